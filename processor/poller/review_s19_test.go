package poller_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 19): the pre-take read bound, the paused
// gauge and the listing cadence (docs/exactly-once.md).

// slowTakes answers every lease take (table.TakeLease: the owner set and
// the shard described) delay late, the write landing first, as a loaded
// table does; renewals, releases and every other call are answered at
// once.
type slowTakes struct {
	poller.Table
	delay time.Duration
}

func isTake(in *dynamodb.UpdateItemInput) bool {
	_, owner := in.ExpressionAttributeValues[":o"]
	_, shard := in.ExpressionAttributeValues[":sh"]
	_, next := in.ExpressionAttributeValues[":next"]
	return owner && shard && next
}

func (s slowTakes) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := s.Table.UpdateItem(ctx, in, opts...)
	if isTake(in) {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	return out, err
}

// refusedTakes refuses every lease take (a poller that registers and
// renews, and never gets a lease).
type refusedTakes struct{ poller.Table }

func (r refusedTakes) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if isTake(in) {
		return nil, &ddbtypes.InternalServerError{Message: aws.String("takes refused by the test")}
	}
	return r.Table.UpdateItem(ctx, in, opts...)
}

// Hole R19-1 (takeBound, liveness). A poller that renews its lease items
// in its rounds (LeaseModeRenew; a heartbeat poller in compat, beside a
// live renewing one) and holds no lease at a round's start got a whole
// lease duration for its reads before the takes and for the takes
// themselves (takeBound: nothing held, nothing a long round can cost).
// But the first leases it takes are held from their take's send, and
// renewed only at the round after this one, a renewal interval after it
// ends: takes in batches of 16 that outlast two thirds of a lease
// duration let the first batch expire before its first renewal.
//
//   - renew: 48 shards, one renewing poller (6 s leases), every take
//     answered 0.3 lease durations late: three batches (0.9 lease
//     durations) in one round; without the fix the first batch's 16
//     leases (32 in the run measured) expired at the next round (readers
//     stopped, leases taken again later).
//   - compat: the same poller in heartbeat mode (9 s leases) beside a
//     renewing poller whose takes are all refused (it holds nothing; its
//     worker item puts the other in compat): a share of 24, two batches
//     at 0.4 lease durations each; without the fix 16 expired. (At 6 s
//     leases the fixed round's slack, 0.27 lease durations, was too
//     little beside the other case on a loaded machine: 9 expired once.)
//
// With the fix a renewing poller's pass starts no batch of takes later
// than half a renewal interval after its first (takeTurn; the first batch
// always made): no lease expires.
func TestReviewS19_ARenewingPollerTakingItsFirstLeasesRenewsThemInTime(t *testing.T) {
	const shards = 48
	for _, tc := range []struct {
		name   string
		lease  time.Duration
		delay  time.Duration
		mode   poller.LeaseMode
		compat bool
		share  float64
	}{
		{name: "renew", lease: 6 * time.Second, delay: 1800 * time.Millisecond, mode: poller.LeaseModeRenew, share: shards},
		{name: "compat", lease: 9 * time.Second, delay: 3600 * time.Millisecond, mode: poller.LeaseModeHeartbeat, compat: true, share: shards / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lease := tc.lease
			ddbtest.Long(t)
			e := newEmuEnv(t, 1901, streamemu.Config{Shards: shards, Seed: 1901})
			stopOld := func() {}
			if tc.compat {
				old := e.hbPoller(t, "old", func(api poller.Table) poller.Table { return refusedTakes{Table: api} }, nil, nil,
					func(c *poller.Config) { c.LeaseDuration, c.LeaseMode = lease, poller.LeaseModeRenew })
				stopOld = start(t, old)
			}
			a := e.hbPoller(t, "a", func(api poller.Table) poller.Table { return slowTakes{Table: api, delay: tc.delay} }, nil, nil,
				func(c *poller.Config) { c.LeaseDuration, c.LeaseMode = lease, tc.mode })
			e.write(t, 40)
			stop := start(t, a)
			eventually(t, "a holds its share", 30*lease, // a liveness bound
				func() bool { return counter(t, a.m.LeasesHeld) >= tc.share })
			time.Sleep(2 * lease) // renewals of the last takes
			stop()
			expired := counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseExpired))
			t.Logf("leases expired before their first renewal: %.0f", expired)
			assert.Zero(t, expired, "leases expired: a round of takes outlasted the first ones' life")
			assert.Zero(t, counter(t, a.m.LeaseLosses.WithLabelValues(poller.LossExpired)))
			stopOld()
			e.finish(t, nil)
		})
	}
}

