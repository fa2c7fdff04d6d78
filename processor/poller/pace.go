package poller

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// writePacer paces one poller's coordination writes that keep no lease
// valid, in the two partitions every poller of the fleet writes: the
// stream's lease partition (aggregates.LeasePK: takes, releases, a
// drain's requests, the registrations of children) and its worker
// partition (aggregates.WorkersPK: offers, asks, their clears, the fence
// of a gone poller's item, the leave). One AWS partition takes about
// 1,000 write units a second; issue 23 asks that no key the fleet writes
// take more than half of it. Unpaced, the fleet's first takes of 1,000
// leases put 609 units in one second on the lease partition, and the
// whole fleet's stop (a release and an offer per lease) 497–691 on the
// worker partition and 521–565 on the lease partition (BENCHMARKS.md,
// "Session 22: the fleet's hottest keys").
//
// Never paced: the heartbeat, the rejoin and the lease renewals (renew
// mode, compat, a drain's): they keep validity, and a wait there could
// cost a lease. Nor the checkpoints, which live in partitions of their
// own.
//
// The fleet's budget (Config.CoordinationWriteRate, write units a second
// per partition) is split evenly among the live pollers of the worker
// registry, this one included, as the DescribeStream pacer splits its
// rate (describeBudget); a drain, which the live pollers do not count (it
// writes no worker item), counts them: its share, all of it in its first
// pass, before its first read of the registry (review of session 23).
// Each partition has its own limiter (burst 1). A write is charged the
// write units its item took the last time this poller wrote it (1 when
// it never did) before it is sent, and what DynamoDB reports it consumed
// beyond that after its answer: a worker item holding many offers costs
// one unit per KB of the item on every write (an offer is a shard id,
// about 40 bytes on AWS, `shardId-` and 20 digits and 8 hex digits: a
// receiver's item holds about 26 offers a KB, measured on the write
// meter, docs/design.md "Scale").
type writePacer struct {
	fleet float64 // write units a second per partition, for the whole fleet

	mu      sync.Mutex
	lim     [partitions]*rate.Limiter
	pollers int
	units   map[string]int // the write units each item took at its last paced write
	m       *Metrics
}

// partition names a paced partition of the coordination table.
type partition int

const (
	leasePartition  partition = iota // STREAM#{stream}: lease items
	workerPartition                  // STREAM#{stream}#WORKERS: worker items
	partitions
)

// String is the partition's label value in
// ledger_poller_coordination_write_* {partition}.
func (p partition) String() string {
	if p == workerPartition {
		return "workers"
	}
	return "leases"
}

// errWriteDeferred means a coordination write's turn of this poller's
// share of the fleet's write budget came after the caller's deadline (the
// round's, or its context's): the write is not sent; what it was for goes
// on at the next round (a take not taken, a lease released later or left
// to expire).
var errWriteDeferred = errors.New("coordination write deferred: this poller's share of the fleet's write budget for the partition is spent")

func newWritePacer(fleet int, m *Metrics) *writePacer {
	w := &writePacer{fleet: float64(fleet), pollers: 1, units: map[string]int{}, m: m}
	for i := range w.lim {
		w.lim[i] = rate.NewLimiter(w.limit(), 1)
		m.CoordinationWriteRate.WithLabelValues(partition(i).String()).Set(float64(w.limit()))
	}
	return w
}

// limit is this poller's write units a second per partition (under w.mu).
func (w *writePacer) limit() rate.Limit {
	return rate.Limit(w.fleet / float64(w.pollers))
}

// setPollers sets the number of live pollers sharing the fleet's budget
// (this one included; at least 1).
func (w *writePacer) setPollers(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n = max(n, 1); n != w.pollers {
		w.pollers = n
		for i, l := range w.lim {
			l.SetLimit(w.limit())
			w.m.CoordinationWriteRate.WithLabelValues(partition(i).String()).Set(float64(w.limit()))
		}
	}
}

// paceUntilKey carries, in a context, the latest time a paced write of
// the call may wait for (withPaceUntil).
type paceUntilKey struct{}

// paceWindowKey carries, in a round's context, the window its paced
// writes may wait in (withPaceWindow).
type paceWindowKey struct{}

// paceWindow is a round's allowance for its paced writes: they may wait
// until d after the first of them asked for its turn (until, set then;
// under writePacer.mu). Counted from the round's start instead, a round
// whose reads took longer than d (a slow or loaded table) deferred every
// paced write it then made, at every round, and so took no lease
// (session 23's loaded CI).
type paceWindow struct {
	d     time.Duration
	until time.Time
}

// withPaceWindow returns ctx whose paced coordination writes defer
// (errWriteDeferred) rather than wait past d after the first of them
// asked for its turn: the pacer adds at most d to the call, however long
// its other requests take.
func withPaceWindow(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, paceWindowKey{}, &paceWindow{d: d})
}

