package processor_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

// Review (adversarial, session 17) of roll-ups turned off and on
// (Config.NoRollups): a batch half-committed by a consumer with one
// setting is finished by a consumer with the other, and the resumer
// follows the pending batch's stored plan, not its own setting. The first
// consumer dies after three groups (the last one's answer lost); the
// resumer (other limits too) commits the others:
//
//   - planned with roll-ups on (layout 4), finished with them off: the
//     resumer puts the deltas of its groups as planned (the plan digest,
//     which covers them, would refuse anything else), so the roll-ups
//     hold the whole batch, none twice, none missing;
//   - planned with roll-ups off (layout 3), finished with them on: the
//     resumer puts no delta, so the roll-ups lack the whole batch, and
//     reconcile names it (the runbook's "turning them on" repair heals it).
//
// Branch reports are exact in both.
func TestReviewS17_AHalfCommittedBatchIsFinishedByItsPlanAcrossTheSwitch(t *testing.T) {
	for _, tc := range []struct {
		name          string
		first, resume bool // NoRollups of the first consumer and of the resumer
	}{
		{"planned on, resumed off", false, true},
		{"planned off, resumed on", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			curs := []string{"BRL", "EUR", ""}
			for i := range 90 {
				rtx{"acme", fmt.Sprint("b", i%5), curs[i%5%3], fmt.Sprintf("2026-11-%02d", 1+i%9), fmt.Sprint(i), "INCOME", "1.5", fmt.Sprint("cat", i%7)}.put(t, e, "")
			}
			_, recs := e.records(t)
			var writes atomic.Int64
			e.faults.Decide = func(op string) ledgertest.Fault {
				if op != "TransactWriteItems" {
					return ledgertest.Pass
				}
				switch n := writes.Add(1); {
				case n < 4:
					return ledgertest.Pass
				case n == 4:
					return ledgertest.LoseAnswer // it lands; the process dies before it learns so
				}
				return ledgertest.Drop
			}
			p, err := processor.New(e.faulty, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond,
				MaxItemsPerRun: 12, MaxEntriesPerItem: 2, MaxAttempts: 2, NoRollups: tc.first}, nil)
			require.NoError(t, err)
			g := p.ShardGuard(e.streamARN, shardOf(t, e))
			g.CommitBatches()
			_, err = p.Process(ctx, g, recs)
			require.Error(t, err, "the first consumer dies mid-batch")
			require.True(t, g.Pending(), "a half-committed batch is left")
			landed := readRollups(t, e).lane

			c := newConsumer(t, e, "batch", nil, processor.Config{NoRollups: tc.resume})
			res := c.deliver(recs...)
			assert.Positive(t, res.Runs, "the resumer commits the batch's other groups")
			e.requireReconciled(t)
			st := readRollups(t, e)
			if !tc.first {
				require.Positive(t, landed, "the first consumer's groups put deltas")
				assert.Greater(t, st.lane, landed, "the resumer (roll-ups off) puts the deltas its groups were planned with")
				requireRollupsExact(t, e, true)
				return
			}
			assert.Zero(t, st.lane, "a batch planned with roll-ups off puts no delta, whoever finishes it")
			assert.NotEmpty(t, reconcileRollups(t, e), "reconcile names the roll-ups short of the batch")
		})
	}
}

// Review (adversarial, session 17), hole S17-R1: a roll-up delta read by
// a consumer with roll-ups off (in flight at the switch, or put by an "on"
// consumer of a mixed fleet in a lane an "off" one reads) is not folded,
// now or later: the partials (what a tenant's roll-up read sums) lack it.
// Reconcile counts it as stored, so its figures agree; before the fix it
// only reported the delta waiting and found no difference, for good. Now
// (session 19) a waiting delta is named stuck, a difference of its roll-up
// with the delta's key, under the quiescent procedure (every waiting delta:
// nothing in flight will fold it) and, without it, once it is older than
// StuckAfter (its updatedAt); a fresh one is late, counted and not named.
// In every guard mode.
func TestReviewS17_ADeltaReadWithRollupsOffIsNamedStuck(t *testing.T) {
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
			off.delivered = on.delivered
			off.pass() // the delta's record: read, not folded
			off.pass()
			assert.Equal(t, waiting, laneKeys(t, e), "the delta still waits in its lane")
			assert.Zero(t, readRollups(t, e).partials, "no partial holds it: a roll-up read is short of it")

			reconcile := func(opts processor.ReconcileOptions) ([]processor.Difference, processor.ReconcileStats) {
				t.Helper()
				opts.Rollups = true
				diffs, stats, err := processor.ReconcileWith(ctx, e.ddb, e.table, processor.Scope{}, opts)
				require.NoError(t, err)
				assert.Equal(t, 1, stats.RollupWaiting["acme"], "the delta is counted waiting")
				return diffs, stats
			}
			diffs, stats := reconcile(processor.ReconcileOptions{})
			assert.Empty(t, diffs, "a fresh delta may be late: counted, not named")
			assert.Zero(t, stats.RollupStuck["acme"])

			later := func() time.Time { return time.Now().Add(processor.DefaultRollupStuckAfter + time.Minute) }
			for _, tc := range []struct {
				name string
				opts processor.ReconcileOptions
			}{
				{"quiescent", processor.ReconcileOptions{Quiescent: true}},
				{"older than StuckAfter", processor.ReconcileOptions{Now: later}},
				{"older than a StuckAfter of a second", processor.ReconcileOptions{StuckAfter: time.Second, Now: func() time.Time { return time.Now().Add(2 * time.Second) }}},
			} {
				diffs, stats := reconcile(tc.opts)
				var periods []string
				for _, diff := range diffs { // one per period the delta names
					d := diff.Rollup
					require.NotNil(t, d, tc.name)
					periods = append(periods, d.Period.String())
					assert.Equal(t, "acme/BRL", d.Tenant+"/"+d.Currency, tc.name)
					require.Len(t, d.Stuck, 1, tc.name)
					assert.Equal(t, waiting[0], d.Stuck[0].Key, tc.name)
					assert.WithinDuration(t, time.Now(), d.Stuck[0].Since, time.Minute, "%s: the delta's updatedAt", tc.name)
					assert.False(t, d.Differs(), "%s: its figures agree (it is counted); the stuck delta is the difference", tc.name)
					assert.True(t, d.Read.Totals.Income.IsZero(), "%s: a read returns the partials only: %s", tc.name, d.Read.Totals)
					assert.Contains(t, diff.String(), "stuck delta "+waiting[0].String(), tc.name)
					assert.Contains(t, diff.String(), "a roll-up read (partials only) returns income=0 ", tc.name)
				}
				assert.Equal(t, []string{"DAILY#2026-11-27", "MONTHLY#2026-11", "YEARLY#2026"}, periods, tc.name)
				assert.Equal(t, 1, stats.RollupStuck["acme"], "%s: one item", tc.name)
			}
			diffs, _ = reconcile(processor.ReconcileOptions{StuckAfter: -1, Now: later})
			assert.Empty(t, diffs, "StuckAfter < 0: never by age")
			e.requireReconciled(t)
		})
	}
}
