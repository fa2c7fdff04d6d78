package poller_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
)

// Four pollers that list the stream as often as they may (every 50 ms, in
// pages of 2 shards: a listing costs calls as a stream of thousands does
// with AWS's pages of 100) while shards roll and split under them (children
// lookups at every shard end), on the emulation's DescribeStream rate of
// AWS (10 calls a second per stream): once each poller counts the others
// in the worker registry, the fleet's calls stay within the stream's rate
// and none is refused over the next 150 calls the stream answers (counted,
// not timed), whatever each poller's code would call. Before the fleet
// shared the rate (--describe-rate), each poller called as fast as its
// listing went: the same fleet had 98 of 150 calls refused in that
// window. Then the reports are exact and no child was read before its
// parent.
func TestPoller_EmulatedFleetDescribeStreamStaysWithinTheStreamRate(t *testing.T) {
	ddbtest.Long(t)
	const pollers, window = 4, 150
	e := newEmuEnv(t, 237, streamemu.Config{Shards: 4, RollRecords: 30, SplitRatio: 0.3, MaxOpenShards: 10, Seed: 237, ListPage: 2,
		Limits: streamemu.AWSLimits})
	often := func(c *poller.Config) {
		c.DiscoverInterval, c.DescribeRate = 50*time.Millisecond, poller.DescribeRateSetting.Default
	}
	var tps []*testPoller
	var stops []func()
	for _, owner := range []string{"a", "b", "c", "d"} {
		tp := e.poller(t, owner, nil, often)
		tps = append(tps, tp)
		stops = append(stops, start(t, tp))
	}
	share := float64(poller.DescribeRateSetting.Default) / pollers
	// Waits bound only a fleet that never reads its registry.
	eventually(t, "every poller counts the fleet", 60*time.Second, func() bool {
		for _, tp := range tps {
			if counter(t, tp.m.DescribeRate) > share+1e-9 {
				return false
			}
		}
		return true
	})
	refused0 := e.s.Refused("DescribeStream", "LimitExceededException")
	calls0 := e.s.Calls("DescribeStream")
	deadline := time.Now().Add(3 * time.Minute) // bounds a fleet that stopped calling
	closed0 := closedShards(e.s)
	for steps := 0; e.s.Calls("DescribeStream")-calls0 < window; {
		require.True(t, time.Now().Before(deadline), "the fleet stopped calling DescribeStream: %d calls", e.s.Calls("DescribeStream")-calls0)
		if steps < 200 { // shards roll and split under the listings, a few dozen in all
			e.write(t, 10)
			steps += 10
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	calls, refused := e.s.Calls("DescribeStream")-calls0, e.s.Refused("DescribeStream", "LimitExceededException")-refused0
	t.Logf("steady state: %d DescribeStream calls, %d refused (at start: %d of %d)", calls, refused, refused0, calls0)
	assert.Zero(t, refused, "DescribeStream calls refused once the pollers share the stream's rate")
	assert.Greater(t, closedShards(e.s), closed0, "shards closed while the fleet listed")
	for _, stop := range stops {
		stop()
	}
	e.finish(t, nil)
}

// A poller started alone takes its shards at its second round, one second
// after its first, not a renewal interval later (a third of the lease
// duration: 200 s here). The wait bounds only the old schedule: with 20 s
// leases (cmd/poller's default) a start's first records waited 6.7 s for a
// reader, which put the steady-rate lag test's p99 at 8.4–9.2 s.
func TestPoller_TakesItsShardsAtItsSecondRoundOneSecondAfterItsFirst(t *testing.T) {
	e := newEnv(t, 238)
	e.stream.addShard("s1", "")
	e.stream.appendTo("s1", e.write(t, 20)...)
	tp := e.poller(t, "solo", nil, nil, func(c *poller.Config) { c.LeaseDuration = 10 * time.Minute })
	start(t, tp)
	eventually(t, "a lease held before the first renewal interval (200 s) is up", 60*time.Second, func() bool {
		return counter(t, tp.m.LeasesHeld) > 0
	})
}

// closedShards counts the emulated stream's closed shards.
func closedShards(s *streamemu.Stream) int {
	n := 0
	for _, sh := range s.Shards() {
		if sh.Closed {
			n++
		}
	}
	return n
}
