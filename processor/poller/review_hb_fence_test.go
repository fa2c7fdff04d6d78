package poller_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// The review of the worker heartbeat (docs/exactly-once.md, "Review
// (adversarial, session 16): the worker heartbeat"), HB1: a fence is good
// for the lease states read before it landed, not for the owner's leases
// for as long as this poller's registry view shows the fenced beat.

// takerFaults sits in front of a taker's coordination table: its writes
// of the lease item of shard block fail (a throttled take), and its reads
// of the worker registry fail while registryDown is set (the hot workers'
// key throttled). Its fences (FenceWorker) are counted.
type takerFaults struct {
	poller.Table
	mu           sync.Mutex
	block        string
	registryDown atomic.Bool
	fences       atomic.Int64
}

func (f *takerFaults) setBlock(shard string) { f.mu.Lock(); f.block = shard; f.mu.Unlock() }

func (f *takerFaults) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	sk, _ := table.String(in.Key, table.AttrSK)
	f.mu.Lock()
	block := f.block
	f.mu.Unlock()
	if block != "" && sk == "LEASE#"+block {
		return nil, &ddbtypes.ProvisionedThroughputExceededException{Message: aws.String("take throttled by the test")}
	}
	out, err := f.Table.UpdateItem(ctx, in, opts...)
	if err == nil && strings.HasPrefix(sk, "WORKER#") && strings.HasPrefix(aws.ToString(in.UpdateExpression), "SET #f") {
		f.fences.Add(1)
	}
	return out, err
}

func (f *takerFaults) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if pk, _ := table.String(in.ExpressionAttributeValues, ":pk"); f.registryDown.Load() && strings.HasSuffix(pk, "#WORKERS") {
		return nil, errors.New("registry read failed by the test")
	}
	return f.Table.Query(ctx, in, opts...)
}

// A taker fences a paused poller "a" and takes its leases over, all but
// one whose take is throttled; its registry reads then fail, so its view
// of a stays "gone at beat b". a resumes: its heartbeat is refused by the
// fence, it drops its leases, rejoins (beat b + 1) and takes its own
// lease back (a new counter, in its name). When the throttled take goes
// through again, the taker reads that lease — a's, written after a
// rejoined — and takes it on the strength of the fence it made at b:
// without a new fence, which would fail on a's new beat. a, a heartbeat
// poller, reads none of its lease items: it never learns, and both read
// and commit the shard (exactness kept by the checkpoint's condition, H2)
// until the shard ends. With the fix (a fence made in the same takeLeases
// call as the take, after the lease was read), the new fence fails and
// the lease stays a's.
func TestPoller_AFenceDoesNotCoverALeaseTheFencedOwnerTookAfterRejoining(t *testing.T) {
	ddbtest.Long(t)
	const shards = 4
	const lease = 3 * time.Second
	e := newEmuEnv(t, 411, streamemu.Config{Shards: shards, Seed: 411})
	cfg := func(c *poller.Config) { c.LeaseDuration = lease }
	g := &gate{}
	paused := faultClient(t, func(string) ledgertest.Fault { g.wait(); return ledgertest.Pass })
	a := e.hbPoller(t, "a", func(poller.Table) poller.Table { return paused }, paused, gatedStreams{Streams: e.s, g: g}, cfg)
	f := &takerFaults{}
	b := e.hbPoller(t, "b", func(api poller.Table) poller.Table { f.Table = api; return f }, nil, nil, cfg)
	e.write(t, 40)
	stopA := start(t, a)
	eventually(t, "a holds every shard", 10*lease, func() bool { return counter(t, a.m.LeasesHeld) == shards })
	stopB := start(t, b)
	eventually(t, "both hold their share", 20*lease, func() bool { return balanced(t, shards, a, b) })

	var x string
	for shard := range e.leaseCounters(t, "a") {
		x = shard
		break
	}
	require.NotEmpty(t, x)
	f.setBlock(x)
	g.pause()
	eventually(t, "b fences a and takes its leases but x", 10*lease, func() bool {
		return f.fences.Load() >= 1 && counter(t, b.m.LeasesHeld) == shards-1
	})
	f.registryDown.Store(true)
	g.resume()
	resumed := time.Now()
	eventually(t, "a rejoins and takes x back", 10*lease, func() bool {
		_, ax := e.leaseCounters(t, "a")[x]
		return counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseRejoined)) >= 1 && ax && counter(t, a.m.LeasesHeld) >= 1
	})
	f.setBlock("")
	time.Sleep(3 * lease) // b's takes of x go through again
	held := counter(t, a.m.LeasesHeld) + counter(t, b.m.LeasesHeld)
	assert.LessOrEqual(t, held, float64(shards), "a shard held by both pollers (a never learns: it reads none of its lease items)")
	f.registryDown.Store(false)
	e.write(t, 20)
	stopA()
	stopB()
	e.finish(t, nil)
	// From a lease duration after the resume on (a's readers cancelled at
	// the resume by their timers log their stop only then: the overlap of
	// the pause itself is H2's, as in the pause test), one reader a shard.
	end := time.Now()
	var after []interval
	for _, iv := range append(readerIntervals(t, a.logs.lines(), end), readerIntervals(t, b.logs.lines(), end)...) {
		if iv.to.After(resumed.Add(lease)) {
			after = append(after, iv)
		}
	}
	requireNoOverlap(t, after)
}
