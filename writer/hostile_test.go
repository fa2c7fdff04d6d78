package writer_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
	// The status is checked first: under a suspended branch even a
	// transaction that does not exist is 409.
	r = e.send(req{method: "DELETE", path: e.base() + "/transactions/" + gone.ID})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
}

// tokenWith is a token for tenant with the given claims, as an identity
// provider would issue it.
func (e *env) tokenWith(tenant string, o writer.TokenOptions) string {
	e.t.Helper()
	o.Tenant = tenant
	tok, err := writer.NewToken([]byte(testSecret), o)
	require.NoError(e.t, err)
	return tok
}

func TestHostile_OtherSpellingsOfOneMailboxAreTaken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	a, b := e.newTenant(), e.newTenant()
	n := uniqueTenant() // a fresh local part per run
	for _, c := range []struct{ first, other, stored string }{
		{"josé" + n + "@example.com", "jose\u0301" + n + "@example.com", "josé" + n + "@example.com"}, // NFC, NFD
		{"bob" + n + "@example.com", "bob" + n + "@ｅｘａｍｐｌｅ.com", "bob" + n + "@example.com"},          // full-width domain
		{"carol" + n + "@bücher.de", "carol" + n + "@xn--bcher-kva.de", "carol" + n + "@bücher.de"},   // IDNA
		{"σ" + n + "@example.gr", "ς" + n + "@example.gr", "σ" + n + "@example.gr"},                   // final sigma
		{"dan" + n + "@example.com", "ＤＡＮ" + n + "@EXAMPLE.COM", "dan" + n + "@example.com"},          // full-width local part
	} {
		acc := e.account(a, c.first)
		assert.Equal(t, c.stored, acc.Email, "the canonical form is stored")
		r := e.postAccount(b, `{"firstName":"Eve","lastName":"X","emails":[{"address":"`+c.other+`","verified":true}]}`)
		require.Equal(t, http.StatusConflict, r.Status, "%q after %q: answer %s", c.other, c.first, r)
		assert.Equal(t, writer.ProblemEmailTaken, r.problem(t).Type)
		// The path parameter of an address is canonicalised too.
		r = e.asAdmin(req{method: "PATCH", path: emailPath(acc, c.other), body: `{"verified":true}`, headers: []string{"If-Match", `"1"`}})
		require.Equal(t, http.StatusOK, r.Status, "the address by another spelling: answer %s", r)
	}
	// What has no canonical form is 400, with the reason.
	for _, bad := range []string{"𝐛𝐨𝐛" + n + "@example.com", "ⓑⓞⓑ" + n + "@example.com", "bob" + n + "@xn--zz.com", "b\u200bob" + n + "@example.com"} {
		r := e.postAccount(b, `{"firstName":"Eve","lastName":"X","emails":[{"address":"`+bad+`","verified":true}]}`)
		require.Equal(t, http.StatusBadRequest, r.Status, "%q: answer %s", bad, r)
		p := r.problem(t)
		assert.Equal(t, writer.ProblemInvalidField, p.Type)
		assert.Equal(t, "emails[0].address", p.Field)
	}
	e.requireConsistent()
}

func TestHostile_DocumentSpellingsAreOneDocument(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	doc := uniqueDocument()[1:] // digits only
	r := createBranchAs(e, e.adminToken(), e.tenant, "b1", doc)
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	other := e.newTenant()
	r = createBranchAs(e, e.adminToken(), other, "b1", toFullWidth(doc))
	require.Equal(t, http.StatusConflict, r.Status, "full-width digits are the same document: answer %s", r)
	assert.Equal(t, writer.ProblemDocumentTaken, r.problem(t).Type)
}

func toFullWidth(s string) string {
	out := []rune{}
	for _, r := range s {
		if r >= '!' && r <= '~' {
			r += 0xFF01 - '!'
		}
		out = append(out, r)
	}
	return string(out)
}

func createBranchAs(e *env, token, tenant, id, document string) reply {
	e.t.Helper()
	return e.send(req{method: "POST", path: "/v1/tenants/" + tenant + "/branches", headers: []string{"Idempotency-Key", newKey(), "Authorization", "Bearer " + token},
		body: `{"id":"` + id + `","name":"Branch","document":"` + document + `"}`})
}

