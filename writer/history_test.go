package writer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/rebucket"
	"github.com/ledger-dev/ledger/writer"
)

// testClock is a writer clock a test sets before each request, so that
// the receive time a history entry records is known exactly.
type testClock struct{ now atomic.Pointer[time.Time] }

func newTestClock(t time.Time) *testClock {
	c := &testClock{}
	c.set(t)
	return c
}

func (c *testClock) set(t time.Time) { c.now.Store(&t) }
func (c *testClock) Now() time.Time  { return *c.now.Load() }

func withClock(c *testClock) envOption { return func(cfg *writer.Config) { cfg.Now = c.Now } }

// tokenAs mints a token of the env's tenant with subject sub (admin: an
// admin-scoped token of no tenant).
func (e *env) tokenAs(sub string, admin bool) string {
	e.t.Helper()
	o := writer.TokenOptions{Tenant: e.tenant, Subject: sub}
	if admin {
		o = writer.TokenOptions{Admin: true, Subject: sub}
	}
	tok, err := writer.NewToken([]byte(testSecret), o)
	require.NoError(e.t, err)
	return tok
}

// as sends rq with token tok.
func (e *env) as(tok string, rq req) reply {
	e.t.Helper()
	rq.headers = append(rq.headers, "Authorization", "Bearer "+tok)
	return e.send(rq)
}

func (r reply) history(t *testing.T) writer.HistoryPage {
	t.Helper()
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	var p writer.HistoryPage
	require.NoError(t, json.Unmarshal(r.Body, &p), "answer %s", r)
	return p
}

func (e *env) historyPath(id string) string { return e.base() + "/transactions/" + id + "/history" }

// allHistory reads a transaction's whole history, page by page, with limit.
func (e *env) allHistory(id string, limit int) []writer.HistoryEntry {
	e.t.Helper()
	var all []writer.HistoryEntry
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(e.t, pages, 100, "the history's pages do not end")
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		p := e.send(req{method: "GET", path: e.historyPath(id) + "?" + q.Encode()}).history(e.t)
		require.LessOrEqual(e.t, len(p.Items), limit)
		all = append(all, p.Items...)
		if p.NextCursor == "" {
			return all
		}
		cursor = p.NextCursor
	}
}

