package processor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// hookedAPI runs hook once, after the first TransactWriteItems that
// succeeds: a consumer's commit between a repair's transactions.
type hookedAPI struct {
	processor.ReconcileAPI
	hook func()
}

func (h *hookedAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := h.ReconcileAPI.TransactWriteItems(ctx, in, opts...)
	if err == nil && h.hook != nil {
		hook := h.hook
		h.hook = nil
		hook()
	}
	return out, err
}

// wideBranch writes 200 transactions of one day of branch "wide", each with
// its own cost centre, and commits them: a report of more names than its
// item keeps inline. It returns the consumer, its guard and the records.
func wideBranch(t *testing.T, e *env) (*processor.Processor, processor.Guard, []processor.Record) {
	t.Helper()
	for i := range 200 {
		putTxn(t, e, "wide", "2024-03-01", fmt.Sprint("t", i), "1", "rent", fmt.Sprintf("cc %03d", 199-i))
	}
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	g := p.ShardGuard(e.streamARN, shard)
	_, err := p.Process(context.Background(), g, recs)
	require.NoError(t, err)
	return p, g, recs
}

// lateCommit writes one more transaction of branch "wide" (cost centre cc)
// and commits it: a consumer's commit between a repair's transactions.
func lateCommit(t *testing.T, e *env, p *processor.Processor, g processor.Guard, recs []processor.Record, cc string) {
	t.Helper()
	putTxn(t, e, "wide", "2024-03-01", "late", "5", "rent", cc)
	_, all := e.records(t)
	_, err := p.Process(context.Background(), g, all[len(recs):])
	require.NoError(t, err)
}

// onePlace fails when a name of report k is both inline and in an entry
// item.
func onePlace(t *testing.T, e *env, k aggregates.ReportKey) {
	t.Helper()
	sr, err := table.ReadReport(context.Background(), e.ddb, e.table, k, true)
	require.NoError(t, err)
	for _, it := range sr.Entries {
		ref, err := aggregates.ParseReportItemKey(aggregates.Key{PK: it["PK"].(*ddbtypes.AttributeValueMemberS).Value, SK: it["SK"].(*ddbtypes.AttributeValueMemberS).Value})
		require.NoError(t, err)
		if m, ok := sr.Item[ref.Dim.Attribute()].(*ddbtypes.AttributeValueMemberM); ok {
			assert.NotContains(t, m.Value, ref.Name, "%s[%q] inline and in an entry item", ref.Dim, ref.Name)
		}
	}
}

// TestRepair_AReportOfManyNamesInterruptedBetweenItsTransactions: a
// damaged report of 200 cost centres needs more writes than one
// transaction takes. A consumer commits to it after the repair's first
// transaction: the rest is refused and the report is reported partly
// repaired, every name still in one place and no figure counted twice;
// a second reconcile --repair finishes it.
func TestRepair_AReportOfManyNamesInterruptedBetweenItsTransactions(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	p, g, recs := wideBranch(t, e)
	var err error
	e.requireReconciled(t)

	// Damage: every entry item of the daily report counts one too many,
	// and the totals are off.
	k := reportKey("wide", aggregates.Daily, "2024-03-01")
	sr, err := table.ReadReport(ctx, e.ddb, e.table, k, true)
	require.NoError(t, err)
	require.Greater(t, len(sr.Entries), 100)
	for _, it := range sr.Entries {
		_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table,
			Key:                       map[string]ddbtypes.AttributeValue{"PK": it["PK"], "SK": it["SK"]},
			UpdateExpression:          aws.String("SET transactionCount = transactionCount + :one"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": nAV("1")}})
		require.NoError(t, err)
	}
	_, err = e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table, Key: map[string]ddbtypes.AttributeValue{"PK": sAV(k.Key().PK), "SK": sAV(k.Key().SK)},
		UpdateExpression: aws.String("SET totalIncome = :x"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":x": nAV("999")}})
	require.NoError(t, err)

	diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{Tenant: "t", Branch: "wide"})
	require.NoError(t, err)
	require.Len(t, diffs, 1)

	// A new transaction, written and committed between the repair's
	// transactions (it is not in what the repair read).
	api := &hookedAPI{ReconcileAPI: e.ddb, hook: func() { lateCommit(t, e, p, g, recs, "cc 007") }}
	res, err := processor.Repair(ctx, api, e.table, diffs, time.Now())
	require.NoError(t, err)
	assert.Equal(t, []aggregates.ReportKey{k}, res.Partial, "the first transaction landed, the next was refused")
	onePlace(t, e, k)

	// What remains differs by the damage the refused transaction would
	// have undone, never by a delta counted twice: repairing again is exact.
	again, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{Tenant: "t", Branch: "wide"})
	require.NoError(t, err)
	require.Len(t, again, 1)
	for _, line := range again[0].Lines {
		assert.Contains(t, line, "byCostCenter", "the totals and the first transaction's names are repaired")
	}
	res, err = processor.Repair(ctx, e.ddb, e.table, again, time.Now())
	require.NoError(t, err)
	assert.Equal(t, 1, res.Repaired)
	onePlace(t, e, k)
	e.requireReconciled(t)
}

