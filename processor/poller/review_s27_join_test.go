package poller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 27), hole S27-J2: a drain took the whole
// of --describe-rate at every pass (shareDescribe's drain case), beside
// a fleet that does not count it (a drain writes no worker item). Session
// 23's review had made the drain count the registry it reads in its pass
// (1/(1+P) of the rate after its first pass, "The pacer of DescribeStream",
// the share): at 8 pollers the drain's 8 calls a second and the fleet's 8
// (a joiner's listing at 4.3 of them) are 16, against AWS's 10 for the
// stream, for as long as the drain lists (its listing has no deadline).
// Here a drain finds three live pollers, one of them announcing its first
// listing: after its first pass (which lists before its first registry
// read) it weighs itself 1 against 1 + 1 + 8. Before the fix: the whole
// rate, 8.
func TestReviewS27J2_ADrainCountsTheFleetsWeightsInItsDescribeRate(t *testing.T) {
	e := newEnv(t, 2702)
	e.stream.addShard("s0", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	registerListingFleet(ctx, t, e)
	const fleet = 8.0
	tp := e.poller(t, "drain", nil, nil, func(c *poller.Config) { c.Drain, c.DescribeRate = true, fleet })
	require.NoError(t, poller.FirstPass(ctx, tp.Poller))
	assert.InDelta(t, fleet/(1+1+1+8), counter(t, tp.m.DescribeRate), 1e-9,
		"a drain's DescribeStream rate counts the live pollers it read, a lister at its weight")
}

// deniedListing refuses every listing of the whole stream, not as
// throttled (a missing permission: claim 8's listing refused for good,
// which keeps a poller's first listing under way).
type deniedListing struct{ poller.Streams }

func (d deniedListing) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	if in.ShardFilter == nil {
		return nil, errors.New("AccessDeniedException: listing refused by the test")
	}
	return d.Streams.DescribeStream(ctx, in, opts...)
}

