package table_test

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
)

// The second adversarial review of the exact repair (issue 25, revision 2;
// docs/exactly-once.md, "Second review"). Revision 2's head fence ("F")
// rests on one claim: once a report head holds transactionCount as a
// string, the previous version's update of it (if_not_exists(#n, :z) + :n)
// is a ValidationException that "cancels the old commit". This test
// checks the DynamoDB side of that claim on DynamoDB Local, with the
// previous version's own update (table.ReportUpdate as it is today), and
// what the previous version does with such a head: it does not cancel its
// commit, it parks the part (docs/exactly-once.md, "Parked deltas"),
// because table.CheckReportItem, which decides parking, names the fenced
// head as refused.
func TestSecondReview25_TheHeadFenceIsAValidationErrorThatTheOldCodeParks(t *testing.T) {
	ctx := t.Context()
	client := ddbtest.Client(t)
	name := ddbtest.NewTable(t, client)

	period, err := aggregates.ParsePeriod(aggregates.PeriodType("DAILY"), "2026-11-26")
	require.NoError(t, err)
	k := aggregates.ReportKey{Tenant: "t1", Branch: "b1", Period: period}
	head := table.Key(k.Key())
	head[table.AttrEntityType] = table.S(aggregates.EntityReport)
	head[table.AttrTotalIncome] = table.Int(10)
	head[table.AttrTotalExpense] = table.Int(0)
	head["txCount"] = table.Int(1)
	head[table.AttrTransactionCount] = table.S("v4") // the fence of revision 2
	head[table.AttrUpdatedAt] = table.S("2026-11-26T10:00:00Z")
	_, err = client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: head})
	require.NoError(t, err)

	// The previous version's update of the head, built by today's code
	// from the shape it reads.
	delta := &aggregates.Report{Totals: aggregates.Totals{Income: decimal.NewFromInt(5), Count: 1}}
	shape := table.DecodeReportShape(head)
	w, err := table.ReportUpdate(name, k, delta, shape, "2026-11-26T11:00:00Z")
	require.NoError(t, err)
	require.NotEmpty(t, w.Updates)
	u := w.Updates[0]

	// Alone (UpdateItem): a ValidationException, not a condition failure.
	_, err = client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
		ConditionExpression: u.ConditionExpression, ExpressionAttributeNames: u.ExpressionAttributeNames,
		ExpressionAttributeValues: u.ExpressionAttributeValues,
	})
	var ccf *types.ConditionalCheckFailedException
	assert.False(t, errors.As(err, &ccf), "got ConditionalCheckFailed; want a ValidationException")
	var api smithy.APIError
	require.True(t, errors.As(err, &api), "got %v; want an API error", err)
	assert.Equal(t, "ValidationException", api.ErrorCode(), "UpdateItem on the fenced head: %v", err)
	t.Logf("UpdateItem: %s: %s", api.ErrorCode(), api.ErrorMessage())

	// In a commit transaction beside a guard-like put: nothing lands. On
	// AWS the documented answer is a TransactionCanceledException with a
	// ValidationError at the head's index; DynamoDB Local answers a plain
	// ValidationException for the whole request (docs/exactly-once.md,
	// "Parked deltas", "Which part").
	marker := table.Key(aggregates.RunMarkerKey("second-review-25"))
	marker[table.AttrEntityType] = table.S(aggregates.EntityRunMarker)
	_, err = client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(name), Item: marker, ConditionExpression: aws.String("attribute_not_exists(PK)")}},
		{Update: u},
	}})
	require.Error(t, err)
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for i, r := range tce.CancellationReasons {
			t.Logf("TransactWriteItems: reason %d: %s %s", i, aws.ToString(r.Code), aws.ToString(r.Message))
		}
	} else {
		require.True(t, errors.As(err, &api), "got %v; want an API error", err)
		assert.Equal(t, "ValidationException", api.ErrorCode())
		t.Logf("TransactWriteItems: %s: %s", api.ErrorCode(), api.ErrorMessage())
	}
	got, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(name), Key: table.Key(aggregates.RunMarkerKey("second-review-25")), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.Nil(t, got.Item, "the guard-like put landed beside a refused head update")

	// What the previous version does next: its parking test names the head
	// as refused, so it sends the same transaction again with the head's
	// part replaced by a parked item, and the claim lands (the review's
	// hole 2: the fence parks, it does not cancel).
	// Step X keeps this (F-a, pinned): readers decode the fenced head
	// without a problem, but the consumers of this version still write the
	// old layout, and their parking test still names the head.
	refused := table.CheckReportItem(head)
	assert.NotEmpty(t, refused, "today's CheckReportItem must name the fenced head (else the old commit stays a permanent error)")
	_, problems := (&table.StoredReport{Key: k, Item: head}).Decode()
	assert.Empty(t, problems, "readers decode the fenced head")
	t.Logf("CheckReportItem on the fenced head: %v", refused)
}

