package poller_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// writer appends workload records to the fake shards (by key hash) until
// stopped.
func (e *env) writeOn(t *testing.T, shards []string, batch int, every time.Duration) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(every):
			}
			e.stream.split(shards, e.write(t, batch))
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// Two pollers share four shards half and half: the second asks the first
// for leases, which hands them over after committing what it holds. When
// one stops, it releases its leases and the other takes them. Writes go
// on throughout; no shard ever has two readers, and the reports come out
// exact.
func TestPoller_TwoPollersShareShardsFairlyAndHandOffOnShutdown(t *testing.T) {
	e := newEnv(t, 11)
	shards := []string{"shardId-0", "shardId-1", "shardId-2", "shardId-3"}
	for _, s := range shards {
		e.stream.addShard(s, "")
	}
	e.stream.split(shards, e.write(t, 200))
	stopWrites := e.writeOn(t, shards, 10, 20*time.Millisecond)

	a := e.poller(t, "A", nil, nil, nil)
	stopA := start(t, a)
	eventually(t, "A holds all four", time.Minute, func() bool { return counter(t, a.m.LeasesHeld) == 4 })

	b := e.poller(t, "B", nil, nil, nil)
	stopB := start(t, b)
	eventually(t, "two each", time.Minute, func() bool {
		return counter(t, a.m.LeasesHeld) == 2 && counter(t, b.m.LeasesHeld) == 2
	})
	// A sees B in the worker registry and hands it the two over its share
	// (B asks for nothing: the registry says who is under its share). On
	// a loaded machine a hand-over can land after a round of B's that
	// took a lease meanwhile, and one goes back: the count is logged.
	handed := counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseHandedOff))
	assert.GreaterOrEqual(t, handed, 2.0)
	assert.Zero(t, counter(t, b.m.LeaseEvents.WithLabelValues(poller.LeaseRequested)))
	t.Logf("A handed %.0f leases to B on its join", handed)
	// Stable: nobody hands over more than the excess — on a quiet
	// machine. On a loaded one a poller's record of what it handed expires
	// after three of the receiver's heartbeats, which its round (taking
	// the offers, then counting them in its worker item) can outlast: one
	// more goes over and comes back (load 28). Two each again, eventually.
	time.Sleep(2 * time.Second)
	eventually(t, "two each, again", time.Minute, func() bool {
		return counter(t, a.m.LeasesHeld) == 2 && counter(t, b.m.LeasesHeld) == 2
	})

	handed, held := counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseHandedOff)), counter(t, a.m.LeasesHeld)
	stopA()
	assert.Equal(t, 0.0, counter(t, a.m.LeasesHeld))
	// Every lease handed over, unless its hand-over did not land within
	// the stop's budget (5 s for all: at load 36 DynamoDB Local took over
	// 3 s a write): then B takes it over a lease duration later. Figures.
	stopHanded := counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseHandedOff)) - handed
	assert.LessOrEqual(t, stopHanded, held)
	eventually(t, "B holds all four", time.Minute, func() bool { return counter(t, b.m.LeasesHeld) == 4 })
	t.Logf("A handed %.0f of its %.0f leases over as it stopped; B took %.0f over", stopHanded, held,
		counter(t, b.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)))

	stopWrites()
	stopB()
	c := e.drain(t, "C", nil)
	e.requireReconciled(t)
	end := time.Now()
	var all []interval
	for _, p := range []*testPoller{a, b, c} {
		all = append(all, readerIntervals(t, p.logs.lines(), end)...)
	}
	requireNoOverlap(t, all)
	assert.Zero(t, recordsTotal(t, a.pm, processor.OutcomeDuplicate)+recordsTotal(t, b.pm, processor.OutcomeDuplicate)+
		recordsTotal(t, c.pm, processor.OutcomeDuplicate), "hand-offs commit what is in hand: nothing is read twice")
}

