package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// The review of the worker heartbeat (docs/exactly-once.md, "Review
// (adversarial, session 16): the worker heartbeat"): holes in what the
// worker registry is trusted to say, fixed; each test fails without its
// fix.

// HB2 (fixed; not gated): a rollback with a stable owner name (LEDGER_OWNER
// set per host or pod). A heartbeat poller "x" runs, stops, and comes back
// as a poller of the version before the heartbeat (emulated by
// LeaseModeRenew, whose worker write is that version's: unconditional,
// SET without leaseMode, ADD beat). That write never removes leaseMode,
// so x's item still said "heartbeat": the heartbeat poller n judged x a
// heartbeat owner, never switched to compat, and renewed none of its lease
// items, while x (the old take-over rule: a counter unchanged for a lease
// duration) could take any lease of n over once under its share; n reads
// none of its lease items and would never learn. Fixed (table.HeartbeatWorker,
// DecodeWorker): the mark holds only at the beat the heartbeat wrote it
// with (modeBeat), which any older version's write moves past. It fails
// without the fix (n never logs compat).
func TestPoller_ARollbackUnderTheSameOwnerNameIsSeenAsARenewingPoller(t *testing.T) {
	ddbtest.Long(t)
	const shards = 6
	const lease = 3 * time.Second
	e := newEmuEnv(t, 412, streamemu.Config{Shards: shards, Seed: 412})
	n := e.hbPoller(t, "n", nil, nil, nil, func(c *poller.Config) { c.LeaseDuration = lease })
	x := e.hbPoller(t, "x", nil, nil, nil, func(c *poller.Config) { c.LeaseDuration = lease })
	e.write(t, 40)
	stopN, stopX := start(t, n), start(t, x)
	eventually(t, "both hold their share", 40*lease, func() bool { return balanced(t, shards, n, x) })
	stopX()
	eventually(t, "n holds every shard", 40*lease, func() bool { return counter(t, n.m.LeasesHeld) == shards })

	old := e.hbPoller(t, "x", nil, nil, nil, func(c *poller.Config) { c.LeaseDuration, c.LeaseMode = lease, poller.LeaseModeRenew })
	stopOld := start(t, old)
	for end := time.Now().Add(4 * lease); time.Now().Before(end); {
		e.write(t, 5)
		time.Sleep(lease / 4)
	}
	// n renewing its lease items is what keeps them from x's take-over
	// rule; a round of n's stalled on a loaded table lets x take one, as
	// between two renewing pollers (n's own validity ended first): logged.
	assert.Positive(t, logged(n.logs.lines(), "a live poller renews every lease"), "n never saw a renewing poller in the registry")
	t.Logf("leases the rolled-back poller took over from n: %.0f", counter(t, old.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)))
	stopOld()
	stopN()
	e.finish(t, nil)
	end := time.Now()
	requireNoOverlap(t, append(readerIntervals(t, n.logs.lines(), end), readerIntervals(t, old.logs.lines(), end)...))
}

// HB4 (fixed; not gated): a live heartbeat poller's worker item deleted (by
// hand; or by TTL under a host suspended past WorkerRetention, which loses
// the fence too). The other poller's next registry read missed the owner,
// so its leases fell to the rule for owners outside the registry (drains,
// renewing pollers): the counter read unchanged for a lease duration,
// which a heartbeat owner's leases always are. They were taken over at
// once, with no fence; the owner's next heartbeat re-created its item (its
// condition, attribute_not_exists(fencedBeat), holds on no item), its
// validity went on, and it reads none of its lease items: both read the
// shards for good. Fixed: a heartbeat after the first is conditional on the
// item existing too (table.HeartbeatWorkerAgain), failing like a fence
// (drop every lease, rejoin); and an owner absent from the registry has
// its leases taken only once it was absent for a lease duration. It fails
// without the fix (9 leases held of 6 shards, three read by both).
func TestPoller_AHeartbeatOwnerWhoseWorkerItemIsDeletedKeepsItsLeasesOrLosesThemForGood(t *testing.T) {
	ddbtest.Long(t)
	const shards = 6
	const lease = 3 * time.Second
	e := newEmuEnv(t, 413, streamemu.Config{Shards: shards, Seed: 413})
	cfg := func(c *poller.Config) { c.LeaseDuration = lease }
	a := e.hbPoller(t, "a", nil, nil, nil, cfg)
	b := e.hbPoller(t, "b", nil, nil, nil, cfg)
	e.write(t, 40)
	stopA, stopB := start(t, a), start(t, b)
	eventually(t, "both hold their share", 20*lease, func() bool { return balanced(t, shards, a, b) })
	time.Sleep(2 * lease) // every lease state seen unchanged for a lease duration

	// The item deleted by hand, again while a's heartbeats re-create it,
	// for a lease duration.
	key := aggregates.WorkerKey(e.stream.arn, "a")
	for end := time.Now().Add(lease); time.Now().Before(end); {
		_, err := e.ddb.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
			TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(key),
		})
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
	}
	for end := time.Now().Add(3 * lease); time.Now().Before(end); {
		e.write(t, 5)
		time.Sleep(lease / 4)
	}
	held := counter(t, a.m.LeasesHeld) + counter(t, b.m.LeasesHeld)
	assert.LessOrEqual(t, held, float64(shards), "a shard held by both pollers")
	stopA()
	stopB()
	e.finish(t, nil)
	end := time.Now()
	requireNoOverlap(t, append(readerIntervals(t, a.logs.lines(), end), readerIntervals(t, b.logs.lines(), end)...))
}
