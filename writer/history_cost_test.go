package writer_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/bench"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	ledgertable "github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// The write units each transaction write costs, by AWS's billing rule
// (bench.Meter: 1 WCU per started KB of the larger of the item before and
// after, twice inside a transaction), for a typical transaction (under
// 1 KB). docs/api.md ("Cost of a write") and BENCHMARKS.md ("Issue 26")
// quote these figures; the test fails when a change to the writer's
// writes changes them.
func TestTransactionWrites_WriteUnitsPerWrite(t *testing.T) {
	t.Parallel()
	table := sharedTable(t)
	meter := bench.NewMeter(ddbtest.Client(t))
	auth, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(testSecret)})
	require.NoError(t, err)
	srv, err := writer.New(meter, writer.Config{Table: table, Auth: auth, CursorKey: cursorKey, FlagsTTL: time.Minute, RequestTimeout: time.Minute}, nil)
	require.NoError(t, err)
	h := validated(t, srv)
	tenant := uniqueTenant()
	seed := newSeeder(t, table)
	seed.tenant(tenant)
	seed.branch(tenant, "north")
	tok, err := writer.NewToken([]byte(testSecret), writer.TokenOptions{Tenant: tenant, Subject: "auditor@example.com"})
	require.NoError(t, err)
	base := "/v1/tenants/" + tenant + "/branches/north/transactions"
	send := func(method, path, body string, headers ...string) *httptest.ResponseRecorder {
		t.Helper()
		rec := httptest.NewRecorder()
		hr := httptest.NewRequest(method, path, strings.NewReader(body))
		hr.Header.Set("Authorization", "Bearer "+tok)
		if body != "" {
			hr.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(headers); i += 2 {
			hr.Header.Set(headers[i], headers[i+1])
		}
		h.ServeHTTP(rec, hr)
		return rec
	}
	const body = `{"type":"EXPENSE","amount":"12.50","category":"food","costCenter":"ops","paymentMethod":"card","description":"team lunch","createdAt":"2026-11-20T12:00:00Z"}`
	create := func() string {
		t.Helper()
		rec := send("POST", base, body, "Idempotency-Key", newKey())
		require.Equal(t, http.StatusCreated, rec.Code, "answer %s", rec.Body)
		return base + "/" + strings.TrimPrefix(rec.Header().Get("Location"), base+"/")
	}
	live := create() // the branch's first transaction also marks the branch (an item the meter does not know): not measured
	warm := len(meter.Cost().Mismatches)

	units := func(f func()) int {
		t.Helper()
		before := meter.Cost().Units
		f()
		return meter.Cost().Units - before
	}
	var path string
	got := map[string]int{
		"create (Idempotency-Key required)": units(func() { path = create() }),
		"patch without Idempotency-Key": units(func() {
			rec := send("PATCH", path, `{"amount":"13"}`, "If-Match", `"1"`)
			require.Equal(t, http.StatusOK, rec.Code, "answer %s", rec.Body)
		}),
		"patch with Idempotency-Key": units(func() {
			rec := send("PATCH", path, `{"amount":"14"}`, "If-Match", `"2"`, "Idempotency-Key", newKey())
			require.Equal(t, http.StatusOK, rec.Code, "answer %s", rec.Body)
		}),
		"delete without Idempotency-Key": units(func() {
			rec := send("DELETE", path, "", "If-Match", `"3"`)
			require.Equal(t, http.StatusNoContent, rec.Code, "answer %s", rec.Body)
		}),
	}
	path = create()
	got["delete with Idempotency-Key"] = units(func() {
		rec := send("DELETE", path, "", "Idempotency-Key", newKey())
		require.Equal(t, http.StatusNoContent, rec.Code, "answer %s", rec.Body)
	})
	require.NoError(t, meter.Err())
	// Each write's computed units agree with the ConsumedCapacity DynamoDB
	// Local reported for it (as bench.Meter recomputes it: BENCHMARKS.md,
	// "How things are counted").
	assert.Empty(t, meter.Cost().Mismatches[warm:], "computed and reported capacity differ")
	// The sizes behind the figures: the last transaction, its entries.
	ctx := context.Background()
	id := path[strings.LastIndex(path, "/")+1:]
	hist, err := meter.Query(ctx, &dynamodb.QueryInput{TableName: &table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("PK = :pk AND begins_with(SK, :id)"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": ledgertable.S(aggregates.HistoryPK(tenant, "north")), ":id": ledgertable.S(id + "#")}})
	require.NoError(t, err)
	require.Len(t, hist.Items, 2, "created, deleted")
	txn, err := meter.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
		Key: ledgertable.Key(aggregates.TransactionKey(tenant, "north", aggregates.Date{Year: 2026, Month: 11, Day: 20}, live[strings.LastIndex(live, "/")+1:]))})
	require.NoError(t, err)
	require.NotNil(t, txn.Item)
	tomb, err := meter.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
		Key: ledgertable.Key(aggregates.TransactionKey(tenant, "north", aggregates.Date{Year: 2026, Month: 11, Day: 20}, id))})
	require.NoError(t, err)
	require.True(t, ledgertable.IsTombstone(tomb.Item), "a delete leaves a tombstone")
	t.Logf("transaction item: %d bytes; its tombstone: %d bytes; history entry: %d bytes (created), %d bytes (deleted)",
		ledgertable.ItemSize(txn.Item), ledgertable.ItemSize(tomb.Item), ledgertable.ItemSize(hist.Items[0]), ledgertable.ItemSize(hist.Items[1]))
	var lines []string
	for op, u := range got {
		lines = append(lines, fmt.Sprintf("%s: %d WCU", op, u))
	}
	t.Logf("write units per transaction write:\n%s", strings.Join(lines, "\n"))
	// Before the audit trail (issue 26): create 4, patch 1 (4 with a key),
	// delete 1 (4 with a key). Each write now also puts its history entry
	// (under 1 KB: 2 WCU in a transaction), and a write without a key,
	// once a lone conditional write, is a transaction of two items.
	// Counted changes (issue 25): the item carries changes and sig (400 →
	// 427 bytes), and a delete is an update to a tombstone (billed by the
	// item before, under 1 KB) instead of a delete: the same units.
	assert.Equal(t, map[string]int{
		"create (Idempotency-Key required)": 6,
		"patch without Idempotency-Key":     4,
		"patch with Idempotency-Key":        6,
		"delete without Idempotency-Key":    4,
		"delete with Idempotency-Key":       6,
	}, got)
}
