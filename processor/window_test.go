package processor_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

func checkpointOf(t *testing.T, e *env, shard string) (string, bool) {
	t.Helper()
	g := e.processor(t, nil, nil).ShardGuard(e.streamARN, shard)
	cp, err := g.Checkpoint(context.Background())
	require.NoError(t, err)
	return cp, g.Pending()
}

// The tumbling-window commit reads its range from the stream and commits
// it in batches (far fewer transactions than runs), stops at the range's
// end, and does nothing for a range already committed.
func TestCommitShardRange_CommitsTheRangeFromTheStreamAsBatches(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(31).Run(ctx, e.ddb, e.table, 300))
	shard, recs := e.records(t)
	p := e.processor(t, nil, e.faulty)
	r := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[0].SequenceNumber, Last: recs[150].SequenceNumber}

	res, err := p.CommitShardRange(ctx, e.streams, r, 100)
	require.NoError(t, err)
	assert.Equal(t, 151, res.Committed)
	cp, pending := checkpointOf(t, e, shard)
	assert.Equal(t, recs[150].SequenceNumber, cp, "stopped at the range's end")
	assert.False(t, pending)

	r.Last = recs[len(recs)-1].SequenceNumber
	before := e.faults.Calls("TransactWriteItems")
	res, err = p.CommitShardRange(ctx, e.streams, r, 100)
	require.NoError(t, err)
	assert.Equal(t, len(recs)-151, res.Committed, "read after the checkpoint")
	batched := e.faults.Calls("TransactWriteItems") - before
	e.requireReconciled(t)

	res, err = p.CommitShardRange(ctx, e.streams, r, 100)
	require.NoError(t, err)
	assert.Zero(t, res.Committed, "nothing after the checkpoint")

	// The same records as runs (the standard Lambda's commit) take more
	// transactions: the point of reading the window as batches.
	e2 := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(31).Run(ctx, e2.ddb, e2.table, 300))
	_, recs2 := e2.records(t)
	p2 := e2.processor(t, nil, e2.faulty)
	_, err = p2.Process(ctx, p2.MarkerGuard(), recs2[151:])
	require.NoError(t, err)
	assert.Less(t, batched, e2.faults.Calls("TransactWriteItems"), "batches against runs")
}

// Without a checkpoint the range is read from its first record: what came
// before it (before the mapping's starting position) is not the window's.
func TestCommitShardRange_WithoutCheckpointStartsAtTheFirstRecord(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(32).Run(ctx, e.ddb, e.table, 120))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	res, err := p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[40].SequenceNumber, Last: recs[99].SequenceNumber}, 1000)
	require.NoError(t, err)
	assert.Equal(t, 60, res.Committed)
	cp, _ := checkpointOf(t, e, shard)
	assert.Equal(t, recs[99].SequenceNumber, cp)

	_, err = p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard}, 1000)
	assert.ErrorContains(t, err, "all three are needed")
}

// A batch left half-committed (a window's commit killed between its group
// transactions) is finished by the next commit of the shard even when that
// one's range ends before the batch does (a shorter or older window
// delivered again): it reads on to the batch's last record, and never
// commits a group twice.
func TestCommitShardRange_FinishesAHalfCommittedBatchPastItsRange(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(33).Run(ctx, e.ddb, e.table, 200))
	shard, recs := e.records(t)
	start := halfCommitted(t, e, recs, shard, 150)

	p := e.processor(t, nil, nil)
	_, err := p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[0].SequenceNumber, Last: recs[start+5].SequenceNumber}, 1000)
	require.NoError(t, err)
	cp, pending := checkpointOf(t, e, shard)
	assert.Equal(t, recs[149].SequenceNumber, cp, "the pending batch finished, past the range")
	assert.False(t, pending)

	_, err = p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[0].SequenceNumber, Last: recs[len(recs)-1].SequenceNumber}, 1000)
	require.NoError(t, err)
	e.requireReconciled(t)
}

// Randomized: windows of a shard committed through a DynamoDB that drops
// requests and loses answers, ranges delivered again, shorter, longer and
// out of turn (the mapping's retries and duplicate deliveries); after a
// last clean commit the reports equal the oracle's fold.
func TestCommitShardRange_ExactUnderLostAnswersAndRedelivery(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(34).Run(ctx, e.ddb, e.table, 400))
	shard, recs := e.records(t)
	rng := rand.New(rand.NewPCG(34, 0))
	p, err := processor.New(e.faulty, processor.Config{Table: e.table, MaxItemsPerRun: 6, MaxEntriesPerItem: 3,
		MaxAttempts: 2, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
	require.NoError(t, err)
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op != "TransactWriteItems" && op != "UpdateItem" {
			return ledgertest.Pass
		}
		switch rng.IntN(10) {
		case 0:
			return ledgertest.Drop
		case 1:
			return ledgertest.LoseAnswer
		}
		return ledgertest.Pass
	}
	failed := 0
	for pos := 0; pos < len(recs); {
		last := min(pos+rng.IntN(120), len(recs)-1)
		if rng.IntN(5) == 0 && pos > 0 {
			last = rng.IntN(pos) // an older window delivered again
		}
		r := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[0].SequenceNumber, Last: recs[last].SequenceNumber}
		if _, err := p.CommitShardRange(ctx, e.streams, r, 10+rng.IntN(100)); err != nil {
			failed++
			continue // the mapping retries; maybe with another window
		}
		pos = max(pos, last+1)
	}
	e.faults.Decide = nil
	_, err = p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[0].SequenceNumber, Last: recs[len(recs)-1].SequenceNumber}, 100)
	require.NoError(t, err)
	assert.Positive(t, failed, "faults were injected")
	e.requireReconciled(t)
}
