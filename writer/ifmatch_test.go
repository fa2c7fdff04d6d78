package writer_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

const ifMatchTx = `{"type":"INCOME","amount":"10","category":"sales","createdAt":"2026-03-01T10:00:00Z"}`

// RFC 9110 If-Match on a transaction's PATCH: "*" matches the existing
// transaction, a list matches when any of its versions is current, and a
// weak tag never matches (the comparison is strong): 412, not 400.
func TestIfMatch_PatchTransactionByRFC9110(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(ifMatchTx)
	path := e.base() + "/transactions/" + tx.ID
	patch := func(ifMatch, amount string) reply {
		return e.send(req{method: "PATCH", path: path, body: `{"amount":"` + amount + `"}`, headers: []string{"If-Match", ifMatch}})
	}
	for _, tc := range []struct {
		ifMatch string
		status  int
		version int64 // after the answer
	}{
		{`W/"1"`, http.StatusPreconditionFailed, 1},
		{`"7", "8"`, http.StatusPreconditionFailed, 1},
		{`"0"`, http.StatusPreconditionFailed, 1},
		{`"abc"`, http.StatusPreconditionFailed, 1},
		{`*`, http.StatusOK, 2},
		{`"5", "2"`, http.StatusOK, 3},
		{`W/"3", "3"`, http.StatusOK, 4},
		{`W/"4"`, http.StatusPreconditionFailed, 4},
		{`abc`, http.StatusBadRequest, 4},
		{`"4`, http.StatusBadRequest, 4},
	} {
		r := patch(tc.ifMatch, "11")
		require.Equal(t, tc.status, r.Status, "If-Match: %s: answer %s", tc.ifMatch, r)
		switch tc.status {
		case http.StatusOK:
			assert.Equal(t, tc.version, r.transaction(t).Version, tc.ifMatch)
		case http.StatusPreconditionFailed:
			p := r.problem(t)
			assert.Equal(t, writer.ProblemVersionMismatch, p.Type)
			assert.Equal(t, tc.version, *p.CurrentVersion, tc.ifMatch)
		case http.StatusBadRequest:
			assert.Equal(t, "If-Match", r.problem(t).Field)
		}
	}

	// "*" on a transaction that does not exist: 404, which a request
	// without the precondition would get too (RFC 9110 §13.2.1).
	missing := e.base() + "/transactions/01HV5Z6Q8X3N2M4K7J9B0C1D2E"
	r := e.send(req{method: "PATCH", path: missing, body: `{"amount":"1"}`, headers: []string{"If-Match", "*"}})
	assert.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
}

func TestIfMatch_DeleteTransactionByRFC9110(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	path := func(tx writer.Transaction) string { return e.base() + "/transactions/" + tx.ID }
	del := func(tx writer.Transaction, ifMatch string) reply {
		return e.send(req{method: "DELETE", path: path(tx), headers: []string{"If-Match", ifMatch}})
	}
	a, b, c := e.create(ifMatchTx), e.create(ifMatchTx), e.create(ifMatchTx)

	r := del(a, `W/"1"`)
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	assert.Equal(t, int64(1), *r.problem(t).CurrentVersion)
	r = del(a, `"2", "3"`)
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	require.Equal(t, http.StatusNoContent, del(a, `"9", "1"`).Status)
	require.Equal(t, http.StatusNoContent, del(b, `*`).Status)
	require.Equal(t, http.StatusNoContent, del(c, `"1"`).Status)
	assert.Equal(t, 0, e.countTransactions(e.tenant, e.branch))

	// Gone: 404 whatever If-Match says (RFC 9110 §13.2.1).
	for _, ifMatch := range []string{`*`, `"1"`, `W/"1"`, `"1", "2"`} {
		r := del(a, ifMatch)
		assert.Equal(t, http.StatusNotFound, r.Status, "If-Match: %s: answer %s", ifMatch, r)
	}
}

// The directory takes the same If-Match: a branch, a tenant, an account
// and its addresses.
func TestIfMatch_DirectoryByRFC9110(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	branch := "/v1/tenants/" + e.tenant + "/branches/south"
	r := e.send(req{method: "PATCH", path: branch, body: `{"name":"South"}`, headers: []string{"If-Match", `W/"1"`}})
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	r = e.send(req{method: "PATCH", path: branch, body: `{"name":"South"}`, headers: []string{"If-Match", "*"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, `"2"`, r.Header.Get("ETag"))
	r = e.send(req{method: "PATCH", path: branch, body: `{"name":"South 2"}`, headers: []string{"If-Match", `"1", "2"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)

	tenant := "/v1/tenants/" + e.tenant
	r = e.asAdmin(req{method: "PATCH", path: tenant, body: `{"name":"T"}`, headers: []string{"If-Match", `"1", "2"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = e.asAdmin(req{method: "PATCH", path: tenant, body: `{"name":"T2"}`, headers: []string{"If-Match", `W/"2"`}})
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)

	a := e.account(e.tenant, uniqueAddress("ifm"))
	r = e.send(req{method: "PATCH", path: accountPath(a), body: `{"lastName":"S"}`, headers: []string{"If-Match", `W/"1"`}})
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	r = e.send(req{method: "PATCH", path: accountPath(a), body: `{"lastName":"S"}`, headers: []string{"If-Match", `*`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	extra := uniqueAddress("ifm.extra")
	r = e.send(req{method: "POST", path: accountPath(a) + "/emails", body: `{"address":"` + extra + `"}`,
		headers: []string{"If-Match", `"1", "2"`, "Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	r = e.send(req{method: "DELETE", path: emailPath(a, extra), headers: []string{"If-Match", `W/"3"`}})
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	r = e.send(req{method: "DELETE", path: emailPath(a, extra), headers: []string{"If-Match", `"3", "4"`}})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	r = e.send(req{method: "DELETE", path: accountPath(a), headers: []string{"If-Match", `"1", "2"`}})
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	r = e.send(req{method: "DELETE", path: accountPath(a), headers: []string{"If-Match", `*`}})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)

	r = e.send(req{method: "DELETE", path: branch, headers: []string{"If-Match", `W/"3"`}})
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	r = e.send(req{method: "DELETE", path: branch, headers: []string{"If-Match", `"1", "3"`}})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
}
