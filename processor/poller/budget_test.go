package poller

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ctx bounds a take that would otherwise wait forever: it then returns 0.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func testBudget(size, readers int) *budget {
	b := newBudget(size, NewMetrics(nil))
	for range readers {
		b.join()
	}
	return b
}

// queued waits until n takes are waiting in b's queue.
func queued(t *testing.T, b *budget, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		l := len(b.queue)
		b.mu.Unlock()
		if l == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, want %d", l, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBudget_Grants(t *testing.T) {
	for _, tc := range []struct {
		name          string
		size, readers int
		used          int // taken before
		want          int
		got           int // 0: waits
	}{
		{"the whole want when it is free", 100, 4, 0, 60, 60},
		{"what is free when it is at least the share", 100, 4, 70, 60, 30},
		{"a smaller page than its limit rather than none", 100, 2, 50, 60, 50},
		{"a lone reader waits for its whole want", 100, 1, 95, 60, 0},
		{"waits when less than the share is free", 100, 4, 80, 60, 0},
		{"a want under the share waits for itself only", 100, 2, 90, 10, 10},
		{"more readers than records: a share of one", 3, 10, 2, 1000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBudget(tc.size, tc.readers)
			if tc.used > 0 {
				require.Equal(t, tc.used, b.take(ctx(t), nil, tc.used))
			}
			assert.Equal(t, tc.got, b.tryTake(tc.want), "tryTake")
			if tc.got == 0 {
				return
			}
			b.give(tc.got)
			assert.Equal(t, tc.got, b.take(ctx(t), nil, tc.want), "take")
		})
	}
}

// The bytes budget grants a read its whole want (a page's 1 MiB) or
// nothing: a part of it bounds no page.
func TestBudget_BytesGrantsAWholePageOrNothing(t *testing.T) {
	b := newBytesBudget(3*pageBytes, NewMetrics(nil))
	for range 8 {
		b.join()
	}
	assert.Equal(t, pageBytes, b.tryTake(pageBytes))
	assert.Equal(t, pageBytes, b.tryTake(pageBytes))
	b.force(pageBytes / 2) // a page kept: 2.5 MiB in use
	assert.Zero(t, b.tryTake(pageBytes), "half a page free: nothing")
	b.give(pageBytes / 2)
	assert.Equal(t, pageBytes, b.take(ctx(t), nil, pageBytes))
	assert.Equal(t, 3*pageBytes, b.peakUsed())
}

// Readers that hold nothing wait in turn, first come first served; a
// reader holding a batch cannot take more while anyone waits (it commits
// instead); the budget given back goes to the waiters in order, each at
// most its share while others wait behind it.
func TestBudget_WaitersAreServedInTurn(t *testing.T) {
	b := testBudget(10, 3)
	require.Equal(t, 10, b.take(ctx(t), nil, 10))
	got := make(chan [2]int, 2)
	for i, want := range []int{8, 8} {
		go func() { got <- [2]int{i, b.take(ctx(t), nil, want)} }()
		queued(t, b, i+1)
	}
	assert.Zero(t, b.tryTake(1), "a reader holding a batch takes nothing while others wait")
	b.give(4) // the first waiter's share is 3 (10 / 3 readers), with one behind it
	first := <-got
	assert.Equal(t, [2]int{0, 3}, first, "the first in line, its share")
	queued(t, b, 1)
	b.give(6) // 7 free: the last in line takes its whole want
	assert.Equal(t, [2]int{1, 7}, <-got)
	assert.LessOrEqual(t, b.peakUsed(), 10)
}

// A waiter that stops (its lease lost, a shutdown) leaves the queue, and
// the next in line is served.
func TestBudget_AStoppedWaiterLeavesTheQueue(t *testing.T) {
	b := testBudget(10, 2)
	require.Equal(t, 10, b.take(ctx(t), nil, 10))
	stop := make(chan struct{})
	first := make(chan int, 1)
	go func() { first <- b.take(ctx(t), stop, 10) }()
	queued(t, b, 1)
	second := make(chan int, 1)
	go func() { second <- b.take(ctx(t), nil, 4) }()
	queued(t, b, 2)
	close(stop)
	assert.Zero(t, <-first)
	queued(t, b, 1)
	b.give(5)
	assert.Equal(t, 4, <-second)
}

// Many readers taking and giving back at random, as shard readers do
// (take a page's limit, give back the unused part, give back the batch
// after its commit; a reader holding records only tries): the budget in
// use never exceeds its size, every reader finishes (nobody starves or
// deadlocks) and all is given back.
func TestBudget_ManyReadersNeverExceedItAndAllFinish(t *testing.T) {
	const size, readers, rounds = 50, 16, 200
	b := testBudget(size, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			held := 0
			for range rounds {
				want := 1 + rng.IntN(40)
				var g int
				if held > 0 {
					if g = b.tryTake(want); g == 0 {
						b.give(held) // commit what is held
						held = 0
						continue
					}
				} else {
					g = b.take(ctx(t), nil, want)
				}
				read := rng.IntN(g + 1)
				b.give(g - read)
				held += read
				if rng.IntN(3) == 0 {
					b.give(held)
					held = 0
				}
			}
			b.give(held)
			b.leave()
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, b.peakUsed(), size)
	assert.Positive(t, b.peakUsed())
	assert.Zero(t, b.used, "everything given back")
}
