package poller_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
)

// Review (adversarial, session 20): HB6-L1, the take gate and S17-D3
// (docs/exactly-once.md, entries S20-R1…).

// cutBeats lets owner's heartbeats through until armed, then lets one
// more land and refuses every later one with a server error: the
// process's worker writes cut off (a partition of its path to the worker
// partition) right after a heartbeat landed, everything else it does
// going on.
type cutBeats struct {
	poller.Table
	owner string
	armed atomic.Bool
	cut   atomic.Int64 // unix nanos of the last heartbeat that landed once armed; 0 before
}

func (c *cutBeats) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	hb := isHeartbeat(in, c.owner)
	if hb && c.cut.Load() != 0 {
		return nil, &ddbtypes.InternalServerError{Message: aws.String("worker writes cut off by the test")}
	}
	out, err := c.Table.UpdateItem(ctx, in, opts...)
	if hb && err == nil && c.armed.Load() {
		c.cut.CompareAndSwap(0, time.Now().UnixNano())
	}
	return out, err
}

// S20-R1: a stable owner name restarted in the other lease mode. Poller
// "x" (heartbeat mode) holds two shards of three and "y" one, for a
// while: y has read x's lease items with the counters x took them at
// (a heartbeat owner never moves them) for longer than a lease
// duration. x's worker writes are cut off right after a heartbeat
// landed (its process lives: its validity runs a lease duration from
// that heartbeat's send, and it reads on until then), and a process
// "x" in LeaseModeRenew starts (a restart with --lease-mode renew, or
// a second process of the name). Its claim makes the worker item a
// renewing owner's, so y judges x's leases by the counter rule — on
// observations made while they were kept by the beat. Before the fix,
// y took one of the first x's leases at its next round, with no fence,
// and read the shard beside it until the first x's validity ended.
// Asserted: one reader a shard (the first x's readers told apart from
// the second's), every shard held again, every record committed.
func TestReviewS20_ARestartInRenewModeUnderAHeartbeatNameLeavesOneReaderAShard(t *testing.T) {
	ddbtest.Long(t)
	const shards = 3
	const lease = 6 * time.Second
	e := newEmuEnv(t, 2001, streamemu.Config{Shards: shards, Seed: 2001})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour", "quay", "mill", "bridge", "market", "abbey", "castle"} // records on every shard
	setLease := func(c *poller.Config) { c.LeaseDuration = lease }
	cut := &cutBeats{owner: "x"}
	x1 := e.hbPoller(t, "x", func(api poller.Table) poller.Table { cut.Table = api; return cut }, nil, nil, setLease)
	y := e.hbPoller(t, "y", nil, nil, nil, setLease)
	e.write(t, 40)
	stopX1 := start(t, x1)
	eventually(t, "the first x holds every shard", 20*lease, func() bool { return counter(t, x1.m.LeasesHeld) == shards })
	stopY := start(t, y)
	eventually(t, "x holds two, y one", 20*lease, func() bool {
		return counter(t, x1.m.LeasesHeld) == 2 && counter(t, y.m.LeasesHeld) == 1
	})
	// y reads x's leases, unchanged, for over a lease duration.
	time.Sleep(lease + lease/2)
	e.write(t, 40)

	cut.armed.Store(true)
	eventually(t, "x's worker writes cut off after a heartbeat", 2*lease, func() bool { return cut.cut.Load() != 0 })
	// A quarter of a lease duration later (the first x reads on for
	// three more quarters), x starts again in renew mode.
	time.Sleep(lease / 4)
	x2 := e.hbPoller(t, "x", nil, nil, nil, func(c *poller.Config) { c.LeaseDuration, c.LeaseMode = lease, poller.LeaseModeRenew })
	stopX2 := start(t, x2)
	e.write(t, 40)
	eventually(t, "every shard held again by the second x or y", 20*lease, func() bool {
		return counter(t, x2.m.LeasesHeld)+counter(t, y.m.LeasesHeld) == shards
	})
	e.write(t, 40)
	eventually(t, "every record written committed", 20*lease, func() bool { return e.reconciledNow(t) })
	t.Logf("x %v, y %v; y took over %v, the second x %v", counter(t, x2.m.LeasesHeld), counter(t, y.m.LeasesHeld),
		counter(t, y.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)), counter(t, x2.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)))
	stopX2()
	stopY()
	stopX1()
	end := time.Now()
	ivs := readerIntervals(t, x1.logs.lines(), end)
	for i := range ivs {
		ivs[i].owner = "x(first)"
	}
	ivs = append(ivs, readerIntervals(t, x2.logs.lines(), end)...)
	requireNoOverlap(t, append(ivs, readerIntervals(t, y.logs.lines(), end)...))
	e.finish(t, nil)
}

