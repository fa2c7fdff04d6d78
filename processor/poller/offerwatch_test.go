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
	"github.com/ledger-dev/ledger/table"
)

// A lease handed over to a heartbeat poller is taken at once (the offer
// watch, Config.OfferWatch), not at its round after the heartbeat whose
// answer shows the offer: while a lease changes hands its shard is read
// by nobody, and at 1,000 shards the steady state's slowest records were
// all on shards changing hands (BENCHMARKS.md, "Session 21"). Here the
// leases last 10 minutes, so b's rounds and heartbeats come every 200 s:
// a "ghost" poller, registered and live to b for that long, holds one of
// the two shards (b takes the other, its share), then hands it to b as a
// giver does (the lease released to b, the offer in b's worker item).
// b holds it within the test's 60 s wait with the watch; without it
// (OfferWatch < 0) the wait fails, the next round being 200 s away.
func TestPoller_ALeaseHandedOverIsTakenAtOnceNotAtTheNextRound(t *testing.T) {
	ddbtest.Long(t)
	ctx := context.Background()
	e := newEmuEnv(t, 2101, streamemu.Config{Shards: 2, Seed: 2101})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour"}
	e.write(t, 30)
	var ids []string
	for _, sh := range e.s.Shards() {
		ids = append(ids, sh.ID)
	}
	require.Len(t, ids, 2)
	coord := table.CoordinationTableName(e.table)
	now := time.Now()
	_, err := e.ddb.UpdateItem(ctx, table.HeartbeatWorker(coord, e.stream.arn, "ghost", "g1", 1, true, now))
	require.NoError(t, err)
	_, err = e.ddb.UpdateItem(ctx, table.TakeLease(coord, e.stream.arn, table.Lease{Shard: ids[0]}, "ghost", "g1", 10*time.Minute, now))
	require.NoError(t, err)

	b := e.hbPoller(t, "b", nil, nil, nil, func(c *poller.Config) { c.LeaseDuration = 10 * time.Minute })
	stopB := start(t, b)
	eventually(t, "b holds its share, the shard the ghost does not hold", time.Minute, func() bool { return counter(t, b.m.LeasesHeld) == 1 })

	// The ghost hands its lease to b.
	_, err = e.ddb.UpdateItem(ctx, table.ReleaseLease(coord, e.stream.arn, table.Lease{Shard: ids[0], Owner: "ghost", Counter: 1}, "b", false, time.Now()))
	require.NoError(t, err)
	_, err = e.ddb.UpdateItem(ctx, table.OfferLease(coord, e.stream.arn, "b", ids[0]))
	require.NoError(t, err)
	eventually(t, "b takes the lease handed to it before its next round (200 s on)", time.Minute, func() bool { return counter(t, b.m.LeasesHeld) == 2 })
	assert.Equal(t, 1.0, counter(t, b.m.Offers.WithLabelValues(poller.OfferTaken)), "ledger_poller_offers_total{outcome=\"taken\"}")

	e.write(t, 30)
	eventually(t, "b reads the shard handed to it", time.Minute, func() bool {
		for _, l := range b.logs.lines() {
			if l["msg"] == "shard reader started" && l["shard"] == ids[0] {
				return true
			}
		}
		return false
	})
	stopB()
	e.finish(t, nil)
}
