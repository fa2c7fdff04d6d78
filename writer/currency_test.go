package writer_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/writer"
)

// Tests of a branch's currency (issue 24, item 1; writer/currency.go):
// through the real HTTP server, against DynamoDB Local.

// postCurrencyBranch creates a branch of the env's tenant with an admin token (the
// tenant's own token proves no document) and extra body members.
func (e *env) postCurrencyBranch(id, extra string) reply {
	e.t.Helper()
	body := fmt.Sprintf(`{"id":%q,"name":"Branch %s","document":%q%s}`, id, id, uniqueDocument(), extra)
	return e.asAdmin(req{method: "POST", path: "/v1/tenants/" + e.tenant + "/branches", body: body, headers: []string{"Idempotency-Key", newKey()}})
}

// patchBranch sends a PATCH of the env's branch id at version v with the
// env's (tenant) token.
func (e *env) patchBranch(id string, v int64, body string) reply {
	e.t.Helper()
	return e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/" + id, body: body, headers: []string{"If-Match", fmt.Sprintf(`"%d"`, v)}})
}

// storedAttr is the S attribute name of the item at k as stored ("" and
// false when absent).
func (e *env) storedAttr(k aggregates.Key, name string) (string, bool) {
	e.t.Helper()
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.table, Key: map[string]ddbAV{"PK": s(k.PK), "SK": s(k.SK)}, ConsistentRead: ptr(true)})
	require.NoError(e.t, err)
	require.NotNil(e.t, out.Item, "no item at %v", k)
	av, ok := out.Item[name]
	if !ok {
		return "", false
	}
	sv, isS := av.(*ddbtypes.AttributeValueMemberS)
	require.True(e.t, isS, "%s is %T, want S", name, av)
	return sv.Value, true
}

// mustTime parses an RFC 3339 time of an answer.
func mustTime(t *testing.T, v string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, v)
	require.NoError(t, err)
	return at
}

