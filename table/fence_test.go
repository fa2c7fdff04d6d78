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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
)

// Step F (issue 25; docs/exactly-once.md, "F as built (session 25)"): the
// checkpoint fence and the head fence, on DynamoDB Local.

// fenceMap is a checkpoint's sequenceNumber in the fenced layout of
// protocol p.
func fenceMap(p int64) types.AttributeValue {
	return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"fence": table.Int(p)}}
}

// fencedState rewrites a checkpoint state of the old layout in the fenced
// layout of protocol p: sequenceNumber the map, the position in pos, and
// countedTo "C0" (a first fence's, which no later write may move).
func fencedState(state map[string]types.AttributeValue, p int64) map[string]types.AttributeValue {
	out := maps.Clone(state)
	if seq, ok := out[table.AttrSequenceNumber]; ok {
		out[table.AttrPos] = seq
	}
	out[table.AttrSequenceNumber] = fenceMap(p)
	out[table.AttrCountedTo] = table.S("C0")
	return out
}

// TestCheckpointFence_EveryWriteLeavesItFencedAndRecordsCountedTo: every
// write of a checkpoint by this version — the claims (ClaimRun, each kind
// of ClaimGroup), the moves outside commits (AdvanceCheckpoint,
// MarkCheckpointStart, CarryLoss) and the guard-alone abandon (AbandonTx:
// the consumers' and ledgerctl abandon-batch's) — on a checkpoint of the
// old layout lands and leaves it fenced: sequenceNumber {fence: 4}, the
// position in pos, and countedTo the position it read ("" for none). On a
// fenced checkpoint it lands, conditioned on pos, moves pos only and keeps
// countedTo. On a checkpoint fenced by a later protocol (5) it fails its
// condition and leaves the item as it was.
func TestCheckpointFence_EveryWriteLeavesItFencedAndRecordsCountedTo(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	coord := table.CoordinationTableName(ddbtest.NewTable(t, c))
	arn := "arn:aws:dynamodb:us-east-1:000000000000:table/f/stream/2026-01-01T00:00:00.000"
	now := time.Now()
	const s42, s50 = "000000000000000000042", "000000000000000000050"
	pending := func(next int) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{
			table.AttrSequenceNumber: table.S(s42), "pendingTo": table.S(s50), "pendingNext": table.Int(int64(next)),
			"pendingGroups": table.Int(3), "pendingPlan": table.S("99/32/3"), "pendingDigest": table.S("d"),
		}
	}
	at42 := map[string]types.AttributeValue{table.AttrSequenceNumber: table.S(s42)}
	counted42 := map[string]types.AttributeValue{table.AttrSequenceNumber: table.S(s42), table.AttrLostAfter: table.S(s42)}
	unpositioned := map[string]types.AttributeValue{"startAt": table.S("LATEST")}
	group := func(k, n int) func(aggregates.Key, string) any {
		return func(key aggregates.Key, shard string) any {
			return table.ClaimGroup(coord, key, table.GroupClaim{Shard: shard, K: k, N: n, Prev: s42, To: s50, Plan: "99/32/3", Digest: "d", Now: now})
		}
	}
	abandon := func(a table.Abandon) func(aggregates.Key, string) any {
		return func(key aggregates.Key, shard string) any {
			a.Shard, a.Now = shard, now
			return table.AbandonTx(coord, key, a)
		}
	}
	cases := []struct {
		name   string
		state  map[string]types.AttributeValue
		write  func(k aggregates.Key, shard string) any // a TransactWriteItem, a TransactWriteItemsInput or an UpdateItemInput
		pos    string                                   // where it stands after ("" none)
		from   string                                   // countedTo after a first fence
		action string                                   // the first action's code, for a condition failure
	}{
		{"ClaimRun from no checkpoint", unpositioned, func(k aggregates.Key, shard string) any { return table.ClaimRun(coord, k, shard, "", s50, now) }, s50, "", ""},
		{"ClaimRun", at42, func(k aggregates.Key, shard string) any { return table.ClaimRun(coord, k, shard, s42, s50, now) }, s50, s42, ""},
		{"ClaimGroup alone", at42, group(0, 1), s50, s42, ""},
		{"ClaimGroup first", at42, group(0, 3), s42, s42, ""},
		{"ClaimGroup middle", pending(1), group(1, 3), s42, s42, ""},
		{"ClaimGroup last", pending(2), group(2, 3), s50, s42, ""},
		{"AdvanceCheckpoint", at42, func(k aggregates.Key, shard string) any {
			return table.AdvanceCheckpoint(coord, k, shard, s42, s50, false, now)
		}, s50, s42, ""},
		{"AdvanceCheckpoint finishing", at42, func(k aggregates.Key, shard string) any {
			return table.AdvanceCheckpoint(coord, k, shard, s42, "", true, now)
		}, s42, s42, ""},
		{"AdvanceCheckpoint from no checkpoint", unpositioned, func(k aggregates.Key, shard string) any {
			return table.AdvanceCheckpoint(coord, k, shard, "", s50, false, now)
		}, s50, "", ""},
		{"MarkCheckpointStart", map[string]types.AttributeValue{}, func(k aggregates.Key, shard string) any {
			return table.MarkCheckpointStart(coord, k, shard, "LATEST", now)
		}, "", "", ""},
		{"CarryLoss", counted42, func(k aggregates.Key, shard string) any {
			return table.CarryLoss(coord, k, shard, s42, s50, now)
		}, s50, s42, ""},
		{"AbandonTx of a pending batch", pending(2), abandon(table.Abandon{Prev: s42, Pending: &table.PendingBatch{To: s50, Next: 2, Groups: 3}}), s50, s42, ""},
		{"AbandonTx of a gap", at42, abandon(table.Abandon{Prev: s42, After: s42}), s42, s42, ""},
		{"AbandonTx creating the checkpoint", unpositioned, abandon(table.Abandon{To: s50}), s50, "", ""},
	}
	for i, tc := range cases {
		for _, variant := range []string{"old layout", "fenced", "fenced by protocol 5"} {
			t.Run(tc.name+" "+variant, func(t *testing.T) {
				shard := "shardId-" + string(rune('a'+i)) + "-" + strings.ReplaceAll(variant, " ", "-")
				k := aggregates.CheckpointKey(arn, shard)
				state := tc.state
				switch variant {
				case "fenced":
					state = fencedState(state, 4)
				case "fenced by protocol 5":
					state = fencedState(state, 5)
				}
				item := table.Key(k)
				maps.Copy(item, state)
				item[table.AttrEntityType], item[table.AttrShardID] = table.S(aggregates.EntityCheckpoint), table.S(shard)
				item[table.AttrUpdatedAt], item["legacyTombstone"] = table.S("2026-01-01T00:00:00Z"), table.S("ledger")
				_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: item})
				require.NoError(t, err)

				switch w := tc.write(k, shard).(type) {
				case types.TransactWriteItem:
					_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{w}})
				case *dynamodb.TransactWriteItemsInput:
					_, err = c.TransactWriteItems(ctx, w)
				case *dynamodb.UpdateItemInput:
					_, err = c.UpdateItem(ctx, w)
				default:
					t.Fatalf("write of type %T", w)
				}
				out, gerr := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord), Key: table.Key(k), ConsistentRead: aws.Bool(true)})
				require.NoError(t, gerr)
				if variant == "fenced by protocol 5" {
					requireConditionFailed(t, err, "a write of protocol 4 landed on a checkpoint fenced by protocol 5")
					assert.Equal(t, item, out.Item, "the checkpoint of protocol 5 is left as it was")
					return
				}
				require.NoError(t, err, "the write lands on the position it read, in either layout")
				assert.Equal(t, fenceMap(4), out.Item[table.AttrSequenceNumber], "left fenced")
				if tc.pos == "" {
					assert.NotContains(t, out.Item, table.AttrPos)
				} else {
					assert.Equal(t, table.S(tc.pos), out.Item[table.AttrPos])
				}
				want := tc.from
				if variant == "fenced" {
					want = "C0" // the first fence's, kept
				}
				assert.Equal(t, table.S(want), out.Item[table.AttrCountedTo], "countedTo")
				cp, derr := table.DecodeCheckpoint(shard, out.Item)
				require.NoError(t, derr)
				assert.Equal(t, tc.pos, cp.Seq, "this version reads the fenced position as its own")
				assert.False(t, cp.Foreign())
			})
		}
	}
}