// Survives (L3, the paused gauge): ledger_poller_leases_paused is every
// lease held while the poller is paused and none otherwise, through a
// pause, a stop while paused and the gauges a stopped poller leaves
// behind (a gauge left high after the stop would count leases nobody
// holds as unread; one left at 0 while paused silences LedgerShardUnread).
// One heartbeat poller alone (nobody fences it): its heartbeats answered
// later than a lease duration pause it; it is stopped while paused.
func TestReviewS19_ThePausedGaugeCountsEveryLeaseHeldWhilePausedAndNoneAfterAStop(t *testing.T) {
	ddbtest.Long(t)
	const shards = 4
	const lease = 3 * time.Second
	e := newEmuEnv(t, 1902, streamemu.Config{Shards: shards, Seed: 1902})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour"} // records on every shard (the default's six keys reach two)
	late := &lateBeats{owner: "a"}
	a := e.hbPoller(t, "a", func(api poller.Table) poller.Table { late.Table = api; return late }, nil, nil,
		func(c *poller.Config) { c.LeaseDuration = lease })
	e.write(t, 20)
	stop := start(t, a)
	eventually(t, "a holds every shard", 20*lease, func() bool { return counter(t, a.m.LeasesHeld) == shards })
	assert.Zero(t, counter(t, a.m.LeasesPaused), "paused leases before any pause")
	late.delay.Store(int64(lease + lease/2))
	eventually(t, "every lease counted paused", 10*lease, func() bool { return counter(t, a.m.LeasesPaused) == shards })
	assert.Equal(t, float64(shards), counter(t, a.m.LeasesHeld), "leases kept while paused")
	assert.Zero(t, counter(t, a.m.LeaseLosses.WithLabelValues(poller.LossExpired))+counter(t, a.m.LeaseLosses.WithLabelValues(poller.LossTaken)))
	stop()
	assert.Zero(t, counter(t, a.m.LeasesHeld), "leases held after the stop")
	assert.Zero(t, counter(t, a.m.LeasesPaused), "leases counted paused after the stop")
	e.finish(t, nil)
}

// failingPages fails the next fail pages after a listing's first (a
// listing of the whole stream that fails half-way: the stream's answer
// an InternalServerError), and records when each failure was answered
// and when each listing completed.
type failingPages struct {
	poller.Streams
	fail     atomic.Int32
	mu       sync.Mutex
	failures []time.Time
	ends     []time.Time
}

func (f *failingPages) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	listing := in.ShardFilter == nil
	if listing && in.ExclusiveStartShardId != nil && f.fail.Add(-1) >= 0 {
		f.mu.Lock()
		f.failures = append(f.failures, time.Now())
		f.mu.Unlock()
		return nil, &streamtypes.InternalServerError{Message: aws.String("a page refused by the test")}
	}
	out, err := f.Streams.DescribeStream(ctx, in, opts...)
	if listing && err == nil && out.StreamDescription != nil && out.StreamDescription.LastEvaluatedShardId == nil {
		f.mu.Lock()
		f.ends = append(f.ends, time.Now())
		f.mu.Unlock()
	}
	return out, err
}

func (f *failingPages) times() (failures, ends []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.failures...), append([]time.Time(nil), f.ends...)
}

