package processor

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names and labels are part of ledger's interface: dashboards and
// alarms depend on them. This file defines the stream consumers' metrics,
// shared by the Lambda and the poller; the Lambda derives its Embedded
// Metric Format lines from the same collectors. The poller's own metrics
// (leases, lag) are in processor/poller/metrics.go, the writer's in
// writer/metrics.go (and its secret reads in cmd/writer). All are documented
// in the README's metrics table.
const namespace = "ledger"

// Label values of ledger_records_total{outcome}.
const (
	OutcomeApplied     = "applied"     // a transaction record whose delta was committed (possibly zero)
	OutcomeDuplicate   = "duplicate"   // already committed by an earlier delivery; skipped
	OutcomeQuarantined = "quarantined" // a transaction record with an invalid new image or a bad shape
	OutcomeIgnored     = "ignored"     // not a transaction item (reports, markers, checkpoints, …, a roll-up delta's MODIFY or REMOVE)
	OutcomeRollup      = "rollup"      // a roll-up delta's INSERT, folded into the partials of its lane
	// OutcomeAbandoned: a record of a half-committed batch whose other
	// records were trimmed; never applied again (part of it may be in the
	// reports through the groups that landed), restored by reconcile --repair.
	OutcomeAbandoned = "abandoned"
)

// CommitCancelled is the ledger_commits_total{outcome} of a commit given up
// because its context ended before it landed or failed (a poller's lease
// lost or expired mid-commit, its shutdown's grace over, a Lambda's
// deadline), in its call, its backoff or its re-read: its outcome is
// unknown, and the next attempt's guard tells whether it landed. Not
// "failed", which is a commit whose own attempts were spent (MaxAttempts)
// or refused for good, and which the LedgerCommitsFailing alert watches.
const CommitCancelled = "cancelled"

// Label values of ledger_aggregate_conflicts_total{reason}.
const (
	ConflictDuplicate           = "duplicate"            // a run's guard was already claimed: records skipped
	ConflictConditionFailed     = "condition_failed"     // a report's shape changed under us: shapes re-read, run retried
	ConflictTransactionConflict = "transaction_conflict" // another transaction held an item: retried with backoff
	ConflictShortRedelivery     = "short_redelivery"     // a Lambda batch ended inside a committed run (see docs/exactly-once.md)
	ConflictAbandonedBatch      = "abandoned_batch"      // a half-committed poller batch whose records were trimmed was given up
	// ConflictMigrationFence: a shard's checkpoint was a copy `ledgerctl
	// coordination migrate` has not released yet (table.ErrCheckpointFenced):
	// nothing committed, tried again later. Counted at each read that finds it.
	ConflictMigrationFence = "migration_fence"
	// ConflictLegacyCheckpoint: the ledger table holds the shard's
	// checkpoint in the layout before the coordination table, not a
	// tombstone (table.ErrLegacyStreamState: a consumer of that version
	// claimed the shard, or a rollback copied it back): nothing committed,
	// tried again later. Counted at each guard read and each fence that
	// finds it (docs/exactly-once.md, "A shard's legacy tombstone").
	ConflictLegacyCheckpoint = "legacy_checkpoint"
	// ConflictNewerDeltaFormat: a roll-up delta item of a newer format
	// than this version reads (table.ErrNewerDeltaFormat, a rolling
	// deploy): the records from it are not committed, tried again later.
	ConflictNewerDeltaFormat = "newer_delta_format"
	// ConflictNewerProtocol: a shard's checkpoint is fenced by a later
	// exactly-once protocol than this version's (table.ErrCheckpointProtocol,
	// a rolling deploy of that protocol, or a rollback past its fence):
	// nothing committed on the shard, ever, by this version. Counted at each
	// guard read that finds it (docs/runbook.md, "Protocols").
	ConflictNewerProtocol = "newer_protocol"
	// ConflictUnchangedItem: a report update's condition failed on an item
	// that a read of the table right after finds unchanged (every commit
	// sets updatedAt), which AWS never answers: the part is sent once more
	// on that read, and parked (refused) if it fails so again
	// (docs/exactly-once.md, "Tenant roll-ups", review of session 18).
	// Counted, and logged with the report, at each such send.
	ConflictUnchangedItem = "unchanged_item"
	// ConflictApplied: a standard-mode run's update of a branch's applied
	// item met another transaction on it (TransactionConflict): retried
	// (also counted as transaction_conflict). Many of them say the item
	// is hot: docs/exactly-once.md, "What it costs", striping.
	ConflictApplied = "applied"
	// ConflictStagingGone: a plan-layout-6 delta group found its staging
	// item gone (or at another lastGroup) while the checkpoint still named
	// the group: the delta was put without the staged branch transitions
	// (docs/exactly-once.md, "The staging item"). Counted, and logged at
	// error level, when that degraded transaction lands; branches is then
	// off for the item's periods: reconcile names it, the quiescent repair
	// heals it.
	ConflictStagingGone = "staging_gone"
)

