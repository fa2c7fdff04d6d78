package writer_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// Issue 26, directory controls: who may lift a suspension, what a
// suspended tenant may still change, and what an email claim proves.

// problemSuspendedByAdmin is spelled out, not writer.ProblemSuspendedByAdmin,
// so that this test compiles, and fails, without the change it proves.
const problemSuspendedByAdmin = writer.ProblemBase + "suspended-by-admin"

func branchField(t *testing.T, r reply, name string) any {
	t.Helper()
	return decodeAs[map[string]any](t, r)[name]
}

func TestDirectoryControls_TenantCannotLiftAnAdminsSuspensionOfItsBranch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	north := "/v1/tenants/" + e.tenant + "/branches/north"
	patch := func(asAdmin bool, path, body, version string) reply {
		rq := req{method: "PATCH", path: path, body: body, headers: []string{"If-Match", version}}
		if asAdmin {
			return e.asAdmin(rq)
		}
		return e.send(rq)
	}

	r := patch(true, north, `{"status":"suspended"}`, "1")
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "admin", branchField(t, r, "suspendedBy"))
	r = patch(false, north, `{"status":"active"}`, "2")
	require.Equal(t, http.StatusForbidden, r.Status, "the tenant lifts the admin's suspension: answer %s", r)
	assert.Equal(t, problemSuspendedByAdmin, r.problem(t).Type)
	r = e.post()
	require.Equal(t, http.StatusConflict, r.Status, "transactions stay refused: answer %s", r)
	assert.Equal(t, writer.ProblemBranchSuspended, r.problem(t).Type)
	// Suspending it again, or changing its name, leaves the suspension the admin's.
	r = patch(false, north, `{"status":"suspended","name":"North"}`, "2")
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "admin", branchField(t, r, "suspendedBy"))
	r = patch(false, north, `{"status":"active"}`, "3")
	require.Equal(t, http.StatusForbidden, r.Status, "answer %s", r)
	// The admin lifts it.
	r = patch(true, north, `{"status":"active"}`, "3")
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Nil(t, branchField(t, r, "suspendedBy"))
	require.Equal(t, http.StatusCreated, e.post().Status)

	// A tenant lifts its own suspension; an admin's over it is the admin's.
	south := "/v1/tenants/" + e.tenant + "/branches/south"
	r = patch(false, south, `{"status":"suspended"}`, "1")
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "tenant", branchField(t, r, "suspendedBy"))
	r = patch(false, south, `{"status":"active"}`, "2")
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = patch(false, south, `{"status":"suspended"}`, "3")
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = patch(true, south, `{"status":"suspended"}`, "4")
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "admin", branchField(t, r, "suspendedBy"))
	r = patch(false, south, `{"status":"active"}`, "5")
	require.Equal(t, http.StatusForbidden, r.Status, "answer %s", r)
	assert.Equal(t, problemSuspendedByAdmin, r.problem(t).Type)

	// A branch an admin creates suspended is the admin's to activate.
	r = e.asAdmin(req{method: "POST", path: "/v1/tenants/" + e.tenant + "/branches", headers: []string{"Idempotency-Key", newKey()},
		body: `{"id":"east","name":"East","document":"` + uniqueDocument() + `","status":"suspended"}`})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	assert.Equal(t, "admin", branchField(t, r, "suspendedBy"))
	r = patch(false, "/v1/tenants/"+e.tenant+"/branches/east", `{"status":"active"}`, "1")
	require.Equal(t, http.StatusForbidden, r.Status, "answer %s", r)
	r = e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches/east"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "suspended", branchField(t, r, "status"))
}

