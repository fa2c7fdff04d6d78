package processor_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

// halfCommitted leaves the env's shard with a checkpoint after recs[start-1]
// and a half-committed batch of recs[start:end]: a batching consumer with
// small groups dies after its second group transaction. It returns start.
func halfCommitted(t *testing.T, e *env, recs []processor.Record, shard string, end int) (start int) {
	t.Helper()
	ctx := context.Background()
	p, err := processor.New(e.faulty, processor.Config{Table: e.table, MaxItemsPerRun: 2, MaxEntriesPerItem: 2,
		MaxAttempts: 2, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shard)
	g.CommitBatches()
	// The first commit of a shard is a plain run: up to the first
	// transaction.
	for start == 0 || !hasCheckpoint(t, e, shard) {
		_, err = p.Process(ctx, g, recs[start:start+1])
		require.NoError(t, err)
		start++
	}
	commits := 0
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op == "TransactWriteItems" {
			if commits++; commits > 2 {
				return ledgertest.Drop
			}
		}
		return ledgertest.Pass
	}
	defer func() { e.faults.Decide = nil }()
	_, err = p.Process(ctx, g, recs[start:end])
	require.Error(t, err)
	fresh := e.processor(t, nil, nil).ShardGuard(e.streamARN, shard)
	cp, err := fresh.Checkpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, recs[start-1].SequenceNumber, cp)
	require.True(t, fresh.Pending(), "the crash must leave a half-committed batch")
	return start
}

func hasCheckpoint(t *testing.T, e *env, shard string) bool {
	cp, err := e.processor(t, nil, nil).ShardGuard(e.streamARN, shard).Checkpoint(context.Background())
	require.NoError(t, err)
	return cp != ""
}

// A half-committed batch is finished by whoever reads the shard next, from
// its stored plan, whatever that consumer's own limits and page size; a
// consumer without batches (the tumbling-window Lambda shares the
// checkpoint) may not commit over it.
func TestShardGuard_ResumesHalfCommittedBatch(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(21).Run(ctx, e.ddb, e.table, 150))
	shard, recs := e.records(t)
	start := halfCommitted(t, e, recs, shard, 120)

	plain := e.processor(t, nil, nil)
	_, err := plain.Process(ctx, plain.ShardGuard(e.streamARN, shard), recs[start:])
	require.Error(t, err, "a run must not be claimed over a half-committed batch")

	p, err := processor.New(e.ddb, processor.Config{Table: e.table}, nil) // other limits than the batch's plan
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shard)
	g.CommitBatches()
	g.SetOrigin(recs[start-1].SequenceNumber)
	res, err := p.Process(ctx, g, recs[start:start+30])
	require.ErrorIs(t, err, processor.ErrIncompleteBatch, "a shorter page cannot finish the batch")
	assert.Zero(t, res.Committed)
	res, err = p.Process(ctx, g, recs[start:])
	require.NoError(t, err)
	assert.Equal(t, len(recs)-start, res.Committed)
	assert.False(t, g.Pending())
	e.requireReconciled(t)
}

// After the records of a half-committed batch were trimmed, the reader tells
// the guard; the next batch replaces the pending one once, and the guard
// never abandons a batch it started itself: here the answer of the
// abandoning transaction is lost, and the re-read shows the guard's own new
// batch, which it must finish, not abandon.
func TestShardGuard_TrimmedAbandonsPendingBatchOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(22).Run(ctx, e.ddb, e.table, 150))
	shard, recs := e.records(t)
	start := halfCommitted(t, e, recs, shard, 60)

	reg := prometheus.NewRegistry()
	p, err := processor.New(e.faulty, processor.Config{Table: e.table, MaxItemsPerRun: 3,
		BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, processor.NewMetrics(reg))
	require.NoError(t, err)
	commits := 0
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op == "TransactWriteItems" {
			if commits++; commits == 1 {
				return ledgertest.LoseAnswer
			}
		}
		return ledgertest.Pass
	}
	g := p.ShardGuard(e.streamARN, shard)
	g.CommitBatches()
	g.Trimmed(recs[start-1].SequenceNumber)
	_, err = p.Process(ctx, g, recs[80:])
	require.NoError(t, err)
	assert.Equal(t, 1.0, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictAbandonedBatch)))
	assert.Equal(t, 1.0, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictDuplicate)), "the lost answer shows as a taken guard")
	assert.False(t, g.Pending())
	cp, err := e.processor(t, nil, nil).ShardGuard(e.streamARN, shard).Checkpoint(ctx)
	require.NoError(t, err)
	assert.Equal(t, recs[len(recs)-1].SequenceNumber, cp)

	// Redelivering everything applies nothing.
	res, err := p.Process(ctx, g, recs)
	require.NoError(t, err)
	assert.Zero(t, res.Applied)
}

