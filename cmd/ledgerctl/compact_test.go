package main

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	ledgertable "github.com/ledger-dev/ledger/table"
)

func TestCompact_RetiresOldTombstonesAndRefusesLessThanTheStreamsRetention(t *testing.T) {
	ctx := context.Background()
	table, env := createdTable(t)

	c := ddbtest.Client(t)
	k := aggregates.TransactionKey("acme", "north", aggregates.Date{Year: 2026, Month: 1, Day: 2}, "01JD0000000000000000000000")
	item := ledgertable.Key(k)
	item[ledgertable.AttrEntityType] = ledgertable.S(aggregates.EntityTransaction)
	item[ledgertable.AttrDeletedAt] = ledgertable.S(time.Now().Add(-72 * time.Hour).UTC().Format(time.RFC3339Nano))
	ledgertable.Count(item, 2)
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: item})
	require.NoError(t, err)

	code, _, errOut := run(t, env, "compact", "--older-than", "23h")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "younger than the stream's retention")

	code, out, errOut := run(t, env, "compact")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "1 tombstones: 1 retired (3 records added to retired counts)")
	a, err := ledgertable.GetApplied(ctx, c, ledgertable.CoordinationTableName(table), "acme", "north")
	require.NoError(t, err)
	assert.Equal(t, int64(3), a.Retired)
}
