package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// TestReconcileRepair_RollupsNamedAndHealedUnderTheQuiescentProcedure
// (issue 24, "Proven by"; docs/runbook.md "Repairing tenant roll-ups"): a
// missing partial and a stray roll-up item are named by reconcile; --repair
// deletes the stray and refuses the difference of figures without
// --quiescent; --quiescent is refused while writes are enabled; with writes
// disabled it puts one repair delta, and once the consumer folds it
// reconcile finds nothing.
func TestReconcileRepair_RollupsNamedAndHealedUnderTheQuiescentProcedure(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	require.NoError(t, ledgertest.NewWorkload(11).Run(ctx, c, table, 100))
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(t, err)
	consume := passer(t, c, info.StreamARN, processor.Config{Table: table})
	consume() // stage 1: branch reports and roll-up deltas
	consume() // stage 2: the deltas folded into the partials
	code, out, errOut := run(t, env, "reconcile")
	require.Equal(t, exitOK, code, out+errOut)

	// Damage: one partial deleted, one stray (a lane no table has).
	var partial aggregates.Key
	scan, err := c.Scan(ctx, &dynamodb.ScanInput{TableName: &table, ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	for _, item := range scan.Items {
		k := ledgertable.KeyOf(item)
		if rk, err := aggregates.ParseRollupKey(k); err == nil && rk.Period.Type == aggregates.Yearly {
			partial = k
			break
		}
	}
	require.NotEmpty(t, partial.PK, "a yearly partial")
	_, err = c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: ledgertable.Key(partial)})
	require.NoError(t, err)
	stray := aggregates.Key{PK: "TENANT#acme#ROLLUP#-#40", SK: "DAILY#2024-01-01"}
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]ddbtypes.AttributeValue{
		"PK": &ddbtypes.AttributeValueMemberS{Value: stray.PK}, "SK": &ddbtypes.AttributeValueMemberS{Value: stray.SK}}})
	require.NoError(t, err)

	code, out, errOut = run(t, env, "reconcile")
	require.Equal(t, exitDiff, code, out+errOut)
	rk, err := aggregates.ParseRollupKey(partial)
	require.NoError(t, err)
	assert.Contains(t, out, "roll-up "+rk.Tenant+"/"+rk.Currency+"/"+rk.Period.String())
	assert.Contains(t, out, "stray item "+stray.String())
	assert.Contains(t, out, "2 differences")
	code, out, errOut = run(t, env, "reconcile", "--json")
	require.Equal(t, exitDiff, code, out+errOut)
	var view reconcileView
	require.NoError(t, json.Unmarshal([]byte(out), &view), out)
	require.Len(t, view.Differences, 2)
	for _, d := range view.Differences {
		if d.Stray {
			assert.Equal(t, stray.PK, d.PK)
			continue
		}
		assert.True(t, d.Rollup)
		assert.Equal(t, []string{rk.Tenant, rk.Currency, rk.Period.String()}, []string{d.Tenant, d.Currency, d.Period})
		assert.Equal(t, aggregates.RollupPK(rk.Tenant, rk.Currency, 0), d.PK)
	}

	code, out, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--settle", "0s")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, "deleted stray item "+stray.String())
	assert.Contains(t, out, "not repaired (a roll-up difference is repaired by comparison only under the quiescent procedure")
	assert.Contains(t, out, "put 0 repair deltas")

	code, _, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--quiescent", "--settle", "0s")
	require.Equal(t, exitError, code)
	assert.Contains(t, errOut, "writes are enabled")

	code, out, errOut = run(t, env, "flags", "set", "writesEnabled=false")
	require.Equal(t, exitOK, code, out+errOut)
	code, out, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--quiescent", "--settle", "0s")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, "put 1 repair deltas")
	code, out, errOut = run(t, env, "reconcile") // the repair delta is counted unfolded
	require.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, "1 roll-up delta items wait in lanes")
	// Its INSERT record is in flight: --quiescent asserts a drain that has
	// not happened, so reconcile names the delta stuck (exit 1), and the
	// repair, which reads the guards and the stream before it writes,
	// leaves it to the consumer (re-delivering it would fold it twice).
	code, out, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--quiescent", "--settle", "0s")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, "stuck delta ")
	assert.Contains(t, out, "left alone (records in flight name this period)")
	assert.NotContains(t, out, "re-delivered")
	consume()
	code, out, errOut = run(t, env, "reconcile")
	require.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, " 0 differences")
	assert.NotContains(t, out, "wait in lanes", "folded")
}
