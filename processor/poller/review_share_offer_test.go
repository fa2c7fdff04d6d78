package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/table"
)

// Tried, and held (review of the share-bounded pass): an offer is a hint,
// not a grant. A child offered to a poller (a forged offer here, or one
// outliving the decision that made it) whose parent is listed, open and
// unfinished is not taken: takeOffers reads the parent's checkpoint
// (parentDone) and finds it unfinished, and the offer is cleared. Without
// parentDone, the child would be read while its parent is: its records
// committed before the parent's, against the lineage order the rebase
// relies on. It passes on this code; gated with the review's other tests.
func TestPoller_AnOfferOfAChildWhoseParentIsUnfinishedIsNotTaken(t *testing.T) {
	reviewShareGate(t)
	ctx := context.Background()
	e := newEnv(t, 1543)
	f := e.stream
	f.addShard("shardId-R0-P", "")
	f.appendTo("shardId-R0-P", e.write(t, 10)...)
	f.addShard("shardId-R0-C", "shardId-R0-P") // listed as P's child while P is open
	f.appendTo("shardId-R0-C", e.write(t, 10)...)
	a := e.poller(t, "a", nil, nil, nil)
	stop := start(t, a)
	eventually(t, "a holds the parent (and is registered)", 20*time.Second, func() bool { return counter(t, a.m.LeasesHeld) == 1 })
	coord := table.CoordinationTableName(e.table)
	_, err := e.ddb.UpdateItem(ctx, table.RegisterShard(coord, f.arn, "shardId-R0-C", "shardId-R0-P", "1", time.Now()))
	require.NoError(t, err)
	_, err = e.ddb.UpdateItem(ctx, table.OfferLease(coord, f.arn, "a", "shardId-R0-C"))
	require.NoError(t, err)
	eventually(t, "a looked at the offer and cleared it", 20*time.Second, func() bool {
		ws, err := table.ReadWorkers(ctx, e.ddb, coord, f.arn)
		require.NoError(t, err)
		for _, w := range ws {
			if w.Owner == "a" {
				return len(w.Offers) == 0
			}
		}
		return false
	})
	stop()
	childReads := 0
	f.mu.Lock()
	for _, r := range f.reads {
		if r.shard == "shardId-R0-C" {
			childReads++
		}
	}
	f.mu.Unlock()
	assert.Zero(t, childReads, "GetRecords on the child while its parent is open")
	assert.Empty(t, e.leaseOwners(t)["shardId-R0-C"], "the child's lease was taken")
}
