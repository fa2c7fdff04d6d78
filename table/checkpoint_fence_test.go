package table_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
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
// it leaves as it was. The claims also fail on the state without its legacy
// tombstone (legacyTombstone: FenceLegacyCheckpoint), where the moves,
// which apply no record, land.
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
	group := func(k, n int) func(aggregates.Key, string) any {
		return func(key aggregates.Key, shard string) any {
			return table.ClaimGroup(coord, key, table.GroupClaim{Shard: shard, K: k, N: n, Prev: s42, To: s50, Plan: "99/32/3", Digest: "d", Now: now})
		}
	}
	cases := []struct {
		name  string
		state map[string]types.AttributeValue
		write func(k aggregates.Key, shard string) any // a TransactWriteItem (a claim) or an UpdateItemInput (a move)
	}{
		{"ClaimRun from no checkpoint", unpositioned, func(k aggregates.Key, shard string) any { return table.ClaimRun(coord, k, shard, "", s50, now) }},
		{"ClaimRun", at42, func(k aggregates.Key, shard string) any { return table.ClaimRun(coord, k, shard, s42, s50, now) }},
		{"ClaimGroup alone", at42, group(0, 1)},
		{"ClaimGroup first", at42, group(0, 3)},
		{"ClaimGroup middle", pending(1), group(1, 3)},
		{"ClaimGroup last", pending(2), group(2, 3)},
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
		for _, variant := range []string{"", "fenced", "without its legacy tombstone"} {
			name := tc.name
			if variant != "" {
				name += " " + variant
			}
			t.Run(name, func(t *testing.T) {
				shard := "shardId-" + string(rune('a'+i)) + "-" + strings.ReplaceAll(variant, " ", "-")
				k := aggregates.CheckpointKey(arn, shard)
				item := table.Key(k)
				maps.Copy(item, tc.state)
				item[table.AttrEntityType], item[table.AttrShardID] = table.S(aggregates.EntityCheckpoint), table.S(shard)
				item[table.AttrUpdatedAt], item["migratedFrom"] = table.S("2026-01-01T00:00:00Z"), table.S("2026-01-01T00:00:00Z")
				if variant != "without its legacy tombstone" {
					item["legacyTombstone"] = table.S("ledger")
				}
				if variant == "fenced" {
					item["migrationFence"] = table.S("ledger")
				}
				_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: item})
				require.NoError(t, err)

				claim := false
				switch w := tc.write(k, shard).(type) {
				case types.TransactWriteItem:
					claim = true
					_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{w}})
				case *dynamodb.UpdateItemInput:
					_, err = c.UpdateItem(ctx, w)
				default:
					t.Fatalf("write of type %T", w)
				}
				if variant == "" || variant != "fenced" && !claim {
					require.NoError(t, err, "the write lands on the state it expects")
					return
				}
				requireConditionFailed(t, err, "a write landed on a fenced copy, or a claim on a checkpoint without its legacy tombstone")
				out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord), Key: table.Key(k), ConsistentRead: aws.Bool(true)})
				require.NoError(t, err)
				assert.Equal(t, item, out.Item, "the fenced copy is left as it was")
			})
		}
	}
}

