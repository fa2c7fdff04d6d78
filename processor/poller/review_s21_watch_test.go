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
	"github.com/ledger-dev/ledger/table"
)

// The review of the offer watch (session 21, docs/exactly-once.md,
// "Review (adversarial, session 21): the offer watch").

// refusedBeats refuses owner's heartbeats (and rejoins) while stopped is
// set, as a worker partition throttled for writes does; its reads, and
// every other write, go through.
type refusedBeats struct {
	poller.Table
	owner   string
	stopped atomic.Bool
}

func (r *refusedBeats) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if r.stopped.Load() && isHeartbeat(in, r.owner) {
		return nil, &ddbtypes.InternalServerError{Message: aws.String("heartbeat refused by the test")}
	}
	return r.Table.UpdateItem(ctx, in, opts...)
}

// ghostHolds registers a "ghost" poller (its worker item, heartbeat mode,
// its beat never moving again) holding shard, whose lease item names the
// shard's parent and start as a poller's take writes them; hand hands the
// lease to another poller as a giver does: released to it, then the offer
// in its worker item.
func (e *emuEnv) ghostHolds(t *testing.T, shard string) (hand func(to string)) {
	t.Helper()
	ctx := context.Background()
	coord := table.CoordinationTableName(e.table)
	d, err := e.s.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(e.stream.arn)})
	require.NoError(t, err)
	l := table.Lease{Shard: shard}
	for _, s := range d.StreamDescription.Shards {
		if aws.ToString(s.ShardId) == shard {
			l.Parent, l.Start = aws.ToString(s.ParentShardId), aws.ToString(s.SequenceNumberRange.StartingSequenceNumber)
		}
	}
	require.NotEmpty(t, l.Start, "shard %s not listed", shard)
	now := time.Now()
	_, err = e.ddb.UpdateItem(ctx, table.HeartbeatWorker(coord, e.stream.arn, "ghost", "g1", 1, true, now))
	require.NoError(t, err)
	_, err = e.ddb.UpdateItem(ctx, table.TakeLease(coord, e.stream.arn, l, "ghost", "g1", 10*time.Minute, now))
	require.NoError(t, err)
	return func(to string) {
		t.Helper()
		_, err := e.ddb.UpdateItem(ctx, table.ReleaseLease(coord, e.stream.arn, table.Lease{Shard: shard, Owner: "ghost", Counter: 1}, to, false, time.Now()))
		require.NoError(t, err)
		_, err = e.ddb.UpdateItem(ctx, table.OfferLease(coord, e.stream.arn, to, shard))
		require.NoError(t, err)
	}
}

// workerItem reads owner's worker item.
func (e *emuEnv) workerItem(t *testing.T, owner string) table.Worker {
	t.Helper()
	ws, err := table.ReadWorkers(context.Background(), e.ddb, table.CoordinationTableName(e.table), e.stream.arn)
	require.NoError(t, err)
	for _, w := range ws {
		if w.Owner == owner {
			return w
		}
	}
	return table.Worker{}
}

// S21-W1 (offers cleared untaken while paused). A heartbeat poller whose
// validity has ended (paused: no heartbeat answered for a lease duration,
// its worker partition refusing writes while reads go through) reads its
// worker item every second all the same (the watch skips only while
// fenced, superseded or not born); offerPass hands the offers to
// takeOffers, whose takes the validity gate refuses, and the offers are
// cleared untaken. Before the watch a paused poller saw no offer until a
// heartbeat landed (the offers came only in a heartbeat's answer), and the
// round after it took them. Here a joiner b whose listing is refused
// (before its first listing only offers are taken: takeUnlisted) is paused
// while a ghost hands it a lease; once its heartbeats land again, nothing
// brings the lease back before b's listing: the offer is gone, and
// takeShare needs the listing. The lease names b, whose beat moves: nobody
// else takes it either, and its shard is read by nobody until b's listing
// completes (for good while DescribeStream refuses it).
func TestReviewS21_AnOfferMadeWhileAPollerIsPausedIsTakenOnceItsHeartbeatLands(t *testing.T) {
	ddbtest.Long(t)
	const lease = 3 * time.Second
	e := newEmuEnv(t, 2111, streamemu.Config{Shards: 2, Seed: 2111})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour"}
	e.write(t, 30)
	id := e.s.Shards()[0].ID
	hand := e.ghostHolds(t, id)
	beats := &refusedBeats{owner: "b"}
	listing := &unlistable{Streams: e.s, shut: &atomic.Bool{}}
	listing.shut.Store(true)
	b := e.hbPoller(t, "b", func(api poller.Table) poller.Table { beats.Table = api; return beats }, nil, listing,
		func(c *poller.Config) { c.LeaseDuration = lease })
	stopB := start(t, b)
	eventually(t, "b heartbeating", 10*lease, func() bool { return e.workerItem(t, "b").Beat >= 3 })

	beats.stopped.Store(true)
	time.Sleep(lease + lease/3) // b's validity ends: paused
	hand("b")
	// Three watch ticks: without the fix b reads the offer and clears it.
	time.Sleep(3 * time.Second)
	t.Logf("b's offers after its pause: %v", e.workerItem(t, "b").Offers)
	beats.stopped.Store(false) // before b goes quiet (pauseQuiet: two lease durations)

	eventually(t, "b takes the lease handed to it while it was paused, its listing still refused", 10*lease,
		func() bool { return counter(t, b.m.LeasesHeld) == 1 })
	require.True(t, listing.shut.Load())
	require.Positive(t, listing.pages.Load(), "b's listing was never refused: the test proves nothing")
	listing.shut.Store(false)
	stopB()
	e.finish(t, nil)
}