// TestRepair_NamesMovedInlineLeaveTheirEntryItemsInTheFirstTransaction: the
// report item of a report of 200 cost centres is lost, so the repair moves
// 32 names inline; a consumer commits after the repair's first transaction.
// The entry items of the moved names went with the report item, so every
// name is still in one place.
func TestRepair_NamesMovedInlineLeaveTheirEntryItemsInTheFirstTransaction(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	p, g, recs := wideBranch(t, e)
	var err error
	k := reportKey("wide", aggregates.Daily, "2024-03-01")
	_, err = e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table,
		Key: map[string]ddbtypes.AttributeValue{"PK": sAV(k.Key().PK), "SK": sAV(k.Key().SK)}})
	require.NoError(t, err)

	diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{Tenant: "t", Branch: "wide"})
	require.NoError(t, err)
	require.Len(t, diffs, 1)
	api := &hookedAPI{ReconcileAPI: e.ddb, hook: func() { lateCommit(t, e, p, g, recs, "cc 150") }}
	res, err := processor.Repair(ctx, api, e.table, diffs, time.Now())
	require.NoError(t, err)
	assert.Equal(t, []aggregates.ReportKey{k}, res.Partial)
	onePlace(t, e, k)
	diffs, _, err = processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{Tenant: "t", Branch: "wide"})
	require.NoError(t, err)
	res, err = processor.Repair(ctx, e.ddb, e.table, diffs, time.Now())
	require.NoError(t, err)
	assert.Equal(t, len(diffs), res.Repaired)
	onePlace(t, e, k)
	e.requireReconciled(t)
}

// TestRepair_AStaleDamagedShapeNeverWritesAnInlineNameToItsEntryItem: a
// report's category map is damaged (a string), so a consumer that read that
// shape sends a new category to its entry item. The repair rebuilds the map
// inline with that name (and deletes its entry item); the consumer, still
// holding the damaged shape, commits the same category again. Its update is
// refused by its condition and redone on the fresh shape: the name stays in
// one place (issue 25, finding 3: it was written to its entry item again).
func TestRepair_AStaleDamagedShapeNeverWritesAnInlineNameToItsEntryItem(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	k := reportKey("dmg", aggregates.Daily, "2024-05-01")
	putTxn(t, e, "dmg", "2024-05-01", "a1", "10", "rent", "")
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	g := p.ShardGuard(e.streamARN, shard)
	_, err := p.Process(ctx, g, recs)
	require.NoError(t, err)
	commitNew := func() {
		t.Helper()
		_, all := e.records(t)
		_, err := p.Process(ctx, g, all[len(recs):])
		require.NoError(t, err)
		recs = all
	}

	_, err = e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table, Key: map[string]ddbtypes.AttributeValue{"PK": sAV(k.Key().PK), "SK": sAV(k.Key().SK)},
		UpdateExpression: aws.String("SET byCategory = :x"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":x": sAV("not a map")}})
	require.NoError(t, err)
	putTxn(t, e, "dmg", "2024-05-01", "a2", "5", "food", "")
	p = e.processor(t, nil, nil) // a consumer that reads the damaged shape (a restart, a takeover)
	g = p.ShardGuard(e.streamARN, shard)
	commitNew() // food goes to its entry item
	entry := k.EntryKey(aggregates.ByCategory, "food")
	got, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &e.table, Key: table.Key(entry), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	require.NotNil(t, got.Item, "food went to its entry item beside the damaged map")

	diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{Tenant: "t", Branch: "dmg"})
	require.NoError(t, err)
	res, err := processor.Repair(ctx, e.ddb, e.table, diffs, time.Now())
	require.NoError(t, err)
	require.Equal(t, len(diffs), res.Repaired)
	sr, err := table.ReadReport(ctx, e.ddb, e.table, k, true)
	require.NoError(t, err)
	m, ok := sr.Item[aggregates.ByCategory.Attribute()].(*ddbtypes.AttributeValueMemberM)
	require.True(t, ok, "the repair rebuilt the map")
	require.Contains(t, m.Value, "food", "the repair moved food inline")
	onePlace(t, e, k)

	putTxn(t, e, "dmg", "2024-05-01", "a3", "7", "food", "")
	commitNew() // the same consumer, its cached shape still the damaged one
	onePlace(t, e, k)
	got, err = e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &e.table, Key: table.Key(entry), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.Nil(t, got.Item, "food's entry item was written again although food is inline")
	e.requireReconciled(t)
}
