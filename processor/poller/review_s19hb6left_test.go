package poller_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
)

// HB6-L1 (docs/exactly-once.md, the review of HB6 as built): a process
// of owner "x" holding every shard of eight is killed (SIGKILL: nothing
// released, its worker item stays); y joins and x is restarted under the
// same name at once, before y could fence the item. The new x claims the
// item and heartbeats under "x", so y judges every lease of "x" live and
// never takes one; the new x takes its previous life's leases (two reads
// a lease duration apart, after its claim) but, before the fix, only up
// to its share, and balance, which plans from the held counts the worker
// items report, never sees the rest: their shards stay unread for good.
// Asserted: every shard is held again by the new x or y, the new x took
// each of its previous life's leases over once, the fleet balances,
// records written after the restart are all committed, one reader a shard
// at a time. Before the fix: x held 4, y 3 (the excess handed over), and
// one shard was read by nobody for the rest of the run (50 s).
func TestReviewS19HB6_ARestartUnderItsNameLeavesNoLeaseOfItsPreviousLifeUnread(t *testing.T) {
	ddbtest.Long(t)
	const shards = 8
	const lease = 3 * time.Second
	e := newEmuEnv(t, 1911, streamemu.Config{Shards: shards, Seed: 1911})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour", "quay", "mill", "bridge", "market", "abbey", "castle"} // records on every shard (the default's six keys reach two)
	setLease := func(c *poller.Config) { c.LeaseDuration = lease }
	x1, dead := e.killable(t, "x", setLease)
	e.write(t, 40)
	stopX1 := start(t, x1)
	eventually(t, "the first x holds every shard", 20*lease, func() bool { return counter(t, x1.m.LeasesHeld) == shards })

	// x's process is killed: nothing released, its worker item left.
	dead.Store(true)
	stopX1()
	killed := time.Now()
	// y joins and x is restarted under its name, at once.
	y := e.poller(t, "y", nil, setLease)
	x2 := e.poller(t, "x", nil, setLease)
	stopY, stopX2 := start(t, y), start(t, x2)
	e.write(t, 40)
	held := func() int { return int(counter(t, x2.m.LeasesHeld) + counter(t, y.m.LeasesHeld)) }
	// The restart's wait for its previous life's leases is about two lease
	// durations; balance settles within two more. Twenty is a liveness
	// bound, not a timing.
	eventually(t, "every shard held again by the new x or y", 20*lease, func() bool { return held() == shards })
	t.Logf("every shard held again %s after the kill: x %v, y %v", time.Since(killed).Round(100*time.Millisecond),
		counter(t, x2.m.LeasesHeld), counter(t, y.m.LeasesHeld))
	// No thrash: each of the previous life's leases is taken over once
	// (a hand-over removes the incarnation: what x hands over is y's, and
	// comes back, if ever, by balance's ordinary moves), and the fleet
	// balances.
	eventually(t, "the fleet balanced", 20*lease, func() bool { return balanced(t, shards, x2, y) })
	e.write(t, 40)
	eventually(t, "every record written committed", 20*lease, func() bool { return e.reconciledNow(t) })
	handed := counter(t, x2.m.LeaseEvents.WithLabelValues(poller.LeaseHandedOff)) + counter(t, y.m.LeaseEvents.WithLabelValues(poller.LeaseHandedOff))
	t.Logf("x %v, y %v; hand-overs %v", counter(t, x2.m.LeasesHeld), counter(t, y.m.LeasesHeld), handed)
	assert.Equal(t, float64(shards), counter(t, x2.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)), "the previous life's leases taken over by the new x, each once")
	assert.Zero(t, counter(t, y.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)), "leases y took over (x's are live to it)")
	stopX2()
	stopY()
	end := time.Now()
	// The killed life's readers under another name, so that its reads and
	// the new x's are told apart.
	ivs := readerIntervals(t, x1.logs.lines(), end)
	for i := range ivs {
		ivs[i].owner = "x(killed)"
	}
	ivs = append(ivs, readerIntervals(t, x2.logs.lines(), end)...)
	requireNoOverlap(t, append(ivs, readerIntervals(t, y.logs.lines(), end)...))
	e.finish(t, nil)
}
