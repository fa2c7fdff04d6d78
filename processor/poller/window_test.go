package poller_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

// batches is how many batches the poller's processor was handed
// (ledger_batch_records' sample count) and how many records they held.
func batches(t *testing.T, tp *testPoller) (n int, records float64) {
	t.Helper()
	var m dto.Metric
	require.NoError(t, tp.pm.BatchSize.(prometheus.Metric).Write(&m))
	return int(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
}

// checkpointed starts shard A with a checkpoint (batches need one).
func checkpointed(t *testing.T, e *env) {
	t.Helper()
	e.stream.addShard("shardId-A", "")
	e.stream.appendTo("shardId-A", e.write(t, 20)...)
	e.drain(t, "p0", nil)
}

// trickle appends the records of steps workload steps to shard A, a few at
// a time, each time waiting until tp has read them: every append is read
// as its own page, shorter than the poller's limit (a caught-up shard).
// It returns how many records it appended.
func trickle(t *testing.T, e *env, tp *testPoller, steps, per int) int {
	t.Helper()
	base, n := counter(t, tp.m.RecordsRead), 0
	for done := 0; done < steps; done += per {
		recs := e.write(t, per)
		e.stream.appendTo("shardId-A", recs...)
		n += len(recs)
		want := base + float64(n)
		eventually(t, "the poller read the records appended", 20*time.Second, func() bool {
			return counter(t, tp.m.RecordsRead) >= want
		})
	}
	return n
}

// held waits until the poller holds n records (ledger_poller_held_records
// follows the reads that counted them).
func held(t *testing.T, tp *testPoller, n int) {
	t.Helper()
	eventually(t, "the records read held", 20*time.Second, func() bool { return counter(t, tp.m.HeldRecords) == float64(n) })
}

// A caught-up poller with a batching window holds the short pages it
// reads, reading on, and commits them as one batch when the batch is full
// (here, before a window of minutes is over): many pages, one batch. On a
// stop it commits what it holds; nothing is lost.
func TestPoller_WindowGathersShortPagesIntoOneBatch(t *testing.T) {
	e := newEnv(t, 31)
	checkpointed(t, e)
	tp := e.poller(t, "p1", nil, nil, func(c *poller.Config) {
		c.MaxRecords, c.BatchRecords, c.BatchWindow = 10, 40, poller.BatchWindowSetting.Max
	})
	stop := start(t, tp)

	read := trickle(t, e, tp, 9, 3) // about 9 records in 3 pages
	require.Less(t, read, 40, "the test wants the batch not full yet")
	pages := counter(t, tp.m.Reads.WithLabelValues("records"))
	require.GreaterOrEqual(t, pages, 3.0, "short pages, read one by one")
	n, _ := batches(t, tp)
	assert.Zero(t, n, "nothing committed while the window is open and the batch has room")
	held(t, tp, read) // every record read
	diffs, _, err := processor.Reconcile(context.Background(), e.ddb, e.table, processor.Scope{})
	require.NoError(t, err)
	require.NotEmpty(t, diffs, "held records are not in the reports yet")

	// Fill the batch: the reader's last read is limited to the room left,
	// and the full batch is committed at once, as one.
	for counter(t, tp.m.RecordsRead) < 40 {
		read += trickle(t, e, tp, 6, 6)
	}
	eventually(t, "the full batch committed", 20*time.Second, func() bool { n, _ := batches(t, tp); return n == 1 })
	n, recs := batches(t, tp)
	assert.Equal(t, 1, n)
	assert.Equal(t, 40.0, recs, "one batch of BatchRecords records")
	assert.Greater(t, counter(t, tp.m.Reads.WithLabelValues("records")), 4.0, "from several pages")
	held(t, tp, read-40) // what was read past the full batch

	stop() // a graceful stop (SIGTERM) commits what is held
	assert.Zero(t, counter(t, tp.m.HeldRecords))
	n, recs = batches(t, tp)
	want := 1
	if read > 40 {
		want = 2 // the rest committed at the stop, as one batch
	}
	assert.Equal(t, want, n)
	assert.Equal(t, float64(read), recs)
	e.requireReconciled(t)
	assert.Equal(t, float64(read), counter(t, tp.m.Committed))
}

// With a short window, a caught-up poller commits what it holds once the
// window is over, without the batch filling up: a trickle of writes is
// committed in fewer batches than pages, and all of it lands.
func TestPoller_WindowCommitsWhenItEnds(t *testing.T) {
	e := newEnv(t, 32)
	checkpointed(t, e)
	tp := e.poller(t, "p1", nil, nil, func(c *poller.Config) {
		c.MaxRecords, c.BatchWindow = 10, 200*time.Millisecond
	})
	start(t, tp)
	read := trickle(t, e, tp, 30, 2)
	eventually(t, "everything read is committed", 20*time.Second, func() bool {
		return counter(t, tp.m.Committed) == float64(read)
	})
	e.requireReconciled(t)
	assert.Zero(t, counter(t, tp.m.HeldRecords))
	n, _ := batches(t, tp)
	t.Logf("%d records in %v pages, %d batches", read, counter(t, tp.m.Reads.WithLabelValues("records")), n)
	assert.GreaterOrEqual(t, n, 1)
}

// A drain with a window of minutes still finishes: it commits what it
// holds once it has caught up (an empty page), one batch for the short
// pages of the backlog, and exits.
func TestPoller_DrainWithAWindowCommitsAtTheEndAndExits(t *testing.T) {
	e := newEnv(t, 33)
	checkpointed(t, e)
	recs := e.write(t, 25)
	e.stream.appendTo("shardId-A", recs...)
	tp := e.drain(t, "p1", func(c *poller.Config) { c.MaxRecords, c.BatchWindow = 10, poller.BatchWindowSetting.Max })
	e.requireReconciled(t)
	n, sum := batches(t, tp)
	assert.Equal(t, 1, n, "the backlog's pages in one batch")
	assert.Equal(t, float64(len(recs)), sum)
	assert.Zero(t, counter(t, tp.m.HeldRecords))
}

// A poller that dies holding records (its table calls all fail from one
// moment on, so not even its stop can commit them) leaves its checkpoint
// before them: the next poller reads them again and nothing is lost.
func TestPoller_RecordsHeldByADeadPollerAreReadAgain(t *testing.T) {
	e := newEnv(t, 34)
	checkpointed(t, e)
	var dead atomic.Bool
	api := faultClient(t, func(string) ledgertest.Fault {
		if dead.Load() {
			return ledgertest.Drop
		}
		return ledgertest.Pass
	})
	tp := e.pollerWith(t, "p1", nil, api, processor.Config{}, func(c *poller.Config) {
		c.MaxRecords, c.BatchWindow = 10, poller.BatchWindowSetting.Max
		c.ShutdownTimeout = time.Second // its commits cannot land: do not wait for them long
	})
	stop := start(t, tp)
	read := trickle(t, e, tp, 12, 4)
	held(t, tp, read)
	dead.Store(true)
	stop()
	assert.Zero(t, counter(t, tp.m.Committed), "the dead poller committed nothing")
	diffs, _, err := processor.Reconcile(context.Background(), e.ddb, e.table, processor.Scope{})
	require.NoError(t, err)
	require.NotEmpty(t, diffs, "the held records never reached the reports")

	p2 := e.drain(t, "p2", nil)
	e.requireReconciled(t)
	assert.Equal(t, float64(read), counter(t, p2.m.Committed), "read again after the checkpoint, committed once")
}
