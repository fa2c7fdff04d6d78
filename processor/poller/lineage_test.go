package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// A shard graph with a split, a grandchild, an orphan whose parent was
// trimmed away and an empty open shard, listed two shards per
// DescribeStream page: every parent is read to its end before any of its
// children is read, and the reports come out exact.
func TestPoller_DrainReadsParentsToTheirEndBeforeChildren(t *testing.T) {
	e := newEnv(t, 1)
	f := e.stream
	f.pageSize = 70
	f.addShard("shardId-A", "")
	f.addShard("shardId-E", "shardId-trimmed-long-ago") // parent no longer listed
	f.appendTo("shardId-A", e.write(t, 300)...)
	f.close("shardId-A")
	f.addShard("shardId-B", "shardId-A")
	f.addShard("shardId-C", "shardId-A")
	f.split([]string{"shardId-B", "shardId-C"}, e.write(t, 300))
	f.close("shardId-B")
	f.addShard("shardId-D", "shardId-B")
	f.split([]string{"shardId-D", "shardId-C"}, e.write(t, 300))
	f.close("shardId-D")

	// A lease no renewal misses on a loaded machine: a lease lost to a
	// slow renewal would re-read records (counted as duplicates below).
	tp := e.drain(t, "p1", func(c *poller.Config) { c.LeaseDuration = 30 * time.Second })
	e.requireReconciled(t)

	for _, pc := range [][2]string{{"shardId-A", "shardId-B"}, {"shardId-A", "shardId-C"}, {"shardId-B", "shardId-D"}} {
		_, parentEnd := f.shardTimes(pc[0])
		childFirst, _ := f.shardTimes(pc[1])
		require.False(t, parentEnd.IsZero(), "%s never read to its end", pc[0])
		require.False(t, childFirst.IsZero(), "%s never read", pc[1])
		assert.True(t, parentEnd.Before(childFirst), "%s read at %s before its parent %s ended at %s",
			pc[1], childFirst.Format("15:04:05.000"), pc[0], parentEnd.Format("15:04:05.000"))
	}
	assert.Equal(t, 0.0, counter(t, tp.pm.Conflicts.WithLabelValues(processor.ConflictDuplicate)), "nothing was read twice")
	assert.Equal(t, 0.0, recordsTotal(t, tp.pm, processor.OutcomeDuplicate))
	assert.Equal(t, 0.0, counter(t, tp.m.LeasesHeld))
	lines := tp.logs.lines()
	assert.Equal(t, 3, logged(lines, "shard finished"), "A, B and D are closed and finished")

	// A second drain finds everything finished or caught up and applies
	// nothing; the closed shards are not even opened.
	reads := f.calls["GetRecords"]
	tp2 := e.drain(t, "p2", nil)
	assert.Equal(t, 0.0, recordsTotal(t, tp2.pm, processor.OutcomeApplied))
	assert.Equal(t, 2*poller.DrainEmptyPagesSetting.Default, f.calls["GetRecords"]-reads, "the drain's empty pages in a row for each open shard (C and E)")
	e.requireReconciled(t)
}

// Shards that appear while the poller runs are followed; a closed shard's
// children are read once it is finished.
func TestPoller_FollowsNewShards(t *testing.T) {
	e := newEnv(t, 2)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 200)...)
	// A lease far longer than a renewal can take on a loaded machine: with
	// 3 s ones a renewal timed out at load 27, the lease expired, and the
	// records read but not yet committed were lost to the stop (the test
	// stops at 500 read, not committed).
	tp := e.poller(t, "p1", nil, nil, func(c *poller.Config) { c.LeaseDuration = 30 * time.Second })
	stop := start(t, tp)
	eventually(t, "A read", 20*time.Second, func() bool { return counter(t, tp.m.RecordsRead) >= 200 })

	f.appendTo("shardId-A", e.write(t, 100)...)
	f.close("shardId-A")
	f.addShard("shardId-B", "shardId-A")
	f.addShard("shardId-C", "shardId-A")
	f.split([]string{"shardId-B", "shardId-C"}, e.write(t, 200))
	eventually(t, "children read", 20*time.Second, func() bool { return counter(t, tp.m.RecordsRead) >= 500 })
	stop()
	e.requireReconciled(t)
	_, endA := f.shardTimes("shardId-A")
	firstB, _ := f.shardTimes("shardId-B")
	assert.True(t, endA.Before(firstB))
}

