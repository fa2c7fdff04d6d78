package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// Issue 23: each leased shard could hold up to BatchRecords (10,000)
// records, so a poller with hundreds of shards behind held gigabytes. Now
// the records in memory across all its shards come out of one budget
// (MaxHeldRecords): sixteen shards all behind, read by one drain with a
// budget of 40 records (a page of 1,000 each otherwise), never have more
// than 40 in hand or in flight, every shard is read to its end in batches
// smaller than its limit, and the reports are exact.
func TestPoller_RecordsBudgetBoundsManyShardsBehind(t *testing.T) {
	ctx := context.Background()
	const shards, budget = 16, 40
	e := newEmuEnv(t, 2303, streamemu.Config{Shards: shards})
	e.write(t, 300)
	require.NoError(t, e.s.Sync(ctx))

	tp := e.poller(t, "budgeted", nil, func(c *poller.Config) { c.Drain, c.MaxHeldRecords = true, budget })
	e.runDrain(t, tp, 3*time.Minute)

	peak := poller.BudgetPeak(tp.Poller)
	t.Logf("budget %d: peak in use %d, reads that waited %v", budget, peak, counter(t, tp.m.HeldBudgetWaits))
	assert.LessOrEqual(t, peak, budget, "records in hand or in flight at once")
	assert.Positive(t, peak)
	assert.Positive(t, counter(t, tp.m.HeldBudgetWaits), "shards waited for the budget")
	assert.Equal(t, float64(budget), counter(t, tp.m.HeldBudget))
	assert.Zero(t, counter(t, tp.m.HeldBudgetUsed), "all given back")
	assert.Zero(t, counter(t, tp.m.HeldRecords))
	n, recs := batches(t, tp)
	require.Positive(t, n)
	assert.LessOrEqual(t, recs/float64(n), float64(budget), "batches within the budget")

	// Every shard with records was read to its end by this drain.
	_, cps, err := table.ReadStreamState(ctx, e.ddb, e.table, e.stream.arn)
	require.NoError(t, err)
	read := map[string]bool{}
	for _, h := range e.s.History() {
		read[h.Shard] = true
	}
	require.NotEmpty(t, read)
	for id := range read {
		if assert.Contains(t, cps, id, "shard %s read", id) {
			assert.NotEmpty(t, cps[id].Seq, "shard %s checkpointed", id)
		}
	}
	e.requireReconciled(t)
	e.requireInOrder(t, nil)
}
