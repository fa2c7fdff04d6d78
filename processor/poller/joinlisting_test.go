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

// A poller joining a fleet on a stream with a day of history lists the
// stream at the rate the others leave unused, and so takes its share
// before its first listing could have completed at its head-count share
// of DescribeStream's rate (issue 23's balance target: within two lease
// durations of a join; BENCHMARKS.md, "Session 25": the joiner's listing
// of 71 pages at one a second bounded what it took during the walk).
// Three pollers walk 60 closed shards and hold the 4 open ones; a fourth
// joins. Pages of one shard: 64 pages, which at the fleet's default rate
// (8) over four pollers cannot be listed in less than 32 s. With the
// weighted share (docs/exactly-once.md, "The first listing's share of
// DescribeStream") the joiner, once the others acknowledge its listing,
// weighs 8 against their 1 each: 8 × 8/11 ≈ 5.8 pages a second. The
// emulation enforces AWS's 10 calls a second: none is refused.
func TestPoller_EmulatedJoinerListsAtTheFleetsUnusedRate(t *testing.T) {
	ddbtest.Long(t)
	const open, rolls, fleet = 4, 15, 3
	e := newEmuEnv(t, 2701, streamemu.Config{Shards: open, Seed: 2701, ListPage: 1, Limits: streamemu.AWSLimits})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour"} // records on every shard
	e.write(t, 40)
	// The history: every open shard rolled 15 times (the records above
	// in the first generation).
	for _, sh := range e.s.Shards() {
		if sh.Closed {
			continue
		}
		id := sh.ID
		for range rolls {
			kids, err := e.s.Close(id, false)
			require.NoError(t, err)
			id = kids[0]
		}
	}
	pages := len(e.s.Shards())
	require.Equal(t, open*(rolls+1), pages)
	cfg := func(c *poller.Config) {
		c.DescribeRate, c.LeaseDuration = poller.DescribeRateSetting.Default, 9*time.Second
	}
	var tps []*testPoller
	var stops []func()
	for _, owner := range []string{"a", "b", "c"} {
		tp := e.hbPoller(t, owner, nil, nil, nil, cfg)
		tps = append(tps, tp)
		stops = append(stops, start(t, tp))
	}
	eventually(t, "the fleet has walked the history and holds every open shard", 4*time.Minute, func() bool {
		held := 0.0
		for _, tp := range tps {
			if !tp.Ready() {
				return false
			}
			held += counter(t, tp.m.LeasesHeld)
		}
		return held == open
	})
	e.write(t, 40)

	refused0 := e.s.Refused("DescribeStream", "LimitExceededException")
	// The least time the joiner's listing took before: its pages at the
	// fleet's rate over the pollers (itself included).
	before := time.Duration(float64(pages) * (fleet + 1) / float64(poller.DescribeRateSetting.Default) * float64(time.Second))
	joined := time.Now()
	d := e.hbPoller(t, "d", nil, nil, nil, cfg)
	stopD := start(t, d)
	eventually(t, "the joiner has listed the stream and holds its share before its listing could have completed at its head-count rate", before, func() bool {
		return d.Ready() && counter(t, d.m.LeasesHeld) >= open/(fleet+1)
	})
	took := time.Since(joined)
	refused := e.s.Refused("DescribeStream", "LimitExceededException") - refused0
	t.Logf("the joiner listed %d pages and held its share %s after joining (at its head-count rate: at least %s); %d DescribeStream calls refused meanwhile", pages, took.Round(100*time.Millisecond), before, refused)
	assert.Zero(t, refused, "DescribeStream calls refused while the joiner listed at the weighted rate")

	e.write(t, 40)
	time.Sleep(2 * time.Second)
	stopD()
	for _, stop := range stops {
		stop()
	}
	end := time.Now()
	var ivs []interval
	for _, tp := range append(tps, d) {
		ivs = append(ivs, readerIntervals(t, tp.logs.lines(), end)...)
	}
	requireNoOverlap(t, ivs)
	e.finish(t, nil)
}
