package poller_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
)

// openShards is how many shards of the emulation are open now.
func openShards(s *streamemu.Stream) int {
	n := 0
	for _, sh := range s.Shards() {
		if !sh.Closed {
			n++
		}
	}
	return n
}

// The review of a joiner's takes before its first listing (session 20,
// S20-J1): the shards a joiner holds close (rolls) while its listing is
// still refused. It reads them to their end and looks their children up
// (CHILD_SHARDS) and registers them, but its reader's end (endPass) went
// no further without a listing: the children were neither taken nor
// offered. The other poller, at its share, does not take them either, so
// they wait unread for the joiner's listing (about 71 s at 7,000 shards;
// for good while DescribeStream is refused). With the fix the joiner takes
// the children it registered as it takes offers: every open shard is held
// while its listing is still refused, read in order.
func TestReviewS20J1_ChildrenOfShardsAJoinerFinishesBeforeItsListingAreTaken(t *testing.T) {
	ddbtest.Long(t)
	const shards = 8
	e := newEmuEnv(t, 2011, streamemu.Config{Shards: shards, Seed: 2011})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour"}
	e.write(t, 60)
	a := e.hbPoller(t, "a", nil, nil, nil, nil)
	stopA := start(t, a)
	eventually(t, "a holds every shard", 2*time.Minute, func() bool { return counter(t, a.m.LeasesHeld) == shards })

	shut := &atomic.Bool{}
	shut.Store(true)
	listing := &unlistable{Streams: e.s, shut: shut}
	b := e.hbPoller(t, "b", nil, nil, listing, nil)
	stopB := start(t, b)
	eventually(t, "b holds leases while its first listing is refused", 2*time.Minute, func() bool {
		return counter(t, b.m.LeasesHeld) >= shards/2-1
	})
	// Every open shard rolls into one child: each poller's parents end.
	for _, sh := range e.s.Shards() {
		if !sh.Closed {
			_, err := e.s.Close(sh.ID, false)
			require.NoError(t, err)
		}
	}
	e.write(t, 60)
	eventually(t, "every open shard is held while b's listing is refused", time.Minute, func() bool {
		return int(counter(t, a.m.LeasesHeld)+counter(t, b.m.LeasesHeld)) == openShards(e.s)
	})
	require.True(t, shut.Load())
	require.False(t, b.Ready(), "b's listing completed: the test proves nothing")

	shut.Store(false)
	e.write(t, 30)
	time.Sleep(2 * time.Second)
	stopB()
	stopA()
	end := time.Now()
	requireNoOverlap(t, append(readerIntervals(t, a.logs.lines(), end), readerIntervals(t, b.logs.lines(), end)...))
	e.finish(t, nil)
}
