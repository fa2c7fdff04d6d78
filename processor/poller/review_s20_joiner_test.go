package poller_test

import (
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
// while its listing is still refused, read in order (rolls, and splits:
// two children each).
func TestReviewS20J1_ChildrenOfShardsAJoinerFinishesBeforeItsListingAreTaken(t *testing.T) {
	ddbtest.Long(t)
	for _, tc := range []struct {
		name  string
		split bool
	}{{"rolls", false}, {"splits", true}} {
		t.Run(tc.name, func(t *testing.T) { childrenBeforeTheListing(t, tc.split) })
	}
}

func childrenBeforeTheListing(t *testing.T, split bool) {
	const shards = 8
	e := newEmuEnv(t, 2011, streamemu.Config{Shards: shards, Seed: 2011})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour"}
	e.write(t, 60)
	a, stopA, b, stopB, listing := e.holderAndUnlistedJoiner(t, shards)
	eventually(t, "b holds leases while its first listing is refused", 2*time.Minute, func() bool {
		return counter(t, b.m.LeasesHeld) >= shards/2-1
	})
	// Every open shard rolls into one child (or splits into two): each
	// poller's parents end.
	for _, sh := range e.s.Shards() {
		if !sh.Closed {
			_, err := e.s.Close(sh.ID, split)
			require.NoError(t, err)
		}
	}
	e.write(t, 60)
	eventually(t, "every open shard is held while b's listing is refused", time.Minute, func() bool {
		return int(counter(t, a.m.LeasesHeld)+counter(t, b.m.LeasesHeld)) == openShards(e.s)
	})
	require.True(t, listing.shut.Load())
	require.False(t, b.Ready(), "b's listing completed: the test proves nothing")

	listing.shut.Store(false)
	e.write(t, 30)
	time.Sleep(2 * time.Second)
	stopB()
	stopA()
	end := time.Now()
	requireNoOverlap(t, append(readerIntervals(t, a.logs.lines(), end), readerIntervals(t, b.logs.lines(), end)...))
	e.finish(t, nil)
}

// S20-J2 (the attack fails): a shard handed to a joiner whose parent was
// trimmed away before anyone read it (no checkpoint, and not listed: the
// giver's listing has no parent). Before its listing the joiner cannot
// tell a trimmed parent from one not listed yet, so it does not take it
// (parentDone: no checkpoint, not finished); the lease stays in its name
// (nobody else takes a lease named by a live poller's beat) and once its
// listing completes it is taken (takeShare: its name's leases first) and
// read, exact and in order.
func TestReviewS20J2_AHandedShardWhoseParentIsTrimmedIsTakenOnceTheListingCompletes(t *testing.T) {
	ddbtest.Long(t)
	const shards = 8
	clock := streamemu.NewManual(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	e := newEmuEnv(t, 2012, streamemu.Config{Shards: shards, Seed: 2012, Clock: clock})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour"}
	gone := map[string]bool{}
	for _, sh := range e.s.Shards() {
		_, err := e.s.Close(sh.ID, false)
		require.NoError(t, err)
		gone[sh.ID] = true
	}
	clock.Advance(25 * time.Hour) // the parents, closed with no record, are deleted
	for _, sh := range e.s.Shards() {
		require.False(t, gone[sh.ID], "a parent is still listed")
	}
	e.write(t, 60)
	a, stopA, b, stopB, listing := e.holderAndUnlistedJoiner(t, shards)
	eventually(t, "a hands leases to b", 2*time.Minute, func() bool {
		return logged(a.logs.lines(), "lease handed_off") >= shards/2-1
	})
	e.write(t, 30)
	require.True(t, listing.shut.Load())
	require.False(t, b.Ready(), "b's listing completed: the test proves nothing")
	t.Logf("b holds %v leases before its listing (their parents trimmed: none may be taken)", counter(t, b.m.LeasesHeld))

	listing.shut.Store(false)
	eventually(t, "every open shard is held once b's listing completes", 2*time.Minute, func() bool {
		return b.Ready() && int(counter(t, a.m.LeasesHeld)+counter(t, b.m.LeasesHeld)) == openShards(e.s)
	})
	require.GreaterOrEqual(t, counter(t, b.m.LeasesHeld), float64(shards/2-1), "b took what it was handed")
	e.write(t, 30)
	time.Sleep(2 * time.Second)
	stopB()
	stopA()
	end := time.Now()
	requireNoOverlap(t, append(readerIntervals(t, a.logs.lines(), end), readerIntervals(t, b.logs.lines(), end)...))
	e.finish(t, gone)
}
