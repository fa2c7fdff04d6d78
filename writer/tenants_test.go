package writer_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

func TestTenants_AdminCreatesGetsListsAndPatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	id := uniqueTenant()
	key := newKey()
	create := req{method: "POST", path: "/v1/tenants", body: `{"id":"` + id + `","name":"Acme #1"}`, headers: []string{"Idempotency-Key", key}}

	// A tenant token cannot create tenants, nor list them: 403 before any read.
	before := e.dynamoCalls()
	for _, rq := range []req{create, {method: "GET", path: "/v1/tenants"}, {method: "GET", path: "/v1/accounts:lookup?email=a@b.co"},
		{method: "GET", path: "/v1/branches:lookup?document=1"},
		{method: "PATCH", path: "/v1/tenants/" + e.tenant, body: `{"status":"active"}`, headers: []string{"If-Match", "1"}}} {
		r := e.send(rq)
		require.Equal(t, http.StatusForbidden, r.Status, "%s %s: answer %s", rq.method, rq.path, r)
		assert.Contains(t, r.problem(t).Detail, "admin")
	}
	assert.Equal(t, before, e.dynamoCalls(), "no request without the admin scope reached DynamoDB")

	r := e.asAdmin(create)
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	tn := decodeAs[writer.Tenant](t, r)
	assert.Equal(t, writer.Tenant{ID: id, Name: "Acme #1", Status: "active", ReportPeriods: []string{"DAILY", "MONTHLY", "YEARLY"},
		CreatedAt: tn.CreatedAt, UpdatedAt: tn.CreatedAt, Version: 1}, tn)
	assert.Equal(t, "/v1/tenants/"+id, r.Header.Get("Location"))
	assert.Equal(t, `"1"`, r.Header.Get("ETag"))

	// A retry replays; the same id with another key is 409.
	again := e.asAdmin(create)
	require.Equal(t, http.StatusCreated, again.Status)
	assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, string(r.Body), string(again.Body))
	dup := e.asAdmin(req{method: "POST", path: "/v1/tenants", body: `{"id":"` + id + `","name":"Other"}`, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusConflict, dup.Status, "answer %s", dup)
	assert.Equal(t, writer.ProblemAlreadyExists, dup.problem(t).Type)

	// The tenant's own token reads it; another tenant's does not.
	own := e.send(req{method: "GET", path: "/v1/tenants/" + id, headers: []string{"Authorization", "Bearer " + e.tokenFor(id)}})
	require.Equal(t, http.StatusOK, own.Status, "answer %s", own)
	assert.Equal(t, tn, decodeAs[writer.Tenant](t, own))
	require.Equal(t, http.StatusForbidden, e.send(req{method: "GET", path: "/v1/tenants/" + id}).Status)
	require.Equal(t, http.StatusNotFound, e.asAdmin(req{method: "GET", path: "/v1/tenants/" + uniqueTenant()}).Status)

	// Listing (GSI1, eventually consistent): paged by a signed cursor.
	require.Eventually(t, func() bool {
		seen := map[string]bool{}
		cursor := ""
		for {
			path := "/v1/tenants?limit=3"
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			r := e.asAdmin(req{method: "GET", path: path})
			require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
			page := decodeAs[writer.TenantPage](t, r)
			require.LessOrEqual(t, len(page.Items), 3)
			for _, x := range page.Items {
				require.False(t, seen[x.ID], "%s listed twice", x.ID)
				seen[x.ID] = true
			}
			if page.NextCursor == "" {
				return seen[id] && seen[e.tenant]
			}
			cursor = page.NextCursor
		}
	}, 5*time.Second, 50*time.Millisecond)
	r = e.asAdmin(req{method: "GET", path: "/v1/tenants?cursor=forged"})
	require.Equal(t, http.StatusBadRequest, r.Status)
	assert.Equal(t, writer.ProblemInvalidCursor, r.problem(t).Type)

	// PATCH: If-Match required, stale is 412, current is 200.
	path := "/v1/tenants/" + id
	r = e.asAdmin(req{method: "PATCH", path: path, body: `{"status":"suspended"}`})
	require.Equal(t, http.StatusPreconditionRequired, r.Status, "answer %s", r)
	r = e.asAdmin(req{method: "PATCH", path: path, body: `{"status":"paused"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
	assert.Equal(t, "status", r.problem(t).Field)
	r = e.asAdmin(req{method: "PATCH", path: path, body: `{"status":"suspended","name":"Acme Ltd"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	patched := decodeAs[writer.Tenant](t, r)
	assert.Equal(t, "suspended", patched.Status)
	assert.Equal(t, "Acme Ltd", patched.Name)
	assert.Equal(t, int64(2), patched.Version)
	assert.Equal(t, tn.CreatedAt, patched.CreatedAt)
	r = e.asAdmin(req{method: "PATCH", path: path, body: `{"status":"active"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	assert.Equal(t, int64(2), *r.problem(t).CurrentVersion)
	r = e.asAdmin(req{method: "GET", path: path})
	assert.Equal(t, patched, decodeAs[writer.Tenant](t, r))
	r = e.asAdmin(req{method: "PATCH", path: "/v1/tenants/" + uniqueTenant(), body: `{"status":"active"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
}

func TestTenants_InvalidCreateIs400AndWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	for name, c := range map[string]struct{ body, field string }{
		"no id":         {`{"name":"x"}`, "id"},
		"id with #":     {`{"id":"a#b","name":"x"}`, "id"},
		"no name":       {`{"id":"x1"}`, "name"},
		"control char":  {`{"id":"x1","name":"a\u0007"}`, "name"},
		"bad status":    {`{"id":"x1","name":"x","status":"deleted"}`, "status"},
		"unknown field": {`{"id":"x1","name":"x","plan":"gold"}`, "plan"},
	} {
		r := e.asAdmin(req{method: "POST", path: "/v1/tenants", body: c.body, headers: []string{"Idempotency-Key", newKey()}})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: answer %s", name, r)
		assert.Equal(t, c.field, r.problem(t).Field, name)
	}
	r := e.asAdmin(req{method: "POST", path: "/v1/tenants", body: `{"id":"x1","name":"x"}`})
	require.Equal(t, http.StatusBadRequest, r.Status)
	assert.Equal(t, writer.ProblemIdempotencyKeyRequired, r.problem(t).Type)
	assert.Equal(t, http.StatusNotFound, e.asAdmin(req{method: "GET", path: "/v1/tenants/x1"}).Status)
}

func TestAuth_AdminTokenActsForAnyTenantAndMayOmitTheTenantClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(createBody)
	r := e.asAdmin(req{method: "GET", path: e.base() + "/transactions/" + tx.ID})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)

	// An admin token that names a tenant still acts for every tenant.
	tok, err := writer.NewToken([]byte(testSecret), writer.TokenOptions{Tenant: "someone-else", Admin: true})
	require.NoError(t, err)
	r = e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID, headers: []string{"Authorization", "Bearer " + tok}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)

	// Without the admin scope a token must name a valid tenant.
	_, err = writer.NewToken([]byte(testSecret), writer.TokenOptions{})
	assert.Error(t, err)
	noTenant := hs256(t, testSecret, claims("", func(c *writer.Claims) { c.Scope = "read write" }))
	r = e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID, headers: []string{"Authorization", "Bearer " + noTenant}})
	require.Equal(t, http.StatusUnauthorized, r.Status, "answer %s", r)
	scoped := hs256(t, testSecret, claims("", func(c *writer.Claims) { c.Scope = "read admin" }))
	r = e.send(req{method: "GET", path: "/v1/tenants?limit=1", headers: []string{"Authorization", "Bearer " + scoped}})
	require.Equal(t, http.StatusOK, r.Status, "admin among other scopes: answer %s", r)
}