// Issue 12, defect 4: a pending batch whose records were trimmed is
// abandoned, and the groups it had committed stay applied. The records of
// the abandoned batch that survive the trim must not be applied again by
// the batch that replaces it: lost (and counted), never doubled. Each
// transaction here is an insert on a day of its own, so any report applied
// twice shows a count above the truth.
func TestShardGuard_TrimmedPendingBatchIsNeverAppliedTwice(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	day := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 80 {
		d := day.AddDate(0, 0, i).Format("2006-01-02")
		_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]ddbtypes.AttributeValue{
			"PK": s("TENANT#t#BRANCH#b#TRANSACTION"), "SK": s(d + "#" + strconv.Itoa(i)),
			"entityType": s("TRANSACTION"), "type": s("INCOME"), "amount": &ddbtypes.AttributeValueMemberN{Value: "1"},
			"category": s("food"), "createdAt": s(d + "T10:00:00Z")}})
		require.NoError(t, err)
	}
	shard, recs := e.records(t)
	start := halfCommitted(t, e, recs, shard, 60)

	reg := prometheus.NewRegistry()
	p, err := processor.New(e.ddb, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, processor.NewMetrics(reg))
	require.NoError(t, err)
	g := p.ShardGuard(e.streamARN, shard)
	g.CommitBatches()
	g.Trimmed(recs[start-1].SequenceNumber)
	// The trim horizon moved a few records into the batch: the rest of the
	// batch's records are read (a page of nothing else, as at a closed
	// shard's end: the abandoned batch is cleared all the same), then those
	// after it.
	res, err := p.Process(ctx, g, recs[start+3:60])
	require.NoError(t, err)
	assert.Equal(t, 60-start-3, res.Committed)
	assert.False(t, g.Pending())
	fresh := e.processor(t, nil, nil).ShardGuard(e.streamARN, shard)
	cp, err := fresh.Checkpoint(ctx)
	require.NoError(t, err)
	assert.Equal(t, recs[59].SequenceNumber, cp, "the abandoned batch is cleared, the checkpoint at its end")
	assert.False(t, fresh.Pending())
	res, err = p.Process(ctx, g, recs[start+3:])
	require.NoError(t, err)
	assert.Equal(t, len(recs)-start-3, res.Committed)
	assert.Equal(t, 1.0, testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictAbandonedBatch)))
	assert.Equal(t, float64(60-start-3), recordsOutcome(p, processor.OutcomeAbandoned), "the surviving records of the abandoned batch are counted as lost")

	diffs, _, err := reconcileBranch(ctx, e, "t", "b")
	require.NoError(t, err)
	require.NotEmpty(t, diffs, "the abandoned batch's records are lost until a repair")
	for _, d := range diffs {
		stored := int64(0)
		if d.Stored != nil {
			stored = d.Stored.Count
		}
		assert.LessOrEqual(t, stored, d.Expected.Count, "applied twice: %s", d)
	}
	// The records after the abandoned batch are applied exactly once.
	for _, d := range diffs {
		if d.Report.Period.String() >= "DAILY#"+day.AddDate(0, 0, 60).Format("2006-01-02") && d.Report.Period.String() < "M" {
			t.Errorf("a record after the abandoned batch is wrong: %s", d)
		}
	}
}

func recordsOutcome(p *processor.Processor, outcome string) float64 {
	sum := 0.0
	for _, ev := range []string{"INSERT", "MODIFY", "REMOVE", "UNKNOWN"} {
		sum += testutil.ToFloat64(p.Metrics().Records.WithLabelValues(ev, outcome))
	}
	return sum
}

