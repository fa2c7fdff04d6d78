package table_test

import (
	"context"
	"maps"
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

// Every write that claims or moves a checkpoint — the claims inside commit
// transactions (ClaimRun, each kind of ClaimGroup) and the moves outside
// them (AdvanceCheckpoint, MarkCheckpointStart: the poller's and the
// tumbling window's) — lands on the state it expects, and fails its
// condition on the same state fenced by a migration (migrationFence), which
// it leaves as it was.
func TestCheckpointWrites_RefuseAFencedCopy(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	coord := table.CoordinationTableName(ddbtest.NewTable(t, c))
	arn := "arn:aws:dynamodb:us-east-1:000000000000:table/fence/stream/2026-01-01T00:00:00.000"
	now := time.Now()
	const s42, s50 = "000000000000000000042", "000000000000000000050"
	pending := func(next int) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{
			table.AttrSequenceNumber: table.S(s42), "pendingTo": table.S(s50), "pendingNext": table.Int(int64(next)),
			"pendingGroups": table.Int(3), "pendingPlan": table.S("99/32/3"), "pendingDigest": table.S("d"),
		}
	}
	at42 := map[string]types.AttributeValue{table.AttrSequenceNumber: table.S(s42)}
	unpositioned := map[string]types.AttributeValue{"startAt": table.S("LATEST")}
	group := func(k, n int, abandoned *table.PendingBatch) func(aggregates.Key, string) any {
		return func(key aggregates.Key, shard string) any {
			return table.ClaimGroup(coord, key, table.GroupClaim{Shard: shard, K: k, N: n, Prev: s42, To: s50, Plan: "99/32/3", Digest: "d", Abandoned: abandoned, Now: now})
		}
	}
	cases := []struct {
		name  string
		state map[string]types.AttributeValue
		write func(k aggregates.Key, shard string) any // a TransactWriteItem or an UpdateItemInput
	}{
		{"ClaimRun from no checkpoint", unpositioned, func(k aggregates.Key, shard string) any { return table.ClaimRun(coord, k, shard, "", s50, now) }},
		{"ClaimRun", at42, func(k aggregates.Key, shard string) any { return table.ClaimRun(coord, k, shard, s42, s50, now) }},
		{"ClaimGroup alone", at42, group(0, 1, nil)},
		{"ClaimGroup first", at42, group(0, 3, nil)},
		{"ClaimGroup first over an abandoned batch", pending(1), group(0, 3, &table.PendingBatch{To: s50, Next: 1})},
		{"ClaimGroup middle", pending(1), group(1, 3, nil)},
		{"ClaimGroup last", pending(2), group(2, 3, nil)},
		{"AdvanceCheckpoint", at42, func(k aggregates.Key, shard string) any {
			return table.AdvanceCheckpoint(coord, k, shard, s42, s50, false, now)
		}},
		{"AdvanceCheckpoint finishing", at42, func(k aggregates.Key, shard string) any {
			return table.AdvanceCheckpoint(coord, k, shard, s42, "", true, now)
		}},
		{"AdvanceCheckpoint from no checkpoint", unpositioned, func(k aggregates.Key, shard string) any {
			return table.AdvanceCheckpoint(coord, k, shard, "", s50, false, now)
		}},
		{"MarkCheckpointStart", map[string]types.AttributeValue{}, func(k aggregates.Key, shard string) any {
			return table.MarkCheckpointStart(coord, k, shard, "LATEST", now)
		}},
	}
	for i, tc := range cases {
		for _, fenced := range []bool{false, true} {
			name := tc.name
			if fenced {
				name += " fenced"
			}
			t.Run(name, func(t *testing.T) {
				shard := "shardId-" + string(rune('a'+i))
				if fenced {
					shard += "-fenced"
				}
				k := aggregates.CheckpointKey(arn, shard)
				item := table.Key(k)
				maps.Copy(item, tc.state)
				item[table.AttrEntityType], item[table.AttrShardID] = table.S(aggregates.EntityCheckpoint), table.S(shard)
				item[table.AttrUpdatedAt], item["migratedFrom"] = table.S("2026-01-01T00:00:00Z"), table.S("2026-01-01T00:00:00Z")
				if fenced {
					item["migrationFence"] = table.S("ledger")
				}
				_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: item})
				require.NoError(t, err)

				switch w := tc.write(k, shard).(type) {
				case types.TransactWriteItem:
					_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{w}})
				case *dynamodb.UpdateItemInput:
					_, err = c.UpdateItem(ctx, w)
				default:
					t.Fatalf("write of type %T", w)
				}
				if !fenced {
					require.NoError(t, err, "the write lands on the state it expects")
					return
				}
				requireConditionFailed(t, err, "a write landed on a fenced copy")
				out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord), Key: table.Key(k), ConsistentRead: aws.Bool(true)})
				require.NoError(t, err)
				assert.Equal(t, item, out.Item, "the fenced copy is left as it was")
			})
		}
	}
}