// ExpiredIteratorException is answered by reopening after the last record
// processed (its checkpoint moved up first), so nothing is read twice;
// throttled reads back off and go on.
func TestPoller_ReopensExpiredIteratorsAfterTheLastRecordAndBacksOffOnThrottling(t *testing.T) {
	e := newEnv(t, 3)
	f := e.stream
	f.pageSize = 50
	f.addShard("shardId-A", "")
	recs := e.write(t, 500)
	f.appendTo("shardId-A", recs...)
	f.expire["shardId-A"] = 2
	f.throttle["shardId-A"] = 3

	// Expire the iterator again in the middle of the stream. The lease is
	// long: this test counts reads, and a renewal slowed past a 3-second
	// lease on a loaded machine restarts the reader (a re-read).
	tp := e.poller(t, "p1", nil, nil, func(c *poller.Config) { c.Drain, c.LeaseDuration = true, 30*time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a loaded machine commits slowly
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- tp.Run(ctx) }()
	eventually(t, "half read", 3*time.Minute, func() bool { return counter(t, tp.m.RecordsRead) >= 200 })
	f.mu.Lock()
	f.expire["shardId-A"] = 1
	f.mu.Unlock()
	require.NoError(t, <-done)
	e.requireReconciled(t)

	assert.Equal(t, 3.0, counter(t, tp.m.Resets.WithLabelValues(poller.ResetExpired)))
	assert.Equal(t, 3.0, counter(t, tp.pm.Throttles.WithLabelValues("GetRecords")))
	assert.Equal(t, float64(len(recs)), counter(t, tp.m.RecordsRead), "every record read exactly once")
	assert.Equal(t, 0.0, recordsTotal(t, tp.pm, processor.OutcomeDuplicate))
}

// Records trimmed before they were read (TrimmedDataAccessException when
// opening after the checkpoint, or on a read) are counted and skipped: the
// reader goes on from TRIM_HORIZON. They are lost to every consumer; the
// reports are short of them until reconcile --repair.
func TestPoller_TrimmedRecordsAreCountedSkippedAndRepairedByReconcile(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 4)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 200)...)
	e.drain(t, "p1", nil)
	e.requireReconciled(t)

	// 300 more records, of which the first 100 are trimmed before the next
	// poller opens the shard after its checkpoint.
	f.appendTo("shardId-A", e.write(t, 300)...)
	f.setTrim("shardId-A", 300)
	// And on the read of the next page, the trim horizon jumps 40 records
	// past the iterator.
	f.trimOnRead["shardId-A"] = 40
	// A long lease: a renewal slowed past a 3-second lease on a loaded
	// machine restarts the reader, which meets the trim once more.
	tp, derr := e.drainLoss(t, "p2", func(c *poller.Config) { c.MaxRecords, c.LeaseDuration = 100, 30*time.Second })
	assert.Equal(t, 2.0, counter(t, tp.m.Resets.WithLabelValues(poller.ResetTrimmed)))
	// The drain's work is complete, but it met records it could not
	// commit: it says so (a DrainLossError naming the shard, both trims;
	// poller --drain exits 4), not nil.
	lost := requireDrainLost(t, derr, "shardId-A")
	assert.Len(t, lost.Trims, 2, "both trims reported: %v", derr)
	assert.Equal(t, 2, logged(tp.logs.lines(), "stream records were trimmed"))
	// The guard-alone abandon transaction (session 22): lostAt on the
	// shard's checkpoint and one move of the loss count — one, not two:
	// both trims are met before the reader's guard reads the checkpoint
	// (the open's, then the first read's), one gap after one checkpoint.
	losses, err := table.GetLosses(ctx, e.ddb, table.CoordinationTableName(e.table))
	require.NoError(t, err)
	assert.Equal(t, int64(1), losses)
	_, cps, err := table.ReadStreamState(ctx, e.ddb, table.CoordinationTableName(e.table), f.arn, nil)
	require.NoError(t, err)
	assert.NotEmpty(t, cps["shardId-A"].LostAt)

	diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
	require.NoError(t, err)
	require.NotEmpty(t, diffs, "140 lost records must show in the reports")
	_, err = processor.Repair(ctx, e.ddb, e.table, diffs, time.Now())
	require.NoError(t, err)
	e.requireReconciled(t)
}

// LATEST skips what a shard held when the poller first opened it; records
// written afterwards are applied.
func TestPoller_LatestStartSkipsTheBacklog(t *testing.T) {
	e := newEnv(t, 5)
	f := e.stream
	f.addShard("shardId-old", "")
	f.appendTo("shardId-old", e.write(t, 50)...)
	f.close("shardId-old")
	f.addShard("shardId-A", "shardId-old")
	f.appendTo("shardId-A", e.write(t, 100)...)
	tp := e.poller(t, "p1", nil, nil, func(c *poller.Config) { c.StartPosition, c.LeaseDuration = poller.Latest, 30*time.Second })
	stop := start(t, tp)
	eventually(t, "ready", 10*time.Second, tp.Ready)
	eventually(t, "A opened", 10*time.Second, func() bool { return counter(t, tp.m.Reads.WithLabelValues("empty")) > 0 })
	recs := e.write(t, 30)
	f.appendTo("shardId-A", recs...)
	eventually(t, "new records read", 10*time.Second, func() bool { return counter(t, tp.m.RecordsRead) >= float64(len(recs)) })
	stop()
	assert.Equal(t, float64(len(recs)), counter(t, tp.m.RecordsRead), "only records after the start")
	first, _ := f.shardTimes("shardId-old")
	assert.True(t, first.IsZero(), "the closed shard was skipped")
}
