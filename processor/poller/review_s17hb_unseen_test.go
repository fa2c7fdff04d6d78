package poller_test

import (
	"testing"
	"time"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/stretchr/testify/assert"
)

// Review (session 17) of the late heartbeat, hole L2: claim H3 keeps a
// heartbeat poller's leases past its validity on the premise that every
// take of them is fenced, or is made by a renewing poller that compat
// guards against; compat is entered only when a registry read shows the
// renewing poller. Poller a (heartbeat) is stopped whole (every call
// waits: SIGSTOP, a frozen VM) while r, a poller that renews every lease
// (an old version in a rolling upgrade), registers, takes a's leases by
// its counter rule (no fence: the heartbeat never moves a lease's
// counter), commits and leaves, releasing them. When a resumes, its
// heartbeat lands unfenced, its registry shows r left (no compat ever),
// and a read those shards again under leases that were no longer its
// own, for as long as it held them (beside any poller taking them free).
// Now a registry read sent a lease duration or more after the previous
// one re-reads the leases held and drops those not in its name at its
// counter. Asserted: a loses every lease (cause taken) without being
// fenced, then the fleet reads on and every record is committed once.
// Without the re-read a keeps every lease and the first wait times out.
func TestReviewS17HB_APollerResumingDropsTheLeasesARenewingPollerTookUnseen(t *testing.T) {
	const shards = 4
	const lease = 6 * time.Second // the pause is injected (the gate)
	e := newEmuEnv(t, 1702, streamemu.Config{Shards: shards, Seed: 1702})
	cfg := func(c *poller.Config) { c.LeaseDuration = lease }
	g := &gate{}
	gated := faultClient(t, func(string) ledgertest.Fault { g.wait(); return ledgertest.Pass })
	a := e.hbPoller(t, "a", func(poller.Table) poller.Table { return gated }, gated, gatedStreams{Streams: e.s, g: g}, cfg)
	e.write(t, 20)
	stopA := start(t, a)
	eventually(t, "a holds every shard", 20*lease, func() bool { return counter(t, a.m.LeasesHeld) == shards })

	g.pause()
	r := e.hbPoller(t, "r", nil, nil, nil, func(c *poller.Config) {
		c.LeaseDuration = lease
		c.LeaseMode = poller.LeaseModeRenew
	})
	stopR := start(t, r)
	eventually(t, "r takes a's leases by its counter rule", 20*lease, func() bool { return counter(t, r.m.LeasesHeld) == shards })
	assert.Zero(t, counter(t, r.m.LeaseEvents.WithLabelValues(poller.LeaseFenced)), "r fences nobody")
	e.write(t, 20)
	eventually(t, "r commits what was written", 20*lease, func() bool { return e.reconciledNow(t) })
	stopR()

	g.resume()
	eventually(t, "a drops the leases r took while it was stopped", 15*lease, func() bool {
		return counter(t, a.m.LeaseLosses.WithLabelValues(poller.LossTaken)) >= shards
	})
	assert.Zero(t, counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseRejoined)), "a was never fenced: its heartbeat landed")
	e.write(t, 20)
	eventually(t, "a takes the free leases and commits", 20*lease, func() bool { return e.reconciledNow(t) })
	stopA()
	e.finish(t, nil)
}