// S20-R2: a drain given the name of a poller that left (or died) while
// another poller runs. Poller "x" (heartbeat mode) stops, handing its
// leases to "y"; its worker item stays (left, kept WorkerRetention). A
// drain is run under the name "x" (LEDGER_OWNER set in x's environment):
// it asks y for every lease, y hands them over to "x" and the drain takes
// them, renewing their items. y judges a lease naming "x" by x's worker
// item, which says heartbeat and whose beat stands still: expired. So y,
// under its share with x not live, fenced the item and took the drain's
// leases back, the drain reading each until its next renewal failed, and
// asked for again: two readers of a shard each time.
func TestReviewS20_ADrainUnderTheNameOfAPollerThatLeftIsNotTakenFromByTheOthers(t *testing.T) {
	ddbtest.Long(t)
	const shards = 4
	const lease = 3 * time.Second
	e := newEmuEnv(t, 2002, streamemu.Config{Shards: shards, Seed: 2002})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour", "quay", "mill", "bridge", "market", "abbey", "castle"} // records on every shard
	setLease := func(c *poller.Config) { c.LeaseDuration = lease }
	x := e.hbPoller(t, "x", nil, nil, nil, setLease)
	y := e.hbPoller(t, "y", nil, nil, nil, setLease)
	e.write(t, 40)
	stopX, stopY := start(t, x), start(t, y)
	eventually(t, "x and y share the shards", 20*lease, func() bool { return balanced(t, shards, x, y) })
	stopX()
	eventually(t, "y holds every shard", 20*lease, func() bool { return counter(t, y.m.LeasesHeld) == shards })
	// The drain reads slowly (pages of five records, each a second late):
	// it holds each lease, its reader running, for several of y's rounds.
	d := e.hbPoller(t, "x", nil, nil, slowPages{Streams: e.s, delay: time.Second}, func(c *poller.Config) {
		c.Drain, c.LeaseDuration, c.MaxRecords = true, lease, 5
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a liveness bound
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- d.Run(ctx) }()
	e.write(t, 100) // for the drain to read: y hands its shards over before reading them all
	require.NoError(t, <-drained)
	require.NoError(t, ctx.Err(), "the drain did not exit")
	stopY()
	end := time.Now()
	t.Logf("the drain took %v, took over %v; y took over %v, lost %v", counter(t, d.m.LeaseEvents.WithLabelValues(poller.LeaseAcquired)),
		counter(t, d.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)), counter(t, y.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)),
		counter(t, d.m.LeaseEvents.WithLabelValues(poller.LeaseLost)))
	ivs := readerIntervals(t, d.logs.lines(), end)
	for i := range ivs {
		ivs[i].owner = "x(drain)"
	}
	requireNoOverlap(t, append(ivs, readerIntervals(t, y.logs.lines(), end)...))
	assert.Zero(t, counter(t, d.m.LeaseEvents.WithLabelValues(poller.LeaseLost)), "leases the drain lost while it renewed them")
	e.finish(t, nil)
}

// slowPages answers every GetRecords delay late.
type slowPages struct {
	poller.Streams
	delay time.Duration
}

func (s slowPages) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Streams.GetRecords(ctx, in, opts...)
}

