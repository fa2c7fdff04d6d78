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

// `abandon-batch` gives up a layout-6 batch that cannot finish with the
// guard-alone abandon transaction: printed only without --to (exit 1,
// nothing written), refused for a --to that is not the batch's end and for
// a shard without a pending batch, and with --to at pendingTo the
// checkpoint moves there with lostAt, the loss count moves once and the
// output says the records are lost until a repair.
func TestAbandonBatch_MovesTheCheckpointToPendingToWithLostAtAndTheLossCount(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	tbl := ddbtest.NewTable(t, c)
	coord := ledgertable.CoordinationTableName(tbl)
	env := map[string]string{"LEDGER_TABLE": tbl, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	arn, err := poller.ResolveStream(ctx, c, tbl)
	require.NoError(t, err)
	const shard, prev, to = "shardId-7", "000000000000000000042", "000000000000000000077"
	key := aggregates.CheckpointKey(arn, shard)
	item := ledgertable.Key(key)
	for k, v := range map[string]ddbtypes.AttributeValue{
		ledgertable.AttrEntityType: ledgertable.S(aggregates.EntityCheckpoint), ledgertable.AttrShardID: ledgertable.S(shard),
		ledgertable.AttrSequenceNumber: ledgertable.S(prev), ledgertable.AttrUpdatedAt: ledgertable.S(time.Now().UTC().Format(time.RFC3339Nano)),
		"pendingTo": ledgertable.S(to), "pendingNext": ledgertable.Int(2), "pendingGroups": ledgertable.Int(5),
		"pendingPlan": ledgertable.S("99/32/6/32"), "pendingDigest": ledgertable.S("d"), "legacyTombstone": ledgertable.S(tbl),
	} {
		item[k] = v
	}
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: item})
	require.NoError(t, err)
	read := func() ledgertable.Checkpoint {
		out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord), Key: ledgertable.Key(key), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		cp, err := ledgertable.DecodeCheckpoint(shard, out.Item)
		require.NoError(t, err)
		return cp
	}
	losses := func() int64 {
		n, err := ledgertable.GetLosses(ctx, c, coord)
		require.NoError(t, err)
		return n
	}

	code, out, errOut := run(t, env, "abandon-batch", "--shard", shard)
	require.Equal(t, exitDiff, code, errOut)
	assert.Contains(t, out, "pending batch through "+to+": groups 0..1 of 5 landed, plan \"99/32/6/32\"")
	assert.Contains(t, out, "run again with --to "+to+" --next 2")
	assert.NotNil(t, read().Pending, "printed only")
	assert.Zero(t, losses())

	code, _, errOut = run(t, env, "abandon-batch", "--shard", shard, "--to", prev, "--next", "2")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "but the pending batch ends at "+to)
	assert.NotNil(t, read().Pending)

	// S22-AB-2 (review session 22): --to alone, or a group landed since
	// the print (a consumer finishing the batch), refuses, writing nothing.
	code, _, errOut = run(t, env, "abandon-batch", "--shard", shard, "--to", to)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "--to needs --next")
	code, _, errOut = run(t, env, "abandon-batch", "--shard", shard, "--to", to, "--next", "1")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "moved since it was printed")
	assert.NotNil(t, read().Pending)
	assert.Zero(t, losses())

	code, out, errOut = run(t, env, "abandon-batch", "--shard", shard, "--to", to, "--next", "2")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "abandoned: checkpoint moved to "+to)
	assert.Contains(t, out, "loss count 1")
	assert.Contains(t, out, "lost to the reports until a repair")
	cp := read()
	assert.Equal(t, to, cp.Seq)
	assert.Nil(t, cp.Pending)
	assert.NotEmpty(t, cp.LostAt)
	assert.Equal(t, int64(1), losses())

	code, _, errOut = run(t, env, "abandon-batch", "--shard", shard, "--to", to, "--next", "2")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "has no pending batch (checkpoint "+to+")")
	assert.Equal(t, int64(1), losses(), "nothing moves a second time")

	code, _, errOut = run(t, env, "abandon-batch", "--shard", "shardId-none")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "has no checkpoint of shard shardId-none")
	code, _, _ = run(t, env, "abandon-batch")
	assert.Equal(t, exitError, code)
}