// withPaceUntil returns ctx whose paced coordination writes defer
// (errWriteDeferred) rather than wait past until; the zero time lifts an
// outer bound.
func withPaceUntil(ctx context.Context, until time.Time) context.Context {
	return context.WithValue(ctx, paceUntilKey{}, until)
}

// wait waits for the turn of a write to the item key of part, charged the
// units the item took at its last write. It returns errWriteDeferred at
// once, without taking the turn, when the turn comes after ctx's deadline,
// the pace-until time ctx carries or the end of its round's window (but
// a turn due now, which waits for nothing, is sent after the window);
// ctx's error when ctx ends first.
func (w *writePacer) wait(ctx context.Context, part partition, key string) error {
	until, _ := ctx.Value(paceUntilKey{}).(time.Time)
	if d, ok := ctx.Deadline(); ok && (until.IsZero() || d.Before(until)) {
		until = d
	}
	hard := until // the bounds in time (a stop's, ctx's), not the window's
	now := time.Now()
	w.mu.Lock()
	if win, ok := ctx.Value(paceWindowKey{}).(*paceWindow); ok {
		if win.until.IsZero() {
			win.until = now.Add(win.d)
		}
		if until.IsZero() || win.until.Before(until) {
			until = win.until
		}
	}
	n := max(w.units[key], 1)
	lim := w.lim[part]
	rs := make([]*rate.Reservation, 0, n)
	var d, first time.Duration
	for i := range n { // burst 1: a unit at a time
		r := lim.ReserveN(now, 1)
		rs = append(rs, r)
		d = r.DelayFrom(now)
		if i == 0 {
			first = d
		}
	}
	if !until.IsZero() && now.Add(d).After(until) && now.Add(first).Before(until) && unitsTime(n-1, lim.Limit()) > until.Sub(now) {
		// Its units could not all be paid before until even from a
		// limiter at rest (an item of many KB at a small share): deferred
		// at every round, it was never sent (a receiver's clear of its
		// own offers, and so its item, stuck: review of session 23,
		// S23-P3). It goes at its first unit's turn, the rest owed: the
		// writes after it wait for them, as for the units a write took
		// beyond its charge (wrote).
		d = first
	}
	// A turn due now costs no wait: it is sent after its round's window
	// (the round's reads may have outlasted it), on a turn the limiter
	// earned, so within the budget; the window bounds what the pacer adds
	// to a round, and this adds nothing (review of session 24, S24-L4:
	// deferred, a round on a slow table sent its paced writes only until
	// its window ran out, whatever the budget left). The bounds in time,
	// a stop's pace-until (S23-P2) and ctx's deadline, still defer it.
	past := !until.IsZero() && now.Add(d).After(until) && d > 0 ||
		!hard.IsZero() && now.Add(d).After(hard)
	if past {
		for i := len(rs) - 1; i >= 0; i-- {
			rs[i].CancelAt(now)
		}
		w.mu.Unlock()
		w.m.CoordinationWriteDeferred.WithLabelValues(part.String()).Inc()
		return errWriteDeferred
	}
	w.mu.Unlock()
	if d <= 0 {
		return nil
	}
	w.m.CoordinationWriteWaits.WithLabelValues(part.String()).Inc()
	w.m.CoordinationWriteWaited.WithLabelValues(part.String()).Add(d.Seconds())
	return sleep(ctx, d)
}

// writeFailed logs a coordination write that did not land and is tried
// again later: a warning, but for one the pacer deferred (the fleet's
// budget spent this round, ledger_poller_coordination_write_deferred_total
// counts it), which is the pacer working and is logged at debug level.
func (p *Poller) writeFailed(err error, msg string, args ...any) {
	args = append(args, "error", err.Error())
	if errors.Is(err, errWriteDeferred) {
		p.log.Debug(msg, args...)
		return
	}
	p.log.Warn(msg, args...)
}

// sleep waits d, or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// unitsTime is how long lim takes to earn n units.
func unitsTime(n int, lim rate.Limit) time.Duration {
	if n <= 0 || lim == rate.Inf {
		return 0
	}
	return time.Duration(float64(n) / float64(lim) * float64(time.Second))
}

// wrote records the write units DynamoDB reported a paced write of key
// consumed (0: not reported, nothing changes): what it took beyond the
// units charged before it is charged now (the next paced writes of the
// partition wait for it), and is what the item's next write is charged.
func (w *writePacer) wrote(part partition, key string, consumed float64) {
	if consumed <= 0 {
		return
	}
	n := int(consumed + 0.999)
	w.mu.Lock()
	defer w.mu.Unlock()
	charged := max(w.units[key], 1)
	if n == 1 {
		delete(w.units, key) // the default
	} else {
		w.units[key] = n
	}
	now := time.Now()
	for range n - charged {
		w.lim[part].ReserveN(now, 1)
	}
}