func TestHostile_VerificationNeedsProof(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	victim, attacker := e.newTenant(), e.newTenant()
	ceo := "ceo-" + uniqueTenant() + "@acme.example"
	as := func(tok string, rq req) reply {
		rq.headers = append(rq.headers, "Authorization", "Bearer "+tok)
		return e.send(rq)
	}
	accounts := func(tenant string) string { return "/v1/tenants/" + tenant + "/accounts" }
	plain := e.tokenFor(attacker)

	// The attacker's own token cannot claim someone else's address as verified.
	body := `{"firstName":"Eve","lastName":"X","emails":[{"address":"` + ceo + `","verified":true}]}`
	r := as(plain, req{method: "POST", path: accounts(attacker), body: body, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusForbidden, r.Status, "answer %s", r)
	p := r.problem(t)
	assert.Equal(t, writer.ProblemEmailNotProven, p.Type)
	assert.Equal(t, "emails[0].verified", p.Field)
	// Nor with an email claim that is not verified, or is another address.
	for _, o := range []writer.TokenOptions{{Email: ceo}, {Email: "eve@evil.example", EmailVerified: true}} {
		r = as(e.tokenWith(attacker, o), req{method: "POST", path: accounts(attacker), body: body, headers: []string{"Idempotency-Key", newKey()}})
		require.Equal(t, http.StatusForbidden, r.Status, "claims %+v: answer %s", o, r)
	}
	// Adding it verified to an account of its own, or verifying it later, is refused too.
	own := e.account(attacker, "eve-"+uniqueTenant()+"@evil.example")
	r = as(plain, req{method: "POST", path: accountPath(own) + "/emails", body: `{"address":"` + ceo + `","verified":true}`})
	require.Equal(t, http.StatusForbidden, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemEmailNotProven, r.problem(t).Type)
	r = as(plain, req{method: "POST", path: accountPath(own) + "/emails", body: `{"address":"` + ceo + `"}`})
	require.Equal(t, http.StatusCreated, r.Status, "unverified, it may be added: answer %s", r)
	r = as(plain, req{method: "PATCH", path: emailPath(own, ceo), body: `{"verified":true,"primary":true}`, headers: []string{"If-Match", `"2"`}})
	require.Equal(t, http.StatusForbidden, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemEmailNotProven, r.problem(t).Type)
	// An unverified address reserves nothing: the attacker's unverified
	// copy (and many more, in other accounts) does not block the owner.
	for range 11 {
		squat := e.account(attacker, "sq-"+uniqueTenant()+"@evil.example")
		r = as(plain, req{method: "POST", path: accountPath(squat) + "/emails", body: `{"address":"` + ceo + `"}`})
		require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	}

	// The owner of the address proves it with an OIDC token (email claim in
	// any spelling, email_verified true), and so does an admin.
	proof := e.tokenWith(victim, writer.TokenOptions{Email: strings.ToUpper(ceo), EmailVerified: true})
	r = as(proof, req{method: "POST", path: accounts(victim), body: body, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusCreated, r.Status, "the unverified copies do not block the owner: answer %s", r)
	owner := decodeAs[writer.Account](t, r)
	// Now no one else can verify it, not even an admin.
	r = e.asAdmin(req{method: "PATCH", path: emailPath(own, ceo), body: `{"verified":true}`, headers: []string{"If-Match", `"2"`}})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemEmailTaken, r.problem(t).Type)
	// The lookup finds the verified holder, however many unverified copies.
	r = e.asAdmin(req{method: "GET", path: "/v1/accounts:lookup?email=" + ceo})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, owner.ID, decodeAs[writer.Account](t, r).ID)
	r = e.postAccount(victim, `{"firstName":"Ana","lastName":"X","emails":[{"address":"cfo-`+uniqueTenant()+`@acme.example","verified":true}]}`)
	require.Equal(t, http.StatusCreated, r.Status, "admin: answer %s", r)

	// Documents: a tenant's own token cannot claim a registration number;
	// one whose documents claim holds it can, and an admin can.
	doc := uniqueDocument()
	r = createBranchAs(e, plain, attacker, "hq", doc)
	require.Equal(t, http.StatusForbidden, r.Status, "answer %s", r)
	p = r.problem(t)
	assert.Equal(t, writer.ProblemDocumentNotProven, p.Type)
	assert.Equal(t, "document", p.Field)
	r = e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/north", body: `{"document":"` + doc + `"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusForbidden, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemDocumentNotProven, r.problem(t).Type)
	r = createBranchAs(e, e.tokenWith(attacker, writer.TokenOptions{Documents: []string{"x", strings.ToLower(doc[:3]) + "." + doc[3:]}}), attacker, "hq", doc)
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	r = createBranchAs(e, e.adminToken(), victim, "hq", uniqueDocument())
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	e.requireConsistent()
}

