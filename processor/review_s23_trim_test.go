package processor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 23) of the trim point and one count per gap
// (docs/exactly-once.md, "Review (adversarial, session 23): the trim point
// and one count per gap").

// S23-RT-1. A second, different gap after a counted checkpoint. A reader
// meets a trim after the checkpoint c: the gap is counted (lostAfter = c).
// It reads on from the trim horizon, but its records do not move the
// checkpoint (they had no effect and the checkpoint interval had not
// passed, or their commit failed: the poller's flush ignores the error),
// and it meets a second trim after its position a > c (reader.pos): the
// records after a were readable by nobody, a loss the first count does
// not cover. The guard took the checkpoint's count for this gap's
// (lostAfter = c, the checkpoint still at c) and moved nothing: the
// records after a were dropped with no new lostAt and the loss count
// unmoved. Fails on s23-trim (losses 1, lostAt the first count's).
func TestReviewS23_ASecondTrimAfterRecordsReadPastACountedCheckpointIsCounted(t *testing.T) {
	ctx := context.Background()
	e, shard, recs := trimShard(t, 33, 150, 100)
	committedTo(t, e, recs, shard, 40)

	p := e.processor(t, nil, nil)
	g := trimmedGuard(p, e, shard, recs[39].SequenceNumber) // met when opening after the checkpoint
	_, err := g.AbandonTrimmed(ctx)
	require.NoError(t, err)
	first := cpItemOf(t, e, shard)
	require.Equal(t, int64(1), lossesOf(t, e))
	require.Equal(t, recs[39].SequenceNumber, first.Seq)
	require.NotEmpty(t, first.LostAt)

	// The reader read recs[45:60] from the trim horizon; the checkpoint
	// did not move. Its next read meets a trim after recs[59]: the trim
	// horizon is now recs[80].
	time.Sleep(2 * time.Millisecond)
	g = trimmedGuard(p, e, shard, recs[59].SequenceNumber)
	_, err = p.Process(ctx, g, recs[80:])
	require.NoError(t, err)
	cp := cpItemOf(t, e, shard)
	assert.Equal(t, recs[len(recs)-1].SequenceNumber, cp.Seq)
	assert.Equal(t, int64(2), lossesOf(t, e), "the records after recs[59] are a loss of their own")
	assert.NotEqual(t, first.LostAt, cp.LostAt, "the checkpoint names the second loss")

	// The same trim point met again (the reader's reopen before it read a
	// record, a second reader at the same position) is the same gap.
	g = trimmedGuard(p, e, shard, cp.Seq)
	_, err = g.AbandonTrimmed(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), lossesOf(t, e), "a trim after the new checkpoint: counted")
	g = trimmedGuard(p, e, shard, cp.Seq)
	_, err = g.AbandonTrimmed(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(3), lossesOf(t, e), "the same trim point again: the same gap")
}

// S23-RT-2. `ledgerctl abandon-batch` counts the batch it gives up, not a
// gap after it. The operator's abandon (no trim met: the batch was stuck)
// set lostAfter = pendingTo, so a trim met later after pendingTo (records
// after the stuck batch aged out before anyone read them) was taken as
// counted: those records were dropped with lostAt left at the operator's
// time and the loss count unmoved. Fails on s23-trim (losses 1).
func TestReviewS23_ATrimAfterAnOperatorsAbandonBatchIsCounted(t *testing.T) {
	ctx := context.Background()
	e, shard, recs := trimShard(t, 34, 150, 100)
	pendingFrom(t, e, recs, shard, 40, 60)
	before := cpItemOf(t, e, shard)

	// What `ledgerctl abandon-batch --to … --next …` sends.
	key := aggregates.CheckpointKey(e.streamARN, shard)
	landed, err := e.processor(t, nil, nil).AbandonCheckpoint(ctx, key,
		table.Abandon{Shard: shard, Prev: before.Seq, Pending: before.Pending, Now: time.Now().UTC()})
	require.NoError(t, err)
	require.True(t, landed)
	op := cpItemOf(t, e, shard)
	require.Equal(t, recs[59].SequenceNumber, op.Seq)
	require.Equal(t, int64(1), lossesOf(t, e))

	time.Sleep(2 * time.Millisecond)
	p := e.processor(t, nil, nil)
	g := trimmedGuard(p, e, shard, recs[59].SequenceNumber) // a reader opening after the abandoned batch meets a trim
	_, err = p.Process(ctx, g, recs[80:])
	require.NoError(t, err)
	cp := cpItemOf(t, e, shard)
	assert.Equal(t, recs[len(recs)-1].SequenceNumber, cp.Seq)
	assert.Equal(t, int64(2), lossesOf(t, e), "the records after the abandoned batch are a loss of their own")
	assert.NotEqual(t, op.LostAt, cp.LostAt)
}

// S23-RT-3. A gap that grows for longer than the stream's retention after
// it was counted. A reader meets a trim after the checkpoint c and the gap
// is counted; then nothing moves the checkpoint for more than 24 hours (the
// consumer down, or failing every commit and reopening after c), so every
// record written after that count and not committed by then ages out too,
// and the next trim is met after c again (a reopen after the checkpoint
// takes c as its trim point: S23-RT-1 does not apply). On s23-trim it was
// taken as the gap counted: records written after the count were dropped
// with lostAt older than their own writes and the loss count unmoved
// ("once per gap, at first sight" holds only while the count is younger
// than the retention). A count older than the retention is now taken as
// not covering the trim (every record it covered has aged out since, and
// any record trimmed now may have been written after it): counted again,
// once. Fails on s23-trim (losses 1).
func TestReviewS23_AGapCountedLongerAgoThanTheRetentionIsCountedAgain(t *testing.T) {
	ctx := context.Background()
	e, shard, recs := trimShard(t, 35, 120, 0)
	committedTo(t, e, recs, shard, 40)
	c := recs[39].SequenceNumber

	trimAt := func(clock time.Time) {
		t.Helper()
		cfg := processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}
		if !clock.IsZero() {
			cfg.Now = func() time.Time { return clock }
		}
		p, err := processor.New(e.ddb, cfg, nil)
		require.NoError(t, err)
		g := trimmedGuard(p, e, shard, c)
		cp, err := g.AbandonTrimmed(ctx)
		require.NoError(t, err)
		require.Equal(t, c, cp)
	}
	trimAt(time.Time{})
	first := cpItemOf(t, e, shard)
	require.Equal(t, int64(1), lossesOf(t, e))
	at, err := time.Parse(time.RFC3339Nano, first.LostAt)
	require.NoError(t, err)

	trimAt(at.Add(23 * time.Hour))
	assert.Equal(t, int64(1), lossesOf(t, e), "within the retention: the same gap")
	trimAt(at.Add(25 * time.Hour))
	assert.Equal(t, int64(2), lossesOf(t, e), "past the retention: records written after the count were lost")
	trimAt(at.Add(26 * time.Hour))
	assert.Equal(t, int64(2), lossesOf(t, e), "the new count covers the trim again")
}
