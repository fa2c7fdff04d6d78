package processor_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

func TestProcess_ThrottledCommitsAreRetriedThenSucceed(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(9).Run(ctx, e.ddb, e.table, 40))
	shard, recs := e.records(t)

	var throttled atomic.Int64
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op == "TransactWriteItems" && throttled.Add(1) <= 3 {
			return ledgertest.Throttle
		}
		return ledgertest.Pass
	}
	reg := prometheus.NewRegistry()
	p := e.processor(t, reg, e.faulty)
	res, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs)
	require.NoError(t, err)
	assert.Equal(t, len(recs), res.Committed)
	e.requireReconciled(t)
	assert.Equal(t, 3.0, testutil.ToFloat64(p.Metrics().Throttles.WithLabelValues("TransactWriteItems")))
	assert.Equal(t, 3.0, testutil.ToFloat64(p.Metrics().Retries.WithLabelValues("TransactWriteItems", "throttle")))
}

func TestProcess_ExhaustedRetriesNameTheFirstRecordNotCommitted(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(10).Run(ctx, e.ddb, e.table, 60))
	shard, recs := e.records(t)

	// The shard's legacy tombstone (the guard's first transaction) and the
	// first commit land; every later one is throttled for good.
	var commits atomic.Int64
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op == "TransactWriteItems" && commits.Add(1) > 2 {
			return ledgertest.Throttle
		}
		return ledgertest.Pass
	}
	p, err := processor.New(e.faulty, processor.Config{Table: e.table, MaxItemsPerRun: 6, MaxAttempts: 3, BaseBackoff: 1, MaxBackoff: 1}, nil)
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shard)
	res, err := p.Process(ctx, g, recs)
	var be *processor.BatchError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, res.Committed, be.Index)
	assert.Positive(t, be.Index, "the first run committed")
	assert.Less(t, be.Index, len(recs))
	assert.Equal(t, recs[be.Index].SequenceNumber, be.SequenceNumber)
	assert.Contains(t, err.Error(), "3 attempts")
	cp, err := g.Checkpoint(ctx)
	require.NoError(t, err)
	assert.Equal(t, -1, processor.CompareSequence(cp, be.SequenceNumber), "the checkpoint is before the named record")

	// Redelivery from the named record, throttling over: exact.
	e.faults.Decide = nil
	res, err = p.Process(ctx, g, recs[be.Index:])
	require.NoError(t, err)
	assert.Equal(t, len(recs)-be.Index, res.Committed)
	e.requireReconciled(t)
}

func TestMetrics_RecordsAndConflictsAreExported(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(11).Run(ctx, e.ddb, e.table, 30))
	_, recs := e.records(t)
	reg := prometheus.NewRegistry()
	p := e.processor(t, reg, nil)
	g := p.MarkerGuard()
	res, err := p.Process(ctx, g, recs)
	require.NoError(t, err)
	_, err = p.Process(ctx, g, recs) // all duplicates now
	require.NoError(t, err)

	require.Equal(t, len(recs), res.Applied+res.Quarantined+res.Ignored)
	// One run: a run holds at most 99 writes, and no report item holds
	// an entry yet, so every entry goes inline (processor/plan.go).
	want := `
# HELP ledger_aggregate_conflicts_total Commit conflicts by reason: duplicate (already applied, skipped), condition_failed (report shape changed), transaction_conflict (retried), short_redelivery, abandoned_batch, migration_fence (the checkpoint is a migration's copy not released yet: nothing committed, retried), legacy_checkpoint (the shard's checkpoint is in the ledger table, the layout before the coordination table: nothing committed, retried), newer_delta_format (a roll-up delta item of a newer format: refused, retried), newer_protocol (the shard's checkpoint is fenced by a later exactly-once protocol: nothing committed, ever, by this version), unchanged_item (a report's condition failed on an item read again unchanged: sent once more, parked if it fails so again), applied (a standard-mode run's update of a branch's applied item met another transaction: retried), staging_gone (a plan-6 delta group found its batch's staging item gone or damaged: the delta put without the staged branch-count transitions; reconcile names the roll-ups' branches, the quiescent repair heals them).
# TYPE ledger_aggregate_conflicts_total counter
ledger_aggregate_conflicts_total{reason="abandoned_batch"} 0
ledger_aggregate_conflicts_total{reason="applied"} 0
ledger_aggregate_conflicts_total{reason="condition_failed"} 0
ledger_aggregate_conflicts_total{reason="duplicate"} 0
ledger_aggregate_conflicts_total{reason="legacy_checkpoint"} 0
ledger_aggregate_conflicts_total{reason="migration_fence"} 0
ledger_aggregate_conflicts_total{reason="newer_delta_format"} 0
ledger_aggregate_conflicts_total{reason="newer_protocol"} 0
ledger_aggregate_conflicts_total{reason="short_redelivery"} 0
ledger_aggregate_conflicts_total{reason="staging_gone"} 0
ledger_aggregate_conflicts_total{reason="transaction_conflict"} 0
ledger_aggregate_conflicts_total{reason="unchanged_item"} 0
# HELP ledger_commits_total Commit runs (one TransactWriteItems each), by outcome (committed, duplicate, failed: its attempts spent or refused for good, cancelled: its context ended first, the outcome left to the next attempt's guard).
# TYPE ledger_commits_total counter
ledger_commits_total{outcome="cancelled"} 0
ledger_commits_total{outcome="committed"} 1
ledger_commits_total{outcome="duplicate"} 0
ledger_commits_total{outcome="failed"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ledger_aggregate_conflicts_total", "ledger_commits_total"))
	total := 0.0
	for _, ev := range []string{"INSERT", "MODIFY", "REMOVE"} {
		for _, o := range []string{processor.OutcomeApplied, processor.OutcomeQuarantined, processor.OutcomeIgnored, processor.OutcomeDuplicate} {
			total += testutil.ToFloat64(p.Metrics().Records.WithLabelValues(ev, o))
		}
	}
	assert.Equal(t, float64(2*len(recs)), total, "every record counted once per delivery")
	assert.Equal(t, float64(res.Quarantined), sumVec(t, reg, "ledger_quarantined_records_total"))
	// The workload writes no change count: every record of a transaction
	// partition is foreign, counted once over both deliveries.
	partition := 0
	for _, r := range recs {
		if pk, _ := table.String(r.Keys, table.AttrPK); aggregates.IsTransactionKey(pk) {
			partition++
		}
	}
	assert.Positive(t, partition)
	assert.Equal(t, float64(partition), sumVec(t, reg, "ledger_foreign_records_total"))
	lint, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, lint)
}

func sumVec(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
