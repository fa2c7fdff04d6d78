package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// TestReconcileRepair_CountedForARebasedBranchRefusedOtherwise: two
// branches written as the writer writes (counted) and committed by a batch
// consumer, one of them rebased since the fence (fencedAt), each with a
// damaged report. `reconcile --repair` repairs the rebased one with the
// counted repair and leaves the other alone, naming the rebase;
// `--uncounted` then repairs the other with the repair of protocol 3.
func TestReconcileRepair_CountedForARebasedBranchRefusedOtherwise(t *testing.T) {
	ctx := context.Background()
	table := ddbtest.TableName(t)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	code, _, errOut := run(t, env, "table", "create")
	require.Equal(t, exitOK, code, errOut)
	coord := ledgertable.CoordinationTableName(table)
	c := ddbtest.Client(t)
	for _, b := range []string{"rebased", "plain"} {
		for i := range 3 {
			item := map[string]ddbtypes.AttributeValue{
				"PK": ledgertable.S(aggregates.TransactionPK("acme", b)), "SK": ledgertable.S(fmt.Sprintf("2024-06-0%d#t%d", i+1, i)),
				"entityType": ledgertable.S(aggregates.EntityTransaction), "type": ledgertable.S("INCOME"),
				"amount": ledgertable.Int(int64(10 * (i + 1))), "category": ledgertable.S("rent"),
				"createdAt": ledgertable.S(fmt.Sprintf("2024-06-0%dT12:00:00Z", i+1)), "version": ledgertable.Int(1),
			}
			ledgertable.Count(item, 1)
			_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: item})
			require.NoError(t, err)
		}
	}
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(t, err)
	streams := dynamodbstreams.NewFromConfig(ddbtest.Config(t))
	p, err := processor.New(c, processor.Config{Table: table}, nil)
	require.NoError(t, err)
	shards, err := ledgertest.ReadAll(ctx, streams, info.StreamARN, nil)
	require.NoError(t, err)
	for _, s := range shards {
		g := p.ShardGuard(info.StreamARN, s.ID)
		g.CommitBatches()
		_, err := p.Process(ctx, g, s.Records)
		require.NoError(t, err)
	}
	// The branch counted from its first write: its counts are what a
	// rebase would reset them to; fencedAt as its B5 sets it.
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &coord, Key: ledgertable.Key(aggregates.AppliedKey("acme", "rebased")),
		UpdateExpression:          aws.String("SET #fat = :now, #fa = :z"),
		ExpressionAttributeNames:  map[string]string{"#fat": ledgertable.AttrFencedAt, "#fa": ledgertable.AttrForeignAck},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":now": ledgertable.S("2026-11-28T00:00:00Z"), ":z": ledgertable.Int(0)}})
	require.NoError(t, err)
	for _, b := range []string{"rebased", "plain"} {
		k := aggregates.ReportKey{Tenant: "acme", Branch: b, Period: aggregates.Period{Type: aggregates.Monthly, Value: "2024-06"}}
		_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table, Key: ledgertable.Key(k.Key()),
			UpdateExpression:          aws.String("SET #i = #i + :d"),
			ExpressionAttributeNames:  map[string]string{"#i": ledgertable.AttrTotalIncome},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":d": ledgertable.Int(7)}})
		require.NoError(t, err)
	}

	code, out, errOut := run(t, env, "reconcile", "--repair", "--rollups=false", "--settle", "0s")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, "repaired acme/rebased (counted: applied = written = 3; 1 reports in 1 transactions")
	assert.Contains(t, out, "left alone (acme/plain is not rebased since the fence")
	assert.Contains(t, out, "its roll-ups are unproven after the counted repair")
	assert.Contains(t, out, "counted repair: 1 branches repaired, 1 left alone, 0 for the repair of protocol 3")
	code, out, _ = run(t, env, "reconcile", "--rollups=false", "--tenant", "acme", "--branch", "rebased")
	assert.Equal(t, exitOK, code, out)
	code, out, _ = run(t, env, "reconcile", "--rollups=false", "--tenant", "acme", "--branch", "plain")
	assert.Equal(t, exitDiff, code, out)

	code, out, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--rollups=false", "--settle", "0s")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, "counted repair: 0 branches repaired, 0 left alone, 1 for the repair of protocol 3")
	assert.Contains(t, out, "repaired 1 reports; deleted 0 stray items; 0 changed during the check")
	code, out, _ = run(t, env, "reconcile", "--rollups=false")
	assert.Equal(t, exitOK, code, out)
}
