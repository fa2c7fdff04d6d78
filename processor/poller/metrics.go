package poller

import "github.com/prometheus/client_golang/prometheus"

// The poller's own collectors, beside the processor's (processor.Metrics:
// iterator age, lag, records, commits, retries and throttles, which the
// poller also feeds with operation="GetRecords"). Label values are bounded.
// Names are part of ledger's interface, like processor/metrics.go's.

// Label values of ledger_poller_lease_events_total{event}.
const (
	LeaseAcquired  = "acquired"   // a free or new lease taken
	LeaseTakenOver = "taken_over" // an expired lease of another owner taken
	LeaseLost      = "lost"       // a renewal found the lease changed: another poller has it
	LeaseExpired   = "expired"    // not renewed in time: reading stopped
	LeaseReleased  = "released"   // given up (shutdown, shard finished, drain done)
	LeaseHandedOff = "handed_off" // given to the poller that asked for it
	LeaseRequested = "requested"  // asked another owner for one of its leases
	LeaseFenced    = "fenced"     // a poller whose heartbeat stopped fenced before its leases are taken over (one per gone poller)
	LeaseRejoined  = "rejoined"   // this poller's heartbeat found it fenced: it dropped every lease and registered again
	LeasePaused    = "paused"     // no heartbeat landed within the lease duration: the lease's reader stopped, the lease kept until a heartbeat lands (or finds the poller fenced)
)

// Label values of ledger_poller_offers_total{outcome}: what became of each
// lease offered to this poller (handed over by another, or a child left
// for it) when it looked at it.
const (
	OfferTaken            = "taken"             // taken
	OfferLater            = "later"             // its lease, its checkpoint or its parent's not read in time, or its take deferred by the write pacer: left offered for the next round (S22-H2, S23-P1)
	OfferNotIts           = "not_its"           // already held, finished, or another poller's (or another process of this name's) by now
	OfferUnknownShard     = "unknown_shard"     // not in this poller's listing and its lease item does not describe it: left to the listing
	OfferParentUnfinished = "parent_unfinished" // its parent is not read to its end: left to the listing
	OfferCheckpointUnread = "checkpoint_unread" // finished by its checkpoint as this poller knows it (an offer whose checkpoint read failed is later since session 22, S22-H2)
	OfferRefused          = "refused"           // sent to be taken and not taken: the take gates (no validity, not born), a failed condition, or past this round's turns
)

// Label values of ledger_poller_lease_losses_total{cause}. Only taken and
// expired stop a reader: lost_answer counts the apparent losses that are
// not (a lease write's condition failed against this poller's own write,
// whose answer was lost; docs/exactly-once.md, "Leases").
const (
	LossLostAnswer = "lost_answer" // recognised as this poller's own write: the lease is kept
	LossExpired    = "expired"     // no renewal landed within the lease's life: reader stopped
	LossTaken      = "taken"       // another poller's write: reader stopped
)

// Label values of ledger_poller_reader_restarts_total{reason}.
const (
	RestartError = "error" // the reader failed (too many failures in a row): restarted after a pause
	RestartLease = "lease" // the reader was cancelled because its lease was taken or expired
)

// Label values of ledger_stream_iterator_resets_total{reason}.
const (
	ResetExpired = "expired" // ExpiredIteratorException: reopened after the checkpoint
	ResetTrimmed = "trimmed" // TrimmedDataAccessException: reopened at TRIM_HORIZON; records lost
	ResetGap     = "gap"     // the checkpoint was behind the iterator (processor.ErrGap)
	ResetFailure = "failure" // a failed batch or read: reopened after the checkpoint
)

// Label values of ledger_stream_describe_stream_total{kind, outcome}.
const (
	DescribeList     = "list"     // a page of the whole stream's listing
	DescribeChildren = "children" // a finished shard's children (ShardFilter CHILD_SHARDS)

	DescribeOK        = "ok"
	DescribeThrottled = "throttled" // LimitExceededException: the stream's DescribeStream rate (docs/runbook.md, "Throttled discovery")
	DescribeError     = "error"
)

