package processor_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor"
)

// Runs are planned on the report shapes the commit reads anyway: an entry
// that goes inline costs no write of its own, so a run holds as many
// records as fit one transaction (issue 11). When the shapes a run was
// planned on go stale before its commit (here another consumer filled the
// reports' maps, so the run's new names must go to entry items), the run
// needs more writes than one transaction holds: it is planned again, not
// sent, and the reports stay exact.
func TestCommitRuns_PlannedOnShapesAndAgainWhenTheyGoStale(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	branches := []string{"b1", "b2", "b3", "b4", "b5"}
	for _, b := range branches {
		putTxn(t, e, b, "2024-01-02", "seed", "1", "seed", "")
	}
	for _, b := range branches {
		for i := range 31 {
			putTxn(t, e, b, "2024-01-02", fmt.Sprintf("fill%02d", i), "1", fmt.Sprintf("fill%02d", i), "")
		}
	}
	for _, b := range branches {
		for i := range 20 {
			putTxn(t, e, b, "2024-01-02", fmt.Sprintf("new%02d", i), "2", fmt.Sprintf("new%02d", i), "")
		}
	}
	_, recs := e.records(t)
	recs = recs[1:] // the default flags item
	seed, fill, fresh := recs[:5], recs[5:5+5*31], recs[5+5*31:]
	require.Len(t, fresh, 100)

	p := e.processor(t, nil, nil)
	_, err := p.Process(ctx, p.MarkerGuard(), seed) // p now knows maps holding one name
	require.NoError(t, err)
	other := e.processor(t, nil, nil)
	_, err = other.Process(ctx, other.MarkerGuard(), fill) // fills them to 32 names behind p's back
	require.NoError(t, err)

	res, err := p.Process(ctx, p.MarkerGuard(), fresh)
	require.NoError(t, err)
	assert.Equal(t, 100, res.Committed)
	assert.Greater(t, res.Runs, 3, "planned again without the stale shapes: 15 reports × 20 entry items need several transactions")
	for _, b := range branches {
		diffs, _, err := reconcileBranch(ctx, e, "t", b)
		require.NoError(t, err)
		assert.Empty(t, diffs, "branch %s", b)
	}

	// With shapes known and room inline, one transaction holds what the
	// blind plan would cut into many: 5 branches × 20 records, 15 reports.
	e2 := newEnv(t)
	for _, b := range branches {
		for i := range 20 {
			putTxn(t, e2, b, "2024-01-02", fmt.Sprintf("new%02d", i), "2", fmt.Sprintf("new%02d", i), "")
		}
	}
	_, recs2 := e2.records(t)
	p2 := e2.processor(t, nil, nil)
	res, err = p2.Process(ctx, p2.MarkerGuard(), recs2[1:])
	require.NoError(t, err)
	assert.Equal(t, 1, res.Runs, "every name fits inline: 15 writes")
	e2.requireReconciled(t)
	_ = processor.Result{}
}
