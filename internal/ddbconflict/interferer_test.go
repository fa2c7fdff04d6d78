package ddbconflict_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ddbconflict"
)

// The interferer holds only items of the entity types it is given, one per
// transaction, and changes none: while it holds one, a write of it is
// refused as on AWS.
func TestInterferer_HoldsItemsOfItsTypesAndChangesNothing(t *testing.T) {
	plain := ddbtest.Client(t)
	table := ddbtest.NewTable(t, plain)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	item := func(pk, et string) map[string]ddbtypes.AttributeValue {
		it := key(pk, "X")
		it["entityType"] = &ddbtypes.AttributeValueMemberS{Value: et}
		it["n"] = &ddbtypes.AttributeValueMemberN{Value: "7"}
		return it
	}
	for pk, et := range map[string]string{"report": "REPORT", "txn": "TRANSACTION"} {
		_, err := plain.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: item(pk, et)})
		require.NoError(t, err)
	}
	report := ddbconflict.Key(table, map[string]string{"PK": "report", "SK": "X"})

	var c *dynamodb.Client
	var holds, refused atomic.Int64
	var other atomic.Value
	tr := &ddbconflict.Transport{Hold: func(hctx context.Context, keys []string) {
		if len(keys) != 1 || keys[0] != report {
			other.Store(keys)
			return
		}
		if holds.Add(1) > 3 {
			cancel()
			return
		}
		// A write of the held item, as a consumer would send it.
		_, err := c.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: &table, Key: key("report", "X"),
			UpdateExpression: aws.String("SET n = :n"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":n": &ddbtypes.AttributeValueMemberN{Value: "8"}}})
		var tce *ddbtypes.TransactionConflictException
		if errors.As(err, &tce) {
			refused.Add(1)
		}
	}}
	c = emulated(t, tr)
	f := &ddbconflict.Interferer{API: c, Tables: []string{table}, EntityTypes: []string{"REPORT"}, Pause: time.Millisecond, Seed: 1}
	require.NoError(t, f.Run(ctx))
	assert.Nil(t, other.Load(), "only the REPORT item is held")
	assert.Equal(t, int64(3), refused.Load(), "each write of the held item refused")
	sent, cancelled := f.Stats()
	assert.GreaterOrEqual(t, sent, 3)
	assert.Zero(t, cancelled)
	out, err := plain.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &table, Key: key("report", "X"), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.Equal(t, item("report", "REPORT"), out.Item, "nothing changed")
}