// Survives (S17-D2, the listing cadence): a listing that fails half-way
// does not move listDone, so the next is tried at the next round, not
// --discover-interval after the failure (which would leave shards
// created meanwhile to the lookups alone for a whole interval more).
// Here four pages a listing, a 10 s interval, 1 s rounds; the second
// listing's second page is refused at each of the pass's three attempts:
// a listing completes within half the interval of the last refusal.
func TestReviewS19_AListingThatFailsHalfWayIsTriedAgainAtTheNextRound(t *testing.T) {
	ddbtest.Long(t)
	const interval = 10 * time.Second
	e := newEmuEnv(t, 1903, streamemu.Config{Shards: 8, Seed: 1903, ListPage: 2})
	f := &failingPages{Streams: e.s}
	a := e.poller(t, "a", f, func(c *poller.Config) { c.DiscoverInterval = interval })
	e.write(t, 20)
	stop := start(t, a)
	eventually(t, "the first listing completed", time.Minute, func() bool { _, ends := f.times(); return len(ends) >= 1 })
	f.fail.Store(3) // every attempt of the next listing's pass
	eventually(t, "the next listing refused three times", 3*interval, func() bool { fs, _ := f.times(); return len(fs) >= 3 })
	eventually(t, "a listing completed after the refusals", 3*interval, func() bool {
		fs, ends := f.times()
		return ends[len(ends)-1].After(fs[len(fs)-1])
	})
	stop()
	fs, ends := f.times()
	last := fs[len(fs)-1]
	var next time.Time
	for _, end := range ends {
		if end.After(last) {
			next = end
			break
		}
	}
	t.Logf("the listing after the last refusal completed %s after it", next.Sub(last).Round(time.Millisecond))
	assert.Less(t, next.Sub(last), interval/2, "a failed listing delayed the next by an interval")
	e.finish(t, nil)
}

// fencedUnjoinable answers, once fenced is set, every heartbeat of owner
// as a fence would (the condition failed) and refuses its rejoin (the
// unconditional heartbeat, table.RejoinWorker) with a server error: a
// poller fenced that cannot register again (its worker partition
// throttled, the table failing its writes).
type fencedUnjoinable struct {
	poller.Table
	owner  string
	fenced atomic.Bool
}

// UpdateItem refuses the owner's rejoins (the worker write that removes
// the fence) while fenced is set; its heartbeats go through, to be
// refused by the fence the test wrote.
func (f *fencedUnjoinable) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.fenced.Load() && isHeartbeat(in, f.owner) && strings.Contains(aws.ToString(in.UpdateExpression), "REMOVE #l, #f") {
		return nil, &ddbtypes.InternalServerError{Message: aws.String("rejoin refused by the test")}
	}
	return f.Table.UpdateItem(ctx, in, opts...)
}