// A third poller joins two that hold two of four shards each: a fair
// share is one or two, so one of them hands it a lease (before, only
// owners above the ceiling of two were asked, and it waited with none
// until the shards changed); then nobody hands over again.
func TestPoller_AJoiningPollerBelowItsFloorGetsALease(t *testing.T) {
	e := newEnv(t, 12)
	shards := []string{"shardId-0", "shardId-1", "shardId-2", "shardId-3"}
	for _, s := range shards {
		e.stream.addShard(s, "")
	}
	e.stream.split(shards, e.write(t, 100))
	a := e.poller(t, "A", nil, nil, nil)
	stopA := start(t, a)
	eventually(t, "A holds all four", 2*time.Minute, func() bool { return counter(t, a.m.LeasesHeld) == 4 })
	b := e.poller(t, "B", nil, nil, nil)
	stopB := start(t, b)
	eventually(t, "two each", 2*time.Minute, func() bool {
		return counter(t, a.m.LeasesHeld) == 2 && counter(t, b.m.LeasesHeld) == 2
	})
	c := e.poller(t, "C", nil, nil, nil)
	stopC := start(t, c)
	// Liveness bounds: 15 s failed at load 8.
	eventually(t, "C holds one", 2*time.Minute, func() bool { return counter(t, c.m.LeasesHeld) >= 1 })
	// Then the moves stop: one owner keeps two, the others one, and no
	// lease changes hands for three seconds. Not a fixed wait: on a loaded
	// table two owners may both hand C a lease on views of the registry a
	// heartbeat old (a CI run: A's hand-over to C landed 2.4 s after its
	// decision, and B, reading C's held count before C's heartbeat said
	// one, handed it another), a move more, not a thrash.
	handed := func() float64 {
		n := 0.0
		for _, p := range []*testPoller{a, b, c} {
			n += counter(t, p.m.LeaseEvents.WithLabelValues(poller.LeaseHandedOff))
		}
		return n
	}
	eventually(t, "stable: one owner keeps two, the others one", 2*time.Minute, func() bool {
		before := handed()
		held := []float64{counter(t, a.m.LeasesHeld), counter(t, b.m.LeasesHeld), counter(t, c.m.LeasesHeld)}
		time.Sleep(3 * time.Second)
		after := []float64{counter(t, a.m.LeasesHeld), counter(t, b.m.LeasesHeld), counter(t, c.m.LeasesHeld)}
		sorted := slices.Sorted(slices.Values(after))
		return handed() == before && slices.Equal(held, after) && slices.Equal(sorted, []float64{1, 1, 2})
	})
	stopC()
	stopB()
	stopA()
	e.drain(t, "D", nil)
	e.requireReconciled(t)
}

// A poller that dies (every call fails) reads its shards until its
// heartbeat's validity ends (then it stops, keeping the leases paused);
// another takes them over only after it has seen its beat unchanged for a
// lease duration, after the dead poller's readers have stopped.
func TestPoller_TakesOverExpiredLeasesOfADeadPoller(t *testing.T) {
	e := newEnv(t, 12)
	shards := []string{"shardId-0", "shardId-1"}
	for _, s := range shards {
		e.stream.addShard(s, "")
	}
	e.stream.split(shards, e.write(t, 200))
	stopWrites := e.writeOn(t, shards, 10, 30*time.Millisecond)

	var dead atomic.Bool
	a := e.poller(t, "A", deadStreams{Streams: e.stream.client("A"), dead: dead.Load}, chaosClient(t, dead.Load), nil)
	stopA := start(t, a)
	eventually(t, "A holds both", 10*time.Second, func() bool { return counter(t, a.m.LeasesHeld) == 2 })
	eventually(t, "A reading", 10*time.Second, func() bool { return counter(t, a.m.RecordsRead) > 200 })

	b := e.poller(t, "B", nil, nil, nil)
	stopB := start(t, b)
	time.Sleep(500 * time.Millisecond)
	diedAt := time.Now()
	dead.Store(true)
	eventually(t, "B takes both over", 60*time.Second, func() bool { return counter(t, b.m.LeasesHeld) == 2 })
	tookAfter := time.Since(diedAt)
	// The takeover waits a lease duration (3s) after the last renewal B
	// saw; A renews every third of that, so its last renewal may precede
	// its death by up to 1s. (That no shard had two readers at once is
	// checked from the logs below.)
	assert.GreaterOrEqual(t, tookAfter, 2*time.Second, "not before a lease duration after A's last renewal")
	assert.Equal(t, 2.0, counter(t, b.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver))+counter(t, b.m.LeaseEvents.WithLabelValues(poller.LeaseAcquired)))
	// A heartbeat poller stops reading at its validity's end and keeps
	// the leases, paused, until a heartbeat lands (here: refused by B's
	// fence once A's calls come back, and then it drops them).
	eventually(t, "A stops reading what it held", 30*time.Second, func() bool {
		return counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeasePaused)) > 0
	})

	stopWrites()
	stopB()
	dead.Store(false)
	stopA()
	c := e.drain(t, "C", nil)
	e.requireReconciled(t)
	end := time.Now()
	var all []interval
	for _, p := range []*testPoller{a, b, c} {
		all = append(all, readerIntervals(t, p.logs.lines(), end)...)
	}
	requireNoOverlap(t, all)
}

