package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 23), S23-RT-1 in the reader
// (docs/exactly-once.md, "Review (adversarial, session 23): the trim point
// and one count per gap"). The records after the checkpoint c are trimmed
// when the reader opens after it (counted: lostAfter = c); it reads a page
// of records without effect from the trim horizon (carried, so the
// checkpoint stays at c), and its next read meets a second trim after that
// page (reader.pos): records nobody read, a loss of their own. Counted
// twice (lostAt moved at the second); fails on s23-trim (losses 1: the
// second gap taken for the first's, its records dropped uncounted).
func TestReviewS23_AReaderThatReadOnFromTheHorizonCountsASecondTrim(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 42)
	f := e.stream
	f.addShard("shardId-A", "")
	first := e.write(t, 150)
	f.appendTo("shardId-A", first...)
	e.drain(t, "p1", nil)
	f.appendTo("shardId-A", withoutEffect(300)...)
	f.appendTo("shardId-A", e.write(t, 100)...)
	f.setTrim("shardId-A", len(first)+50) // opening after the checkpoint meets a trim

	// The reader's second read (after one page of 100) meets a trim 40
	// records past its iterator.
	s := &overtakenAtTrim{Streams: f.client("p2"), f: f, shard: "shardId-A", trim: 40, owner: func(context.Context) {}}
	tp := e.poller(t, "p2", s, nil, func(c *poller.Config) {
		c.Drain, c.MaxRecords, c.BatchRecords, c.LeaseDuration = true, 100, 1000, 30*time.Second
		c.CheckpointInterval = time.Hour
	})
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	derr := tp.Run(dctx)
	require.NoError(t, dctx.Err(), "the drain did not exit")

	assert.Equal(t, 2.0, counter(t, tp.m.Resets.WithLabelValues(poller.ResetTrimmed)), "both trims were met")
	// The drain says what it lost: both trims, on shardId-A (poller
	// --drain exits 4).
	lost := requireDrainLost(t, derr, "shardId-A")
	assert.Len(t, lost.Trims, 2, "both trims reported: %v", derr)
	losses, err := table.GetLosses(ctx, e.ddb, table.CoordinationTableName(e.table))
	require.NoError(t, err)
	assert.Equal(t, int64(2), losses, "two gaps: after the checkpoint, and after the page read from the horizon")
}