// Reasons of ledger_parked_deltas_total: why a report item's update was
// refused for good and its delta parked.
const (
	ParkedTooLarge  = "item_too_large" // the item is (or would grow) past the bound a report item keeps
	ParkedMalformed = "item_malformed" // a figure or map of the item has the wrong type
	ParkedRefused   = "refused"        // DynamoDB named the item (ValidationError) for another reason
)

// Metrics are the processor's Prometheus collectors. Create them once per
// process with NewMetrics and share them between processors.
type Metrics struct {
	IteratorAge   *prometheus.GaugeVec   // ledger_stream_iterator_age_seconds{shard}
	Lag           prometheus.Histogram   // ledger_stream_lag_seconds
	Records       *prometheus.CounterVec // ledger_records_total{event,outcome}
	Conflicts     *prometheus.CounterVec // ledger_aggregate_conflicts_total{reason}
	Retries       *prometheus.CounterVec // ledger_dynamodb_retries_total{operation,reason}
	Throttles     *prometheus.CounterVec // ledger_dynamodb_throttles_total{operation}
	Quarantined   *prometheus.CounterVec // ledger_quarantined_records_total{reason}
	Parked        *prometheus.CounterVec // ledger_parked_deltas_total{reason}
	BatchSize     prometheus.Histogram   // ledger_batch_records
	BatchDuration prometheus.Histogram   // ledger_batch_duration_seconds
	Commits       *prometheus.CounterVec // ledger_commits_total{outcome}
	WriteRequests *prometheus.CounterVec // ledger_dynamodb_write_requests_total{operation}
	WriteUnits    *prometheus.CounterVec // ledger_dynamodb_write_units_total{operation}
	// RollupWriteUnits: ledger_rollup_write_units_total{kind}, the write
	// units of the roll-up items of the commits that landed, by AWS's
	// billing rule (rollupcost.go).
	RollupWriteUnits *prometheus.CounterVec
	// ForeignRecords: ledger_foreign_records_total, the records of
	// transaction partitions committed that are not writer-shaped (no
	// label: the applied item holds them per branch).
	ForeignRecords prometheus.Counter
}