// FenceLegacyCheckpoint, against each state of the shard's key in the
// ledger table: nothing there (a shard without a checkpoint at the
// migration, or a table that never had the old layout) or a tombstone (the
// migration's) — it marks the checkpoint and leaves a tombstone; an old
// consumer's checkpoint — ErrLegacyStreamState, both items as they were;
// and against a migration's fenced copy — ErrCheckpointFenced.
func TestFenceLegacyCheckpoint(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	name := ddbtest.NewTable(t, c)
	coord := table.CoordinationTableName(name)
	arn := "arn:aws:dynamodb:us-east-1:000000000000:table/" + name + "/stream/2026-01-01T00:00:00.000"
	now := time.Now()
	const s42 = "000000000000000000042"
	migrated := map[string]types.AttributeValue{
		table.AttrSequenceNumber: table.S(s42), "movedTo": table.S(coord), "pendingTo": table.S("MIGRATED"),
		table.AttrUpdatedAt: table.S("2026-01-01T00:00:00Z"), table.AttrExpiresAt: table.Int(now.Add(time.Hour).Unix()),
	}
	oldConsumer := map[string]types.AttributeValue{table.AttrSequenceNumber: table.S(s42), table.AttrUpdatedAt: table.S("2026-01-01T00:00:00Z")}
	cases := []struct {
		name          string
		ledger, coord map[string]types.AttributeValue // nil: no item
		want          error                           // nil: lands
	}{
		{"nothing anywhere", nil, nil, nil},
		{"a checkpoint without the mark", nil, map[string]types.AttributeValue{table.AttrSequenceNumber: table.S(s42)}, nil},
		{"a start mark", nil, map[string]types.AttributeValue{"startAt": table.S("LATEST")}, nil},
		{"the migration's tombstone and released copy", migrated, map[string]types.AttributeValue{table.AttrSequenceNumber: table.S(s42)}, nil},
		{"an old consumer's checkpoint", oldConsumer, nil, table.ErrLegacyStreamState},
		{"an old consumer's checkpoint and a new one's", oldConsumer, map[string]types.AttributeValue{table.AttrSequenceNumber: table.S(s42)}, table.ErrLegacyStreamState},
		{"a fenced copy", oldConsumer, map[string]types.AttributeValue{table.AttrSequenceNumber: table.S(s42), "migrationFence": table.S(name)}, table.ErrCheckpointFenced},
	}
	get := func(tableName string, k aggregates.Key) map[string]types.AttributeValue {
		out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(tableName), Key: table.Key(k), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		return out.Item
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			shard := "shardId-" + string(rune('a'+i))
			lk, ck := table.LegacyCheckpointKey(arn, shard), aggregates.CheckpointKey(arn, shard)
			for _, put := range []struct {
				tableName string
				k         aggregates.Key
				attrs     map[string]types.AttributeValue
			}{{name, lk, tc.ledger}, {coord, ck, tc.coord}} {
				if put.attrs == nil {
					continue
				}
				item := table.Key(put.k)
				maps.Copy(item, put.attrs)
				_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(put.tableName), Item: item})
				require.NoError(t, err)
			}
			ledgerBefore, coordBefore := get(name, lk), get(coord, ck)

			_, err := c.TransactWriteItems(ctx, table.FenceLegacyCheckpoint(name, coord, arn, shard, now))
			if tc.want != nil {
				require.Error(t, err)
				err = table.FenceError(arn, shard, err)
				require.ErrorIs(t, err, tc.want)
				assert.Equal(t, ledgerBefore, get(name, lk), "the ledger table's item is as it was")
				assert.Equal(t, coordBefore, get(coord, ck), "the checkpoint is as it was")
				return
			}
			require.NoError(t, err)
			cp, err := table.DecodeCheckpoint(shard, get(coord, ck))
			require.NoError(t, err)
			assert.True(t, cp.Tombstoned, "the checkpoint is marked")
			if tc.coord != nil {
				want, _ := table.DecodeCheckpoint(shard, coordBefore)
				assert.Equal(t, want.Seq, cp.Seq, "the checkpoint's position is kept")
				assert.Equal(t, want.StartAt, cp.StartAt, "the checkpoint's start is kept")
			}
			tomb := get(name, lk)
			assert.Equal(t, "MIGRATED", stringOf(tomb["pendingTo"]), "the ledger table holds a tombstone no old claim accepts")
			assert.NotEmpty(t, stringOf(tomb["movedTo"]))
			if tc.ledger != nil {
				assert.Equal(t, ledgerBefore, tomb, "the migration's tombstone is kept as it was")
			}
			// A claim from the checkpoint lands now.
			claim := table.ClaimRun(coord, ck, shard, cp.Seq, "000000000000000000099", now)
			_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{claim}})
			require.NoError(t, err)
		})
	}
}

func stringOf(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// A fence repeated on a fenced shard changes neither item, so the ledger
// table's stream holds one record of the tombstone per shard however often
// consumers send it (a guard whose read was stale, two consumers at once):
// the record costs one per shard's life, and an idle stream goes quiet
// (DynamoDB Streams writes no record for a write that changes no data; so
// does DynamoDB Local).
func TestFenceLegacyCheckpoint_RepeatWritesNoRecord(t *testing.T) {
	ctx := context.Background()
	cfg := ddbtest.Config(t)
	c := dynamodb.NewFromConfig(cfg)
	name := ddbtest.NewTable(t, c)
	coord := table.CoordinationTableName(name)
	info, err := table.DescribeTable(ctx, c, name)
	require.NoError(t, err)
	arn := info.StreamARN
	for i := range 3 {
		_, err := c.TransactWriteItems(ctx, table.FenceLegacyCheckpoint(name, coord, arn, "shardId-1", time.Now().Add(time.Duration(i)*time.Minute)))
		require.NoError(t, err, "fence %d", i+1)
	}
	// A marker record after the fences: reading up to it reads every
	// record the fences could have made.
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: map[string]types.AttributeValue{
		table.AttrPK: table.S("TEST#END"), table.AttrSK: table.S("END"),
	}})
	require.NoError(t, err)

	streams := dynamodbstreams.NewFromConfig(cfg)
	desc, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn)})
	require.NoError(t, err)
	var tombs int
	end := false
	for _, sh := range desc.StreamDescription.Shards {
		it, err := streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
			StreamArn: aws.String(arn), ShardId: sh.ShardId, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon,
		})
		require.NoError(t, err)
		for i, iter := 0, it.ShardIterator; i < 100 && iter != nil && !end; i++ {
			out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
			require.NoError(t, err)
			for _, r := range out.Records {
				switch pk, _ := r.Dynamodb.Keys[table.AttrPK].(*streamtypes.AttributeValueMemberS); {
				case pk == nil:
				case pk.Value == aggregates.LeasePK(arn):
					tombs++
				case pk.Value == "TEST#END":
					end = true
				}
			}
			iter = out.NextShardIterator
		}
	}
	require.True(t, end, "read up to the end marker")
	assert.Equal(t, 1, tombs, "stream records of the tombstone after three fences of one shard")
}
