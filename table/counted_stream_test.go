package table_test

import (
	"context"
	"maps"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/table"
)

// Counting rests on two facts of the stream (design.md, "Transaction"): a
// write that changes nothing makes no record, and a write that raises
// changes always changes the item, so it makes exactly one; the k-th
// record of an item carries changes = k. Checked on DynamoDB Local.
func TestCount_AWriteThatChangesNothingMakesNoRecordAndACountedWriteExactlyOne(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	name := ddbtest.NewTable(t, c)
	k := aggregates.TransactionKey("acme", "north", aggregates.Date{Year: 2026, Month: 11, Day: 20}, "01JD0000000000000000000000")
	item, err := table.EncodeTransaction(k, table.Transaction{ID: "01JD0000000000000000000000", Tenant: "acme", Branch: "north",
		Type: "EXPENSE", Amount: "5", Category: "c", CreatedAt: "2026-11-20T12:00:00Z", UpdatedAt: "2026-11-20T12:00:00Z", Version: 1})
	require.NoError(t, err)
	table.Count(item, 1)
	put := func(item map[string]types.AttributeValue) {
		t.Helper()
		_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &name, Item: item})
		require.NoError(t, err)
	}
	put(item)
	put(maps.Clone(item)) // the same item again: no record
	next := maps.Clone(item)
	next["description"] = table.S("x")
	table.Count(next, 2)
	put(next)
	put(maps.Clone(next)) // again: no record

	info, err := table.DescribeTable(ctx, c, name)
	require.NoError(t, err)
	shards, err := ledgertest.ReadAll(ctx, dynamodbstreams.NewFromConfig(ddbtest.Config(t)), info.StreamARN, nil)
	require.NoError(t, err)
	var got []string
	var counts []int64
	for _, sh := range shards {
		for _, r := range sh.Records {
			if pk, _ := table.String(r.Keys, table.AttrPK); pk != k.PK {
				continue
			}
			got = append(got, r.EventName)
			n, _ := table.Changes(r.NewImage)
			counts = append(counts, n)
		}
	}
	assert.Equal(t, []string{"INSERT", "MODIFY"}, got)
	assert.Equal(t, []int64{1, 2}, counts, "the k-th record carries changes = k")
}