// Metrics are the poller's collectors.
type Metrics struct {
	LeasesHeld   prometheus.Gauge       // ledger_poller_leases_held
	LeasesPaused prometheus.Gauge       // ledger_poller_leases_paused
	LeaseEvents  *prometheus.CounterVec // ledger_poller_lease_events_total{event}
	Offers       *prometheus.CounterVec // ledger_poller_offers_total{outcome}
	Shards       *prometheus.GaugeVec   // ledger_poller_shards{state}
	// ProtocolFenced: ledger_poller_shards_protocol_fenced (S25-F1).
	ProtocolFenced prometheus.Gauge
	Reads          *prometheus.CounterVec // ledger_stream_get_records_total{outcome}
	RecordsRead    prometheus.Counter     // ledger_stream_records_read_total
	Resets         *prometheus.CounterVec // ledger_stream_iterator_resets_total{reason}
	Checkpoints    prometheus.Counter     // ledger_poller_checkpoint_moves_total

	LeaseLosses    *prometheus.CounterVec // ledger_poller_lease_losses_total{cause}
	ReaderRestarts *prometheus.CounterVec // ledger_poller_reader_restarts_total{reason}
	Committed      prometheus.Counter     // ledger_poller_records_committed_total
	Goodput        prometheus.Gauge       // ledger_poller_goodput_records_per_second
	HeldRecords    prometheus.Gauge       // ledger_poller_held_records
	Describes      *prometheus.CounterVec // ledger_stream_describe_stream_total{kind,outcome}
	HeldBytes      prometheus.Gauge       // ledger_poller_held_bytes

	HeldBudget      prometheus.Gauge   // ledger_poller_held_records_budget
	HeldBudgetUsed  prometheus.Gauge   // ledger_poller_held_records_budget_used
	HeldBudgetWaits prometheus.Counter // ledger_poller_held_records_budget_waits_total

	HeldBytesBudget     prometheus.Gauge // ledger_poller_held_bytes_budget
	HeldBytesBudgetUsed prometheus.Gauge // ledger_poller_held_bytes_budget_used

	DescribeRate     prometheus.Gauge   // ledger_stream_describe_stream_rate
	DescribeDeferred prometheus.Counter // ledger_stream_describe_stream_deferred_total

	CoordinationWriteRate     *prometheus.GaugeVec   // ledger_poller_coordination_write_rate{partition}
	CoordinationWriteWaits    *prometheus.CounterVec // ledger_poller_coordination_write_waits_total{partition}
	CoordinationWriteWaited   *prometheus.CounterVec // ledger_poller_coordination_write_wait_seconds_total{partition}
	CoordinationWriteDeferred *prometheus.CounterVec // ledger_poller_coordination_write_deferred_total{partition}
}

