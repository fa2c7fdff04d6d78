package poller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A paced write waits for its turn of the poller's share of the fleet's
// budget, and is not sent (errWriteDeferred, counted) when the turn comes
// after its round's deadline or its context's; a deferred turn is not
// taken from the writes after it.
func TestWritePacer_DefersATurnPastTheRoundsDeadlineWithoutTakingIt(t *testing.T) {
	m := NewMetrics(nil)
	w := newWritePacer(2, m)
	w.setPollers(2) // 1 unit a second: a turn every second
	assert.Equal(t, 1.0, testutil.ToFloat64(m.CoordinationWriteRate.WithLabelValues("leases")))
	ctx := withPaceUntil(context.Background(), time.Now().Add(1500*time.Millisecond))
	start := time.Now()
	require.NoError(t, w.wait(ctx, leasePartition, "a")) // the burst
	require.NoError(t, w.wait(ctx, leasePartition, "b")) // 1 s
	called := time.Now()
	err := w.wait(ctx, leasePartition, "c") // 2 s: past the round
	require.ErrorIs(t, err, errWriteDeferred)
	assert.Less(t, time.Since(called), time.Second, "a deferred write does not wait for its turn")
	assert.Equal(t, 1.0, testutil.ToFloat64(m.CoordinationWriteDeferred.WithLabelValues("leases")))
	// The other partition has its own budget.
	require.NoError(t, w.wait(ctx, workerPartition, "w"))
	// The deferred turn was given back: the next one is 2 s after the
	// start, not 3.
	require.NoError(t, w.wait(context.Background(), leasePartition, "c"))
	assert.Less(t, time.Since(start), 2800*time.Millisecond)
	// A context's deadline bounds the wait too.
	dctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, w.wait(dctx, leasePartition, "d"), errWriteDeferred)
	// A context that ends while waiting ends the wait: its turn is a
	// second away.
	require.NoError(t, w.wait(context.Background(), workerPartition, "w2"), "the worker partition's next turn, taken")
	cctx, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel2)
	assert.True(t, errors.Is(w.wait(cctx, workerPartition, "e"), context.Canceled))
}

// A write is charged its item's write units: what DynamoDB reported
// beyond the charge is taken from the next writes' turns, and the item's
// next write is charged what it took.
func TestWritePacer_ChargesAWriteItsItemsUnits(t *testing.T) {
	m := NewMetrics(nil)
	w := newWritePacer(10, m) // a turn every 100 ms
	ctx := context.Background()
	require.NoError(t, w.wait(ctx, workerPartition, "big")) // the burst
	w.wrote(workerPartition, "big", 4)                      // 3 units beyond the charge
	start := time.Now()
	require.NoError(t, w.wait(ctx, workerPartition, "small"))
	assert.GreaterOrEqual(t, time.Since(start), 350*time.Millisecond, "the 3 units beyond the charge wait first")
	start = time.Now()
	require.NoError(t, w.wait(ctx, workerPartition, "big")) // charged 4
	require.NoError(t, w.wait(ctx, workerPartition, "small"))
	assert.GreaterOrEqual(t, time.Since(start), 450*time.Millisecond, "the big item's next write charged 4 units")
	assert.Positive(t, testutil.ToFloat64(m.CoordinationWriteWaits.WithLabelValues("workers")))
}

// S23-P3 (review of session 23): a write charged more units than its
// share of the budget earns before its round's deadline, even from a
// limiter at rest, is sent at its first unit's turn, the rest owed by the
// writes after it; before, it was deferred at every round and never sent.
func TestWritePacer_AWriteLargerThanARoundsShareIsSentAndItsUnitsOwed(t *testing.T) {
	m := NewMetrics(nil)
	w := newWritePacer(2, m) // 2 units a second
	ctx := context.Background()
	require.NoError(t, w.wait(ctx, workerPartition, "big"))
	w.wrote(workerPartition, "big", 10) // an item of 10 KB: 9 units owed
	time.Sleep(5 * time.Second)         // the debt paid: the limiter at rest
	round := func() context.Context { return withPaceUntil(ctx, time.Now().Add(500*time.Millisecond)) }
	// 10 units at 2 a second: 4.5 s beyond the burst, past any round of 0.5 s.
	require.NoError(t, w.wait(round(), workerPartition, "big"), "a write larger than a round's share is sent at its first unit's turn")
	// Its 9 units beyond the first are owed: the next write's turn is 4.5 s
	// away, past its round.
	require.ErrorIs(t, w.wait(round(), workerPartition, "small"), errWriteDeferred)
}