// S21-W2 (the LATEST gate). Before its first listing a poller takes only
// what it is handed (takeUnlisted), and not at StartPosition LATEST: a
// fresh start there is decided on every checkpoint of the stream first
// (readAll marks each shard's start), and a take before it reads its
// shard from its trim horizon — and a commit of it makes the stream look
// started, so the decision for every other shard is TRIM_HORIZON. The
// watch's offerPass skipped that gate. Here b starts at LATEST on a stream
// with no checkpoint, its listing refused, and a ghost hands it a lease:
// b must take nothing until its listing completes and it has decided.
func TestReviewS21_APollerStartingAtLatestTakesNoOfferBeforeItHasDecidedItsStart(t *testing.T) {
	ddbtest.Long(t)
	const lease = 3 * time.Second
	e := newEmuEnv(t, 2113, streamemu.Config{Shards: 2, Seed: 2113})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour"}
	e.write(t, 30)
	id := e.s.Shards()[0].ID
	hand := e.ghostHolds(t, id)
	listing := &unlistable{Streams: e.s, shut: &atomic.Bool{}}
	listing.shut.Store(true)
	b := e.hbPoller(t, "b", nil, nil, listing, func(c *poller.Config) {
		c.LeaseDuration, c.StartPosition = lease, poller.Latest
	})
	stopB := start(t, b)
	eventually(t, "b heartbeating", 10*lease, func() bool { return e.workerItem(t, "b").Beat >= 3 })
	hand("b")
	for end := time.Now().Add(2 * lease); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		require.Zero(t, counter(t, b.m.LeasesHeld), "b took a lease before deciding its LATEST start")
	}
	require.Positive(t, listing.pages.Load(), "b's listing was never refused: the test proves nothing")
	listing.shut.Store(false)
	eventually(t, "b takes the lease once listed, its start decided", 20*lease,
		func() bool { return counter(t, b.m.LeasesHeld) >= 1 })
	stopB()
}

// S21-W3 (compat: takes renewed too late). A heartbeat poller beside a
// live poller that renews every lease (a rolling upgrade: compat) renews
// every lease item it holds at each round, and holds a lease from its
// take's send: the round's takes start no later than half a renewal
// interval after its first (takeTurn, reset at each pass), and the
// offers not taken wait for the next round, which renews first (review
// of session 19, R19-3). offerPass resets takeTurn too, and comes at
// once after a round (the round resets the ticker) or after another
// offerPass: on a slow table a second wave of takes starts before the
// first wave's renewal, which then comes after their life. Here g renews
// every lease (LeaseModeRenew) and holds all 48 shards; r, a heartbeat
// poller (compat beside g), joins, every take of its answered 0.55 lease
// durations late, and is handed 24: two waves.
func TestReviewS21_AHeartbeatPollerInCompatRenewsTheLeasesItIsHandedInTime(t *testing.T) {
	ddbtest.Long(t)
	const shards = 48
	const lease = 12 * time.Second
	e := newEmuEnv(t, 2112, streamemu.Config{Shards: shards, Seed: 2112})
	g := e.hbPoller(t, "g", nil, nil, nil, func(c *poller.Config) { c.LeaseDuration, c.LeaseMode = lease, poller.LeaseModeRenew })
	e.write(t, 40)
	stopG := start(t, g)
	eventually(t, "g holds every shard", 30*lease, func() bool { return counter(t, g.m.LeasesHeld) == shards })
	r := e.hbPoller(t, "r", func(api poller.Table) poller.Table { return slowTakes{Table: api, delay: lease * 55 / 100} }, nil, nil,
		func(c *poller.Config) { c.LeaseDuration = lease })
	stopR := start(t, r)
	eventually(t, "r in compat beside g", 10*lease, func() bool {
		return logged(r.logs.lines(), "a live poller renews every lease") > 0
	})
	eventually(t, "r holds its share", 30*lease, // a liveness bound
		func() bool { return counter(t, r.m.LeasesHeld) == shards/2 })
	time.Sleep(2 * lease) // renewals of the last takes
	stopR()
	stopG()
	expired := counter(t, r.m.LeaseEvents.WithLabelValues(poller.LeaseExpired))
	t.Logf("leases handed to r expired before their first renewal: %.0f", expired)
	assert.Zero(t, expired, "leases expired: a second wave of takes held up the renewal of the first")
	e.finish(t, nil)
}
