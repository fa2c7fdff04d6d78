package main

import (
	"context"
	"path/filepath"
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

// TestReviewS25X3_ReplayRefusedUnderAHigherProtocol: S25-X3
// (docs/exactly-once.md, "Review (adversarial, session 25): step X as
// built"), under step F one protocol up (5 refused, 4 replays). ledgerctl replay commits as a standard-mode consumer of this
// version; under flags naming protocol 4 its parts on fenced report items
// would be parked (F-a), so it is refused as reconcile --repair is,
// naming both protocols and writing nothing (before: it committed). Under
// protocol 3 it replays.
func TestReviewS25X3_ReplayRefusedUnderAHigherProtocol(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	file := filepath.Join(fixtureEvents, "insert-basics.json")
	setProtocol := func(n int64) {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &table, Key: ledgertable.Key(aggregates.FlagsKey()),
			UpdateExpression:          aws.String("SET #p = :p"),
			ExpressionAttributeNames:  map[string]string{"#p": ledgertable.AttrProtocol},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": ledgertable.Int(n)},
		})
		require.NoError(t, err)
	}
	items := func() int32 {
		out, err := c.Scan(ctx, &dynamodb.ScanInput{TableName: &table, Select: ddbtypes.SelectCount, ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		return out.Count
	}

	setProtocol(5)
	before := items()
	code, out, errOut := run(t, env, "replay", file)
	require.Equal(t, exitError, code, out+errOut)
	assert.Contains(t, errOut, "replay refused: the table is at protocol 5 (flags item), this version speaks protocol 4")
	assert.Equal(t, before, items(), "nothing written")

	setProtocol(4)
	code, out, errOut = run(t, env, "replay", file)
	require.Equal(t, exitOK, code, out+errOut)
	assert.Greater(t, items(), before)
}

// TestReviewS25X7_AbandonBatchRefusesAProtocolFencedCheckpointByName:
// S25-X7 (under step F: fenced by protocol 5, this version's 4). abandon-batch on a checkpoint fenced by protocol 4 printed it as
// "checkpoint -" and, with --to, sent the abandon, whose condition failed
// on the map ("the checkpoint ... moved since it was read"): nothing
// landed, but the message named no protocol. It now refuses by name, with
// or without --to, and writes nothing.
func TestReviewS25X7_AbandonBatchRefusesAProtocolFencedCheckpointByName(t *testing.T) {
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
		ledgertable.AttrSequenceNumber: &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{"fence": ledgertable.Int(5)}},
		ledgertable.AttrPos:            ledgertable.S(prev), ledgertable.AttrUpdatedAt: ledgertable.S(time.Now().UTC().Format(time.RFC3339Nano)),
		"pendingTo": ledgertable.S(to), "pendingNext": ledgertable.Int(2), "pendingGroups": ledgertable.Int(5),
		"pendingPlan": ledgertable.S("99/32/6/32"), "pendingDigest": ledgertable.S("d"), "legacyTombstone": ledgertable.S(tbl),
	} {
		item[k] = v
	}
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: item})
	require.NoError(t, err)

	for _, args := range [][]string{{}, {"--to", to, "--next", "2"}} {
		code, out, errOut := run(t, env, append([]string{"abandon-batch", "--shard", shard}, args...)...)
		require.Equal(t, exitError, code, out+errOut)
		assert.Contains(t, errOut, "protocol 5, this version's 4")
		assert.Contains(t, errOut, "fenced by a later protocol")
	}
	out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord), Key: ledgertable.Key(key), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.Equal(t, item, out.Item, "nothing written")
	n, err := ledgertable.GetLosses(ctx, c, coord)
	require.NoError(t, err)
	assert.Zero(t, n)
}
