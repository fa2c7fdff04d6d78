package poller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	coord := table.CoordinationTableName(e.table)
	for _, o := range []string{"a", "b", "lister"} {
		in := table.HeartbeatWorker(coord, e.stream.arn, o, o+"-1", 1, true, time.Now())
		in = table.ListingNote(in, o == "lister", nil)
		_, err := e.ddb.UpdateItem(ctx, in)
		require.NoError(t, err)
	}
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
