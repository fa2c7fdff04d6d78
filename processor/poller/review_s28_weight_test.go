package poller_test

import (
	"context"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor/poller"
)

// Review (adversarial, session 28), hole S28-W1: a drain's first listing
// went at the whole of --describe-rate beside the fleet. S27-J2 made a
// drain count the fleet's weights from its first registry read on, but a
// drain's pass lists the stream (discover) before it reads the registry,
// and its listing has no deadline: its whole first listing (71 pages at
// 1,000 shards with a day of history, about 9 s) went at 8 calls a second
// beside the fleet's 8 (a granted joiner's 4.3 among them): 16 against
// AWS's 10 for the stream, at every drain started beside a fleet (the
// runbook's and CI's tool). Here a drain finds three live pollers, one
// announcing its first listing: every listing call it makes must be paced
// at 8 × 1/(1 + 1 + 1 + 8). Before the fix: 8.
func TestReviewS28W1_ADrainsFirstListingCountsTheFleet(t *testing.T) {
	e := newEnv(t, 2801)
	e.stream.addShard("s0", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	registerListingFleet(ctx, t, e)
	const fleet = 8.0
	rec := &rateAtListing{Streams: e.stream.client("drain")}
	tp := e.poller(t, "drain", rec, nil, func(c *poller.Config) { c.Drain, c.DescribeRate = true, fleet })
	rec.setRate(func() float64 { return counter(t, tp.m.DescribeRate) })
	require.NoError(t, poller.FirstPass(ctx, tp.Poller))
	rates := rec.rates()
	require.NotEmpty(t, rates, "the drain listed the stream")
	for _, r := range rates {
		assert.InDelta(t, fleet/(1+1+1+8), r, 1e-9,
			"a drain's first listing is paced at its share of the fleet it reads, a lister at its weight")
	}
}

// rateAtListing records this poller's DescribeStream rate (its gauge) at
// each listing call of the whole stream.
type rateAtListing struct {
	poller.Streams
	mu   sync.Mutex
	rate func() float64
	at   []float64
}

func (r *rateAtListing) setRate(f func() float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rate = f
}

func (r *rateAtListing) rates() []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]float64(nil), r.at...)
}

func (r *rateAtListing) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	if in.ShardFilter == nil {
		r.mu.Lock()
		if r.rate != nil {
			r.at = append(r.at, r.rate())
		}
		r.mu.Unlock()
	}
	return r.Streams.DescribeStream(ctx, in, opts...)
}