func TestHostile_OneTenantCannotTakeTheWholeAPI(t *testing.T) {
	t.Parallel()
	// A bucket of 3 that refills once an hour: the fourth request within
	// the test is refused however slow the machine is.
	e := newEnv(t, sharedTable(t), func(c *writer.Config) { c.TenantRate, c.TenantBurst = 1.0/3600, 3 })
	for i := range 3 {
		r := e.send(req{method: "GET", path: e.base() + "/transactions"})
		require.Equal(t, http.StatusOK, r.Status, "request %d: answer %s", i+1, r)
	}
	writes := e.dynamoCalls()
	r := e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusTooManyRequests, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemRateLimited, r.problem(t).Type)
	secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", r.Header.Get("Retry-After"))
	assert.Greater(t, secs, 60, "the next token is most of an hour away")
	assert.Equal(t, writes, e.dynamoCalls(), "a limited request reads and writes nothing")
	assert.Zero(t, e.countTransactions(e.tenant, e.branch))

	// Another tenant has a bucket of its own, and admins are not limited.
	other := e.newTenant()
	r = e.send(req{method: "GET", path: "/v1/tenants/" + other + "/accounts", headers: []string{"Authorization", "Bearer " + e.tokenFor(other)}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = e.asAdmin(req{method: "GET", path: e.base() + "/transactions"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	// Requests that do not authenticate, or are for another tenant, take
	// nothing from the bucket: nobody can drain another tenant's.
	for range 5 {
		require.Equal(t, http.StatusUnauthorized, e.send(req{method: "GET", path: "/v1/tenants/" + other + "/accounts", noAuth: true}).Status)
		require.Equal(t, http.StatusForbidden, e.send(req{method: "GET", path: "/v1/tenants/" + other + "/accounts"}).Status)
	}
	r = e.send(req{method: "GET", path: "/v1/tenants/" + other + "/accounts", headers: []string{"Authorization", "Bearer " + e.tokenFor(other)}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)

	assert.Equal(t, 5.0, testutil.ToFloat64(e.metrics.RateLimit.WithLabelValues("allowed")))
	assert.Equal(t, 1.0, testutil.ToFloat64(e.metrics.RateLimit.WithLabelValues("limited")))
	body := e.send(req{method: "GET", path: "/metrics", noAuth: true}).Body
	assert.Contains(t, string(body), `ledger_writer_rate_limit_total{outcome="limited"} 1`)
	assert.NotContains(t, string(body), e.tenant, "no tenant label")
}

// A request committed by a writer from before the decoded-route
// fingerprint, retried after the upgrade, still replays.
func TestHostile_RecordsFingerprintedBeforeTheUpgradeStillReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	key := newKey()
	path := e.base() + "/transactions"
	sum := sha256.Sum256([]byte("POST\n" + path + "\n\n" + createBody))
	// The record as such a writer stored it: the whole answer, Location and ETag included.
	const id = "01KG64X2T0EJ4FD06S4JBS0277"
	stored := fmt.Sprintf(`{"id":%q,"tenant":%q,"branch":%q,"type":"INCOME","amount":"1","category":"a",`+
		`"createdAt":"2026-01-31T12:00:00Z","updatedAt":"2026-01-31T12:00:00Z","version":1}`, id, e.tenant, e.branch) + "\n"
	_, err := e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]ddbAV{
		"PK": s("IDEMPOTENCY#" + e.tenant + "#" + key), "SK": s("REQUEST"), "entityType": s("IDEMPOTENCY"),
		"fingerprint": s(hex.EncodeToString(sum[:])), "status": n(201), "body": s(stored),
		"location": s(path + "/" + id), "etag": s(`"1"`),
		"expiresAt": n(time.Now().Add(time.Hour).Unix()),
	}})
	require.NoError(t, err)
	r := e.send(req{method: "POST", path: path, body: createBody, headers: []string{"Idempotency-Key", key}})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	assert.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, stored, string(r.Body))
	assert.Zero(t, e.countTransactions(e.tenant, e.branch), "nothing written again")
}

func n(v int64) ddbAV { return &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)} }