func TestBranchCurrency_SetAtCreationValidatedAndShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	cases := map[string]struct {
		member string
		status int
		want   string // the currency shown (201) or the detail's part (4xx)
	}{
		"BRL":                        {`,"currency":"BRL"`, 201, "BRL"},
		"JPY":                        {`,"currency":"JPY"`, 201, "JPY"},
		"a code added after CLDR 32": {`,"currency":"VES"`, 201, "VES"},
		"a historic code":            {`,"currency":"DEM"`, 201, "DEM"},
		"none":                       {``, 201, ""},
		"null":                       {`,"currency":null`, 201, ""},
		"lower case":                 {`,"currency":"brl"`, 422, "upper case (BRL)"},
		"mixed case":                 {`,"currency":"Brl"`, 422, "upper case (BRL)"},
		"unknown":                    {`,"currency":"ZZZ"`, 422, "not an ISO 4217 currency code"},
		"no currency (XXX)":          {`,"currency":"XXX"`, 422, "not a currency amounts can be in"},
		"gold":                       {`,"currency":"XAU"`, 422, "not a currency amounts can be in"},
		"two letters":                {`,"currency":"BR"`, 422, "three upper-case letters"},
		"padded":                     {`,"currency":" BRL"`, 422, "three upper-case letters"},
		"empty":                      {`,"currency":""`, 422, "three upper-case letters"},
		"a number":                   {`,"currency":986`, 400, "must be a string"},
	}
	i := 0
	for name, c := range cases {
		i++
		id := fmt.Sprintf("cur%d", i)
		r := e.postCurrencyBranch(id, c.member)
		require.Equal(t, c.status, r.Status, "%s: answer %s", name, r)
		if c.status != http.StatusCreated {
			p := r.problem(t)
			assert.Equal(t, writer.ProblemInvalidField, p.Type, name)
			assert.Equal(t, "currency", p.Field, name)
			assert.Contains(t, p.Detail, c.want, name)
			assert.Equal(t, http.StatusNotFound, e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches/" + id}).Status, "%s: nothing written", name)
			continue
		}
		assert.Equal(t, c.want, decodeAs[writer.Branch](t, r).Currency, name)
		got := decodeAs[writer.Branch](t, e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches/" + id}))
		assert.Equal(t, c.want, got.Currency, "%s: as read back", name)
		stored, ok := e.storedAttr(aggregates.BranchKey(e.tenant, id), "currency")
		assert.Equal(t, c.want != "", ok, "%s: a branch without a currency stores none", name)
		assert.Equal(t, c.want, stored, name)
	}
}

func TestBranchCurrency_PatchAllowedUntilTheFirstTransactionThen409(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	require.Equal(t, http.StatusCreated, e.postCurrencyBranch("shop", "").Status)
	e.branch = "shop"

	r := e.patchBranch("shop", 1, `{"currency":"GBP"}`)
	require.Equal(t, http.StatusOK, r.Status, "no transactions yet: answer %s", r)
	assert.Equal(t, "GBP", decodeAs[writer.Branch](t, r).Currency)
	r = e.patchBranch("shop", 2, `{"currency":"JPY","name":"Tokyo"}`)
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "JPY", decodeAs[writer.Branch](t, r).Currency)
	r = e.patchBranch("shop", 3, `{"currency":"jpy"}`)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "answer %s", r)
	assert.Equal(t, "currency", r.problem(t).Field)
	r = e.patchBranch("shop", 3, `{"currency":null}`)
	require.Equal(t, http.StatusBadRequest, r.Status, "a currency cannot be removed: answer %s", r)

	tx := e.create(`{"type":"INCOME","amount":"1500","category":"sales"}`)
	assert.Equal(t, "JPY", tx.Currency)

	r = e.patchBranch("shop", 3, `{"currency":"BRL"}`)
	require.Equal(t, http.StatusConflict, r.Status, "the branch has a transaction: answer %s", r)
	p := r.problem(t)
	assert.Equal(t, writer.ProblemBranchHasTransactions, p.Type)
	assert.Equal(t, "currency", p.Field)
	assert.Contains(t, p.Detail, "JPY")
	// Its own currency again is no change; other fields still change.
	r = e.patchBranch("shop", 3, `{"currency":"JPY","name":"Tokyo Ginza"}`)
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	// Deleting every transaction leaves the marker, and the currency, as is.
	require.Equal(t, http.StatusNoContent, e.send(req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID}).Status)
	r = e.patchBranch("shop", 4, `{"currency":"BRL"}`)
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	b := decodeAs[writer.Branch](t, e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches/shop"}))
	assert.Equal(t, "JPY", b.Currency)
	assert.Equal(t, int64(4), b.Version, "no refused PATCH wrote")

	// A branch without a currency that has transactions keeps having none.
	e.branch = "north"
	e.create(createBody)
	r = e.patchBranch("north", 1, `{"currency":"EUR"}`)
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Contains(t, r.problem(t).Detail, "has none")
}

