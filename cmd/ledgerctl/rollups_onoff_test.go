package main

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
		p, err := processor.New(c, processor.Config{Table: table, NoRollups: off}, nil)
		require.NoError(t, err)
		return func() { // every record so far (the guard skips what is committed)
			t.Helper()
			shards, err := ledgertest.ReadAll(ctx, dynamodbstreams.NewFromConfig(ddbtest.Config(t)), info.StreamARN, nil)
			require.NoError(t, err)
			for _, s := range shards {
				_, err = p.Process(ctx, p.ShardGuard(info.StreamARN, s.ID), s.Records)
				require.NoError(t, err)
			}
		}
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
	code, out, errOut = run(t, env, "reconcile", "--repair", "--quiescent", "--settle", "0s")
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
