package poller

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// budget is the poller's memory budget of stream records, shared by its
// shard readers (Config.MaxHeldRecords). A reader takes records from it
// before a GetRecords call (the call's Limit) and gives back what it no
// longer holds. Readers that hold nothing wait for budget in turn, first
// come first served, so that none starves; a reader that already holds a
// batch only takes more when no one waits (tryTake), and commits what it
// holds otherwise, so that the budget held always comes back.
type budget struct {
	mu      sync.Mutex
	size    int
	used    int
	peak    int // most ever used, for tests
	readers int // readers running: a waiter's fair share is size / readers
	queue   []*budgetWaiter
	// whole: grant only a waiter's whole want (the bytes budget, whose
	// want is a page's most: a part of it bounds nothing).
	whole bool

	gauge prometheus.Gauge   // ledger_poller_held_records_budget_used
	waits prometheus.Counter // ledger_poller_held_records_budget_waits_total
}

type budgetWaiter struct {
	want  int
	grant int
	ready chan struct{}
}

func newBudget(size int, m *Metrics) *budget {
	m.HeldBudget.Set(float64(size))
	return &budget{size: size, gauge: m.HeldBudgetUsed, waits: m.HeldBudgetWaits}
}

// newBytesBudget is the budget of the records' wire bytes
// (Config.MaxHeldBytes): a read takes AWS's most for a GetRecords
// response, pageBytes, and keeps what the page held.
func newBytesBudget(size int, m *Metrics) *budget {
	m.HeldBytesBudget.Set(float64(size))
	return &budget{size: size, gauge: m.HeldBytesBudgetUsed, waits: m.HeldBudgetWaits, whole: true}
}

// join and leave count the readers running, which set the fair share.
func (b *budget) join() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.readers++
}

func (b *budget) leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.readers--
	b.wakeLocked() // a smaller share may let the first waiter go
}

// share is the least grant a waiter accepts when its whole want is not
// free: the budget divided by the readers running (at least 1).
func (b *budget) shareLocked() int {
	return max(1, b.size/max(1, b.readers))
}

// grantLocked takes up to want from what is free, if at least
// min(want, share) is: the whole want when no one waits behind, else at
// most the share (the others get theirs too). It returns 0 when it takes
// nothing.
func (b *budget) grantLocked(want int, behind bool) int {
	free := b.size - b.used
	share := b.shareLocked()
	if b.whole {
		share = want
	}
	if want <= 0 || free < min(want, share) {
		return 0
	}
	g := min(want, free)
	if behind {
		g = min(g, share)
	}
	b.addLocked(g)
	return g
}

func (b *budget) addLocked(n int) {
	b.used += n
	b.peak = max(b.peak, b.used)
	b.gauge.Set(float64(b.used))
}

// take waits in turn until min(want, share) records of budget are free and
// takes up to want of them. It returns 0 when ctx ends or stop is closed
// first.
func (b *budget) take(ctx context.Context, stop <-chan struct{}, want int) int {
	b.mu.Lock()
	if len(b.queue) == 0 {
		if g := b.grantLocked(want, false); g > 0 {
			b.mu.Unlock()
			return g
		}
	}
	w := &budgetWaiter{want: want, ready: make(chan struct{})}
	b.queue = append(b.queue, w)
	b.waits.Inc()
	b.mu.Unlock()
	select {
	case <-w.ready:
		return w.grant
	case <-stop:
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // granted meanwhile: give it back
		b.giveLocked(w.grant)
	default:
		for i, q := range b.queue {
			if q == w {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
		b.wakeLocked() // the next in line may fit where this one did not
	}
	return 0
}

// tryTake takes up to want records at once, for a reader that holds a
// batch already: nothing (0) while others wait or less than
// min(want, share) is free.
func (b *budget) tryTake(want int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) > 0 {
		return 0
	}
	return b.grantLocked(want, false)
}

// force takes n records whether or not they are free: a reader that must
// read on to finish a half-committed batch (ErrIncompleteBatch) cannot
// commit part of it.
func (b *budget) force(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.addLocked(n)
}

// give returns n records of budget and lets the waiters in turn take what
// is free.
func (b *budget) give(n int) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.giveLocked(n)
}

func (b *budget) giveLocked(n int) {
	b.used -= n
	b.gauge.Set(float64(b.used))
	b.wakeLocked()
}

// wakeLocked grants the waiters in order while the first one fits.
func (b *budget) wakeLocked() {
	for len(b.queue) > 0 {
		w := b.queue[0]
		g := b.grantLocked(w.want, len(b.queue) > 1)
		if g == 0 {
			return
		}
		w.grant = g
		b.queue = b.queue[1:]
		close(w.ready)
	}
}

// peakUsed is the most budget ever in use at once.
func (b *budget) peakUsed() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}