func TestTransactionAmount_AtMostTheFractionDigitsOfTheBranchCurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	for id, cur := range map[string]string{"tokyo": "JPY", "manama": "BHD", "saopaulo": "BRL"} {
		require.Equal(t, http.StatusCreated, e.postCurrencyBranch(id, `,"currency":"`+cur+`"`).Status)
	}
	cases := []struct {
		branch, amount string // amount as the JSON value
		status         int
		stored         string // the amount stored (201)
	}{
		{"tokyo", `"10.5"`, 422, ""},
		{"tokyo", `10.5`, 422, ""},
		{"tokyo", `"0.1"`, 422, ""},
		{"tokyo", `"10"`, 201, "10"},
		{"tokyo", `"10.000"`, 201, "10"}, // trailing zeros are no digits: it is 10 yen
		{"manama", `"1.234"`, 201, "1.234"},
		{"manama", `"1.2345"`, 422, ""},
		{"manama", `"1.2340"`, 201, "1.234"},
		{"saopaulo", `"0.01"`, 201, "0.01"},
		{"saopaulo", `"0.001"`, 422, ""},
		{"north", `"0.00000001"`, 201, "0.00000001"}, // no currency: today's rule, 8 digits
		{"north", `"0.000000001"`, 400, ""},
	}
	for _, c := range cases {
		e.branch = c.branch
		name := c.branch + " " + c.amount
		before := e.countTransactions(e.tenant, c.branch)
		r := e.send(req{method: "POST", path: e.base() + "/transactions", body: `{"type":"EXPENSE","amount":` + c.amount + `,"category":"rent"}`,
			headers: []string{"Idempotency-Key", newKey()}})
		require.Equal(t, c.status, r.Status, "%s: answer %s", name, r)
		if c.status != http.StatusCreated {
			p := r.problem(t)
			assert.Equal(t, writer.ProblemInvalidField, p.Type, name)
			assert.Equal(t, "amount", p.Field, name)
			assert.Equal(t, before, e.countTransactions(e.tenant, c.branch), "%s: nothing written", name)
			continue
		}
		tx := r.transaction(t)
		assert.Equal(t, c.stored, tx.Amount, name)
		want := map[string]string{"tokyo": "JPY", "manama": "BHD", "saopaulo": "BRL"}[c.branch]
		assert.Equal(t, want, tx.Currency, "%s: the answer shows the currency", name)
		stored, ok := e.storedAttr(aggregates.TransactionKey(e.tenant, c.branch, aggregates.DateOf(mustTime(t, tx.CreatedAt)), tx.ID), "currency")
		assert.Equal(t, want != "", ok, "%s: stamped only where the branch has a currency", name)
		assert.Equal(t, want, stored, name)
		got := e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID}).transaction(t)
		assert.Equal(t, want, got.Currency, "%s: as read back", name)
	}

	// A PATCH of the amount is held to the same rule; the stamp stays.
	e.branch = "tokyo"
	tx := e.create(`{"type":"INCOME","amount":"700","category":"sales"}`)
	path := e.base() + "/transactions/" + tx.ID
	r := e.send(req{method: "PATCH", path: path, body: `{"amount":"7.5"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "answer %s", r)
	assert.Equal(t, "amount", r.problem(t).Field)
	r = e.send(req{method: "PATCH", path: path, body: `{"amount":"750","category":"other"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "JPY", r.transaction(t).Currency)
	assert.Equal(t, "750", r.transaction(t).Amount)
	page := decodeAs[writer.ListPage](t, e.send(req{method: "GET", path: e.base() + "/transactions"}))
	require.NotEmpty(t, page.Items)
	for _, it := range page.Items {
		assert.Equal(t, "JPY", it.Currency, "the listing shows the currency")
	}
}

// raceHook runs fn, once, just before the next DynamoDB request of
// operation op the env's writer sends (its FaultTransport), then lets the
// request through: fn commits something between what the request read and
// its commit.
func (e *env) raceHook(op string, fn func()) {
	var armed atomic.Bool
	armed.Store(true)
	e.calls.Decide = func(got string) ledgertest.Fault {
		if got == op && armed.CompareAndSwap(true, false) {
			fn()
		}
		return ledgertest.Pass
	}
	e.t.Cleanup(func() { e.calls.Decide = nil })
}

// viaSeeder sends a request through the seeder's writer, a writer of its
// own (another process, as far as the env's writer knows), with an admin
// token.
func (e *env) viaSeeder(method, path, body string, headers ...string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	hr := httptest.NewRequest(method, path, strings.NewReader(body))
	hr.Header.Set("Authorization", "Bearer "+e.seed.token)
	hr.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		hr.Header.Set(headers[i], headers[i+1])
	}
	e.seed.srv.ServeHTTP(rec, hr)
	return rec
}