func TestHistory_CreatePatchPatchDeleteKeepsEveryVersionWithItsAuthorAndReceiveTime(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	clock := newTestClock(start)
	e := newEnv(t, sharedTable(t), withClock(clock))
	alice, admin, bob := e.tokenAs("alice@acme", false), e.tokenAs("ops-admin", true), e.tokenAs("bob@acme", false)

	steps := []struct {
		token     string
		rq        req
		status    int
		requestID string
	}{
		{alice, req{method: "POST", path: e.base() + "/transactions", headers: []string{"Idempotency-Key", newKey()},
			body: `{"type":"EXPENSE","amount":"12.50","category":"food","createdAt":"2024-02-29T23:59:59.5-03:00"}`}, http.StatusCreated, "req-create"},
		{admin, req{method: "PATCH", headers: []string{"If-Match", `"1"`}, body: `{"amount":"13"}`}, http.StatusOK, "req-patch-1"},
		{alice, req{method: "PATCH", headers: []string{"If-Match", `"2"`}, body: `{"category":"travel","description":"taxi"}`}, http.StatusOK, "req-patch-2"},
		{bob, req{method: "DELETE"}, http.StatusNoContent, "req-delete"},
	}
	var id string
	received := make([]time.Time, len(steps))
	for i, st := range steps {
		received[i] = start.Add(time.Duration(i) * time.Hour)
		clock.set(received[i])
		if st.rq.path == "" {
			st.rq.path = e.base() + "/transactions/" + id
		}
		st.rq.headers = append(st.rq.headers, "X-Request-Id", st.requestID)
		r := e.as(st.token, st.rq)
		require.Equal(t, st.status, r.Status, "step %d: answer %s", i, r)
		if i == 0 {
			id = r.transaction(t).ID
		}
	}
	require.Equal(t, http.StatusNotFound, e.send(req{method: "GET", path: e.base() + "/transactions/" + id}).Status)

	// Readable after the hard delete, in version order.
	got := e.allHistory(id, 50)
	require.Len(t, got, 4)
	wantOps := []string{writer.OperationCreated, writer.OperationChanged, writer.OperationChanged, writer.OperationDeleted}
	wantSubjects := []string{"alice@acme", "ops-admin", "alice@acme", "bob@acme"}
	wantAmounts := []string{"12.5", "13", "13", "13"}
	for i, h := range got {
		assert.Equal(t, int64(i+1), h.Version, "entry %d", i)
		assert.Equal(t, wantOps[i], h.Operation, "entry %d", i)
		assert.Equal(t, wantSubjects[i], h.Subject, "entry %d", i)
		assert.Equal(t, i == 1, h.Admin, "entry %d", i)
		assert.Equal(t, received[i].Format(time.RFC3339Nano), h.ReceivedAt, "entry %d: the server's receive time", i)
		assert.Equal(t, steps[i].requestID, h.RequestID, "entry %d", i)
		assert.Equal(t, id, h.Transaction.ID, "entry %d", i)
		assert.Equal(t, wantAmounts[i], h.Transaction.Amount, "entry %d", i)
		assert.Equal(t, "2024-03-01T02:59:59.5Z", h.Transaction.CreatedAt, "entry %d: the client's createdAt stays in the body", i)
		assert.Equal(t, e.tenant, h.Transaction.Tenant)
	}
	// The body of each version is the transaction as of that version; the
	// deleted entry's is the last version, as it was deleted.
	assert.Equal(t, int64(1), got[0].Transaction.Version)
	assert.Equal(t, int64(2), got[1].Transaction.Version)
	assert.Equal(t, int64(3), got[2].Transaction.Version)
	assert.Equal(t, int64(3), got[3].Transaction.Version, "deleted: the body as deleted")
	assert.Equal(t, "food", got[1].Transaction.Category)
	assert.Equal(t, "travel", got[3].Transaction.Category)
	assert.Equal(t, "taxi", got[3].Transaction.Description)
	assert.Equal(t, "2024-03-01", got[0].Transaction.BusinessDate, "the stamp as written (UTC calendar)")
}

func TestHistory_IdempotentReplaysAddNoEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	create := req{method: "POST", path: e.base() + "/transactions", headers: []string{"Idempotency-Key", newKey()},
		body: `{"type":"INCOME","amount":"5","category":"sales"}`}
	first := e.send(create)
	require.Equal(t, http.StatusCreated, first.Status, "answer %s", first)
	id := first.transaction(t).ID
	path := e.base() + "/transactions/" + id
	patch := req{method: "PATCH", path: path, headers: []string{"If-Match", `"1"`, "Idempotency-Key", newKey()}, body: `{"amount":"6"}`}
	del := req{method: "DELETE", path: path, headers: []string{"Idempotency-Key", newKey()}}
	for _, rq := range []req{patch, del} {
		r := e.send(rq)
		require.Less(t, r.Status, 300, "answer %s", r)
	}
	for _, rq := range []req{create, patch, del} {
		r := e.send(rq)
		require.Less(t, r.Status, 300, "%s: answer %s", rq.method, r)
		assert.Equal(t, "true", r.Header.Get("Idempotent-Replayed"), "%s is replayed", rq.method)
	}
	got := e.allHistory(id, 10)
	require.Len(t, got, 3, "one entry per write, none per replay")
	assert.Equal(t, []string{"created", "changed", "deleted"}, []string{got[0].Operation, got[1].Operation, got[2].Operation})
}

