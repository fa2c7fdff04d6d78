package writer_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/writer"
)

// uniqueAddress returns an email address no other test uses.
func uniqueAddress(label string) string {
	return fmt.Sprintf("%s.%d-%d@example.com", label, time.Now().UnixNano()%1e9, tenantSeq.Add(1))
}

func addresses(a writer.Account) []string {
	var out []string
	for _, e := range a.Emails {
		out = append(out, e.Address)
	}
	return out
}

func TestAccounts_Lifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	work, home := uniqueAddress("ana"), uniqueAddress("ana.home")
	body := fmt.Sprintf(`{"firstName":"Ana","lastName":"Silva","role":"admin",
		"emails":[{"address":"  %s ","verified":true,"primary":true},{"address":%q}]}`, strings.ToUpper(work), home)
	key := newKey()
	// The user's own OIDC token proves the address it marks verified.
	create := req{method: "POST", path: "/v1/tenants/" + e.tenant + "/accounts", body: body, headers: []string{"Idempotency-Key", key,
		"Authorization", "Bearer " + e.tokenWith(e.tenant, writer.TokenOptions{Email: work, EmailVerified: true})}}
	r := e.send(create)
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	a := decodeAs[writer.Account](t, r)
	assert.Len(t, a.ID, 26, "a ULID")
	assert.Equal(t, e.tenant, a.Tenant)
	assert.Equal(t, "admin", a.Role)
	assert.Equal(t, "active", a.Status)
	assert.Equal(t, work, a.Email, "normalised: trimmed, lower-case")
	assert.Equal(t, int64(1), a.Version)
	require.Len(t, a.Emails, 2)
	for _, em := range a.Emails {
		assert.Equal(t, em.Address == work, em.Primary)
		assert.Equal(t, em.Address == work, em.Verified)
	}
	assert.Equal(t, accountPath(a), r.Header.Get("Location"))
	again := e.send(create)
	require.Equal(t, http.StatusCreated, again.Status, "a retry replays, not 409 email-taken: %s", again)
	assert.Equal(t, string(r.Body), string(again.Body))

	got := e.send(req{method: "GET", path: accountPath(a)})
	require.Equal(t, http.StatusOK, got.Status)
	assert.Equal(t, a, decodeAs[writer.Account](t, got))
	assert.Equal(t, `"1"`, got.Header.Get("ETag"))

	// Profile: If-Match required.
	r = e.send(req{method: "PATCH", path: accountPath(a), body: `{"lastName":"Souza"}`})
	require.Equal(t, http.StatusPreconditionRequired, r.Status)
	r = e.send(req{method: "PATCH", path: accountPath(a), body: `{"lastName":"Souza","role":"viewer"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	a = decodeAs[writer.Account](t, r)
	assert.Equal(t, "Souza", a.LastName)
	assert.Equal(t, int64(2), a.Version)
	r = e.send(req{method: "PATCH", path: accountPath(a), body: `{"firstName":"X"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusPreconditionFailed, r.Status)
	assert.Equal(t, int64(2), *r.problem(t).CurrentVersion)

	// Add, verify, make primary (seed 004), remove the old primary.
	extra := uniqueAddress("ana.extra")
	r = e.send(req{method: "POST", path: accountPath(a) + "/emails", body: `{"address":"` + extra + `"}`, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	a = decodeAs[writer.Account](t, r)
	assert.Equal(t, int64(3), a.Version, "every email change is a change of the account")
	assert.Equal(t, `"3"`, r.Header.Get("ETag"))
	assert.ElementsMatch(t, []string{work, home, extra}, addresses(a))

	r = e.send(req{method: "PATCH", path: emailPath(a, extra), body: `{"primary":true}`, headers: []string{"If-Match", "3"}})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemEmailNotVerified, r.problem(t).Type)
	r = e.send(req{method: "PATCH", path: emailPath(a, extra), body: `{"verified":true}`, headers: []string{"If-Match", "3",
		"Authorization", "Bearer " + e.tokenWith(e.tenant, writer.TokenOptions{Email: extra, EmailVerified: true})}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	a = decodeAs[writer.Account](t, r)
	r = e.send(req{method: "PATCH", path: emailPath(a, strings.ToUpper(extra)), body: `{"primary":true}`, headers: []string{"If-Match", "4"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	a = decodeAs[writer.Account](t, r)
	assert.Equal(t, extra, a.Email)
	assert.Equal(t, int64(5), a.Version)
	for _, em := range a.Emails {
		assert.Equal(t, em.Address == extra, em.Primary, em.Address)
	}
	assert.Equal(t, a, decodeAs[writer.Account](t, e.send(req{method: "GET", path: accountPath(a)})), "the answer is what is stored")

	r = e.send(req{method: "DELETE", path: emailPath(a, extra)})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemPrimaryEmail, r.problem(t).Type)
	r = e.send(req{method: "DELETE", path: emailPath(a, work), headers: []string{"If-Match", "5"}})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	assert.Empty(t, r.Body)
	a = decodeAs[writer.Account](t, e.send(req{method: "GET", path: accountPath(a)}))
	assert.Equal(t, int64(6), a.Version)
	assert.ElementsMatch(t, []string{home, extra}, addresses(a))
	r = e.send(req{method: "DELETE", path: emailPath(a, work)})
	require.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)

	// The freed address can be taken by anyone; the verified ones held
	// cannot. An unverified address (home) reserves nothing: whoever
	// verifies it first holds it, and the other can no longer verify it.
	other := e.account(e.newTenant(), work)
	r = e.postAccount(other.Tenant, `{"firstName":"B","lastName":"C","emails":[{"address":"`+extra+`","verified":true}]}`)
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemEmailTaken, r.problem(t).Type)
	r = e.postAccount(other.Tenant, `{"firstName":"B","lastName":"C","emails":[{"address":"`+home+`","verified":true}]}`)
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	r = e.asAdmin(req{method: "PATCH", path: emailPath(a, home), body: `{"verified":true}`, headers: []string{"If-Match", etagVersion(a)}})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemEmailTaken, r.problem(t).Type)

	// Listing: accounts with their addresses, paged between accounts.
	e.account(e.tenant, uniqueAddress("x"))
	e.account(e.tenant, uniqueAddress("y"))
	var listed []writer.Account
	cursor := ""
	for {
		path := "/v1/tenants/" + e.tenant + "/accounts?limit=1"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := e.send(req{method: "GET", path: path})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
		page := decodeAs[writer.AccountPage](t, r)
		require.LessOrEqual(t, len(page.Items), 1)
		listed = append(listed, page.Items...)
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	require.Len(t, listed, 3)
	assert.Equal(t, a, listed[0], "the first account, with all its addresses")
	for _, x := range listed {
		assert.NotEmpty(t, x.Emails)
	}

	// Soft delete keeps the addresses; DELETE removes the account and frees them.
	r = e.send(req{method: "PATCH", path: accountPath(a), body: `{"status":"deleted"}`, headers: []string{"If-Match", "6"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = e.send(req{method: "PATCH", path: accountPath(a), body: `{"status":"active"}`, headers: []string{"If-Match", "7"}})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemAccountDeleted, r.problem(t).Type)
	r = e.send(req{method: "POST", path: accountPath(a) + "/emails", body: `{"address":"` + uniqueAddress("z") + `"}`})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemAccountDeleted, r.problem(t).Type)
	r = e.send(req{method: "DELETE", path: accountPath(a), headers: []string{"If-Match", "6"}})
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	r = e.send(req{method: "DELETE", path: accountPath(a), headers: []string{"If-Match", "7"}})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	require.Equal(t, http.StatusNotFound, e.send(req{method: "GET", path: accountPath(a)}).Status)
	e.account(other.Tenant, extra) // freed; home stays with the account that verified it
}

func TestAccounts_InvalidRequestsAre400AndWriteNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	taken := uniqueAddress("taken")
	e.account(e.tenant, taken)
	fresh := uniqueAddress("fresh")
	for name, c := range map[string]struct{ body, field string }{
		"no emails":            {`{"firstName":"A","lastName":"B"}`, "emails"},
		"empty emails":         {`{"firstName":"A","lastName":"B","emails":[]}`, "emails"},
		"not an array":         {`{"firstName":"A","lastName":"B","emails":"a@b.co"}`, "emails"},
		"bad address":          {`{"firstName":"A","lastName":"B","emails":[{"address":"a@localhost","verified":true}]}`, "emails[0].address"},
		"unverified primary":   {`{"firstName":"A","lastName":"B","emails":[{"address":"` + fresh + `"}]}`, "emails[0].verified"},
		"two primaries":        {`{"firstName":"A","lastName":"B","emails":[{"address":"a1@b.co","verified":true,"primary":true},{"address":"a2@b.co","verified":true,"primary":true}]}`, "emails[1].primary"},
		"no primary among two": {`{"firstName":"A","lastName":"B","emails":[{"address":"a1@b.co","verified":true},{"address":"a2@b.co","verified":true}]}`, "emails"},
		"duplicate address":    {`{"firstName":"A","lastName":"B","emails":[{"address":"a1@b.co","verified":true,"primary":true},{"address":"A1@B.CO"}]}`, "emails[1].address"},
		"unknown email field":  {`{"firstName":"A","lastName":"B","emails":[{"address":"a1@b.co","verified":true,"label":"x"}]}`, "emails[0].label"},
		"bad role":             {`{"firstName":"A","lastName":"B","role":"root","emails":[{"address":"a1@b.co","verified":true}]}`, "role"},
		"deleted at creation":  {`{"firstName":"A","lastName":"B","status":"deleted","emails":[{"address":"a1@b.co","verified":true}]}`, "status"},
		"no last name":         {`{"firstName":"A","emails":[{"address":"a1@b.co","verified":true}]}`, "lastName"},
	} {
		r := e.postAccount(e.tenant, c.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: answer %s", name, r)
		assert.Equal(t, c.field, r.problem(t).Field, name)
	}
	tooMany := `{"firstName":"A","lastName":"B","emails":[`
	for i := range aggregates.MaxEmailsPerAccount + 1 {
		if i > 0 {
			tooMany += ","
		}
		tooMany += `{"address":"m` + strconv.Itoa(i) + `@b.co","verified":true,"primary":` + strconv.FormatBool(i == 0) + `}`
	}
	r := e.postAccount(e.tenant, tooMany+"]}")
	require.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)

	// A taken address among new ones: 409, and none of them is taken.
	r = e.postAccount(e.tenant, `{"firstName":"A","lastName":"B","emails":[{"address":"`+fresh+`","verified":true,"primary":true},{"address":"`+taken+`","verified":true}]}`)
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	p := r.problem(t)
	assert.Equal(t, writer.ProblemEmailTaken, p.Type)
	assert.Contains(t, p.Detail, taken)
	e.account(e.tenant, fresh) // still free
	r = e.postAccount(uniqueTenant(), `{"firstName":"A","lastName":"B","emails":[{"address":"`+uniqueAddress("n")+`","verified":true}]}`)
	require.Equal(t, http.StatusNotFound, r.Status, "an account needs its tenant: %s", r)

	// Email operations on a missing account or address.
	a := e.account(e.tenant, uniqueAddress("ops"))
	for name, c := range map[string]struct {
		rq     req
		status int
	}{
		"add to missing account": {req{method: "POST", path: "/v1/tenants/" + e.tenant + "/accounts/01J1Z7ZZZZZZZZZZZZZZZZZZZZ/emails", body: `{"address":"q@b.co"}`}, 404},
		"add own address":        {req{method: "POST", path: accountPath(a) + "/emails", body: `{"address":"` + a.Email + `"}`}, 409},
		"add primary flag":       {req{method: "POST", path: accountPath(a) + "/emails", body: `{"address":"q@b.co","primary":true}`}, 400},
		"add with stale version": {req{method: "POST", path: accountPath(a) + "/emails", body: `{"address":"q@b.co"}`, headers: []string{"If-Match", "9"}}, 412},
		"patch missing address":  {req{method: "PATCH", path: emailPath(a, "q@b.co"), body: `{"verified":true}`, headers: []string{"If-Match", "1", "Authorization", "Bearer " + e.adminToken()}}, 404},
		"patch without If-Match": {req{method: "PATCH", path: emailPath(a, a.Email), body: `{"primary":true}`}, 428},
		"primary false":          {req{method: "PATCH", path: emailPath(a, a.Email), body: `{"primary":false}`, headers: []string{"If-Match", "1"}}, 400},
		"unverify":               {req{method: "PATCH", path: emailPath(a, a.Email), body: `{"verified":false}`, headers: []string{"If-Match", "1"}}, 400},
		"bad address in path":    {req{method: "DELETE", path: accountPath(a) + "/emails/nope"}, 400},
	} {
		r := e.send(c.rq)
		require.Equal(t, c.status, r.Status, "%s: answer %s", name, r)
	}
	r = e.asAdmin(req{method: "PATCH", path: emailPath(a, a.Email), body: `{"primary":true,"verified":true}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusOK, r.Status, "already so: answer %s", r)
	assert.Equal(t, int64(1), decodeAs[writer.Account](t, r).Version, "nothing written")

	// At most MaxEmailsPerAccount addresses.
	for i := 1; i < aggregates.MaxEmailsPerAccount; i++ {
		r := e.send(req{method: "POST", path: accountPath(a) + "/emails", body: `{"address":"` + uniqueAddress("many") + `"}`})
		require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	}
	r = e.send(req{method: "POST", path: accountPath(a) + "/emails", body: `{"address":"` + uniqueAddress("many") + `"}`})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemTooManyEmails, r.problem(t).Type)
}

func TestAccountLookup_FindsTheTenantByAddressForAdminsOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	other := e.newTenant()
	address := uniqueAddress("lookup")
	a := e.account(other, address)
	lookup := "/v1/accounts:lookup?email=" + strings.ToUpper(address)
	r := e.send(req{method: "GET", path: lookup})
	require.Equal(t, http.StatusForbidden, r.Status, "a tenant token: answer %s", r)

	// GSI1 is eventually consistent: the address shows up shortly.
	require.Eventually(t, func() bool { return e.asAdmin(req{method: "GET", path: lookup}).Status == http.StatusOK }, 5*time.Second, 20*time.Millisecond)
	r = e.asAdmin(req{method: "GET", path: lookup})
	found := decodeAs[writer.Account](t, r)
	assert.Equal(t, other, found.Tenant, "the index names the tenant")
	assert.Equal(t, a.ID, found.ID)

	second := uniqueAddress("lookup2")
	r = e.asAdmin(req{method: "POST", path: accountPath(a) + "/emails", body: `{"address":"` + second + `","verified":true}`})
	require.Equal(t, http.StatusCreated, r.Status)
	require.Eventually(t, func() bool {
		r := e.asAdmin(req{method: "GET", path: "/v1/accounts:lookup?email=" + second})
		return r.Status == http.StatusOK && decodeAs[writer.Account](t, r).ID == a.ID
	}, 5*time.Second, 20*time.Millisecond, "any address, not only the primary")

	// A removed address is not found, even before the index catches up:
	// the hit is confirmed with a strongly consistent read.
	r = e.asAdmin(req{method: "DELETE", path: emailPath(a, second)})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	assert.Equal(t, http.StatusNotFound, e.asAdmin(req{method: "GET", path: "/v1/accounts:lookup?email=" + second}).Status)
	assert.Equal(t, http.StatusNotFound, e.asAdmin(req{method: "GET", path: "/v1/accounts:lookup?email=" + uniqueAddress("nobody")}).Status)
	r = e.asAdmin(req{method: "GET", path: "/v1/accounts:lookup?email=not-an-address"})
	require.Equal(t, http.StatusBadRequest, r.Status)
	assert.Equal(t, "email", r.problem(t).Field)
}

func etagVersion(a writer.Account) string { return strconv.FormatInt(a.Version, 10) }
