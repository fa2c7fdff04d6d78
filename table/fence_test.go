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
	"github.com/shopspring/decimal"
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
// position in pos, and countedTo the position it read ("" for none; a
// pending batch's end for a write after its first group: S25-F2). On a
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
		{"ClaimGroup middle", pending(1), group(1, 3), s42, s50, ""},
		{"ClaimGroup last", pending(2), group(2, 3), s50, s50, ""},
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
		{"AbandonTx of a pending batch", pending(2), abandon(table.Abandon{Prev: s42, Pending: &table.PendingBatch{To: s50, Next: 2, Groups: 3}}), s50, s50, ""},
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

// putHead puts an old-layout report head of k with income 100, expense 40,
// count 3 and one inline category, and returns it as put.
func putHead(t *testing.T, c *dynamodb.Client, name string, k aggregates.ReportKey) map[string]types.AttributeValue {
	t.Helper()
	head := table.Key(k.Key())
	head[table.AttrEntityType] = table.S(aggregates.EntityReport)
	head[table.AttrPeriodType], head[table.AttrPeriodValue] = table.S(string(k.Period.Type)), table.S(k.Period.Value)
	head[table.AttrTotalIncome], head[table.AttrTotalExpense], head[table.AttrTransactionCount] = table.Int(100), table.Int(40), table.Int(3)
	head[aggregates.ByCategory.Attribute()] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		"food": table.TotalsAV(aggregates.Totals{Income: decimal.NewFromInt(100), Expense: decimal.NewFromInt(40), Count: 3}),
	}}
	head[table.AttrUpdatedAt] = table.S("2026-11-26T10:00:00Z")
	_, err := c.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(name), Item: head})
	require.NoError(t, err)
	return head
}

func getItem(t *testing.T, c *dynamodb.Client, name string, k aggregates.Key) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(name), Key: table.Key(k), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	return out.Item
}

func decodeHead(t *testing.T, k aggregates.ReportKey, item map[string]types.AttributeValue) *aggregates.Report {
	t.Helper()
	r, problems := (&table.StoredReport{Key: k, Item: item}).Decode()
	require.Empty(t, problems)
	return r
}

// TestHeadFence_AnOldLayoutHeadIsMovedOverWithItsFiguresUnchanged: a
// consumer update of this version on a head of the old layout moves the
// count over (txCount = count read + delta, transactionCount "v4") in the
// same update, every figure the old plus the delta; the next update adds
// to txCount on condition of the fence; an update sent on the old shape
// after the head was fenced fails its condition (no ValidationException,
// which would park); and a head absent until then is created fenced.
func TestHeadFence_AnOldLayoutHeadIsMovedOverWithItsFiguresUnchanged(t *testing.T) {
	c := ddbtest.Client(t)
	name := ddbtest.NewTable(t, c)
	period, err := aggregates.ParsePeriod(aggregates.PeriodType("DAILY"), "2026-11-26")
	require.NoError(t, err)
	k := aggregates.ReportKey{Tenant: "t1", Branch: "b1", Period: period}
	head := putHead(t, c, name, k)
	before := decodeHead(t, k, head)
	oldShape := table.DecodeReportShape(head)
	require.False(t, oldShape.Fenced)

	delta := &aggregates.Report{Totals: aggregates.Totals{Income: decimal.NewFromInt(5), Expense: decimal.NewFromInt(2), Count: 1}}
	delta.Breakdowns[aggregates.ByCategory] = map[string]aggregates.Totals{"food": delta.Totals}
	apply := func(sh table.ReportShape) error {
		w, err := table.ReportUpdate(name, k, delta, sh, "2026-11-26T11:00:00Z")
		require.NoError(t, err)
		_, err = c.TransactWriteItems(t.Context(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Update: w.Updates[0]}}})
		return err
	}
	require.NoError(t, apply(oldShape), "the move-over lands")
	after := getItem(t, c, name, k.Key())
	assert.True(t, table.FencedHead(after), "moved over: transactionCount is the fence")
	assert.Equal(t, table.Int(4), after[table.AttrTxCount])
	want := &aggregates.Report{}
	want.Merge(before)
	want.Merge(delta)
	assert.True(t, want.Equal(decodeHead(t, k, after)), "every figure is the old one plus the delta: %v, want %v", decodeHead(t, k, after), want)

	requireConditionFailed(t, apply(oldShape), "an update on the old shape of a fenced head fails its condition")
	require.NoError(t, apply(table.DecodeReportShape(after)), "an update of the fenced head lands")
	again := getItem(t, c, name, k.Key())
	assert.Equal(t, table.Int(5), again[table.AttrTxCount])
	want.Merge(delta)
	assert.True(t, want.Equal(decodeHead(t, k, again)))

	// An absent head is created fenced.
	k2 := aggregates.ReportKey{Tenant: "t1", Branch: "b2", Period: period}
	w, err := table.ReportUpdate(name, k2, delta, table.DecodeReportShape(nil), "2026-11-26T11:00:00Z")
	require.NoError(t, err)
	_, err = c.TransactWriteItems(t.Context(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Update: w.Updates[0]}}})
	require.NoError(t, err)
	created := getItem(t, c, name, k2.Key())
	assert.True(t, table.FencedHead(created))
	assert.True(t, delta.Equal(decodeHead(t, k2, created)))
}

