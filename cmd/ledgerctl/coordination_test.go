package main

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor/poller"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// `coordination migrate` moves a stream's checkpoints from where versions
// before the coordination table kept them (the ledger table, STREAM#{arn})
// to the coordination table: refused (exit 1) while a lease is held, done
// once it is not, idempotent; `table describe` checks both tables.
func TestCoordinationMigrate_MovesLegacyCheckpointsOnceNoConsumerRuns(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	arn, err := poller.ResolveStream(ctx, c, table)
	require.NoError(t, err)
	now := time.Now().UTC()
	put := func(sk string, attrs map[string]ddbtypes.AttributeValue) {
		item := ledgertable.Key(aggregates.Key{PK: "STREAM#" + arn, SK: sk})
		for k, v := range attrs {
			item[k] = v
		}
		_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
		require.NoError(t, err)
	}
	put("SHARD#shardId-1", map[string]ddbtypes.AttributeValue{
		ledgertable.AttrEntityType: ledgertable.S(aggregates.EntityCheckpoint), ledgertable.AttrShardID: ledgertable.S("shardId-1"),
		ledgertable.AttrSequenceNumber: ledgertable.S("000000000000000000042"), ledgertable.AttrUpdatedAt: ledgertable.S(now.Format(time.RFC3339Nano)),
	})
	put("LEASE#shardId-1", map[string]ddbtypes.AttributeValue{
		ledgertable.AttrEntityType: ledgertable.S(aggregates.EntityLease), ledgertable.AttrShardID: ledgertable.S("shardId-1"),
		ledgertable.AttrLeaseOwner: ledgertable.S("old-poller"), ledgertable.AttrLeaseCounter: ledgertable.Int(3),
		ledgertable.AttrLeaseExpiry: ledgertable.S(now.Add(time.Hour).Format(time.RFC3339Nano)), ledgertable.AttrUpdatedAt: ledgertable.S(now.Format(time.RFC3339Nano)),
	})

	code, _, errOut := run(t, env, "coordination", "migrate")
	assert.Equal(t, exitDiff, code, errOut)
	assert.Contains(t, errOut, "lease of shardId-1 held by old-poller")

	put("LEASE#shardId-1", map[string]ddbtypes.AttributeValue{
		ledgertable.AttrEntityType: ledgertable.S(aggregates.EntityLease), ledgertable.AttrShardID: ledgertable.S("shardId-1"),
		ledgertable.AttrLeaseCounter: ledgertable.Int(4), ledgertable.AttrUpdatedAt: ledgertable.S(now.Format(time.RFC3339Nano)),
	})
	code, out, errOut := run(t, env, "coordination", "migrate")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "moved 1 checkpoints to "+table+"-coordination, removed 1 leases")
	_, cps, err := ledgertable.ReadStreamState(ctx, c, ledgertable.CoordinationTableName(table), arn, nil)
	require.NoError(t, err)
	assert.Equal(t, "000000000000000000042", cps["shardId-1"].Seq)
	assert.False(t, cps["shardId-1"].Fenced, "the copy is released once its tombstone landed")
	found, err := ledgertable.LegacyStreamState(ctx, c, table, arn)
	require.NoError(t, err)
	assert.False(t, found)

	code, out, errOut = run(t, env, "coordination", "migrate")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "moved 0 checkpoints")

	code, out, _ = run(t, env, "table", "describe")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "coordination table "+table+"-coordination: ok")
	env["LEDGER_COORDINATION_TABLE"] = table
	code, _, errOut = run(t, env, "coordination", "migrate")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "is the ledger table")
}