// A drain run takes over the expired leases of a dead poller and asks live
// owners to hand theirs over.
func TestPoller_DrainTakesOverExpiredLeasesAndAsksLiveOwners(t *testing.T) {
	e := newEnv(t, 13)
	shards := []string{"shardId-0", "shardId-1", "shardId-2"}
	for _, s := range shards {
		e.stream.addShard(s, "")
	}
	e.stream.split(shards, e.write(t, 300))

	var dead atomic.Bool
	a := e.poller(t, "A", deadStreams{Streams: e.stream.client("A"), dead: dead.Load}, chaosClient(t, dead.Load), nil)
	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() { doneA <- a.Run(ctxA) }()
	eventually(t, "A holds all", 10*time.Second, func() bool { return counter(t, a.m.LeasesHeld) == 3 })
	dead.Store(true) // A dies holding three leases

	b := e.poller(t, "B", nil, nil, nil)
	stopB := start(t, b)
	eventually(t, "B takes them over", 15*time.Second, func() bool { return counter(t, b.m.LeasesHeld) >= 1 })
	e.stream.split(shards, e.write(t, 100))

	d := e.drain(t, "D", nil)
	assert.Positive(t, counter(t, d.m.LeaseEvents.WithLabelValues(poller.LeaseRequested))+counter(t, d.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)))
	stopB()
	cancelA()
	dead.Store(false)
	require.NoError(t, <-doneA)
	e.drain(t, "E", nil)
	e.requireReconciled(t)
}

// listingCounter counts a poller's listings of the whole stream
// (DescribeStream without a ShardFilter).
type listingCounter struct {
	poller.Streams
	n atomic.Int64
}

func (c *listingCounter) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	if in.ShardFilter == nil {
		c.n.Add(1)
	}
	return c.Streams.DescribeStream(ctx, in, opts...)
}

// Issue 23: between two listings of the whole stream (DiscoverInterval,
// here an hour) a poller learns of new shards from the lease items the
// poller that finished their parent registered: the one holding a shard
// that ends looks its children up (ShardFilter CHILD_SHARDS) and
// registers them; when it stops, the other takes them over having listed
// the stream only once, at its start. Before, it knew only the shards of
// its last listing and would have read the children an hour later.
func TestPoller_NewShardsAreLearnedFromLeasesBetweenListings(t *testing.T) {
	e := newEnv(t, 23)
	f := e.stream
	f.addShard("shardId-A", "")
	f.addShard("shardId-X", "")
	f.split([]string{"shardId-A", "shardId-X"}, e.write(t, 60))
	hourly := func(c *poller.Config) { c.DiscoverInterval = time.Hour }
	ca, cb := &listingCounter{Streams: f.client("P")}, &listingCounter{Streams: f.client("Q")}
	p, q := e.poller(t, "P", ca, nil, hourly), e.poller(t, "Q", cb, nil, hourly)
	stopP, stopQ := start(t, p), start(t, q)
	eventually(t, "one shard each", 15*time.Second, func() bool {
		return counter(t, p.m.LeasesHeld) == 1 && counter(t, q.m.LeasesHeld) == 1
	})
	listedP, listedQ := ca.n.Load(), cb.n.Load()

	// A ends; its children B and C get the next records.
	f.appendTo("shardId-A", e.write(t, 30)...)
	f.close("shardId-A")
	f.addShard("shardId-B", "shardId-A")
	f.addShard("shardId-C", "shardId-A")
	f.split([]string{"shardId-B", "shardId-C"}, e.write(t, 60))
	eventually(t, "B and C registered", 30*time.Second, func() bool {
		leases, _, err := table.ReadStreamState(context.Background(), e.ddb, table.CoordinationTableName(e.table), f.arn, nil)
		require.NoError(t, err)
		return leases["shardId-B"].Start != "" && leases["shardId-C"].Start != "" && leases["shardId-B"].Parent == "shardId-A"
	})
	// The one that finished A registered them; the other learns of them.
	o, stopH, stopO, co, listed := q, stopP, stopQ, cb, listedQ
	if finishedA := func(tp *testPoller) bool {
		for _, l := range tp.logs.lines() {
			if l["msg"] == "shard finished: read to its end" && l["shard"] == "shardId-A" {
				return true
			}
		}
		return false
	}; finishedA(q) {
		o, stopH, stopO, co, listed = p, stopQ, stopP, ca, listedP
	}

	stopH()
	eventually(t, "the other holds X, B and C", 30*time.Second, func() bool { return counter(t, o.m.LeasesHeld) == 3 })
	assert.Equal(t, listed, co.n.Load(), "no listing of the whole stream since its start")
	stopO()
	e.drain(t, "R", nil)
	e.requireReconciled(t)
}