// xClaimRun is the claim of protocol 3 (step X, branch s25-readx,
// table.ClaimRun): the checkpoint from prev to last on condition
// sequenceNumber = prev as a string, or absent for "".
func xClaimRun(tableName string, key aggregates.Key, shard, prev, last string) types.TransactWriteItem {
	names := map[string]string{"#seq": table.AttrSequenceNumber, "#pt": "pendingTo", "#fence": "migrationFence", "#lt": "legacyTombstone", "#sh": table.AttrShardID}
	values := map[string]types.AttributeValue{":last": table.S(last), ":sh": table.S(shard)}
	cond := "attribute_not_exists(#seq) AND attribute_not_exists(#pt)"
	if prev != "" {
		cond = "#seq = :prev AND attribute_not_exists(#pt)"
		values[":prev"] = table.S(prev)
	}
	cond += " AND attribute_not_exists(#fence) AND attribute_exists(#lt)"
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(tableName), Key: table.Key(key),
		UpdateExpression: aws.String("SET #seq = :last, #sh = :sh"), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}}
}

// TestCheckpointFence_AnXVersionClaimCannotLandOnAFencedCheckpoint: the
// fence against the previous protocol. A claim of protocol 3 (X's
// ClaimRun, whose consumer also refuses the fence on load by name,
// ErrCheckpointProtocol) lands on the old layout at the position it read,
// and fails its condition on the same position fenced by this version's
// first write, as it does on a fence before any position; a later claim of
// this version from a stale position fails too (it conditions on pos).
func TestCheckpointFence_AnXVersionClaimCannotLandOnAFencedCheckpoint(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	coord := table.CoordinationTableName(ddbtest.NewTable(t, c))
	arn := "arn:aws:dynamodb:us-east-1:000000000000:table/x/stream/2026-01-01T00:00:00.000"
	const s42, s50, s60 = "000000000000000000042", "000000000000000000050", "000000000000000000060"
	put := func(shard string, state map[string]types.AttributeValue) aggregates.Key {
		k := aggregates.CheckpointKey(arn, shard)
		item := table.Key(k)
		maps.Copy(item, state)
		item["legacyTombstone"] = table.S("ledger")
		_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: item})
		require.NoError(t, err)
		return k
	}
	tx := func(w types.TransactWriteItem) error {
		_, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{w}})
		return err
	}

	k := put("old", map[string]types.AttributeValue{table.AttrSequenceNumber: table.S(s42)})
	require.NoError(t, tx(xClaimRun(coord, k, "old", s42, s50)), "X's claim lands on the old layout")

	k = put("fenced", map[string]types.AttributeValue{table.AttrSequenceNumber: table.S(s42)})
	require.NoError(t, tx(table.ClaimRun(coord, k, "fenced", s42, s50, time.Now())), "this version's first claim fences")
	requireConditionFailed(t, tx(xClaimRun(coord, k, "fenced", s50, s60)), "X's claim from the fenced position")
	requireConditionFailed(t, tx(xClaimRun(coord, k, "fenced", "", s60)), "X's claim from nothing")
	requireConditionFailed(t, tx(table.ClaimRun(coord, k, "fenced", s42, s60, time.Now())), "a claim of this version from the position before the fence")
	require.NoError(t, tx(table.ClaimRun(coord, k, "fenced", s50, s60, time.Now())), "a later claim of this version moves pos")

	k = put("marked", map[string]types.AttributeValue{})
	_, err := c.UpdateItem(ctx, table.MarkCheckpointStart(coord, k, "marked", "LATEST", time.Now()))
	require.NoError(t, err)
	requireConditionFailed(t, tx(xClaimRun(coord, k, "marked", "", s50)), "X's claim from nothing on a start mark of this version")
}
