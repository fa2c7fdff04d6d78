package bench

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor/poller"
)

// The fleet benchmark's smallest configuration (issue 23), so that the
// harness cannot rot: 4 open shards after half a day of rolls and splits,
// one poller, a second joining and the first leaving, a few seconds of
// writes: the run completes, exactly, and every figure is filled in.
func TestFleet_SmallestConfigurationRunsExactly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts DynamoDB Local")
	}
	var log bytes.Buffer
	res, err := Fleet(context.Background(), FleetConfig{
		Shards: 4, Pollers: 2, Rate: 20, Duration: 9 * time.Second, IdleFor: 2 * time.Second,
		Compression: 1440, History: 12 * time.Hour, Seed: 23, DrainTimeout: 2 * time.Minute, Log: &log,
		Poller: func(c *poller.Config) { c.LeaseDuration, c.DiscoverInterval = 3*time.Second, time.Second },
	})
	require.NoError(t, err, "log:\n%s", log.String())
	t.Logf("log:\n%s", log.String())
	assert.Empty(t, res.Errors)
	assert.True(t, res.Drained)
	assert.Zero(t, res.Differences, "report differences")
	assert.Zero(t, res.OrderViolations, "order violations")
	assert.Positive(t, res.CheckpointRecords, "the order check read the checkpoints' history")
	assert.Zero(t, res.EarlyReads, "early reads")
	assert.Positive(t, res.Written)
	assert.Greater(t, res.ShardsAtStart, 4, "closed shards from the half day played")
	assert.Positive(t, res.LagN)
	assert.Positive(t, res.DescribeStream)
	assert.Positive(t, res.Describes["list/ok"], "listing pages counted by kind from the pollers' counters")
	assert.Equal(t, res.LagN, res.Stages.StartN+res.Stages.SteadyN, "every lag sample is start-up or steady state")
	assert.Equal(t, res.Stages.UnreadN, res.Stages.UnreadBehindParent+res.Stages.UnreadNoParent, "records before their shard's first read: behind a parent or waiting for a lease")
	assert.Equal(t, res.Stages.TailN, res.Stages.TailCommit+res.Stages.TailUnseen+res.Stages.TailReopened+res.Stages.TailGap, "every slow record in one class")
	assert.Positive(t, res.Commits)
	assert.NotEmpty(t, res.HotKeys)
	require.Len(t, res.PerPoller, 2)
	// The leases p1 hands over are offers to p2, each with an outcome
	// (taken; or already its own: its round took its name's leases first).
	assert.NotEmpty(t, res.PerPoller[1].Offers, "the joiner's offers by outcome (ledger_poller_offers_total, gathered)")
	var joined bool
	for _, s := range res.Leases {
		joined = joined || len(s.Offers["p2"]) > 0
	}
	assert.True(t, joined, "the joiner's offers sampled over time")
	assert.GreaterOrEqual(t, res.JoinListed, 0.0, "the joiner's first listing of the stream completed, timed from its join")
	require.Len(t, res.Balance, 3, "start, join, leave")
	assert.NotEmpty(t, res.Leases)
	assert.Positive(t, res.PeakRSS)
	var md bytes.Buffer
	res.Markdown(&md)
	assert.Contains(t, md.String(), "report differences")
	assert.Contains(t, md.String(), "lag by stage")
	assert.Contains(t, md.String(), "discovery by kind")
	assert.Contains(t, md.String(), "steady-state records over 3 s")
	assert.Contains(t, md.String(), "offers taken / later")
	var offers bytes.Buffer
	res.OfferTimeline(&offers, "p2", 5)
	assert.Contains(t, offers.String(), "| s | leases held |")
	t.Logf("\n%s\n%s", md.String(), offers.String())
}