// throttledListing refuses every listing of the whole stream (DescribeStream
// without a ShardFilter) with LimitExceededException while on, as
// DescribeStream's rate (10 a second per stream, shared by every poller)
// refuses them when several pollers list thousands of shards at once.
type throttledListing struct {
	poller.Streams
	on      atomic.Bool
	refused atomic.Int64
}

func (c *throttledListing) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	if in.ShardFilter == nil && c.on.Load() {
		c.refused.Add(1)
		return nil, &st.LimitExceededException{Message: aws.String("Rate exceeded for DescribeStream")}
	}
	return c.Streams.DescribeStream(ctx, in, opts...)
}

// Issue 23, found by the fleet benchmark (100 and 1,000 shards): a listing
// waits out throttled DescribeStream pages inside the coordinator's pass,
// and the pass is what renews the leases. Waiting out up to 200 throttled
// pages (about 30 s, and again at each of the pass's 3 attempts) let every
// lease the poller held expire at once, its readers stopped (20 s leases;
// here 3 s): 448 expiries at 100 shards. Now a listing pauses in time for
// the next renewals and goes on at the next pass; the lease is kept and
// the shard read throughout.
func TestPoller_AThrottledListingDoesNotHoldUpLeaseRenewals(t *testing.T) {
	e := newEnv(t, 2323)
	f := e.stream
	f.addShard("shardId-A", "")
	f.addShard("shardId-B", "")
	shards := []string{"shardId-A", "shardId-B"}
	f.split(shards, e.write(t, 40))
	c := &throttledListing{Streams: f.client("P")}
	p := e.poller(t, "P", c, nil, nil) // leases of 3 s, a listing due every 100 ms
	stop := start(t, p)
	eventually(t, "both leases held", time.Minute, func() bool { return counter(t, p.m.LeasesHeld) == 2 })

	c.on.Store(true)
	stopWrites := e.writeOn(t, shards, 5, 50*time.Millisecond)
	time.Sleep(3 * 3 * time.Second) // three lease durations of refused listings
	// Still refused: the shards are still read (before, the readers were
	// stopped at their leases' end, 3 s in, and the pass still waited).
	before := counter(t, p.m.Committed)
	eventually(t, "records committed after three lease durations of refused listings", time.Minute, func() bool {
		return counter(t, p.m.Committed) > before
	})
	stopWrites()
	assert.Positive(t, c.refused.Load(), "listings refused")
	assert.Zero(t, counter(t, p.m.LeaseEvents.WithLabelValues(poller.LeaseExpired)), "no lease expired while the listing was refused")
	assert.Equal(t, 2.0, counter(t, p.m.LeasesHeld))
	c.on.Store(false)

	stop()
	e.drain(t, "D", nil)
	e.requireReconciled(t)
}

// Issue 23, found by the fleet benchmark at 1,000 shards (once listings
// completed): a pass took its share of leases one UpdateItem after another
// and renewed none meanwhile; a lease is valid from its take, so a pass
// taking hundreds on a slow table outlived the first ones it took, and
// they expired at the next renewal, 80 to 249 leases of a poller at once.
// Here 40 shards and takes of 150 ms each (6 s) against 3 s leases. Now a
// pass takes for at most half a renewal interval and the next passes take
// the rest.
func TestPoller_TakingManyLeasesOnASlowTableLetsNoneExpire(t *testing.T) {
	e := newEnv(t, 2325)
	var shards []string
	for i := range 40 {
		id := fmt.Sprintf("shardId-%02d", i)
		shards = append(shards, id)
		e.stream.addShard(id, "")
	}
	e.stream.split(shards, e.write(t, 120))
	slow := faultClient(t, func(op string) ledgertest.Fault {
		if op == "UpdateItem" {
			time.Sleep(150 * time.Millisecond)
		}
		return ledgertest.Pass
	})
	p := e.poller(t, "P", nil, slow, nil)
	stop := start(t, p)
	eventually(t, "every lease held", 60*time.Second, func() bool { return counter(t, p.m.LeasesHeld) == 40 })
	time.Sleep(3 * time.Second) // a lease duration: any lease taken too early has expired by now
	assert.Zero(t, counter(t, p.m.LeaseEvents.WithLabelValues(poller.LeaseExpired)), "no lease expired")
	assert.Zero(t, logged(p.logs.lines(), "lease expired before it could be renewed; reader stopped"))
	stop()
	e.drain(t, "D", nil)
	e.requireReconciled(t)
}