func TestDirectoryControls_TenantCannotLiftAnAdminsSuspensionOfAnAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	acc := e.account(e.tenant, "a-"+uniqueTenant()+"@example.com")
	r := e.asAdmin(req{method: "PATCH", path: accountPath(acc), body: `{"status":"suspended"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "admin", branchField(t, r, "suspendedBy"))
	r = e.send(req{method: "PATCH", path: accountPath(acc), body: `{"status":"active"}`, headers: []string{"If-Match", `"2"`}})
	require.Equal(t, http.StatusForbidden, r.Status, "answer %s", r)
	assert.Equal(t, problemSuspendedByAdmin, r.problem(t).Type)
	r = e.asAdmin(req{method: "PATCH", path: accountPath(acc), body: `{"status":"active"}`, headers: []string{"If-Match", `"2"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Nil(t, branchField(t, r, "suspendedBy"))
	// Its own suspension the tenant lifts.
	r = e.send(req{method: "PATCH", path: accountPath(acc), body: `{"status":"suspended"}`, headers: []string{"If-Match", `"3"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "tenant", branchField(t, r, "suspendedBy"))
	r = e.send(req{method: "PATCH", path: accountPath(acc), body: `{"status":"active"}`, headers: []string{"If-Match", `"4"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
}

func TestDirectoryControls_SuspendedTenantCannotChangeItsDirectory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	n := uniqueTenant()
	first, second, third := "a-"+n+"@example.com", "b-"+n+"@example.com", "c-"+n+"@example.com"
	acc := e.account(e.tenant, first)
	r := e.asAdmin(req{method: "POST", path: accountPath(acc) + "/emails", body: `{"address":"` + second + `"}`})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	doc := uniqueDocument()
	own := e.tokenWith(e.tenant, writer.TokenOptions{Documents: []string{doc}, Email: third, EmailVerified: true})

	r = e.asAdmin(req{method: "PATCH", path: "/v1/tenants/" + e.tenant, body: `{"status":"suspended"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)

	branches := "/v1/tenants/" + e.tenant + "/branches"
	for _, rq := range []req{
		{method: "POST", path: branches, body: `{"id":"east","name":"East","document":"` + doc + `"}`, headers: []string{"Idempotency-Key", newKey()}},
		{method: "PATCH", path: branches + "/north", body: `{"name":"North"}`, headers: []string{"If-Match", "1"}},
		{method: "PATCH", path: branches + "/north", body: `{"status":"suspended"}`, headers: []string{"If-Match", "1"}},
		{method: "DELETE", path: branches + "/south"},
		{method: "POST", path: "/v1/tenants/" + e.tenant + "/accounts", headers: []string{"Idempotency-Key", newKey()},
			body: `{"firstName":"Eve","lastName":"X","emails":[{"address":"` + third + `","verified":true}]}`},
		{method: "PATCH", path: accountPath(acc), body: `{"firstName":"Zed"}`, headers: []string{"If-Match", `"2"`}},
		{method: "POST", path: accountPath(acc) + "/emails", body: `{"address":"` + third + `","verified":true}`},
		{method: "PATCH", path: emailPath(acc, second), body: `{"primary":true}`, headers: []string{"If-Match", `"2"`}},
		{method: "DELETE", path: emailPath(acc, second)},
		{method: "DELETE", path: accountPath(acc)},
	} {
		rq.headers = append(rq.headers, "Authorization", "Bearer "+own)
		r := e.send(rq)
		require.Equal(t, http.StatusConflict, r.Status, "%s %s by the suspended tenant: answer %s", rq.method, rq.path, r)
		p := r.problem(t)
		assert.Equal(t, writer.ProblemTenantSuspended, p.Type, "%s %s", rq.method, rq.path)
		assert.Contains(t, p.Detail, "admin", "the problem says who can still change it")
	}
	// Nothing changed.
	got := decodeAs[writer.Account](t, e.asAdmin(req{method: "GET", path: accountPath(acc)}))
	assert.Equal(t, int64(2), got.Version)
	assert.Len(t, got.Emails, 2)
	require.Equal(t, http.StatusOK, e.asAdmin(req{method: "GET", path: branches + "/south"}).Status)
	require.Equal(t, http.StatusNotFound, e.asAdmin(req{method: "GET", path: "/v1/accounts:lookup?email=" + third}).Status)

	// An admin still changes it.
	r = e.asAdmin(req{method: "POST", path: branches, body: `{"id":"east","name":"East","document":"` + doc + `"}`, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	r = e.asAdmin(req{method: "PATCH", path: accountPath(acc), body: `{"firstName":"Zed"}`, headers: []string{"If-Match", `"2"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = e.asAdmin(req{method: "DELETE", path: branches + "/south"})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	e.requireConsistent()
}

// logBuffer is a slog handler's output, safe for the server's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestDirectoryControls_EmailClaimProvesOnlyItsOwnSpelling(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	e := newEnv(t, sharedTable(t), func(c *writer.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	n := uniqueTenant()
	create := func(claim, address string) reply {
		tok := e.tokenWith(e.tenant, writer.TokenOptions{Email: claim, EmailVerified: true})
		return e.send(req{method: "POST", path: "/v1/tenants/" + e.tenant + "/accounts", headers: []string{"Idempotency-Key", newKey(), "Authorization", "Bearer " + tok},
			body: `{"firstName":"Eve","lastName":"X","emails":[{"address":"` + address + `","verified":true}]}`})
	}
	for _, c := range []struct{ name, claim, address string }{
		{"sharp s does not prove ss", "stra\u00dfe" + n + "@example.de", "strasse" + n + "@example.de"},
		{"sharp s does not prove its folded stored form", "stra\u00dfe" + n + "@example.de", "stra\u00dfe" + n + "@example.de"},
		{"the Kelvin sign does not prove k", "\u212aate" + n + "@example.com", "kate" + n + "@example.com"},
		{"the Kelvin sign does not prove itself folded", "\u212aate" + n + "@example.com", "\u212aate" + n + "@example.com"},
		{"final sigma does not prove sigma", "\u03c2" + n + "@example.gr", "\u03c3" + n + "@example.gr"},
		{"full-width letters do not prove ASCII", "\uff42ob" + n + "@example.com", "bob" + n + "@example.com"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := create(c.claim, c.address)
			require.Equal(t, http.StatusForbidden, r.Status, "claim %q, address %q: answer %s", c.claim, c.address, r)
			p := r.problem(t)
			assert.Equal(t, writer.ProblemEmailNotProven, p.Type)
			assert.Contains(t, p.Detail, "folding", "the problem says why the claim does not prove it")
		})
	}
	for _, c := range []struct{ name, claim, address string }{
		{"ASCII case", "Bea" + n + "@Example.COM", "bea" + n + "@example.com"},
		{"the domain in either IDNA form", "jos\u00e9" + n + "@xn--bcher-kva.de", "jos\u00e9" + n + "@b\u00fccher.de"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := create(c.claim, c.address)
			require.Equal(t, http.StatusCreated, r.Status, "claim %q, address %q: answer %s", c.claim, c.address, r)
		})
	}

	// An address mixing scripts (a Cyrillic а among Latin letters) is
	// proven by a claim that spells it, and reported in the log.
	lookalike := "p\u0430ypal" + n + "@example.com"
	r := create(lookalike, lookalike)
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	assert.Contains(t, logs.String(), "mixes scripts")
	assert.Contains(t, logs.String(), "Cyrillic")
	assert.NotContains(t, logs.String(), "ypal"+n, "the address itself is not logged")
	plain := "plain" + n + "@example.com"
	before := strings.Count(logs.String(), "mixes scripts")
	require.Equal(t, http.StatusCreated, create(plain, plain).Status)
	assert.Equal(t, before, strings.Count(logs.String(), "mixes scripts"), "a single-script address is not reported")
}
