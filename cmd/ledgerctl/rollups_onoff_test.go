package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// TestReconcileRepair_TurningRollupsOnIsHealedOnce (docs/runbook.md,
// "Turning tenant roll-ups on or off"): consumers with roll-ups off leave
// the roll-ups short and the deltas they read unfolded in their lanes;
// the quiescent repair re-delivers the waiting deltas and puts the
// differences, and once the consumers (roll-ups on) fold them reconcile
// finds nothing. The re-delivery comes before the repair deltas are put:
// after, it took them for waiting deltas and put copies of them, folded
// besides their own records (every roll-up counted the difference twice).
func TestReconcileRepair_TurningRollupsOnIsHealedOnce(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(t, err)
	consumer := func(off bool) func() {
		return passer(t, c, info.StreamARN, processor.Config{Table: table, NoRollups: off})
	}
	on, off := consumer(false), consumer(true)
	require.NoError(t, ledgertest.NewWorkload(11).Run(ctx, c, table, 60))
	on()  // branch reports and roll-up deltas, not folded yet
	off() // roll-ups off: the deltas' records are read and not folded
	require.NoError(t, ledgertest.NewWorkload(12).Run(ctx, c, table, 60))
	off()

	code, out, errOut := run(t, env, "reconcile")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, "roll-up ")
	assert.Contains(t, out, "wait in lanes")

	code, out, errOut = run(t, env, "flags", "set", "writesEnabled=false")
	require.Equal(t, exitOK, code, out+errOut)
	code, out, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--quiescent", "--settle", "0s")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, "re-delivered")
	assert.NotContains(t, out, "put 0 repair deltas")
	on() // roll-ups on again: the re-delivered and repair deltas are folded
	on()
	code, out, errOut = run(t, env, "reconcile")
	require.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, " 0 differences")
	assert.NotContains(t, out, "wait in lanes", "folded")
}

