package main

import (
	"context"
	"encoding/json"
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

// TestReconcile_RepairRefusedUnderAHigherProtocolReadingWorks: steps X
// and F of the counted repair (docs/exactly-once.md, "Cost to build, and
// the order"). Under flags naming a higher protocol than its own (5 since
// F; X's was 4), ledgerctl reads (reconcile without --repair: fenced heads
// decode, a damaged report is named) and refuses --repair, naming both
// numbers, writing nothing; under its own it repairs, and a head it read
// fenced (every head a commit of this version wrote) stays fenced.
func TestReconcile_RepairRefusedUnderAHigherProtocolReadingWorks(t *testing.T) {
	ctx := context.Background()
	table, env := createdTable(t)

	c := ddbtest.Client(t)
	require.NoError(t, ledgertest.NewWorkload(25).Run(ctx, c, table, 60))
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(t, err)
	shards, err := ledgertest.ReadAll(ctx, dynamodbstreams.NewFromConfig(ddbtest.Config(t)), info.StreamARN, nil)
	require.NoError(t, err)
	p, err := processor.New(c, processor.Config{Table: table}, nil)
	require.NoError(t, err)
	_, err = p.Process(ctx, p.ShardGuard(info.StreamARN, shards[0].ID), shards[0].Records)
	require.NoError(t, err)

	// Damage the income of one report, whose head the commit fenced.
	key := map[string]ddbtypes.AttributeValue{"PK": ledgertable.S("TENANT#acme#BRANCH#north#REPORTING"), "SK": ledgertable.S("YEARLY#2024")}
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &table, Key: key,
		UpdateExpression:          aws.String("SET totalIncome = totalIncome + :one"),
		ConditionExpression:       aws.String("transactionCount = :v4 AND attribute_type(txCount, :N)"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":v4": ledgertable.S("v4"), ":N": ledgertable.S("N"), ":one": &ddbtypes.AttributeValueMemberN{Value: "0.01"}},
	})
	require.NoError(t, err)
	setProtocol := func(n int64) {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &table, Key: ledgertable.Key(aggregates.FlagsKey()),
			UpdateExpression:          aws.String("SET #p = :p"),
			ExpressionAttributeNames:  map[string]string{"#p": ledgertable.AttrProtocol},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": ledgertable.Int(n)},
		})
		require.NoError(t, err)
	}
	setProtocol(5)

	code, out, errOut := run(t, env, "reconcile")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, " 1 differences", "the fenced head is read: only its damage differs")
	assert.Contains(t, out, "totals: got income=")
	assert.NotContains(t, out, "not a number")

	code, out, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--settle", "0s")
	require.Equal(t, exitError, code, out+errOut)
	assert.Contains(t, errOut, "the table is at protocol 5 (flags item), this version speaks protocol 4")
	code, out, _ = run(t, env, "reconcile")
	require.Equal(t, exitDiff, code, out)
	assert.Contains(t, out, " 1 differences", "nothing was repaired")

	setProtocol(4)
	code, out, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--settle", "0s")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, "repaired 1 reports")
	code, out, _ = run(t, env, "reconcile")
	require.Equal(t, exitOK, code, out)
	got, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: key, ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.Equal(t, ledgertable.S("v4"), got.Item["transactionCount"], "the repaired head stays fenced")
	assert.IsType(t, &ddbtypes.AttributeValueMemberN{}, got.Item["txCount"])
}

// TestLag_AFencedCheckpointIsShownAtItsPos: steps X and F. ledgerctl lag
// reads a checkpoint fenced by protocol 4 (sequenceNumber {fence: 4}, the
// position in pos; since F, as this version's commit leaves it) at pos:
// the same checkpoint and pending records as the same checkpoint in the
// old layout (the old decoder read no position: every record pending).
func TestLag_AFencedCheckpointIsShownAtItsPos(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	require.NoError(t, ledgertest.NewWorkload(2513).Run(ctx, c, table, 40))
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(t, err)
	shards, err := ledgertest.ReadAll(ctx, dynamodbstreams.NewFromConfig(ddbtest.Config(t)), info.StreamARN, nil)
	require.NoError(t, err)
	recs := shards[0].Records
	p, err := processor.New(c, processor.Config{Table: table}, nil)
	require.NoError(t, err)
	_, err = p.Process(ctx, p.ShardGuard(info.StreamARN, shards[0].ID), recs[:len(recs)/2])
	require.NoError(t, err)

	type lagOut struct{ Shards []shardLag }
	lag := func() shardLag {
		t.Helper()
		code, out, errOut := run(t, env, "lag", "--json")
		require.Equal(t, exitOK, code, errOut)
		var l lagOut
		require.NoError(t, json.Unmarshal([]byte(out), &l), out)
		require.Len(t, l.Shards, 1)
		return l.Shards[0]
	}
	before := lag() // fenced by the commit
	require.NotEmpty(t, before.Checkpoint)
	require.Positive(t, before.Pending)

	key := aggregates.CheckpointKey(info.StreamARN, shards[0].ID)
	_, err = c.UpdateItem(ctx, ledgertable.UnfenceCheckpoint(ledgertable.CoordinationTableName(table), key, recs[len(recs)/2-1].SequenceNumber))
	require.NoError(t, err)
	after := lag() // the old layout
	assert.Equal(t, before.Checkpoint, after.Checkpoint, "the fenced checkpoint's pos")
	assert.Equal(t, before.Pending, after.Pending)
	assert.Equal(t, before.PendingTxns, after.PendingTxns)
}
