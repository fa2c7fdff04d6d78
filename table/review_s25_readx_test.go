package table_test

import (
	"errors"
	"testing"

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

// TestReviewS25X1_RepairHeadConditionsOnTheLayoutRead: S25-X1, the
// condition itself (docs/exactly-once.md, "Review (adversarial, session
// 25): step X as built"). A repair's put of a report item lands on the
// item as read in each layout (a numeric count, a damaged string count,
// no count, the fence), and fails on an old-layout item fenced since the
// read by an update that kept updatedAt (before the fix it landed: the
// head went back to the old layout).
func TestReviewS25X1_RepairHeadConditionsOnTheLayoutRead(t *testing.T) {
	ctx := t.Context()
	client := ddbtest.Client(t)
	name := ddbtest.NewTable(t, client)
	want := &aggregates.Report{Totals: aggregates.Totals{Income: decimal.NewFromInt(20), Count: 2}}
	for i, tc := range []struct {
		name  string
		count map[string]types.AttributeValue // the head's count attributes
		fence bool                            // fenced after the read, updatedAt kept
		lands bool
	}{
		{name: "numeric", count: map[string]types.AttributeValue{"transactionCount": table.Int(1)}, lands: true},
		{name: "a damaged string count", count: map[string]types.AttributeValue{"transactionCount": table.S("abc")}, lands: true},
		{name: "no count", count: map[string]types.AttributeValue{}, lands: true},
		{name: "fenced", count: map[string]types.AttributeValue{"transactionCount": table.S(table.HeadFence), "txCount": table.Int(1)}, lands: true},
		{name: "numeric, fenced after the read", count: map[string]types.AttributeValue{"transactionCount": table.Int(1)}, fence: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			period, err := aggregates.ParsePeriod(aggregates.PeriodType("DAILY"), "2026-11-2"+string(rune('0'+i)))
			require.NoError(t, err)
			k := aggregates.ReportKey{Tenant: "t1", Branch: "b1", Period: period}
			head := table.Key(k.Key())
			head[table.AttrEntityType] = table.S(aggregates.EntityReport)
			head[table.AttrTotalIncome] = table.Int(10)
			head[table.AttrUpdatedAt] = table.S("2026-11-26T10:00:00Z")
			for a, v := range tc.count {
				head[a] = v
			}
			_, err = client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: head})
			require.NoError(t, err)
			stored, err := table.ReadReport(ctx, client, name, k, true)
			require.NoError(t, err)
			if tc.fence {
				_, err = client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
					TableName: aws.String(name), Key: table.Key(k.Key()),
					UpdateExpression:          aws.String("SET #tc = #n, #n = :v4"),
					ConditionExpression:       aws.String("attribute_type(#n, :N)"),
					ExpressionAttributeNames:  map[string]string{"#tc": table.AttrTxCount, "#n": table.AttrTransactionCount},
					ExpressionAttributeValues: map[string]types.AttributeValue{":v4": table.S(table.HeadFence), ":N": table.S("N")},
				})
				require.NoError(t, err)
			}
			ri := table.EncodeRepair(k, want, stored, "2026-11-27T12:00:00Z")
			_, err = client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
				table.RepairHead(name, ri.Item, true, stored.Item[table.AttrUpdatedAt]),
			}})
			var tce *types.TransactionCanceledException
			if tc.lands {
				require.NoError(t, err)
			} else {
				require.True(t, errors.As(err, &tce), "the put of a head fenced since the read: %v", err)
			}
			after, err := table.ReadReport(ctx, client, name, k, true)
			require.NoError(t, err)
			if tc.fence {
				assert.True(t, table.FencedHead(after.Item), "the head stays fenced")
				return
			}
			got, problems := after.Decode()
			require.Empty(t, problems)
			assert.True(t, got.Equal(want), "got %s; want %s", got, want)
		})
	}
}