// TestReconcile_AStuckRollupDeltaIsNamedNotLate (docs/exactly-once.md,
// S17-R1; docs/runbook.md, "Turning tenant roll-ups on or off"): roll-up
// deltas read by consumers with roll-ups off wait in their lanes for good,
// and a roll-up read lacks them. Before the fix reconcile counted them as
// stored and exited 0 with a line; now one older than --stuck-after (its
// updatedAt; here put by a consumer whose clock says two hours ago) is a
// difference naming its key, exit 1, and under the quiescent procedure
// (--quiescent, refused while writes are enabled) every waiting delta is;
// a fresh one outside it is late, counted. --repair without --quiescent
// leaves them and says so; with it they are re-delivered, and consumers
// with roll-ups on fold them.
func TestReconcile_AStuckRollupDeltaIsNamedNotLate(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(t, err)
	consumer := func(cfg processor.Config) func() {
		cfg.Table = table
		return passer(t, c, info.StreamARN, cfg)
	}
	lanes := func() map[string]bool {
		t.Helper()
		keys := map[string]bool{}
		scan, err := c.Scan(ctx, &dynamodb.ScanInput{TableName: &table, ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		require.Nil(t, scan.LastEvaluatedKey, "one page")
		for _, item := range scan.Items {
			if k := ledgertable.KeyOf(item); aggregates.IsRollupLaneKey(k.PK) {
				keys[k.String()] = true
			}
		}
		return keys
	}
	twoHoursAgo := func() time.Time { return time.Now().Add(-2 * time.Hour) }
	onEarlier, off := consumer(processor.Config{Now: twoHoursAgo}), consumer(processor.Config{NoRollups: true})
	require.NoError(t, ledgertest.NewWorkload(11).Run(ctx, c, table, 40))
	onEarlier() // branch reports and roll-up deltas stamped two hours ago
	off()       // a mixed fleet: the deltas' records read, not folded
	old := lanes()
	require.NotEmpty(t, old)

	code, out, errOut := run(t, env, "reconcile")
	require.Equal(t, exitDiff, code, "a delta stuck for good is a difference:\n"+out+errOut)
	for k := range old {
		assert.Contains(t, out, "stuck delta "+k)
	}
	assert.Contains(t, out, "not late (older than 1h0m0s")
	assert.Contains(t, out, "a roll-up read (partials only) returns")
	assert.Contains(t, out, fmt.Sprintf("%d roll-up delta items wait in lanes, every one stuck", len(old)))

	code, out, errOut = run(t, env, "reconcile", "--stuck-after", "0")
	require.Equal(t, exitOK, code, "never by age: counted only\n"+out+errOut)
	assert.Contains(t, out, "not judged by age")
	code, _, errOut = run(t, env, "reconcile", "--stuck-after", "-1s")
	require.Equal(t, exitError, code)
	assert.Contains(t, errOut, "--stuck-after must not be negative")

	code, out, errOut = run(t, env, "reconcile", "--json")
	require.Equal(t, exitDiff, code, out+errOut)
	var view reconcileView
	require.NoError(t, json.Unmarshal([]byte(out), &view), out)
	named := map[string]bool{}
	for _, d := range view.Differences {
		for _, s := range d.Stuck {
			named[aggregates.Key{PK: s.PK, SK: s.SK}.String()] = true
			since, err := time.Parse(time.RFC3339Nano, s.Since)
			require.NoError(t, err)
			assert.WithinDuration(t, twoHoursAgo(), since, 10*time.Minute)
		}
	}
	assert.Equal(t, old, named, "every stuck delta named by key")
	total := 0
	for _, n := range view.RollupStuck {
		total += n
	}
	assert.Equal(t, len(old), total)

	code, out, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--settle", "0s")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, "not re-delivered (stuck roll-up deltas are put back through a lane only under the quiescent procedure")
	assert.NotContains(t, out, "re-delivered 1") // none re-delivered outside it
	assert.Equal(t, old, lanes(), "left waiting")

	// The "off" consumer commits transactions after the deltas (its
	// checkpoint passes them: no consumer reads them again), and an "on"
	// one puts fresh deltas after those: late, counted, not named.
	require.NoError(t, ledgertest.NewWorkload(12).Run(ctx, c, table, 20))
	off()
	on := consumer(processor.Config{})
	require.NoError(t, ledgertest.NewWorkload(13).Run(ctx, c, table, 20))
	on() // stage 1 only
	waiting := lanes()
	require.Greater(t, len(waiting), len(old))
	code, out, errOut = run(t, env, "reconcile")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, fmt.Sprintf("%d roll-up delta items wait in lanes for their fold: %d stuck (named above), %d younger than --stuck-after 1h0m0s", len(waiting), len(old), len(waiting)-len(old)))

	// The quiescent procedure: every waiting delta is stuck.
	code, _, errOut = run(t, env, "reconcile", "--quiescent")
	require.Equal(t, exitError, code)
	assert.Contains(t, errOut, "writes are enabled")
	code, _, errOut = run(t, env, "reconcile", "--quiescent", "--tenant", "acme", "--branch", "north")
	require.Equal(t, exitError, code)
	assert.Contains(t, errOut, "whole table only")
	code, out, errOut = run(t, env, "flags", "set", "writesEnabled=false")
	require.Equal(t, exitOK, code, out+errOut)
	code, out, errOut = run(t, env, "reconcile", "--quiescent")
	require.Equal(t, exitDiff, code, out+errOut)
	for k := range waiting {
		assert.Contains(t, out, "stuck delta "+k)
	}
	assert.Contains(t, out, "not late (the quiescent procedure holds")
	assert.Contains(t, out, fmt.Sprintf("%d roll-up delta items wait in lanes, every one stuck", len(waiting)))

	// Turning them on again heals it (runbook): consumers on, then the
	// quiescent repair until it finds nothing. The fresh deltas' records
	// are still in flight (the periods they name are held: re-delivering
	// them would fold them twice), the old ones' are not: re-delivered.
	redelivered := false
	for range 3 {
		code, out, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--quiescent", "--settle", "0s")
		if code == exitOK {
			break
		}
		require.Equal(t, exitDiff, code, out+errOut)
		redelivered = redelivered || strings.Contains(out, "re-delivered")
		on() // the deltas' records
		on() // what the folds wrote
	}
	assert.True(t, redelivered, "the stuck deltas were re-delivered")
	code, out, errOut = run(t, env, "reconcile", "--quiescent")
	require.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, " 0 differences")
	assert.NotContains(t, out, "wait in lanes", "folded")
}
