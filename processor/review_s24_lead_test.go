package processor_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

// Review (adversarial, session 24) of the lead's changes of session 23
// (docs/exactly-once.md, "Review (adversarial, session 24): the lead's
// changes of session 23").

// S24-L1. A trim "passed" over lost records. A drain's reader (its lease
// lost meanwhile, or a second consumer beside it) meets a trim after c;
// the shard's live owner met the same trim first, counted the gap and read
// on from the trim horizon (or abandoned its pending batch there), so the
// checkpoint the drain's guard reads is past c. The guard took that as
// "another consumer read on past the trim point" (TrimPassed) and the
// drain left the trim out of its DrainLossError: it exited 0 although the
// records after c were lost, contrary to docs/exactly-once.md ("A trim met
// by a stale reader of the drain ... is reported too"). A checkpoint past
// the trim point whose counted loss (lostAfter) lies at or after it moved
// there over lost records: the trim is not passed. Fails without the fix
// (TrimPassed true in the first two cases); the third, a checkpoint
// another consumer moved by reading, stays passed.
func TestReviewS24_ATrimPassedOnlyOverRecordsAnotherConsumerLostIsReported(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, e *env, recs []processor.Record, shard string)
		passed bool
	}{
		{"the owner counted the gap and read on", func(t *testing.T, e *env, recs []processor.Record, shard string) {
			committedTo(t, e, recs, shard, 40)
			p := e.processor(t, nil, nil)
			g := p.ShardGuard(e.streamARN, shard)
			g.CommitBatches()
			g.Trimmed(recs[39].SequenceNumber)
			_, err := p.Process(context.Background(), g, recs[80:])
			require.NoError(t, err)
			require.Equal(t, int64(1), lossesOf(t, e))
		}, false},
		{"the owner abandoned its pending batch", func(t *testing.T, e *env, recs []processor.Record, shard string) {
			pendingFrom(t, e, recs, shard, 40, 60)
			p := e.processor(t, nil, nil)
			g := p.ShardGuard(e.streamARN, shard)
			g.CommitBatches()
			g.Trimmed(recs[39].SequenceNumber)
			_, err := g.AbandonTrimmed(context.Background())
			require.NoError(t, err)
			require.Equal(t, recs[59].SequenceNumber, cpItemOf(t, e, shard).Seq)
			require.Equal(t, int64(1), lossesOf(t, e))
		}, false},
		{"the owner read on past the trim point", func(t *testing.T, e *env, recs []processor.Record, shard string) {
			committedTo(t, e, recs, shard, 80)
			require.Equal(t, int64(0), lossesOf(t, e))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			require.NoError(t, ledgertest.NewWorkload(41).Run(ctx, e.ddb, e.table, 150))
			shard, recs := e.records(t)
			require.Greater(t, len(recs), 100)
			tc.setup(t, e, recs, shard)

			// The drain's reader, positioned after recs[39], meets the trim.
			g := e.processor(t, nil, nil).ShardGuard(e.streamARN, shard)
			g.CommitBatches()
			g.Trimmed(recs[39].SequenceNumber)
			_, err := g.AbandonTrimmed(ctx)
			require.ErrorIs(t, err, processor.ErrGap, "the checkpoint is past the trim point: the reader reopens after it")
			assert.Equal(t, tc.passed, g.TrimPassed())
		})
	}
}