// TestSecondReview25_TheRepairKeepsAFencedHeadFenced: hole F-b, as step X
// answers it. The ledgerctl of the day of the review read a fenced head as
// malformed (its Decode named the string count) and rewrote it the way
// processor.repairReport does (table.EncodeRepair, table.RepairHead on
// condition of the updatedAt it read): the write landed, the head held a
// numeric transactionCount again and txCount was gone: the fence undone by
// a repair that moves no epoch and counts nothing (this test asserted
// that until step X). Now the head decodes without a problem to its
// figures, and a repair of it (here with other figures: the fold says 20)
// writes it fenced: transactionCount "v4", the count in txCount.
func TestSecondReview25_TheRepairKeepsAFencedHeadFenced(t *testing.T) {
	ctx := t.Context()
	client := ddbtest.Client(t)
	name := ddbtest.NewTable(t, client)

	period, err := aggregates.ParsePeriod(aggregates.PeriodType("DAILY"), "2026-11-26")
	require.NoError(t, err)
	k := aggregates.ReportKey{Tenant: "t1", Branch: "b1", Period: period}
	head := table.Key(k.Key())
	head[table.AttrEntityType] = table.S(aggregates.EntityReport)
	head[table.AttrTotalIncome] = table.Int(10)
	head["txCount"] = table.Int(1)
	head[table.AttrTransactionCount] = table.S("v4")
	head[table.AttrUpdatedAt] = table.S("2026-11-26T10:00:00Z")
	_, err = client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: head})
	require.NoError(t, err)

	stored, err := table.ReadReport(ctx, client, name, k, true)
	require.NoError(t, err)
	got, problems := stored.Decode()
	require.Empty(t, problems, "the fenced head decodes without a problem")
	assert.Equal(t, "10", got.Income.String())
	assert.Equal(t, int64(1), got.Count)

	// A repair of it, as processor.repairReport writes a report item: the
	// fold of the branch (here two incomes, 20) on condition of the
	// updatedAt read.
	expected := &aggregates.Report{Totals: aggregates.Totals{Income: decimal.NewFromInt(20), Count: 2}}
	ri := table.EncodeRepair(k, expected, stored, "2026-11-26T12:00:00Z")
	_, err = client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		table.RepairHead(name, ri.Item, true, stored.Item[table.AttrUpdatedAt]),
	}})
	require.NoError(t, err, "the repair of a fenced head")

	item, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(name), Key: table.Key(k.Key()), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.Equal(t, table.S("v4"), item.Item[table.AttrTransactionCount], "the fence after the repair")
	assert.Equal(t, table.Int(2), item.Item["txCount"], "the count after the repair")
	after, problems := (&table.StoredReport{Key: k, Item: item.Item}).Decode()
	require.Empty(t, problems)
	assert.True(t, after.Equal(expected), "got %s; want %s", after, expected)
}
