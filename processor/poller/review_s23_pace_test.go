package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
)

// The review of the write pacer (session 23, docs/exactly-once.md,
// "Review (adversarial, session 23): the pacer as built").

// S23-P1: the holder a hands the joiner b its share (balance) while b's
// first listing is refused. b's share of the fleet's coordination write
// budget is small (here 1 unit a second for the fleet, half of it b's:
// a take every 2 s), so the offer watch's pass takes one offered lease
// and the pacer defers the others' takes (their turns come after the
// round's deadline). Before the fix takeOffers cleared every offer it
// had looked at, the deferred ones too: those leases stayed in b's name,
// which nobody else may take while b's beat moves, and b takes the
// leases of its name it was not offered only at its share, after its
// first listing: read by nobody for as long as the listing was refused
// (S22-H1's outcome, reached by a deferral instead of a failed offer).
// In production: a joiner handed more leases at once than its share of
// --coordination-write-rate takes in half a renewal interval (at the
// default 400 and 20 s leases, more than 1,333 divided by the pollers:
// 84 at 16 pollers) while its listing is paced or refused. With the fix
// the deferred takes' offers stay offered and b takes them a turn at a
// time.
func TestReviewS23P1_AnOfferWhoseTakeThePacerDeferredStaysOffered(t *testing.T) {
	ddbtest.Long(t)
	const shards = 8
	e := sixBranchEnv(t, 2301, shards)
	a, stopA := e.holderOfAll(t, shards, nil)
	listing := e.refusedListing()
	b := e.hbPoller(t, "b", nil, nil, listing, func(c *poller.Config) { c.CoordinationWriteRate = 1 })
	stopB := start(t, b)
	eventually(t, "every shard is held while b's listing is refused", time.Minute, func() bool {
		return counter(t, b.m.LeasesHeld) >= shards/2-1 && counter(t, a.m.LeasesHeld)+counter(t, b.m.LeasesHeld) == shards
	})
	deferred := counter(t, b.m.CoordinationWriteDeferred.WithLabelValues("leases"))
	t.Logf("b: %.0f takes deferred; holds %.0f", deferred, counter(t, b.m.LeasesHeld))
	require.Positive(t, deferred, "no take of b's was deferred: the test proves nothing")
	require.True(t, listing.shut.Load())
	require.False(t, b.Ready(), "b's listing completed: the test proves nothing")

	e.listAndFinish(t, listing, a, stopA, b, stopB)
}

// S23-P2: a stop's paced writes had no common bound. Each release (and
// the offer after it) waited up to its own 5 s for its turn, one after
// another, so a poller holding more leases than its share of the budget
// releases in a few seconds took as long as its share made it: at the
// default 400 units a second over 8 pollers (50 each), 1,000 leases held
// by one poller (a deploy that stops it as seven new ones register) are
// 20 s of releases and as long again of offers, past the 40 s stopTimeout
// of docs/deploy.md after the commits' 20 s: SIGKILL, no leave written,
// the rest expiring. Here: one poller holding 24 shards, 2 units a second
// (its releases alone 12 s), a 2 s shutdown timeout. With the fix the
// stop's paced writes end at the shutdown timeout + 5 s after the stop
// began; the releases not made by then are left to expire (counted
// deferred), and the leave is written.
func TestReviewS23P2_AStopsPacedWritesEndWithinTheShutdownTimeoutAndFiveSeconds(t *testing.T) {
	ddbtest.Long(t)
	const shards = 24
	const shutdown = 2 * time.Second
	e := newEmuEnv(t, 2302, streamemu.Config{Shards: shards, Seed: 2302})
	e.write(t, 40)
	a := e.hbPoller(t, "a", nil, nil, nil, func(c *poller.Config) {
		c.CoordinationWriteRate = 2
		c.ShutdownTimeout = shutdown
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	eventually(t, "a holds every shard", 2*time.Minute, func() bool { return counter(t, a.m.LeasesHeld) == shards })
	time.Sleep(2 * time.Second) // the limiter's turns taken by the start are past
	stopping := time.Now()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2 * time.Minute):
		t.Fatal("a did not stop within 2 minutes")
	}
	took := time.Since(stopping)
	released := counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseReleased))
	t.Logf("the stop took %s: %.0f leases released of %d", took.Round(time.Millisecond), released, shards)
	// A second and a half for the leave and the readers' ends on a loaded
	// machine.
	assert.Less(t, took, shutdown+5*time.Second+1500*time.Millisecond, "the stop's paced writes end within the shutdown timeout and 5 s")
	assert.Positive(t, released, "no lease released at the stop")
}
