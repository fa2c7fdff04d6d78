package writer_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// The directory and the ledger against a hostile tenant (issue 13, part 2):
// each test attacks over real HTTP, as a client with a valid token of its
// own tenant would, against DynamoDB Local.

func TestHostile_CreatedAtOffsetOutOfRangeIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	for _, at := range []string{"2026-01-31T00:30:00+24:00", "2026-01-31T00:30:00-24:00", "2026-01-31T00:30:00+23:60", "2026-01-31T00:30:00+01:60"} {
		r := e.send(req{method: "POST", path: e.base() + "/transactions", headers: []string{"Idempotency-Key", newKey()},
			body: `{"type":"INCOME","amount":"1","category":"a","createdAt":"` + at + `"}`})
		require.Equal(t, http.StatusBadRequest, r.Status, "createdAt %s: answer %s", at, r)
		p := r.problem(t)
		assert.Equal(t, writer.ProblemInvalidField, p.Type)
		assert.Equal(t, "createdAt", p.Field)
		assert.Contains(t, p.Detail, "offset")
	}
	assert.Zero(t, e.countTransactions(e.tenant, e.branch), "nothing stored")
	// The extremes RFC 3339 allows are accepted.
	for _, at := range []string{"2026-01-31T00:30:00+23:59", "2026-01-31T00:30:00-23:59"} {
		r := e.send(req{method: "POST", path: e.base() + "/transactions", headers: []string{"Idempotency-Key", newKey()},
			body: `{"type":"INCOME","amount":"1","category":"a","createdAt":"` + at + `"}`})
		require.Equal(t, http.StatusCreated, r.Status, "createdAt %s: answer %s", at, r)
	}
}

func TestHostile_IdempotencyFingerprintIgnoresPercentEncoding(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	key := newKey()
	// The tenant's first letter percent-encoded: the same route, the same
	// tenant, the same request.
	encoded := "/v1/tenants/%" + hexByte(e.tenant[0]) + e.tenant[1:] + "/branches/n%6Frth/transactions"
	r := e.send(req{method: "POST", path: encoded, body: createBody, headers: []string{"Idempotency-Key", key}})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	first := r.transaction(t)
	r = e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", key}})
	require.Equal(t, http.StatusCreated, r.Status, "the retry spelled plainly replays: answer %s", r)
	assert.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, first.ID, r.transaction(t).ID)
	assert.Equal(t, 1, e.countTransactions(e.tenant, "north"))
	// Another branch with the same key is another request.
	r = e.send(req{method: "POST", path: "/v1/tenants/" + e.tenant + "/branches/south/transactions", body: createBody, headers: []string{"Idempotency-Key", key}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "answer %s", r)
}

func hexByte(b byte) string {
	const digits = "0123456789ABCDEF"
	return string([]byte{digits[b>>4], digits[b&15]})
}

func TestHostile_ReadyzIsServedFromTheFlagsCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), func(c *writer.Config) { c.FlagsTTL = time.Minute })
	e.create(createBody) // the branch's first transaction, which reads it once
	before := e.calls.Calls("GetItem")
	for range 25 {
		r := e.send(req{method: "GET", path: "/readyz", noAuth: true})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	}
	assert.LessOrEqual(t, e.calls.Calls("GetItem")-before, 1, "25 readiness probes read the flags item at most once per flags TTL")
}

func TestHostile_SuspendedTenantCannotRewriteItsLedger(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(createBody)
	gone := e.create(createBody)
	r := e.asAdmin(req{method: "PATCH", path: "/v1/tenants/" + e.tenant, body: `{"status":"suspended"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)

	path := e.base() + "/transactions/" + tx.ID
	r = e.send(req{method: "PATCH", path: path, body: `{"amount":"999999","type":"EXPENSE"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusConflict, r.Status, "PATCH under a suspended tenant: answer %s", r)
	assert.Equal(t, writer.ProblemTenantSuspended, r.problem(t).Type)
	r = e.send(req{method: "DELETE", path: path})
	require.Equal(t, http.StatusConflict, r.Status, "DELETE under a suspended tenant: answer %s", r)
	assert.Equal(t, writer.ProblemTenantSuspended, r.problem(t).Type)
	r = e.send(req{method: "DELETE", path: e.base() + "/transactions/" + gone.ID, headers: []string{"If-Match", `"1"`, "Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)

	got := e.send(req{method: "GET", path: path}).transaction(t)
	assert.Equal(t, "1", got.Amount, "unchanged")
	assert.Equal(t, int64(1), got.Version)
	assert.Equal(t, 2, e.countTransactions(e.tenant, "north"))

	// Reactivated, the same requests go through.
	r = e.asAdmin(req{method: "PATCH", path: "/v1/tenants/" + e.tenant, body: `{"status":"active"}`, headers: []string{"If-Match", "2"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = e.send(req{method: "PATCH", path: path, body: `{"amount":"2"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	require.Equal(t, http.StatusNoContent, e.send(req{method: "DELETE", path: e.base() + "/transactions/" + gone.ID}).Status)

	// A suspended branch means the same for its transactions.
	r = e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/north", body: `{"status":"suspended"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = e.send(req{method: "PATCH", path: path, body: `{"amount":"3"}`, headers: []string{"If-Match", `"2"`}})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemBranchSuspended, r.problem(t).Type)
	r = e.send(req{method: "DELETE", path: path})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemBranchSuspended, r.problem(t).Type)
	// A transaction that does not exist is still 404 (the item's condition
	// is reported first).
	r = e.send(req{method: "DELETE", path: e.base() + "/transactions/" + gone.ID})
	require.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
}
