package poller_test

import (
	"context"
	"testing"
	"time"

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