// NewMetrics creates the poller's collectors and registers them with reg
// (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		LeasesHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "leases_held",
			Help: "Shard leases this poller holds.",
		}),
		LeasesPaused: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "leases_paused",
			Help: "Shard leases this poller holds and reads nothing of: its validity for them ended (its heartbeat late: paused until one lands; fenced and not registered again; a renewal late), or dropped and not yet forgotten.",
		}),
		LeaseEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "lease_events_total",
			Help: "Lease changes by this poller: acquired, taken_over, lost, expired, released, handed_off, requested, fenced, rejoined, paused.",
		}, []string{"event"}),
		Offers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "offers_total",
			Help: "Leases offered to this poller (handed over, or children left for it), by what became of each when it looked: taken, later, not_its, unknown_shard, parent_unfinished, checkpoint_unread, refused.",
		}, []string{"outcome"}),
		ProtocolFenced: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "shards_protocol_fenced",
			Help: "Shards this poller gave up because their checkpoint is fenced by another exactly-once protocol than its own: it released their leases and does not take them again while it runs (a poller of that protocol reads them). They stay counted in ledger_poller_shards as open or closed.",
		}),
		Shards: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "shards",
			Help: "Shards of the stream by state: open, closed (not yet read to the end), finished, waiting (parents not finished).",
		}, []string{"state"}),
		Reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "stream", Name: "get_records_total",
			Help: "GetRecords calls by outcome: records, empty, throttled, error.",
		}, []string{"outcome"}),
		RecordsRead: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "stream", Name: "records_read_total",
			Help: "Stream records read with GetRecords (before deduplication).",
		}),
		Resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "stream", Name: "iterator_resets_total",
			Help: "Shard iterators reopened, by reason: expired, trimmed (records lost: run ledgerctl reconcile --repair), gap, failure.",
		}, []string{"reason"}),
		Checkpoints: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "checkpoint_moves_total",
			Help: "Checkpoints moved outside commits, over records that had no effect (and at shard ends).",
		}),
		LeaseLosses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "lease_losses_total",
			Help: "Leases lost by cause: taken (another poller's write) and expired stop a reader; lost_answer is a lease write whose answer was lost, recognised as this poller's own: the lease is kept.",
		}, []string{"cause"}),
		ReaderRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "reader_restarts_total",
			Help: "Shard readers stopped before their shard's end and read again from the checkpoint: error (failed), lease (lease taken or expired).",
		}, []string{"reason"}),
		Committed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "records_committed_total",
			Help: "Stream records this poller finished (committed, quarantined, or without effect), duplicates excluded: goodput.",
		}),
		Goodput: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "goodput_records_per_second",
			Help: "Records committed per second (records_committed_total) over the last minute.",
		}),
		HeldRecords: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "held_records",
			Help: "Stream records read and not yet committed, held by the shard readers for the batch they gather (the batching window, or full pages while a shard is behind).",
		}),
		Describes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "stream", Name: "describe_stream_total",
			Help: "DescribeStream calls by kind (list: a page of the whole stream; children: a finished shard's, by ShardFilter) and outcome (ok, throttled, error).",
		}, []string{"kind", "outcome"}),
		HeldBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "held_bytes",
			Help: "Size of the records of held_records as the stream reports it (SizeBytes, their wire size; decoded they take a few times that).",
		}),
		HeldBudget: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "held_records_budget",
			Help: "The poller's budget of stream records in memory across all its shards (--max-held-records).",
		}),
		HeldBudgetUsed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "held_records_budget_used",
			Help: "Records of the budget in use: the Limit of GetRecords calls in flight, batches being gathered and batches being committed. At most held_records_budget, but for a shard finishing a batch half committed before a crash.",
		}),
		HeldBudgetWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "held_records_budget_waits_total",
			Help: "Reads that waited for the records budget or the bytes budget (other shards held it).",
		}),
		HeldBytesBudget: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "held_bytes_budget",
			Help: "The poller's budget of stream records' wire bytes in memory across all its shards (--max-held-bytes).",
		}),
		HeldBytesBudgetUsed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "held_bytes_budget_used",
			Help: "Bytes of the bytes budget in use: 1 MiB (AWS's most per GetRecords response) per call in flight, and the SizeBytes of the batches gathered and being committed.",
		}),
		DescribeRate: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "stream", Name: "describe_stream_rate",
			Help: "DescribeStream calls a second this poller allows itself: --describe-rate (the fleet's) divided by the live pollers of the worker registry, halved per throttled answer (docs/runbook.md, \"Throttled discovery\").",
		}),
		DescribeDeferred: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "stream", Name: "describe_stream_deferred_total",
			Help: "DescribeStream calls not made in a round because this poller's share of the stream's rate came too late for it: the listing page or children lookup goes on at the next round.",
		}),
		CoordinationWriteRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "coordination_write_rate",
			Help: "Write units a second this poller allows its paced coordination writes (takes, releases, registrations, offers, asks, their clears, fences, the leave) in each partition (leases: STREAM#{stream}; workers: STREAM#{stream}#WORKERS): --coordination-write-rate (the fleet's) divided by the live pollers of the worker registry (docs/runbook.md, \"A hot coordination key\").",
		}, []string{"partition"}),
		CoordinationWriteWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "coordination_write_waits_total",
			Help: "Paced coordination writes that waited for this poller's share of the fleet's write budget of their partition (leases, workers).",
		}, []string{"partition"}),
		CoordinationWriteWaited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "coordination_write_wait_seconds_total",
			Help: "Time paced coordination writes waited for this poller's share of the fleet's write budget of their partition (leases, workers).",
		}, []string{"partition"}),
		CoordinationWriteDeferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "poller", Name: "coordination_write_deferred_total",
			Help: "Paced coordination writes not sent because their turn of the partition's budget came after the round's deadline (or their own): a take goes on at the next round, an offer is told again, a release not made is taken back by this poller at its next round, or at a stop expires.",
		}, []string{"partition"}),
	}
	for _, part := range []string{"leases", "workers"} {
		m.CoordinationWriteWaits.WithLabelValues(part)
		m.CoordinationWriteWaited.WithLabelValues(part)
		m.CoordinationWriteDeferred.WithLabelValues(part)
	}
	for _, c := range []string{LossLostAnswer, LossExpired, LossTaken} {
		m.LeaseLosses.WithLabelValues(c)
	}
	for _, r := range []string{RestartError, RestartLease} {
		m.ReaderRestarts.WithLabelValues(r)
	}
	for _, e := range []string{LeaseAcquired, LeaseTakenOver, LeaseLost, LeaseExpired, LeaseReleased, LeaseHandedOff, LeaseRequested} {
		m.LeaseEvents.WithLabelValues(e)
	}
	for _, o := range []string{OfferTaken, OfferLater, OfferNotIts, OfferUnknownShard, OfferParentUnfinished, OfferCheckpointUnread, OfferRefused} {
		m.Offers.WithLabelValues(o)
	}
	for _, r := range []string{ResetExpired, ResetTrimmed, ResetGap, ResetFailure} {
		m.Resets.WithLabelValues(r)
	}
	for _, o := range []string{"records", "empty", "throttled", "error"} {
		m.Reads.WithLabelValues(o)
	}
	for _, s := range []string{"open", "closed", "finished", "waiting"} {
		m.Shards.WithLabelValues(s)
	}
	for _, k := range []string{DescribeList, DescribeChildren} {
		for _, o := range []string{DescribeOK, DescribeThrottled, DescribeError} {
			m.Describes.WithLabelValues(k, o)
		}
	}
	if reg != nil {
		reg.MustRegister(m.ProtocolFenced, m.LeasesHeld, m.LeasesPaused, m.LeaseEvents, m.Offers, m.Shards, m.Reads, m.RecordsRead, m.Resets, m.Checkpoints,
			m.LeaseLosses, m.ReaderRestarts, m.Committed, m.Goodput, m.HeldRecords, m.Describes,
			m.HeldBytes, m.HeldBudget, m.HeldBudgetUsed, m.HeldBudgetWaits, m.HeldBytesBudget, m.HeldBytesBudgetUsed,
			m.DescribeRate, m.DescribeDeferred,
			m.CoordinationWriteRate, m.CoordinationWriteWaits, m.CoordinationWriteWaited, m.CoordinationWriteDeferred)
	}
	return m
}