// A round's paced writes may wait for half a renewal interval after the
// first of them asked, however long the round's reads took before it:
// counted from the round's start, a round whose reads took longer than
// that deferred every write it made, at every round, and a poller on a
// slow table took no lease (session 23's loaded CI:
// TestPoller_ARenewingPollerTakesLeasesWhenEveryReadIsSlowerThanHalfARenewal
// and the fleet pacing test timed out).
func TestWritePacer_ARoundsWindowStartsAtItsFirstPacedWrite(t *testing.T) {
	m := NewMetrics(nil)
	w := newWritePacer(2, m)
	w.setPollers(2) // 1 unit a second: a turn every second
	ctx := withPaceWindow(context.Background(), 1500*time.Millisecond)
	time.Sleep(1600 * time.Millisecond) // the round's reads, longer than its window
	start := time.Now()
	require.NoError(t, w.wait(ctx, leasePartition, "a"), "the burst, after slow reads")
	require.NoError(t, w.wait(ctx, leasePartition, "b"), "1 s after the round's first paced write: within its window")
	assert.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond)
	assert.ErrorIs(t, w.wait(ctx, leasePartition, "c"), errWriteDeferred, "2 s after the first: past the window")
	assert.Equal(t, 1.0, testutil.ToFloat64(m.CoordinationWriteDeferred.WithLabelValues("leases")))
	// A new round, a new window.
	require.NoError(t, w.wait(withPaceWindow(context.Background(), 1500*time.Millisecond), leasePartition, "c"))
}

// S24-L4 (review of session 24): a write whose turn is due now is sent
// even once its round's window has passed (the round's reads, slow, took
// it up after its first paced write): the pacer makes it wait for
// nothing, so it adds nothing to the round, and it takes a turn the
// limiter had earned, so the budget is kept. Before, it was deferred:
// on a slow table each round sent its paced writes only until its window
// ran out after the first, whatever the budget left (one take a round
// when every read before a take outlasts the window). A write whose turn
// is later than the window is still deferred, and a context's deadline
// still defers a write due now.
func TestWritePacer_AWriteDueNowIsSentAfterItsRoundsWindow(t *testing.T) {
	m := NewMetrics(nil)
	w := newWritePacer(2, m)
	w.setPollers(2) // 1 unit a second
	ctx := withPaceWindow(context.Background(), 500*time.Millisecond)
	require.NoError(t, w.wait(ctx, leasePartition, "a"), "the round's first paced write opens its window")
	time.Sleep(1100 * time.Millisecond) // a slow read: past the window; the next turn earned
	called := time.Now()
	require.NoError(t, w.wait(ctx, leasePartition, "b"), "due now: sent though the window has passed")
	assert.Less(t, time.Since(called), 200*time.Millisecond, "it waits for nothing")
	assert.ErrorIs(t, w.wait(ctx, leasePartition, "c"), errWriteDeferred, "a turn a second away, past the window: deferred")
	assert.Equal(t, 1.0, testutil.ToFloat64(m.CoordinationWriteDeferred.WithLabelValues("leases")))
	// The bounds in time still defer a turn due now: a stop's pace-until
	// time passed (S23-P2's bound of the whole stop), a context's deadline.
	time.Sleep(1100 * time.Millisecond)
	assert.ErrorIs(t, w.wait(withPaceUntil(context.Background(), time.Now().Add(-time.Millisecond)), leasePartition, "d"), errWriteDeferred)
	dctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	assert.ErrorIs(t, w.wait(dctx, leasePartition, "e"), errWriteDeferred)
	require.NoError(t, w.wait(ctx, leasePartition, "f"), "the turn was not taken by them")
}