// faultyCoord is a poller's table whose writes all fail while
// writesDown is set and whose lease takes fail, once allowed takes have
// landed, while takesDown is set: server errors, the requests not
// applied.
type faultyCoord struct {
	poller.Table
	writesDown atomic.Bool
	takesDown  atomic.Bool
	allowed    atomic.Int64
}

func (f *faultyCoord) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.writesDown.Load() {
		return nil, &ddbtypes.InternalServerError{Message: aws.String("writes failing (the test)")}
	}
	if f.takesDown.Load() && isTake(in) && f.allowed.Add(-1) < 0 {
		return nil, &ddbtypes.InternalServerError{Message: aws.String("takes failing (the test)")}
	}
	return f.Table.UpdateItem(ctx, in, opts...)
}

// S20-R3: a fenced poller's own dropped leases beyond its share. HB6-L1
// takes every lease of the name and not of the incarnation over the
// share; those of the poller's own incarnation that it does not hold
// stayed within it, "the fencer is taking them". x holds all eight
// shards; its heartbeats fail (a pause) while y starts; y fences x and
// takes one lease, its other takes failing (the lease partition
// throttled). x's heartbeats land again: refused by the fence, x drops
// its eight and rejoins, its beat moves, and y judges the seven left in
// x's name live. x took them back only up to its share (four), balance
// moved leases from x to y, x took more within its share, and so on
// until x held four and y three: one shard read by nobody, for good,
// as in HB6-L1. Asserted: every shard held again, one reader a shard,
// every record committed.
func TestReviewS20_AFencedPollerTakesBackEveryLeaseItDroppedThatNobodyTook(t *testing.T) {
	ddbtest.Long(t)
	const shards = 8
	const lease = 3 * time.Second
	e := newEmuEnv(t, 2003, streamemu.Config{Shards: shards, Seed: 2003})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour", "quay", "mill", "bridge", "market", "abbey", "castle"} // records on every shard
	setLease := func(c *poller.Config) { c.LeaseDuration = lease }
	fx, fy := &faultyCoord{}, &faultyCoord{}
	x := e.hbPoller(t, "x", func(api poller.Table) poller.Table { fx.Table = api; return fx }, nil, nil, setLease)
	y := e.hbPoller(t, "y", func(api poller.Table) poller.Table { fy.Table = api; return fy }, nil, nil, setLease)
	e.write(t, 40)
	stopX := start(t, x)
	eventually(t, "x holds every shard", 20*lease, func() bool { return counter(t, x.m.LeasesHeld) == shards })
	fx.writesDown.Store(true)
	eventually(t, "x paused", 20*lease, func() bool { return counter(t, x.m.LeasesPaused) == shards })
	fy.allowed.Store(1)
	fy.takesDown.Store(true)
	stopY := start(t, y)
	eventually(t, "y fenced x", 20*lease, func() bool { return counter(t, y.m.LeaseEvents.WithLabelValues(poller.LeaseFenced)) >= 1 })
	fx.writesDown.Store(false)
	eventually(t, "x rejoined and took leases again", 20*lease, func() bool {
		return counter(t, x.m.LeaseEvents.WithLabelValues(poller.LeaseRejoined)) >= 1 && counter(t, x.m.LeasesHeld) >= 1
	})
	fy.takesDown.Store(false)
	e.write(t, 40)
	eventually(t, "every shard held again", 20*lease, func() bool {
		return counter(t, x.m.LeasesHeld)+counter(t, y.m.LeasesHeld) == shards
	})
	eventually(t, "every record written committed", 20*lease, func() bool { return e.reconciledNow(t) })
	t.Logf("x %v, y %v; y took over %v", counter(t, x.m.LeasesHeld), counter(t, y.m.LeasesHeld), counter(t, y.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)))
	stopY()
	stopX()
	end := time.Now()
	requireNoOverlap(t, append(readerIntervals(t, x.logs.lines(), end), readerIntervals(t, y.logs.lines(), end)...))
	e.finish(t, nil)
}