// Hole R19-2 (the paused gauge, observability) and its leftover. A
// heartbeat poller fenced drops every lease and registers again (rejoin),
// clearing its pause; when that write fails it goes on with no validity at
// all (beatUntil zero). It took leases again in the same round (its own,
// free to it) and could read none of them; the next round's rejoin failed
// again, and so on, while ledger_poller_leases_paused said 0
// (LedgerShardUnread, which subtracts it, stayed silent). The gauge now
// counts held leases whose validity has ended, and a heartbeat poller with
// no validity takes nothing: here it holds nothing while its rejoins are
// refused (it held all four again, unread, before), and takes its shards
// back once one lands. One poller, four shards, fenced by the test as a
// taker would.
func TestReviewS19_APollerWithNoValidityTakesNoLease(t *testing.T) {
	ddbtest.Long(t)
	const shards = 4
	const lease = 3 * time.Second
	e := newEmuEnv(t, 1904, streamemu.Config{Shards: shards, Seed: 1904})
	f := &fencedUnjoinable{owner: "a"}
	a := e.hbPoller(t, "a", func(api poller.Table) poller.Table { f.Table = api; return f }, nil, nil,
		func(c *poller.Config) { c.LeaseDuration = lease })
	e.write(t, 20)
	stop := start(t, a)
	eventually(t, "a holds every shard", 20*lease, func() bool { return counter(t, a.m.LeasesHeld) == shards })
	f.fenced.Store(true)
	ctx := context.Background()
	coord := table.CoordinationTableName(e.table)
	eventually(t, "a fenced", 10*lease, func() bool {
		ws, err := table.ReadWorkers(ctx, e.ddb, coord, e.stream.arn)
		require.NoError(t, err)
		for _, w := range ws {
			if w.Owner == "a" {
				_, err := e.ddb.UpdateItem(ctx, table.FenceWorker(coord, e.stream.arn, "a", w.Beat))
				return err == nil
			}
		}
		return false
	})
	eventually(t, "a's rejoin refused", 10*lease, func() bool {
		return logged(a.logs.lines(), "registering again after the fence failed; retrying at the next round") > 0
	})
	eventually(t, "a's dropped leases gone", 10*lease, func() bool { return counter(t, a.m.LeasesHeld) == 0 })
	// Rounds go on (a lease duration of them) with the rejoin refused: a
	// takes nothing, so nothing it holds is unread.
	for end := time.Now().Add(lease); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		require.Zero(t, counter(t, a.m.LeasesHeld), "a takes no lease while it has no validity")
		require.Zero(t, counter(t, a.m.LeasesPaused))
	}
	f.fenced.Store(false)
	eventually(t, "a rejoined, nothing counted unread", 10*lease, func() bool {
		return counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseRejoined)) >= 1 &&
			counter(t, a.m.LeasesHeld) == shards && counter(t, a.m.LeasesPaused) == 0
	})
	stop()
	e.finish(t, nil)
}

// Hole R19-3 (takeOffers, liveness). A renewing poller took every lease
// offered to it in one call, in waves of 16 with no bound in time: a
// poller joining a renewing fleet is handed its share at once (balance),
// and on a table whose takes are slow the first wave's leases expired
// before the round that renews them came. Here a renewing poller holds
// all 48 shards (9 s leases) and a second joins, every take of its
// answered 0.4 lease durations late: it is handed 24, two waves in one
// round; without the fix the first wave expired before its first
// renewal (25 expired: takeShare's batch followed the offers' two waves;
// with a cut in takeOffers alone, still 25). With it no batch of the pass
// starts later than half a renewal interval after its first (takeTurn),
// the offers not taken left offered for the next round.
func TestReviewS19_ARenewingPollerHandedItsShareRenewsItInTime(t *testing.T) {
	ddbtest.Long(t)
	const shards = 48
	const lease = 9 * time.Second
	e := newEmuEnv(t, 1905, streamemu.Config{Shards: shards, Seed: 1905})
	renew := func(c *poller.Config) { c.LeaseDuration, c.LeaseMode = lease, poller.LeaseModeRenew }
	g := e.hbPoller(t, "g", nil, nil, nil, renew)
	e.write(t, 40)
	stopG := start(t, g)
	eventually(t, "g holds every shard", 30*lease, func() bool { return counter(t, g.m.LeasesHeld) == shards })
	r := e.hbPoller(t, "r", func(api poller.Table) poller.Table { return slowTakes{Table: api, delay: lease * 4 / 10} }, nil, nil, renew)
	stopR := start(t, r)
	eventually(t, "r holds its share", 30*lease, // a liveness bound
		func() bool { return counter(t, r.m.LeasesHeld) == shards/2 })
	time.Sleep(2 * lease) // renewals of the last takes
	stopR()
	stopG()
	expired := counter(t, r.m.LeaseEvents.WithLabelValues(poller.LeaseExpired))
	t.Logf("leases handed to r expired before their first renewal: %.0f", expired)
	assert.Zero(t, expired, "leases expired: the takes of the offers outlasted the first ones' life")
	e.finish(t, nil)
}
