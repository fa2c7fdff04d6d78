package processor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// TestNoRollups_WritesNoRollupItemAndTurningOnIsRepaired (Config.NoRollups,
// docs/runbook.md "Turning tenant roll-ups on or off"): a consumer with
// roll-ups off, in every guard mode, keeps the branch reports exact and
// writes no roll-up delta, no partial and no currency on a branch report;
// a delta left in a lane by a consumer with roll-ups on is not folded.
// Turning roll-ups on later: reconcile names the roll-ups short, the
// quiescent repair heals them, and the consumers keep them exact from
// there.
func TestNoRollups_WritesNoRollupItemAndTurningOnIsRepaired(t *testing.T) {
	for _, mode := range rollupModes {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			on := newConsumer(t, e, mode, nil, processor.Config{})
			rtx{"acme", "sp", "BRL", "2026-11-27", "1", "INCOME", "10", "food"}.put(t, e, "")
			on.pass() // stage 1 only: its delta waits in a lane
			waiting := laneKeys(t, e)
			require.Len(t, waiting, 1, "the consumer with roll-ups on put one delta")

			off := newConsumer(t, e, mode, nil, processor.Config{NoRollups: true})
			off.delivered = on.delivered // marker mode: what was handed over is not again
			rtx{"acme", "rio", "BRL", "2026-11-27", "2", "EXPENSE", "3", "rent"}.put(t, e, "")
			rtx{"acme", "tk", "JPY", "2026-11-27", "3", "INCOME", "700", "food"}.put(t, e, "")
			rtx{"acme", "x", "", "2026-11-26", "4", "INCOME", "2", "food"}.put(t, e, "")
			off.pass()
			off.pass()

			e.requireReconciled(t) // branch reports exact
			st := readRollups(t, e)
			assert.Equal(t, waiting, laneKeys(t, e), "roll-ups off: no delta put, the waiting one not folded")
			assert.Zero(t, st.partials, "roll-ups off: no partial written")
			for _, item := range scanAll(t, e) {
				k := table.KeyOf(item)
				ref, err := aggregates.ParseReportItemKey(k)
				if err != nil || ref.Kind != aggregates.ReportHeader || ref.Report.Branch == "sp" {
					continue
				}
				_, has := item[table.AttrCurrency]
				assert.False(t, has, "roll-ups off: branch report %s records no currency", k)
			}

			// Turning roll-ups on: the roll-ups are short, named, and the
			// quiescent procedure heals them (the waiting delta redelivered).
			diffs, stats, err := processor.ReconcileWith(ctx, e.ddb, e.table, processor.Scope{}, processor.ReconcileOptions{Rollups: true})
			require.NoError(t, err)
			require.NotEmpty(t, diffs, "reconcile names the roll-ups the consumer with roll-ups off left short")
			assert.Equal(t, 1, stats.RollupWaiting["acme"])
			// The waiting delta first: RedeliverWaiting re-puts every item
			// in the lanes, and a repair delta put before it would be
			// folded twice (its own record and the copy's).
			n, err := processor.RedeliverWaiting(ctx, e.ddb, e.table, "acme", time.Now(), nil)
			require.NoError(t, err)
			assert.Equal(t, 1, n, "the delta left waiting is put back through a lane")
			_, err = processor.Repair(ctx, e.ddb, e.table, diffs, time.Now())
			require.NoError(t, err)
			res, err := processor.RepairRollups(ctx, e.ddb, e.table, diffs, time.Now(), processor.RollupRepairOptions{Quiescent: true})
			require.NoError(t, err)
			assert.Empty(t, res.Refused)
			assert.Positive(t, res.Deltas)

			on2 := newConsumer(t, e, mode, nil, processor.Config{})
			on2.delivered = off.delivered
			on2.drain()
			rtx{"acme", "tk", "JPY", "2026-11-27", "5", "EXPENSE", "300", "rent"}.put(t, e, "")
			rtx{"acme", "rio", "BRL", "2026-11-28", "6", "INCOME", "1", "food"}.put(t, e, "")
			on2.drain()
			for _, d := range reconcileRollups(t, e) {
				t.Errorf("after turning roll-ups on and the repair: %s", d)
			}
			// Figures against the test's oracle; branches by reconcile's
			// (the test's counts branch reports by the currency they
			// record, which the reports written with roll-ups off lack).
			requireRollupsExact(t, e, false)
			e.requireReconciled(t)
		})
	}
}
