package poller_test

import (
	"testing"
	"time"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
)

// Review (session 17) of the late heartbeat, hole L1: a poller whose
// heartbeats land but whose answers never come in time (every answer more
// than a lease duration after its send: a process starved of CPU, a
// response path that drops or delays answers) stays alive to the others,
// its beat moving at every attempt, while it reads nothing: paused, its
// leases kept. Nobody fences it (the beat moves), so its shards were read
// by nobody for as long as it lasted. The poller now stops heartbeating
// once paused for two lease durations, but for one probe every three: the
// others see its beat stand still, fence it and take its leases over.
// Asserted: a kept its leases paused, b fenced a and took every shard,
// and every record written after a's answers went late is committed (by
// b). Without the silence, b never fences a. The workload's branches are
// widened to keys on every shard of the four: with its default six, only
// two shards carry records, and a stop-17 CI run reconciled at once
// because b happened to hold those two (b never fenced a; the test then
// failed on the fence, having waited on the wrong thing).
func TestReviewS17HB_APollerWhoseHeartbeatsLandUnansweredIsFencedByTheOthers(t *testing.T) {
	ddbtest.Long(t)
	const shards = 4
	const lease = 8 * time.Second // b's rounds on a loaded table; a's lateness is injected
	e := newEmuEnv(t, 1701, streamemu.Config{Shards: shards, Seed: 1701})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour"}
	cfg := func(c *poller.Config) { c.LeaseDuration = lease }
	late := &lateBeats{owner: "a"}
	a := e.hbPoller(t, "a", func(api poller.Table) poller.Table { late.Table = api; return late }, nil, nil, cfg)
	e.write(t, 20)
	stopA := start(t, a)
	eventually(t, "a holds every shard", 20*lease, func() bool { return counter(t, a.m.LeasesHeld) == shards })
	b := e.hbPoller(t, "b", nil, nil, nil, cfg)
	stopB := start(t, b)
	eventually(t, "both hold their share", 30*lease, func() bool { return balanced(t, shards, a, b) })

	// Every heartbeat of a lands, its answer later than the attempt waits.
	// A pause counted before (a loaded machine's late heartbeat while the
	// two balanced, seen in a CI run) is not this one: a then read and
	// committed its shards itself, and nobody fenced it.
	paused := counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeasePaused))
	late.delay.Store(int64(2 * lease))
	eventually(t, "a's readers stopped, its leases kept", 10*lease, func() bool {
		return counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeasePaused)) > paused && counter(t, a.m.LeasesPaused) > 0
	})
	e.write(t, 40) // on every shard, a's too
	eventually(t, "b fenced a and holds every shard", 20*lease, func() bool {
		return counter(t, b.m.LeaseEvents.WithLabelValues(poller.LeaseFenced)) >= 1 && counter(t, b.m.LeasesHeld) == shards
	})
	eventually(t, "every record committed: a's shards read by b", 20*lease, func() bool { return e.reconciledNow(t) })

	late.delay.Store(0)
	eventually(t, "a's heartbeat finds the fence and a registers again", 20*lease, func() bool {
		return counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseRejoined)) >= 1
	})
	stopA()
	stopB()
	e.finish(t, nil)
}
