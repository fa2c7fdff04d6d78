package poller

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"golang.org/x/time/rate"
)

// describeBudget paces one poller's DescribeStream calls (listing pages
// and CHILD_SHARDS lookups) so that the fleet's together stay under the
// stream's rate. AWS allows DescribeStream "at a maximum rate of 10 times
// per second" per stream (API_streams_DescribeStream), shared by every
// reader of the stream; beyond it the call is refused with
// LimitExceededException. Issue 23's fleet benchmark measured half the
// fleet's calls refused at 100 shards and 64–75% at 1,000 with every
// poller calling as fast as its code went.
//
// The fleet's budget (Config.DescribeRate, calls a second) is divided by
// weight among the live pollers of the worker registry, this one
// included (share): each calls at most DescribeRate × its own weight /
// the weights it counts, each wait drawn up to a quarter of the interval
// longer (jitter: pollers started together do not call in step). A poller
// weighs 1, or listingWeight while its first listing is under way and
// every other live poller has acknowledged counting it so
// (docs/exactly-once.md, "The first listing's share of DescribeStream"):
// that weight holds only while its heartbeat's validity runs (valid),
// checked at each call's turn. A throttled answer (another reader of the
// stream, a poller not yet in the registry) halves this poller's rate,
// down to a sixteenth; each answer accepted gives back a tenth of the
// full rate.
type describeBudget struct {
	fleet float64 // calls a second for the whole fleet

	mu    sync.Mutex
	lim   *rate.Limiter
	self  float64          // this poller's weight
	total float64          // the weights it counts, its own included (≥ self)
	valid func() time.Time // self above 1 holds only before valid() (nil: never)
	slow  float64          // ≤ 1: the share of the rate after throttled answers
	m     *Metrics
}

// listingWeight is the weight of a poller whose first listing of the
// stream is under way, in every poller's count of the DescribeStream
// budget (1 otherwise): among 8 pollers, a joiner granted it lists at
// 8 × 8/15 ≈ 4.3 pages a second instead of 1, the others' lookups at
// 0.53 a second each meanwhile.
const listingWeight = 8

// minDescribeSlow is the least share of its rate a throttled poller keeps.
const minDescribeSlow = 1.0 / 16

// errDescribeDeferred means the next DescribeStream call this poller's
// share of the stream's rate allows comes after the caller's deadline:
// the call is not made; the listing or the lookups go on at the next pass.
var errDescribeDeferred = errors.New("describe stream deferred: this poller's share of the stream's DescribeStream rate is spent")

func newDescribeBudget(fleet int, m *Metrics) *describeBudget {
	b := &describeBudget{fleet: float64(fleet), self: 1, total: 1, slow: 1, m: m}
	b.lim = rate.NewLimiter(b.limitAt(time.Now()), 1)
	b.m.DescribeRate.Set(float64(b.limitAt(time.Now())))
	return b
}

// limitAt is this poller's calls a second at now (under b.mu): its own
// weight above 1 only while valid() is after now.
func (b *describeBudget) limitAt(now time.Time) rate.Limit {
	self := b.self
	if self > 1 && (b.valid == nil || !now.Before(b.valid())) {
		self = 1
	}
	return rate.Limit(b.fleet * b.slow * self / b.total)
}

// reset applies limitAt(now) to the limiter when it changed (under b.mu):
// the next reservation is at the new rate (a poller makes one call at a
// time, so at most one goes at the old rate after a change).
func (b *describeBudget) reset(now time.Time) {
	if l := b.limitAt(now); l != b.lim.Limit() {
		b.lim.SetLimitAt(now, l)
		b.m.DescribeRate.Set(float64(l))
	}
}

// share sets this poller's weight (self) and the weights it counts, its
// own included (total, at least self); a weight above 1 holds only while
// valid() is after the call's turn.
func (b *describeBudget) share(self, total float64, valid func() time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.self, b.total, b.valid = max(self, 1), max(total, self, 1), valid
	b.reset(time.Now())
}

// wait waits for this poller's next DescribeStream call. When until is set
// and the call's turn (with its jitter) comes after it, wait returns
// errDescribeDeferred at once, without taking the turn.
func (b *describeBudget) wait(ctx context.Context, until time.Time) error {
	now := time.Now()
	b.mu.Lock()
	b.reset(now)
	r := b.lim.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if lim := b.lim.Limit(); lim > 0 {
		interval := time.Duration(float64(time.Second) / float64(lim))
		d += rand.N(interval/4 + 1)
	}
	if !until.IsZero() && now.Add(d).After(until) {
		r.CancelAt(now)
		b.mu.Unlock()
		b.m.DescribeDeferred.Inc()
		return errDescribeDeferred
	}
	b.mu.Unlock()
	if d <= 0 {
		return nil
	}
	return sleep(ctx, d)
}

// answered adjusts the rate after a DescribeStream answer: a throttled one
// halves it, an accepted one gives a tenth of it back.
func (b *describeBudget) answered(err error) {
	var le *streamtypes.LimitExceededException
	throttled := errors.As(err, &le)
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.slow
	if throttled {
		b.slow = max(minDescribeSlow, b.slow/2)
	} else if err == nil {
		b.slow = min(1, b.slow+0.1)
	}
	if b.slow != old {
		b.reset(time.Now())
	}
}