// Issue 12, defect 5: two readers open a shard without a checkpoint at
// different places (TRIM_HORIZON at different times, or LATEST). Whoever
// commits first creates the checkpoint; the other's records may start
// after it, with records in between it never saw, so it must refuse (ErrGap)
// and reopen after the checkpoint instead of committing over the gap.
func TestShardGuard_FirstReaderWithoutCheckpointBindsTheOthers(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(23).Run(ctx, e.ddb, e.table, 120))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)

	a := p.ShardGuard(e.streamARN, shard) // opened at TRIM_HORIZON
	b := p.ShardGuard(e.streamARN, shard) // opened later, at LATEST
	for _, g := range []*processor.ShardGuard{a, b} {
		cp, err := g.Checkpoint(ctx)
		require.NoError(t, err)
		require.Empty(t, cp)
		g.SetOrigin("")
	}
	_, err := p.Process(ctx, a, recs[:40])
	require.NoError(t, err)
	_, err = p.Process(ctx, b, recs[80:])
	require.ErrorIs(t, err, processor.ErrGap, "records 40..79 are in nobody's hands")

	// b reopens after the checkpoint: exact.
	r := p.ShardGuard(e.streamARN, shard)
	cp, err := r.Checkpoint(ctx)
	require.NoError(t, err)
	r.SetOrigin(cp)
	_, err = p.Process(ctx, r, recs[40:])
	require.NoError(t, err)
	// a goes on from its own commits without a gap.
	_, err = p.Process(ctx, a, recs[40:])
	require.NoError(t, err)
	e.requireReconciled(t)
}

// A batching guard on a shard without a checkpoint commits one run, up to
// the first record with an effect, and the rest as a batch: exactly what
// two calls would commit, the first of them ending after that record. (The
// whole first commit used to be cut into runs of at most 99 items, each
// writing its report items again.)
func TestShardGuard_FirstCommitIsOneRunThenABatch(t *testing.T) {
	ctx := context.Background()
	type outcome struct {
		units, requests float64
		res             []processor.Result
	}
	commit := func(split bool) outcome {
		e := newEnv(t)
		require.NoError(t, ledgertest.NewWorkload(33).Run(ctx, e.ddb, e.table, 400))
		shard, recs := e.records(t)
		p := e.processor(t, nil, nil)
		g := p.ShardGuard(e.streamARN, shard)
		g.CommitBatches()
		var o outcome
		next := 0
		if split {
			// One record at a time until one creates the checkpoint.
			for next == 0 || !hasCheckpoint(t, e, shard) {
				res, err := p.Process(ctx, g, recs[next:next+1])
				require.NoError(t, err)
				o.res = append(o.res, res)
				next++
			}
		}
		res, err := p.Process(ctx, g, recs[next:])
		require.NoError(t, err)
		o.res = append(o.res, res)
		e.requireReconciled(t)
		m := p.Metrics()
		o.units = testutil.ToFloat64(m.WriteUnits.WithLabelValues("TransactWriteItems"))
		o.requests = testutil.ToFloat64(m.WriteRequests.WithLabelValues("TransactWriteItems"))
		return o
	}
	one, two := commit(false), commit(true)
	require.Len(t, one.res, 1)
	runs := 0
	for _, r := range two.res[:len(two.res)-1] {
		runs += r.Runs
	}
	assert.Equal(t, 1, runs, "the calls up to the checkpoint's creation commit one run")
	assert.Equal(t, runs+two.res[len(two.res)-1].Runs, one.res[0].Runs, "one call commits what the calls do: one run, then the batch's groups")
	assert.Equal(t, two.requests, one.requests)
	assert.Equal(t, two.units, one.units)
	t.Logf("400 records, first commit of the shard: %d transactions, %.0f write units reported", one.res[0].Runs, one.units)
}

// A guard opened without a checkpoint whose first claim lands with its
// answer lost finds that claim on its re-read and goes on after it: it is
// its own, not another reader's (which would be a gap, ErrGap).
func TestShardGuard_FirstClaimWithItsAnswerLostIsOwn(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(24).Run(ctx, e.ddb, e.table, 60))
	shard, recs := e.records(t)
	p, err := processor.New(e.faulty, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
	require.NoError(t, err)
	// The guard's first transaction puts the shard's legacy tombstone
	// (docs/exactly-once.md, "A shard's legacy tombstone"); its second is
	// the first claim, whose answer is lost.
	lost, tx := false, 0
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op != "TransactWriteItems" || lost {
			return ledgertest.Pass
		}
		if tx++; tx == 2 {
			lost = true
			return ledgertest.LoseAnswer
		}
		return ledgertest.Pass
	}
	defer func() { e.faults.Decide = nil }()
	for _, batches := range []bool{false, true} {
		g := p.ShardGuard(e.streamARN, shard+map[bool]string{false: "-runs", true: "-batches"}[batches])
		if batches {
			g.CommitBatches()
			lost, tx = false, 0
		}
		g.SetOrigin("")
		res, err := p.Process(ctx, g, recs)
		require.NoError(t, err, "batches %v", batches)
		assert.Equal(t, len(recs), res.Committed)
		assert.True(t, lost)
	}
}