// Review (adversarial, session 27), hole S27-J1, on the poller: a poller
// whose first listing is under way beside one poller j rolled back to a
// version before the listing note (j's item: acknowledged i's listing
// under its previous process, then claimed by the older version, which
// leaves what it does not know in place, and heartbeats by head count).
// i must not count j's inherited acknowledgement: it weighs itself 1,
// 8 × 1/(1 + 1) = 4 calls a second, j's 8/2 beside it. Before the fix it
// was granted: 8 × 8/9 ≈ 7.1, with j's 4 beside it, 11.1 against AWS's
// 10 (table.TestReviewS27J1_AnOlderVersionsClaimInheritsNoListingNote
// is the item's half).
func TestReviewS27J1_AListerIsNotGrantedByAnOlderVersionsInheritedAcknowledgement(t *testing.T) {
	e := newEnv(t, 2703)
	e.stream.addShard("s0", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	coord := table.CoordinationTableName(e.table)
	const fleet = 8.0
	tp := e.poller(t, "i", deniedListing{e.stream.client("i")}, nil, func(c *poller.Config) { c.DescribeRate = fleet })
	t.Cleanup(func() { poller.StopHeartbeat(tp.Poller) })
	_ = poller.FirstPass(ctx, tp.Poller) // its listing refused: still under way
	ws, err := table.ReadWorkers(ctx, e.ddb, coord, e.stream.arn)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.True(t, ws[0].Listing, "i announces its first listing")
	mine := table.ListingKey("i", ws[0].Incarnation)

	// j of this version acknowledged i; then j rolled back: the older
	// version's claim and heartbeats (HeartbeatWorker alone).
	_, err = e.ddb.UpdateItem(ctx, table.ListingNote(table.HeartbeatWorker(coord, e.stream.arn, "j", "j-1", 0, true, time.Now()), false, []string{mine}))
	require.NoError(t, err)
	_, err = e.ddb.UpdateItem(ctx, table.HeartbeatWorker(coord, e.stream.arn, "j", "j-2", 0, true, time.Now()))
	require.NoError(t, err)

	_ = poller.Round(ctx, tp.Poller)
	assert.InDelta(t, fleet/2, counter(t, tp.m.DescribeRate), 1e-9,
		"a lister is granted only by acknowledgements its acknowledgers' processes wrote")
}

// Review (adversarial, session 27), hole S27-J3: an acknowledgement
// outlived the count it promised. j's rate stopped counting a lister i
// at the first registry read that showed i's beat unmoved for a lease
// duration, but j's item went on acknowledging i until j's next
// heartbeat (a round heartbeats before it reads; the heartbeat goroutine
// every renewal interval). A lister whose heartbeats stalled past its
// validity (a pause, a throttled coordination table) and then landed
// again (it holds no lease, so nobody fenced it) read that
// acknowledgement and weighed itself 8 while j counted it at 0: claim 2's
// "j sees i live while i is granted" holds for one beat, not across a
// validity that lapsed and came back. Here, rounds driven by hand: i
// (its listing refused for good) is granted on j's acknowledgement; i
// stalls for a lease duration; j's round drops it; i's round after the
// stall. The two rates must stay within the fleet's 8. Before the fix:
// i 8 × 8/9 ≈ 7.1 and j 8 (15.1).
func TestReviewS27J3_AnAcknowledgementHoldsItsCountUntilItsRemovalLanded(t *testing.T) {
	const (
		fleet = 8.0
		lease = 3 * time.Second
	)
	_, i, j, round := listerPair(t, 2704, fleet, lease)
	rate := func(tp *testPoller) float64 { return counter(t, tp.m.DescribeRate) }

	round(i, true)
	round(j, true)
	round(j, false) // its heartbeat acknowledges i
	round(i, false)
	require.InDelta(t, fleet*8/9, rate(i), 1e-9, "i granted on j's acknowledgement")
	require.InDelta(t, fleet/9, rate(j), 1e-9, "j counts i at 8")
	round(j, false) // j reads i's last beat

	time.Sleep(lease + 200*time.Millisecond) // i stalls: no heartbeat, no round
	round(j, false)                          // i's beat unmoved for a lease duration
	round(i, false)                          // i's heartbeat lands again; it reads j's item
	t.Logf("after i's stall: i %.2f calls a second, j %.2f", rate(i), rate(j))
	assert.LessOrEqual(t, rate(i)+rate(j), fleet+1e-9,
		"a lister granted on an acknowledgement is counted by its acknowledger")
}

// Review (adversarial, session 27), the builder's residual 10, closed by
// S27-J3's fix: a granted lister's worker item deleted under it (by
// hand, by the TTL under a suspended host: HB4). The others dropped it
// from their count at their next registry read while it stayed granted
// until its validity ended (up to a lease duration). Now an acknowledger
// counts it until grantFor after the write that removed its
// acknowledgement landed, and the lister's grant ends grantFor after the
// send of the read that showed that acknowledgement (which came first).
// Before: i 8 × 8/9 ≈ 7.1 beside j's 8.
func TestReviewS27J3_AGrantedListersDeletedItemStaysCountedWhileItsGrantRuns(t *testing.T) {
	const (
		fleet = 8.0
		lease = 3 * time.Second
	)
	e, i, j, round := listerPair(t, 2705, fleet, lease)
	ctx := context.Background()

	round(i, true)
	round(j, true)
	round(j, false) // its heartbeat acknowledges i
	round(i, false)
	granted := time.Now()
	require.InDelta(t, fleet*8/9, poller.DescribeLimit(i.Poller), 1e-9, "i granted on j's acknowledgement")

	_, err := e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(table.CoordinationTableName(e.table)),
		Key:       table.Key(aggregates.WorkerKey(e.stream.arn, "i")),
	})
	require.NoError(t, err)
	round(j, false) // reads i's item gone
	round(j, false) // its heartbeat no longer acknowledges i
	require.Less(t, time.Since(granted), lease/2, "the test's rounds were too slow to catch i's grant")
	li, lj := poller.DescribeLimit(i.Poller), poller.DescribeLimit(j.Poller)
	t.Logf("i's item deleted: i %.2f calls a second, j %.2f", li, lj)
	assert.LessOrEqual(t, li+lj, fleet+1e-9, "a granted lister whose item was deleted is still counted while its grant runs")
}

// listerPair is S27-J3's two pollers on one shard, each round driven by
// hand: i, whose listing DescribeStream refuses for good (so that it stays
// a first lister), and j. round runs a poller's first pass or a round,
// then stops its heartbeat goroutine: the next round heartbeats first,
// synchronously.
func listerPair(t *testing.T, seed uint64, fleet int, lease time.Duration) (e *env, i, j *testPoller, round func(tp *testPoller, first bool)) {
	t.Helper()
	e = newEnv(t, seed)
	e.stream.addShard("s0", "")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := func(c *poller.Config) { c.DescribeRate, c.LeaseDuration = fleet, lease }
	i = e.poller(t, "i", deniedListing{e.stream.client("i")}, nil, cfg)
	j = e.poller(t, "j", nil, nil, cfg)
	round = func(tp *testPoller, first bool) {
		if first {
			_ = poller.FirstPass(ctx, tp.Poller)
		} else {
			_ = poller.Round(ctx, tp.Poller) // i's: its listing refused
		}
		poller.StopHeartbeat(tp.Poller)
	}
	t.Cleanup(func() { poller.StopHeartbeat(i.Poller); poller.StopHeartbeat(j.Poller) })
	return e, i, j, round
}

// registerListingFleet writes the worker items of three live pollers a
// drain finds (S27-J2, S28-W1): a, b, and lister, whose first listing is
// under way (its note).
func registerListingFleet(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	coord := table.CoordinationTableName(e.table)
	for _, o := range []string{"a", "b", "lister"} {
		in := table.HeartbeatWorker(coord, e.stream.arn, o, o+"-1", 1, true, time.Now())
		in = table.ListingNote(in, o == "lister", nil)
		_, err := e.ddb.UpdateItem(ctx, in)
		require.NoError(t, err)
	}
}