// NewMetrics creates the collectors and registers them with reg (a fresh
// prometheus.NewRegistry() in tests; never the global default in library
// code). reg may be nil to create unregistered collectors.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		IteratorAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "stream", Name: "iterator_age_seconds",
			Help: "Age of the newest record read from each shard when it was read: how far the consumer is behind the stream.",
		}, []string{"shard"}),
		Lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "stream", Name: "lag_seconds",
			Help:    "Time from a transaction's write (its updatedAt, else the record's ApproximateCreationDateTime) to the commit of its report delta.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600},
		}),
		Records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "records_total",
			Help: "Stream records processed, by event (INSERT, MODIFY, REMOVE, UNKNOWN) and outcome (applied, duplicate, quarantined, ignored).",
		}, []string{"event", "outcome"}),
		Conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "aggregate", Name: "conflicts_total",
			Help: "Commit conflicts by reason: duplicate (already applied, skipped), condition_failed (report shape changed), transaction_conflict (retried), short_redelivery, abandoned_batch, migration_fence (the checkpoint is a migration's copy not released yet: nothing committed, retried), legacy_checkpoint (the shard's checkpoint is in the ledger table, the layout before the coordination table: nothing committed, retried), newer_delta_format (a roll-up delta item of a newer format: refused, retried), newer_protocol (the shard's checkpoint is fenced by a later exactly-once protocol: nothing committed, ever, by this version), unchanged_item (a report's condition failed on an item read again unchanged: sent once more, parked if it fails so again), applied (a standard-mode run's update of a branch's applied item met another transaction: retried), staging_gone (a plan-6 delta group found its batch's staging item gone or damaged: the delta put without the staged branch-count transitions; reconcile names the roll-ups' branches, the quiescent repair heals them).",
		}, []string{"reason"}),
		Parked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "parked_deltas_total",
			Help: "Report deltas parked because DynamoDB refused the report item's update for good, by reason.",
		}, []string{"reason"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "dynamodb", Name: "retries_total",
			Help: "DynamoDB calls retried by the processor after a retryable error, by operation and reason (throttle, server, network, conflict).",
		}, []string{"operation", "reason"}),
		Throttles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "dynamodb", Name: "throttles_total",
			Help: "DynamoDB calls throttled, by operation.",
		}, []string{"operation"}),
		Quarantined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "quarantined_records_total",
			Help: "Records written to quarantine, by validation reason.",
		}, []string{"reason"}),
		BatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "batch_records",
			Help:    "Records per processed batch.",
			Buckets: []float64{1, 10, 50, 100, 250, 500, 1000, 2500, 10000},
		}),
		BatchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "batch_duration_seconds",
			Help:    "Time to process one batch, decode to last commit.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		Commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "commits_total",
			Help: "Commit runs (one TransactWriteItems each), by outcome (committed, duplicate, failed: its attempts spent or refused for good, cancelled: its context ended first, the outcome left to the next attempt's guard).",
		}, []string{"outcome"}),
		WriteRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "dynamodb", Name: "write_requests_total",
			Help: "DynamoDB write requests sent by the processor (attempts included), by operation.",
		}, []string{"operation"}),
		WriteUnits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "dynamodb", Name: "write_units_total",
			Help: "Write capacity units DynamoDB reported as consumed, by operation (DynamoDB Local reports transactional writes once; AWS bills and reports them twice).",
		}, []string{"operation"}),
		RollupWriteUnits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "rollup", Name: "write_units_total",
			Help: "Write units of the roll-up items of the commits that landed, by kind (delta_put, delta_delete, partial, partial_entry), computed by AWS's billing rule (transactional writes twice) from the items as sent; partial items estimated from their known shape.",
		}, []string{"kind"}),
		ForeignRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "foreign_records_total",
			Help: "Records of transaction partitions committed that the writer did not write (not writer-shaped: a direct PutItem, a hard delete, an edit keeping the count, an item that is no transaction), counted once each into their branch's applied item by standard-mode runs. Any increase: docs/runbook.md, \"Foreign records\".",
		}),
	}
	for _, k := range []string{RollupCostDeltaPut, RollupCostDeltaDelete, RollupCostPartial, RollupCostEntry} {
		m.RollupWriteUnits.WithLabelValues(k)
	}
	for _, ev := range []string{"INSERT", "MODIFY", "REMOVE", "UNKNOWN"} {
		for _, o := range []string{OutcomeApplied, OutcomeDuplicate, OutcomeQuarantined, OutcomeIgnored, OutcomeAbandoned} {
			m.Records.WithLabelValues(ev, o)
		}
	}
	for _, r := range []string{ConflictDuplicate, ConflictConditionFailed, ConflictTransactionConflict, ConflictShortRedelivery, ConflictAbandonedBatch, ConflictMigrationFence, ConflictLegacyCheckpoint, ConflictNewerDeltaFormat, ConflictNewerProtocol, ConflictUnchangedItem, ConflictApplied, ConflictStagingGone} {
		m.Conflicts.WithLabelValues(r)
	}
	for _, r := range []string{ParkedTooLarge, ParkedMalformed, ParkedRefused} {
		m.Parked.WithLabelValues(r)
	}
	for _, o := range []string{"committed", "duplicate", "failed", CommitCancelled} {
		m.Commits.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(m.collectors()...)
	}
	return m
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.IteratorAge, m.Lag, m.Records, m.Conflicts, m.Retries, m.Throttles,
		m.Quarantined, m.Parked, m.BatchSize, m.BatchDuration, m.Commits, m.WriteRequests, m.WriteUnits, m.RollupWriteUnits, m.ForeignRecords}
}