// A write whose answer is lost after it landed is retried by the client
// under its key: the retry replays, and the history holds the one write.
func TestHistory_LostAnswerRetriedUnderItsKeyAddsOneEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"5","category":"sales"}`)
	var once sync.Once
	e.calls.Decide = func(op string) ledgertest.Fault {
		fault := ledgertest.Pass
		if op == "TransactWriteItems" {
			once.Do(func() { fault = ledgertest.LoseAnswer })
		}
		return fault
	}
	rq := req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`, "Idempotency-Key", newKey()}, body: `{"amount":"6"}`}
	first := e.send(rq)
	if first.Status != http.StatusOK {
		assert.GreaterOrEqual(t, first.Status, 500, "answer %s", first)
	}
	again := e.send(rq)
	require.Equal(t, http.StatusOK, again.Status, "answer %s", again)
	got := e.allHistory(tx.ID, 10)
	require.Len(t, got, 2)
	assert.Equal(t, "6", got[1].Transaction.Amount)
}

func TestHistory_RefusedWritesAddNoEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"5","category":"sales"}`)
	path := e.base() + "/transactions/" + tx.ID
	for _, rq := range []req{
		{method: "PATCH", path: path, headers: []string{"If-Match", `"5"`}, body: `{"amount":"6"}`},
		{method: "PATCH", path: path, headers: []string{"If-Match", `W/"1"`}, body: `{"amount":"6"}`},
		{method: "DELETE", path: path, headers: []string{"If-Match", `"2"`}},
	} {
		r := e.send(rq)
		require.Equal(t, http.StatusPreconditionFailed, r.Status, "%s %v: answer %s", rq.method, rq.headers, r)
	}
	got := e.allHistory(tx.ID, 10)
	require.Len(t, got, 1)
	assert.Equal(t, "created", got[0].Operation)
}

// Concurrent PATCHes naming the same version: one wins, and the history
// holds exactly its version.
func TestHistory_ConcurrentPatchesWithIfMatchKeepOneEntryPerVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"5","category":"sales"}`)
	const n = 6
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`},
				body: fmt.Sprintf(`{"amount":"%d"}`, 100+i)})
			statuses[i] = r.Status
		}()
	}
	wg.Wait()
	won := -1
	for i, st := range statuses {
		if st == http.StatusOK {
			require.Equal(t, -1, won, "two PATCHes of version 1 succeeded: %v", statuses)
			won = i
		} else {
			assert.Contains(t, []int{http.StatusPreconditionFailed, http.StatusConflict}, st, "statuses %v", statuses)
		}
	}
	require.NotEqual(t, -1, won, "no PATCH succeeded: %v", statuses)
	got := e.allHistory(tx.ID, 10)
	require.Len(t, got, 2)
	assert.Equal(t, fmt.Sprint(100+won), got[1].Transaction.Amount, "the entry is the winner's")
	cur := e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID}).transaction(t)
	assert.Equal(t, cur, got[1].Transaction, "the current version is the last entry's")
}

func TestHistory_IsolatedLikeTheTransactionAndNotFoundForNoTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"5","category":"sales"}`)
	other := newEnv(t, sharedTable(t)) // another tenant with the same branch names

	// Another tenant's token on this tenant's paths: what it gets for the
	// transaction, it gets for its history.
	for _, path := range []string{e.base() + "/transactions/" + tx.ID, e.historyPath(tx.ID)} {
		r := e.as(other.token, req{method: "GET", path: path})
		assert.Equal(t, http.StatusForbidden, r.Status, "%s: answer %s", path, r)
	}
	// Its own tenant's path with this tenant's id: nothing there.
	for _, path := range []string{other.base() + "/transactions/" + tx.ID, other.historyPath(tx.ID)} {
		r := other.send(req{method: "GET", path: path})
		assert.Equal(t, http.StatusNotFound, r.Status, "%s: answer %s", path, r)
	}
	// A well-formed id that never existed; a malformed one.
	r := e.send(req{method: "GET", path: e.historyPath("01HV5Z6Q8X3N2M4K7J9B0C1D2E")})
	assert.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemNotFound, r.problem(t).Type)
	r = e.send(req{method: "GET", path: e.historyPath("nope")})
	assert.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
	// Without a token.
	r = e.send(req{method: "GET", path: e.historyPath(tx.ID), noAuth: true})
	assert.Equal(t, http.StatusUnauthorized, r.Status, "answer %s", r)
}

