package table_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
)

// A bucket of 10 units refilled at 10 a second: Interval 100ms, Tolerance 1s.
var bucket10 = table.BudgetBucket{Interval: 100 * time.Millisecond, Tolerance: time.Second}

func TestTakeBudget_GrantsUntilEmptyThenSaysHowLongToWait(t *testing.T) {
	ctx := t.Context()
	client := ddbtest.Client(t)
	name := table.CoordinationTableName(ddbtest.NewTable(t, client)) // where the writer keeps them
	key := aggregates.BudgetKey("acme", 0)
	now := time.Unix(1_800_000_000, 0)

	var hint int64
	steps := []struct {
		units   float64
		granted bool
		wait    time.Duration
	}{
		{4, true, 0},                       // full: 10 → 6
		{6, true, 0},                       // 6 → 0
		{1, false, 100 * time.Millisecond}, // empty: one unit comes back in 100ms
		{3, false, 300 * time.Millisecond},
	}
	for i, s := range steps {
		got, err := table.TakeBudget(ctx, client, name, key, bucket10, now, s.units, 0, hint)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, s.granted, got.Granted, "step %d granted", i)
		assert.Equal(t, s.wait, got.Wait, "step %d wait", i)
		assert.Positive(t, got.WriteUnits, "step %d: every call consumes a write unit", i)
		hint = got.TAT
	}
	// 300ms later three units are back.
	got, err := table.TakeBudget(ctx, client, name, key, bucket10, now.Add(300*time.Millisecond), 3, 0, hint)
	require.NoError(t, err)
	assert.True(t, got.Granted)
	// A full second after that the bucket is full again: 10 units at once.
	got, err = table.TakeBudget(ctx, client, name, key, bucket10, now.Add(1300*time.Millisecond), 10, 0, got.TAT)
	require.NoError(t, err)
	assert.True(t, got.Granted)
}

func TestTakeBudget_DebtMakesTheNextTakeWait(t *testing.T) {
	ctx := t.Context()
	client := ddbtest.Client(t)
	name := ddbtest.NewTable(t, client)
	key := aggregates.BudgetKey("acme", 1)
	now := time.Unix(1_800_000_000, 0)

	// 1 unit taken and 29 charged after the fact: 20 units of debt beyond the
	// empty bucket, so a unit is back only after 2.1s.
	got, err := table.TakeBudget(ctx, client, name, key, bucket10, now, 1, 29, 0)
	require.NoError(t, err)
	require.True(t, got.Granted)
	got, err = table.TakeBudget(ctx, client, name, key, bucket10, now, 1, 0, got.TAT)
	require.NoError(t, err)
	assert.False(t, got.Granted)
	assert.Equal(t, 2100*time.Millisecond, got.Wait)
}

func TestTakeBudget_AWrongHintCostsOneMoreCall(t *testing.T) {
	ctx := t.Context()
	client := ddbtest.Client(t)
	name := ddbtest.NewTable(t, client)
	key := aggregates.BudgetKey("acme", 2)
	now := time.Unix(1_800_000_000, 0)

	first, err := table.TakeBudget(ctx, client, name, key, bucket10, now, 5, 0, 0)
	require.NoError(t, err)
	require.True(t, first.Granted)
	assert.Equal(t, 1, first.Calls)
	// The hint says full (0) but the bucket is filling: the condition fails,
	// returns the item, and the second call takes.
	got, err := table.TakeBudget(ctx, client, name, key, bucket10, now, 5, 0, 0)
	require.NoError(t, err)
	assert.True(t, got.Granted)
	assert.Equal(t, 2, got.Calls)
	// The other way round: the hint says filling, the bucket is full again.
	later := now.Add(time.Hour)
	got, err = table.TakeBudget(ctx, client, name, key, bucket10, later, 5, 0, later.Add(time.Second).UnixMicro())
	require.NoError(t, err)
	assert.True(t, got.Granted)
	assert.Equal(t, 2, got.Calls)
}

func TestTakeBudget_ConcurrentTakersNeverGetMoreThanTheBucketHolds(t *testing.T) {
	ctx := t.Context()
	client := ddbtest.Client(t)
	name := ddbtest.NewTable(t, client)
	key := aggregates.BudgetKey("acme", 3)
	now := time.Unix(1_800_000_000, 0)

	var granted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var hint int64
			for range 5 {
				got, err := table.TakeBudget(ctx, client, name, key, bucket10, now, 1, 0, hint)
				if !assert.NoError(t, err) {
					return
				}
				if got.Granted {
					granted.Add(1)
				}
				hint = got.TAT
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(10), granted.Load(), "40 takes of one unit from a full bucket of 10 at the same instant")
}

func TestTakeBudget_RefusesWhatCanNeverFit(t *testing.T) {
	client := ddbtest.Client(t)
	name := ddbtest.NewTable(t, client)
	_, err := table.TakeBudget(t.Context(), client, name, aggregates.BudgetKey("acme", 0), bucket10, time.Now(), 11, 0, 0)
	assert.ErrorContains(t, err, "never fit")
}
