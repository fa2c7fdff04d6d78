package writer_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// The Location of an added address is a resource: GET reads the address
// as the account holds it, the account's version as its ETag, in any
// spelling; a removed address is 404 there.
func TestEmails_TheLocationOfAnAddIsReadableAndARemovalIs204(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	a := e.account(e.tenant, uniqueAddress("loc"))
	extra := uniqueAddress("loc.extra")
	r := e.send(req{method: "POST", path: accountPath(a) + "/emails", body: `{"address":"` + extra + `"}`, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	loc := r.Header.Get("Location")
	require.Equal(t, emailPath(a, extra), loc)

	got := e.send(req{method: "GET", path: loc})
	require.Equal(t, http.StatusOK, got.Status, "answer %s", got)
	em := decodeAs[writer.AccountEmail](t, got)
	assert.Equal(t, extra, em.Address)
	assert.False(t, em.Primary)
	assert.False(t, em.Verified)
	assert.NotEmpty(t, em.AddedAt)
	assert.Equal(t, `"2"`, got.Header.Get("ETag"), "the account's version")
	upper := e.send(req{method: "GET", path: emailPath(a, strings.ToUpper(extra))})
	require.Equal(t, http.StatusOK, upper.Status, "answer %s", upper)
	assert.Equal(t, em, decodeAs[writer.AccountEmail](t, upper))

	del := e.send(req{method: "DELETE", path: loc, headers: []string{"If-Match", `"2"`}})
	require.Equal(t, http.StatusNoContent, del.Status, "answer %s", del)
	assert.Empty(t, del.Body)
	assert.Empty(t, del.Header.Get("Content-Type"))

	gone := e.send(req{method: "GET", path: loc})
	require.Equal(t, http.StatusNotFound, gone.Status, "answer %s", gone)
	assert.Equal(t, writer.ProblemNotFound, gone.problem(t).Type)
	missing := e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/accounts/01J1Z7ZZZZZZZZZZZZZZZZZZZZ/emails/" + extra})
	require.Equal(t, http.StatusNotFound, missing.Status, "answer %s", missing)
	assert.Contains(t, missing.problem(t).Detail, "account")
	other := e.send(req{method: "GET", path: loc, headers: []string{"Authorization", "Bearer " + e.tokenFor(e.newTenant())}})
	assert.Equal(t, http.StatusForbidden, other.Status, "another tenant's token")
}