func TestHistory_PagesInVersionOrderWithCursorsBoundToTheTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"1","category":"sales"}`)
	for v := 1; v <= 6; v++ {
		r := e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", fmt.Sprintf(`"%d"`, v)},
			body: fmt.Sprintf(`{"amount":"%d"}`, v+1)})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	}
	for _, limit := range []int{1, 2, 3, 7, 200} {
		got := e.allHistory(tx.ID, limit)
		require.Len(t, got, 7, "limit %d", limit)
		for i, h := range got {
			assert.Equal(t, int64(i+1), h.Version, "limit %d", limit)
			assert.Equal(t, fmt.Sprint(i+1), h.Transaction.Amount, "limit %d", limit)
		}
	}
	first := e.send(req{method: "GET", path: e.historyPath(tx.ID) + "?limit=3"}).history(t)
	require.NotEmpty(t, first.NextCursor)
	// A cursor of one transaction's history is refused for another's.
	other := e.create(`{"type":"INCOME","amount":"1","category":"sales"}`)
	r := e.send(req{method: "GET", path: e.historyPath(other.ID) + "?cursor=" + url.QueryEscape(first.NextCursor)})
	assert.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemInvalidCursor, r.problem(t).Type)
	for _, q := range []string{"?limit=0", "?from=2026-01-01", "?limit=1&limit=2"} {
		r := e.send(req{method: "GET", path: e.historyPath(tx.ID) + q})
		assert.Equal(t, http.StatusBadRequest, r.Status, "%s: answer %s", q, r)
	}
}

// A token whose subject is too long to record writes nothing.
func TestHistory_TokenWithAnOverlongSubjectCannotWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"1","category":"sales"}`)
	long := e.tokenAs(strings.Repeat("s", writer.MaxSubjectLength+1), false)
	for _, rq := range []req{
		{method: "POST", path: e.base() + "/transactions", headers: []string{"Idempotency-Key", newKey()}, body: `{"type":"INCOME","amount":"1","category":"sales"}`},
		{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`}, body: `{"amount":"2"}`},
		{method: "DELETE", path: e.base() + "/transactions/" + tx.ID},
	} {
		r := e.as(long, rq)
		require.Equal(t, http.StatusForbidden, r.Status, "%s: answer %s", rq.method, r)
	}
	assert.Equal(t, 1, e.countTransactions(e.tenant, e.branch))
	require.Len(t, e.allHistory(tx.ID, 10), 1)
	ok := e.tokenAs(strings.Repeat("s", writer.MaxSubjectLength), false)
	r := e.as(ok, req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
}

// A transaction put back by another path after its delete was recorded
// (at a version below the deleted entry's) is not written over its trail:
// the PATCH that would make a recorded version is 500, writes nothing, and
// the entries stay as they were (docs/runbook.md, "Writer 5xx").
func TestHistory_AnEntryOfAVersionTheTransactionNeverReachedIsNeverOverwritten(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"5","category":"sales","createdAt":"2026-03-04T05:06:07Z"}`)
	k := aggregates.TransactionKey(e.tenant, e.branch, aggregates.Date{Year: 2026, Month: 3, Day: 4}, tx.ID)
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.table, ConsistentRead: ptr(true),
		Key: map[string]ddbAV{"PK": s(k.PK), "SK": s(k.SK)}})
	require.NoError(t, err)
	require.NotNil(t, out.Item)
	path := e.base() + "/transactions/" + tx.ID
	r := e.send(req{method: "DELETE", path: path})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	_, err = e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: out.Item}) // restored at version 1
	require.NoError(t, err)

	r = e.send(req{method: "PATCH", path: path, headers: []string{"If-Match", `"1"`}, body: `{"amount":"6"}`})
	require.Equal(t, http.StatusInternalServerError, r.Status, "answer %s", r)
	got := e.send(req{method: "GET", path: path}).transaction(t)
	assert.Equal(t, "5", got.Amount, "nothing written")
	h := e.allHistory(tx.ID, 10)
	require.Len(t, h, 2)
	assert.Equal(t, "deleted", h[1].Operation)
	assert.Equal(t, "5", h[1].Transaction.Amount)
}

