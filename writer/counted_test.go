package writer_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/rebucket"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// The counted changes of docs/exactly-once.md ("The design: counted
// changes", W): every write of a transaction item counts itself in
// changes and stores the sig of what it wrote.

// requireCounted requires the stored item of tx to hold changes = want and
// the sig of what it holds, and no probe.
func (e *env) requireCounted(tx writer.Transaction, want int64) map[string]ddbAV {
	e.t.Helper()
	item := e.transactionItem(tx)
	got, ok := table.Changes(item)
	require.True(e.t, ok, "changes stored")
	require.Equal(e.t, want, got, "changes")
	require.True(e.t, table.SigMatches(item), "sig matches the item")
	require.NotContains(e.t, item, table.AttrProbe)
	return item
}

func TestCountedChanges_EveryWriteStepsTheCountAndStoresItsSig(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"EXPENSE","amount":"12.50","category":"food","costCenter":"ops","createdAt":"2026-11-20T12:00:00Z"}`)
	first := e.requireCounted(tx, 1)

	for i, body := range []string{
		`{"amount":"13"}`,
		`{"costCenter":null,"paymentMethod":"card"}`,
		`{"amount":"13"}`,     // the same figures: still a new version, so a new count and a record
		`{"category":"food"}`, // the same again
	} {
		r := e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, body: body,
			headers: []string{"If-Match", strconv.Quote(strconv.Itoa(i + 1))}})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
		e.requireCounted(tx, int64(i+2))
	}
	last := e.transactionItem(tx)
	assert.NotEqual(t, first[table.AttrSig], last[table.AttrSig], "the count is in the sig")
}

// A ledgerctl rebucket that restamps a transaction between a PATCH's read
// and its write moves the count, not the version: the PATCH is prepared
// again on the count rebucket left (never a 412, and never a count that
// skips the rebucket's record).
func TestCountedChanges_ARebucketBetweenReadAndWriteIsPreparedAgainNotA412(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, sharedTable(t))
	e.branchWithCalendar("sp", saoPaulo)
	e.branch = "sp"
	tx := e.create(`{"type":"EXPENSE","amount":"2.5","category":"c","createdAt":"2026-03-05T02:00:00Z"}`)
	r := e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/sp", body: `{"calendar":{"timeZone":"UTC","dayStartsAt":"00:00"}}`,
		headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)

	moved := 0
	e.raceHook("TransactWriteItems", func() {
		res, err := rebucket.Run(ctx, e.ddb, e.table, e.tenant, "sp", rebucket.Options{Settle: -1, Parallel: 1})
		require.NoError(t, err)
		moved = res.Moved
	})
	r = e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`}, body: `{"amount":"3"}`})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	require.Equal(t, 1, moved, "the rebucket restamped it in between")
	assert.Equal(t, int64(2), r.transaction(t).Version)
	e.requireCounted(tx, 3) // created, restamped, patched
}

// ledgerctl rebucket counts its restamp as a change of the item, and drops
// a probe left on it.
func TestCountedChanges_RebucketCountsItsRestamp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, sharedTable(t))
	e.branchWithCalendar("sp", saoPaulo)
	e.branch = "sp"
	tx := e.create(`{"type":"EXPENSE","amount":"2.5","category":"c","createdAt":"2026-03-05T02:00:00Z"}`)
	r := e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/sp", body: `{"calendar":{"timeZone":"UTC","dayStartsAt":"00:00"}}`,
		headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	k := table.KeyOf(e.transactionItem(tx))
	_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table, Key: table.Key(k),
		UpdateExpression: ptr("SET probe = :p"), ExpressionAttributeValues: map[string]ddbAV{":p": s("rebase-1")}})
	require.NoError(t, err)
	res, err := rebucket.Run(ctx, e.ddb, e.table, e.tenant, "sp", rebucket.Options{Settle: -1, Parallel: 1})
	require.NoError(t, err)
	require.Equal(t, 1, res.Moved)
	item := e.requireCounted(tx, 2)
	assert.Equal(t, "2026-03-05", item["businessDate"].(*ddbtypes.AttributeValueMemberS).Value)
}