// TestBranchCurrency_ChangeCommittedBeforeTheFirstCreateCommitsIsHonoured:
// a branch's first create read the branch in BRL; another writer changes
// the currency to JPY before the create commits. The create's marker
// Update is conditional on the currency it read, so it prepares again and
// is held to JPY: 10.25 is refused (422 amount), 1025 is stamped JPY.
// Without the condition the create commits a transaction stamped BRL in a
// JPY branch.
func TestBranchCurrency_ChangeCommittedBeforeTheFirstCreateCommitsIsHonoured(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	for _, c := range []struct {
		branch, amount string
		status         int
	}{{"race1", "10.25", 422}, {"race2", "1025", 201}} {
		require.Equal(t, http.StatusCreated, e.postCurrencyBranch(c.branch, `,"currency":"BRL"`).Status)
		e.branch = c.branch
		branchPath := "/v1/tenants/" + e.tenant + "/branches/" + c.branch
		e.raceHook("TransactWriteItems", func() {
			rec := e.viaSeeder("PATCH", branchPath, `{"currency":"JPY"}`, "If-Match", `"1"`)
			require.Equal(t, http.StatusOK, rec.Code, "the racing PATCH: answer %s", rec.Body)
		})
		r := e.send(req{method: "POST", path: e.base() + "/transactions", body: `{"type":"INCOME","amount":"` + c.amount + `","category":"sales"}`,
			headers: []string{"Idempotency-Key", newKey()}})
		require.Equal(t, c.status, r.Status, "%s: answer %s", c.amount, r)
		b := decodeAs[writer.Branch](t, e.send(req{method: "GET", path: branchPath}))
		assert.Equal(t, "JPY", b.Currency)
		if c.status == http.StatusUnprocessableEntity {
			assert.Equal(t, "amount", r.problem(t).Field)
			assert.Zero(t, e.countTransactions(e.tenant, c.branch), "nothing written")
			assert.False(t, b.HasTransactions)
			continue
		}
		tx := r.transaction(t)
		assert.Equal(t, "JPY", tx.Currency, "stamped with the currency committed before it")
		stored, _ := e.storedAttr(aggregates.TransactionKey(e.tenant, c.branch, aggregates.DateOf(mustTime(t, tx.CreatedAt)), tx.ID), "currency")
		assert.Equal(t, "JPY", stored)
		assert.True(t, b.HasTransactions)
	}
}