// ledgerctl rebucket restamps a transaction without a new version: it
// writes no history entry, If-Match keeps naming the version, and the next
// change's entry carries the stamp in force (docs/design.md, "Transaction
// history").
func TestHistory_RebucketRestampIsNoEntryAndIfMatchKeepsWorking(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, sharedTable(t))
	e.branchWithCalendar("sp", saoPaulo)
	e.branch = "sp"
	// 02:00 UTC is 23:00 the day before in São Paulo, before its 04:00 start: the 3rd's business day.
	tx := e.create(`{"type":"EXPENSE","amount":"2.5","category":"c","createdAt":"2026-03-05T02:00:00Z"}`)
	require.Equal(t, "2026-03-04", tx.BusinessDate)
	r := e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/sp", body: `{"calendar":{"timeZone":"UTC","dayStartsAt":"00:00"}}`,
		headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)

	res, err := rebucket.Run(ctx, e.ddb, e.table, e.tenant, "sp", rebucket.Options{Settle: -1, Parallel: 1})
	require.NoError(t, err)
	require.Equal(t, 1, res.Moved)
	got := e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID}).transaction(t)
	assert.Equal(t, "2026-03-05", got.BusinessDate, "restamped")
	assert.Equal(t, int64(1), got.Version, "not a new version")
	h := e.allHistory(tx.ID, 10)
	require.Len(t, h, 1, "a restamp is no entry")
	assert.Equal(t, "2026-03-04", h[0].Transaction.BusinessDate, "the entry keeps the stamp of its version as written")

	r = e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", `"1"`}, body: `{"amount":"3"}`})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	h = e.allHistory(tx.ID, 10)
	require.Len(t, h, 2)
	assert.Equal(t, "2026-03-05", h[1].Transaction.BusinessDate)
}

// A change that lands between a DELETE's read and its write: without
// If-Match the delete reads again and records the version it deleted (the
// changed one); naming the version it read, it is 412 and records nothing.
func TestHistory_DeleteRacingAChangeRecordsTheVersionItDeletes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		ifMatch string
		status  int
		ops     []string
	}{
		{"without If-Match", "", http.StatusNoContent, []string{"created", "changed", "deleted"}},
		{"If-Match the version read", `"1"`, http.StatusPreconditionFailed, []string{"created", "changed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, sharedTable(t))
			tx := e.create(`{"type":"INCOME","amount":"5","category":"sales"}`)
			path := e.base() + "/transactions/" + tx.ID
			var armed atomic.Bool
			armed.Store(true)
			patched := make(chan int, 1)
			e.calls.Decide = func(op string) ledgertest.Fault {
				if op == "TransactWriteItems" && armed.CompareAndSwap(true, false) {
					// The delete has read version 1; another client changes it first.
					hr, err := http.NewRequest("PATCH", e.http.URL+path, strings.NewReader(`{"amount":"9"}`))
					if err == nil {
						hr.Header.Set("Authorization", "Bearer "+e.token)
						hr.Header.Set("Content-Type", "application/json")
						hr.Header.Set("If-Match", `"1"`)
						if resp, err := e.http.Client().Do(hr); err == nil {
							resp.Body.Close()
							patched <- resp.StatusCode
						}
					}
				}
				return ledgertest.Pass
			}
			r := e.send(req{method: "DELETE", path: path, headers: []string{"If-Match", tc.ifMatch}})
			require.Equal(t, http.StatusOK, <-patched, "the racing change")
			require.Equal(t, tc.status, r.Status, "answer %s", r)
			h := e.allHistory(tx.ID, 10)
			var ops []string
			for _, x := range h {
				ops = append(ops, x.Operation)
			}
			require.Equal(t, tc.ops, ops)
			assert.Equal(t, "9", h[len(h)-1].Transaction.Amount, "the last entry holds the change")
			if tc.status == http.StatusNoContent {
				assert.Equal(t, int64(2), h[2].Transaction.Version, "deleted: the version it deleted")
			}
		})
	}
}