// TestHeadFence_TheAtomicFenceKeepsEveryFigureAndUnfenceRestoresTheHead:
// FenceHead fences an old-layout head without moving a figure (the
// decoded report is the same, the count in txCount), fails its condition
// on a fenced head, and UnfenceHead puts the head back exactly as it was
// (and fails its condition on an old-layout one).
func TestHeadFence_TheAtomicFenceKeepsEveryFigureAndUnfenceRestoresTheHead(t *testing.T) {
	c := ddbtest.Client(t)
	name := ddbtest.NewTable(t, c)
	period, err := aggregates.ParsePeriod(aggregates.PeriodType("DAILY"), "2026-11-26")
	require.NoError(t, err)
	k := aggregates.ReportKey{Tenant: "t1", Branch: "b1", Period: period}
	head := putHead(t, c, name, k)
	before := decodeHead(t, k, head)

	_, err = c.UpdateItem(t.Context(), table.FenceHead(name, k.Key()))
	require.NoError(t, err)
	fenced := getItem(t, c, name, k.Key())
	assert.True(t, table.FencedHead(fenced))
	assert.Equal(t, table.Int(3), fenced[table.AttrTxCount])
	assert.True(t, before.Equal(decodeHead(t, k, fenced)), "the fence keeps every figure")
	_, err = c.UpdateItem(t.Context(), table.FenceHead(name, k.Key()))
	requireConditionFailed(t, err, "a second fence")

	_, err = c.UpdateItem(t.Context(), table.UnfenceHead(name, k.Key()))
	require.NoError(t, err)
	assert.Equal(t, head, getItem(t, c, name, k.Key()), "unfenced: the head as it was")
	_, err = c.UpdateItem(t.Context(), table.UnfenceHead(name, k.Key()))
	requireConditionFailed(t, err, "unfence of an old-layout head")
}

// TestFlags_TheConsumersRaiseTheProtocolAndUnfenceLowersIt: RaiseProtocol
// (the consumers at start) sets protocol 4 on a flags item without one,
// once (a second call writes nothing), leaves a higher protocol alone,
// refuses one that is no integer, and creates no flags item where there
// is none; LowerProtocol (ledgerctl unfence) moves 4 to 3 only from 4.
func TestFlags_TheConsumersRaiseTheProtocolAndUnfenceLowersIt(t *testing.T) {
	c := ddbtest.Client(t)
	name := ddbtest.NewTable(t, c)
	ctx := t.Context()
	protocol := func() table.Flags {
		f, err := table.GetFlags(ctx, c, name)
		require.NoError(t, err)
		return f
	}
	setRaw := func(v types.AttributeValue) {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(name), Key: table.Key(aggregates.FlagsKey()),
			UpdateExpression: aws.String("SET #p = :p"), ExpressionAttributeNames: map[string]string{"#p": "protocol"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": v},
		})
		require.NoError(t, err)
	}
	require.Equal(t, int64(0), protocol().Protocol)
	raised, err := table.RaiseProtocol(ctx, c, name, table.Protocol)
	require.NoError(t, err)
	assert.True(t, raised)
	f := protocol()
	assert.Equal(t, int64(4), f.Protocol)
	assert.True(t, f.WritesEnabled(), "the flags are left as they were")
	raised, err = table.RaiseProtocol(ctx, c, name, table.Protocol)
	require.NoError(t, err)
	assert.False(t, raised, "raised once")

	lowered, err := table.LowerProtocol(ctx, c, name, 4, 3)
	require.NoError(t, err)
	assert.True(t, lowered)
	assert.Equal(t, int64(3), protocol().Protocol)
	lowered, err = table.LowerProtocol(ctx, c, name, 4, 3)
	require.NoError(t, err)
	assert.False(t, lowered, "lowered once")
	raised, err = table.RaiseProtocol(ctx, c, name, table.Protocol)
	require.NoError(t, err)
	assert.True(t, raised, "from 3")

	setRaw(table.Int(5))
	raised, err = table.RaiseProtocol(ctx, c, name, table.Protocol)
	require.NoError(t, err)
	assert.False(t, raised)
	assert.Equal(t, int64(5), protocol().Protocol, "a higher protocol is left alone")
	lowered, err = table.LowerProtocol(ctx, c, name, 4, 3)
	require.NoError(t, err)
	assert.False(t, lowered)
	assert.Equal(t, int64(5), protocol().Protocol)

	setRaw(table.S("4"))
	_, err = table.RaiseProtocol(ctx, c, name, table.Protocol)
	assert.ErrorContains(t, err, "no integer")

	_, err = c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(name), Key: table.Key(aggregates.FlagsKey())})
	require.NoError(t, err)
	raised, err = table.RaiseProtocol(ctx, c, name, table.Protocol)
	require.NoError(t, err)
	assert.False(t, raised)
	assert.False(t, protocol().Exists, "no flags item is created (it would disable writes)")
}
