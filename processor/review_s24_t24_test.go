package processor_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

// Review of T24-1 (session 24), S24-T1: a tumbling window on a shard
// without a checkpoint whose first records were trimmed (its First among
// them) while some record up to its Last is still readable. The records
// from First up to the trim horizon are lost; the window commits the
// readable ones. They are counted once: the checkpoint is created at First
// by the abandon transaction (lostAt, lostAfter = First, losses once)
// before the readable records are committed after it; the mapping's retry
// and a duplicate invocation count nothing. The same with the abandon's
// answer lost. Fails on main (T24-1 as merged): the first claim creates
// the checkpoint with no lostAt and losses 0.
func TestReviewS24_AWindowWithoutACheckpointWhoseFirstRecordsWereTrimmedCountsThem(t *testing.T) {
	for _, loseAnswer := range []bool{false, true} {
		t.Run("lost_answer="+strconv.FormatBool(loseAnswer), func(t *testing.T) {
			ctx := context.Background()
			e, shard, recs := trimShard(t, 35, 150, 110)
			r := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[80].SequenceNumber, Last: recs[100].SequenceNumber}
			streams := startTrimmed{e.streams, recs[90].SequenceNumber} // readable from recs[91]
			lost := false
			e.faults.Decide = func(op string) ledgertest.Fault {
				if loseAnswer && op == "TransactWriteItems" && !lost {
					lost = true
					return ledgertest.LoseAnswer
				}
				return ledgertest.Pass
			}
			defer func() { e.faults.Decide = nil }()
			p := fastProcessor(t, e, e.faulty)
			res, err := p.CommitShardRange(ctx, streams, r, 100)
			require.NoError(t, err)
			assert.Equal(t, 10, res.Committed, "the readable records of the window, recs[91..100]")
			assert.Equal(t, loseAnswer, lost)
			cp := cpItemOf(t, e, shard)
			assert.Equal(t, r.Last, cp.Seq)
			assert.NotEmpty(t, cp.LostAt, "the trimmed records of the window are lost: lostAt")
			assert.Equal(t, int64(1), lossesOf(t, e), "the trimmed records of the window: one count")
			// The mapping's retry and a duplicate invocation count nothing.
			for try := range 2 {
				_, err := p.CommitShardRange(ctx, streams, r, 100)
				require.NoError(t, err, "retry %d", try+1)
			}
			_, err = e.processor(t, nil, nil).CommitShardRange(ctx, streams, r, 100)
			require.NoError(t, err)
			assert.Equal(t, r.Last, cpItemOf(t, e, shard).Seq)
			assert.Equal(t, int64(1), lossesOf(t, e), "one gap, one count")
		})
	}
}

// S24-T1 and S24-T4, the race: two invocations of the same window at once
// (a duplicate invocation), both opening at its trimmed First on a shard
// without a checkpoint, both sending the create. One lands; the other is
// overtaken, and both go on from the checkpoint at First, committing the
// readable records of the window as concurrent batches do. Each call that
// fails is retried, as the mapping would: the checkpoint ends at Last and
// the loss is counted once.
func TestReviewS24_TwoInvocationsOfAWindowWhoseFirstWasTrimmedCountItOnce(t *testing.T) {
	ctx := context.Background()
	e, shard, recs := trimShard(t, 36, 150, 110)
	r := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[80].SequenceNumber, Last: recs[100].SequenceNumber}
	streams := startTrimmed{e.streams, recs[90].SequenceNumber}
	errs := make(chan error, 2)
	for range 2 {
		p := fastProcessor(t, e, e.ddb)
		go func() {
			var err error
			for range 3 {
				if _, err = p.CommitShardRange(ctx, streams, r, 100); err == nil {
					break
				}
			}
			errs <- err
		}()
	}
	for range 2 {
		require.NoError(t, <-errs)
	}
	cp := cpItemOf(t, e, shard)
	assert.Equal(t, r.Last, cp.Seq)
	assert.NotEmpty(t, cp.LostAt)
	assert.Nil(t, cp.Pending)
	assert.Equal(t, int64(1), lossesOf(t, e), "one gap, one count")
}
