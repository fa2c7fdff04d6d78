package poller_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

// A poller that dies between the group transactions of a page leaves a
// half-committed batch on the checkpoint. The next poller, reading smaller
// pages and with other processor limits, reads on until it holds the
// batch's last record, finishes the batch from its stored plan and drains
// the rest; a drain does not stop while the batch is pending.
func TestPoller_FinishesAHalfCommittedBatchWithSmallerPages(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 8)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 50)...)
	e.drain(t, "p0", nil) // a checkpoint: batches need one
	f.appendTo("shardId-A", e.write(t, 250)...)

	var commits atomic.Int64
	dead := func() bool { return commits.Load() > 3 }
	api := faultClient(t, func(op string) ledgertest.Fault {
		if op == "TransactWriteItems" {
			commits.Add(1)
		}
		if dead() {
			return ledgertest.Drop
		}
		return ledgertest.Pass
	})
	p1 := e.pollerWith(t, "p1", nil, api, processor.Config{MaxItemsPerRun: 3, MaxEntriesPerItem: 2}, nil)
	stop := start(t, p1)
	eventually(t, "p1 died mid-batch", 20*time.Second, dead)
	stop()

	probe, err := processor.New(e.ddb, processor.Config{Table: e.table}, nil)
	require.NoError(t, err)
	pending := func() bool {
		g := probe.ShardGuard(e.stream.arn, "shardId-A")
		_, err := g.Checkpoint(ctx)
		require.NoError(t, err)
		return g.Pending()
	}
	require.True(t, pending(), "p1 must have left a half-committed batch")
	diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
	require.NoError(t, err)
	require.NotEmpty(t, diffs, "a half-committed batch shows in the reports")

	e.drain(t, "p2", func(c *poller.Config) { c.MaxRecords = 7 })
	e.requireReconciled(t)
	assert.False(t, pending())
}

// Behind, a poller with BatchRecords above its page size folds several full
// pages into one batch: fewer commit transactions than pages; the batch
// that reaches a closed shard's end is committed before the shard is
// marked finished.
func TestPoller_FoldsFullPagesIntoOneBatchAndCommitsTheLastOnes(t *testing.T) {
	e := newEnv(t, 9)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 20)...)
	e.drain(t, "p0", nil) // a checkpoint: batches need one
	prev := "shardId-A"
	commitsAt := map[int]float64{}
	for i, batch := range []int{50, 250, 10000} {
		// Each poller drains a new child shard of 500 records in pages of 50.
		shard := "shardId-" + strconv.Itoa(i)
		f.close(prev)
		f.addShard(shard, prev)
		f.appendTo(shard, e.write(t, 20)...)
		e.drain(t, "warm-"+shard, nil)
		f.appendTo(shard, e.write(t, 500)...)
		f.close(shard)
		tp := e.drain(t, "p-"+shard, func(c *poller.Config) { c.MaxRecords, c.BatchRecords = 50, batch })
		e.requireReconciled(t)
		commits := counter(t, tp.pm.Commits.WithLabelValues("committed"))
		t.Logf("%d commit transactions for 500 records at batch %d", int(commits), batch)
		commitsAt[batch] = commits
		if batch == 50 {
			assert.GreaterOrEqual(t, commits, 10.0, "a batch per page")
		}
		prev = shard
	}
	// Groups hold at most 99 writes counting each entry of a part as a
	// possible entry item (processor/plan.go), so a batch is several
	// transactions; folding pages still makes fewer of them.
	assert.Less(t, commitsAt[250], commitsAt[50], "two batches of five pages")
	assert.Less(t, commitsAt[10000], commitsAt[250], "one batch")
}
