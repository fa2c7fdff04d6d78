package table_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 25): step F as built (docs/exactly-once.md,
// "Review (adversarial, session 25): step F as built").

// TestReviewS25F2_ABatchBegunByAnOlderPlanIsCountedFromItsEnd: S25-F2. A
// batch left pending by an older version is finished as it was planned
// (processor/guard.go, planLayout): a batch of plan layout 4 or before
// (a version before step A's batches) is finished uncounted, its landed
// groups and the ones this version commits alike. The first fence of its
// checkpoint is then a middle or last group, or the abandon, and it
// recorded countedTo = the batch's start, saying that every record after
// it was claimed by counting code, while the records of (start, end] were
// not counted. countedTo is now the batch's end on a first fence after a
// batch's first group (for a batch of layout 6 begun by protocol 3, which
// counted, that is merely conservative); a batch this version began keeps
// the countedTo its first group recorded.
func TestReviewS25F2_ABatchBegunByAnOlderPlanIsCountedFromItsEnd(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	coord := table.CoordinationTableName(ddbtest.NewTable(t, c))
	arn := "arn:aws:dynamodb:us-east-1:000000000000:table/f2/stream/2026-01-01T00:00:00.000"
	now := time.Now()
	const start, end = "000000000000000000042", "000000000000000000050"
	put := func(shard string, next int) aggregates.Key {
		k := aggregates.CheckpointKey(arn, shard)
		item := table.Key(k)
		for a, v := range map[string]types.AttributeValue{
			table.AttrEntityType: table.S(aggregates.EntityCheckpoint), table.AttrShardID: table.S(shard),
			table.AttrUpdatedAt: table.S("2026-01-01T00:00:00Z"), "legacyTombstone": table.S("ledger"),
			// As an older version's group 0 (of 3) left it: the old layout, the batch pending.
			table.AttrSequenceNumber: table.S(start), "pendingTo": table.S(end), "pendingNext": table.Int(int64(next)),
			"pendingGroups": table.Int(3), "pendingPlan": table.S("99/32/4/32"), "pendingDigest": table.S("d"),
		} {
			item[a] = v
		}
		_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: item})
		require.NoError(t, err)
		return k
	}
	group := func(k aggregates.Key, shard string, g int) {
		_, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			table.ClaimGroup(coord, k, table.GroupClaim{Shard: shard, K: g, N: 3, Prev: start, To: end, Plan: "99/32/4/32", Digest: "d", Now: now}),
		}})
		require.NoError(t, err)
	}
	countedTo := func(k aggregates.Key) types.AttributeValue {
		out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord), Key: table.Key(k), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		require.Equal(t, fenceMap(4), out.Item[table.AttrSequenceNumber], "fenced")
		return out.Item[table.AttrCountedTo]
	}

	// Resumed at group 1: fenced there; group 2 keeps what group 1 recorded.
	k := put("shardId-resumed", 1)
	group(k, "shardId-resumed", 1)
	assert.Equal(t, table.S(end), countedTo(k), "the batch is finished uncounted: counting begins at its end")
	group(k, "shardId-resumed", 2)
	assert.Equal(t, table.S(end), countedTo(k), "kept")

	// Resumed at its last group.
	k = put("shardId-last", 2)
	group(k, "shardId-last", 2)
	assert.Equal(t, table.S(end), countedTo(k))

	// Abandoned (the consumer's trim, or ledgerctl abandon-batch).
	k = put("shardId-abandoned", 2)
	_, err := c.TransactWriteItems(ctx, table.AbandonTx(coord, k, table.Abandon{Shard: "shardId-abandoned", Prev: start, Pending: &table.PendingBatch{To: end, Next: 2, Groups: 3}, Now: now}))
	require.NoError(t, err)
	assert.Equal(t, table.S(end), countedTo(k))

	// A batch this version began: its group 0 fenced at the start, kept.
	k = aggregates.CheckpointKey(arn, "shardId-own")
	item := table.Key(k)
	item[table.AttrSequenceNumber], item["legacyTombstone"] = table.S(start), table.S("ledger")
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: item})
	require.NoError(t, err)
	for g := range 3 {
		group(k, "shardId-own", g)
		assert.Equal(t, table.S(start), countedTo(k), "group %d", g)
	}
}