// TestBranchCurrency_ChangeLosingToTheFirstCreateIs409: a PATCH of the
// currency read the branch without transactions; another writer commits
// the branch's first transaction before the PATCH commits. The PATCH's
// condition (no hasTransactions marker) refuses it: 409, and the
// transaction and the branch keep BRL. Without the condition (the version
// alone: the marker is no change of version) the PATCH commits and the
// transaction is in another currency than its branch.
func TestBranchCurrency_ChangeLosingToTheFirstCreateIs409(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	require.Equal(t, http.StatusCreated, e.postCurrencyBranch("race", `,"currency":"BRL"`).Status)
	e.branch = "race"
	// The PATCH commits in one transaction with the tenant's currency set
	// (JPY is new to it: currencycap.go).
	e.raceHook("TransactWriteItems", func() {
		rec := e.viaSeeder("POST", e.base()+"/transactions", `{"type":"INCOME","amount":"12.34","category":"sales"}`, "Idempotency-Key", newKey())
		require.Equal(t, http.StatusCreated, rec.Code, "the racing create: answer %s", rec.Body)
	})
	r := e.patchBranch("race", 1, `{"currency":"JPY"}`)
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	p := r.problem(t)
	assert.Equal(t, writer.ProblemBranchHasTransactions, p.Type)
	assert.Equal(t, "currency", p.Field)
	b := decodeAs[writer.Branch](t, e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches/race"}))
	assert.Equal(t, "BRL", b.Currency)
	assert.Equal(t, int64(1), b.Version)
	page := decodeAs[writer.ListPage](t, e.send(req{method: "GET", path: e.base() + "/transactions"}))
	require.Len(t, page.Items, 1)
	assert.Equal(t, "BRL", page.Items[0].Currency)
}

// TestBranchCurrency_AnotherTenantsTokenCannotReadOrChangeIt: an attacker
// with a valid token of its own tenant reads, changes and writes nothing of
// another tenant's branch currency or transactions.
func TestBranchCurrency_AnotherTenantsTokenCannotReadOrChangeIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	require.Equal(t, http.StatusCreated, e.postCurrencyBranch("victim", `,"currency":"BRL"`).Status)
	attacker := newEnv(t, e.table)
	path := "/v1/tenants/" + e.tenant + "/branches/victim"
	for _, rq := range []req{
		{method: "GET", path: path},
		{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches"},
		{method: "PATCH", path: path, body: `{"currency":"JPY"}`, headers: []string{"If-Match", `"1"`}},
		{method: "POST", path: path + "/transactions", body: `{"type":"INCOME","amount":"10.5","category":"x"}`, headers: []string{"Idempotency-Key", newKey()}},
		{method: "GET", path: path + "/transactions"},
	} {
		r := attacker.send(rq)
		assert.Equal(t, http.StatusForbidden, r.Status, "%s %s: answer %s", rq.method, rq.path, r)
		assert.NotContains(t, string(r.Body), "BRL", "%s %s: nothing of the branch shown", rq.method, rq.path)
	}
	// The attacker's own branch of the same id is its own, currency and all.
	require.Equal(t, http.StatusCreated, attacker.postCurrencyBranch("victim", `,"currency":"JPY"`).Status)
	b := decodeAs[writer.Branch](t, e.send(req{method: "GET", path: path}))
	assert.Equal(t, "BRL", b.Currency)
	assert.Equal(t, int64(1), b.Version)
	assert.False(t, b.HasTransactions)
	assert.Zero(t, e.countTransactions(e.tenant, "victim"))
}

// TestBranchCurrency_DamagedStoredCurrencyRefusesWritesUntilMended: a
// branch whose stored currency is not a code (changed by hand) gets no
// transaction stamped with it: creates fail (500) and write nothing; a
// PATCH of the currency mends it while the branch has no transactions.
func TestBranchCurrency_DamagedStoredCurrencyRefusesWritesUntilMended(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	require.Equal(t, http.StatusCreated, e.postCurrencyBranch("hurt", `,"currency":"BRL"`).Status)
	e.branch = "hurt"
	k := aggregates.BranchKey(e.tenant, "hurt")
	_, err := e.ddb.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: &e.table,
		Key: map[string]ddbAV{"PK": s(k.PK), "SK": s(k.SK)}, UpdateExpression: ptr("SET currency = :c"),
		ExpressionAttributeValues: map[string]ddbAV{":c": s("brl")}})
	require.NoError(t, err)
	r := e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusInternalServerError, r.Status, "answer %s", r)
	assert.Zero(t, e.countTransactions(e.tenant, "hurt"))
	r = e.patchBranch("hurt", 1, `{"currency":"BRL"}`)
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "BRL", e.create(createBody).Currency)
}

// TestTransactionAmount_RefusalForTheCurrencyIsKeptUnderItsKey: a create
// refused for its amount's digits is a result of the currency it read:
// retried with its key it is replayed, even after the currency changed.
func TestTransactionAmount_RefusalForTheCurrencyIsKeptUnderItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	require.Equal(t, http.StatusCreated, e.postCurrencyBranch("osaka", `,"currency":"JPY"`).Status)
	e.branch = "osaka"
	key := newKey()
	post := func() reply {
		return e.send(req{method: "POST", path: e.base() + "/transactions", body: `{"type":"INCOME","amount":"10.5","category":"sales"}`, headers: []string{"Idempotency-Key", key}})
	}
	first := post()
	require.Equal(t, http.StatusUnprocessableEntity, first.Status, "answer %s", first)
	require.Equal(t, http.StatusOK, e.patchBranch("osaka", 1, `{"currency":"BRL"}`).Status)
	again := post()
	require.Equal(t, http.StatusUnprocessableEntity, again.Status, "answer %s", again)
	assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, "amount", again.problem(t).Field)
	assert.Zero(t, e.countTransactions(e.tenant, "osaka"))
	// A new key is a new request: 10.5 is an amount in reais.
	assert.Equal(t, "BRL", e.create(`{"type":"INCOME","amount":"10.5","category":"sales"}`).Currency)
}
