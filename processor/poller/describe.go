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
// The fleet's budget (Config.DescribeRate, calls a second) is split evenly
// among the live pollers of the worker registry, this one included: each
// calls at most DescribeRate / pollers a second, each wait drawn up to a
// quarter of the interval longer (jitter: pollers started together do not
// call in step). A throttled answer (another reader of the stream, a
// poller not yet in the registry) halves this poller's rate, down to a
// sixteenth; each answer accepted gives back a tenth of the full rate.
type describeBudget struct {
	fleet float64 // calls a second for the whole fleet

	mu      sync.Mutex
	lim     *rate.Limiter
	pollers int     // live pollers, this one included
	slow    float64 // ≤ 1: the share of the rate after throttled answers
	m       *Metrics
}

// minDescribeSlow is the least share of its rate a throttled poller keeps.
const minDescribeSlow = 1.0 / 16

// errDescribeDeferred means the next DescribeStream call this poller's
// share of the stream's rate allows comes after the caller's deadline:
// the call is not made; the listing or the lookups go on at the next pass.
var errDescribeDeferred = errors.New("describe stream deferred: this poller's share of the stream's DescribeStream rate is spent")

func newDescribeBudget(fleet int, m *Metrics) *describeBudget {
	b := &describeBudget{fleet: float64(fleet), pollers: 1, slow: 1, m: m}
	b.lim = rate.NewLimiter(b.limit(), 1)
	b.m.DescribeRate.Set(float64(b.limit()))
	return b
}

// limit is this poller's calls a second (under b.mu).
func (b *describeBudget) limit() rate.Limit {
	return rate.Limit(b.fleet * b.slow / float64(b.pollers))
}

// setPollers sets the number of live pollers sharing the stream's rate
// (this one included; at least 1).
func (b *describeBudget) setPollers(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n = max(n, 1); n != b.pollers {
		b.pollers = n
		b.lim.SetLimit(b.limit())
		b.m.DescribeRate.Set(float64(b.limit()))
	}
}

// wait waits for this poller's next DescribeStream call. When until is set
// and the call's turn (with its jitter) comes after it, wait returns
// errDescribeDeferred at once, without taking the turn.
func (b *describeBudget) wait(ctx context.Context, until time.Time) error {
	now := time.Now()
	b.mu.Lock()
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
		b.lim.SetLimit(b.limit())
		b.m.DescribeRate.Set(float64(b.limit()))
	}
}
