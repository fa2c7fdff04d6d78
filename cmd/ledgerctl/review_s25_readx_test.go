package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// TestReviewS25X3_ReplayRefusedUnderAHigherProtocol: S25-X3
// (docs/exactly-once.md, "Review (adversarial, session 25): step X as
// built"). ledgerctl replay commits as a standard-mode consumer of this
// version; under flags naming protocol 4 its parts on fenced report items
// would be parked (F-a), so it is refused as reconcile --repair is,
// naming both protocols and writing nothing (before: it committed). Under
// protocol 3 it replays.
func TestReviewS25X3_ReplayRefusedUnderAHigherProtocol(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	file := filepath.Join(fixtureEvents, "insert-basics.json")
	setProtocol := func(n int64) {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &table, Key: ledgertable.Key(aggregates.FlagsKey()),
			UpdateExpression:          aws.String("SET #p = :p"),
			ExpressionAttributeNames:  map[string]string{"#p": ledgertable.AttrProtocol},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": ledgertable.Int(n)},
		})
		require.NoError(t, err)
	}
	items := func() int32 {
		out, err := c.Scan(ctx, &dynamodb.ScanInput{TableName: &table, Select: ddbtypes.SelectCount, ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		return out.Count
	}

	setProtocol(4)
	before := items()
	code, out, errOut := run(t, env, "replay", file)
	require.Equal(t, exitError, code, out+errOut)
	assert.Contains(t, errOut, "replay refused: the table is at protocol 4 (flags item), this version speaks protocol 3")
	assert.Equal(t, before, items(), "nothing written")

	setProtocol(3)
	code, out, errOut = run(t, env, "replay", file)
	require.Equal(t, exitOK, code, out+errOut)
	assert.Greater(t, items(), before)
}
