package writer_test

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

func (e *env) postBranch(tenant, id, document string) reply {
	e.t.Helper()
	return e.asAdmin(req{method: "POST", path: "/v1/tenants/" + tenant + "/branches", headers: []string{"Idempotency-Key", newKey()},
		body: fmt.Sprintf(`{"id":%q,"name":"Branch %s","document":%q}`, id, id, document)})
}

func TestBranches_CreateGetListPatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	doc := uniqueDocument()
	spaced := doc[:3] + "." + doc[3:6] + "/" + doc[6:]
	// The tenant's own token manages its branches.
	key := newKey()
	// The tenant's own token manages its branches; claiming a document
	// number takes a token whose documents claim holds it.
	create := req{method: "POST", path: "/v1/tenants/" + e.tenant + "/branches", headers: []string{"Idempotency-Key", key,
		"Authorization", "Bearer " + e.tokenWith(e.tenant, writer.TokenOptions{Documents: []string{spaced}})},
		body: `{"id":"east","name":"East #3","document":"` + spaced + `"}`}
	r := e.send(create)
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	b := decodeAs[writer.Branch](t, r)
	assert.Equal(t, writer.Branch{ID: "east", Tenant: e.tenant, Name: "East #3", Document: doc, Status: "active",
		Calendar:  writer.Calendar{TimeZone: "UTC", DayStartsAt: "00:00", WeekStartsOn: "MONDAY", FiscalYearStartMonth: 1},
		CreatedAt: b.CreatedAt, UpdatedAt: b.CreatedAt, Version: 1}, b, "the document is stored normalised; no calendar is the default one")
	assert.Equal(t, "/v1/tenants/"+e.tenant+"/branches/east", r.Header.Get("Location"))
	again := e.send(create)
	require.Equal(t, http.StatusCreated, again.Status)
	assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))

	r = e.postBranch(e.tenant, "east", uniqueDocument())
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemAlreadyExists, r.problem(t).Type)
	r = e.postBranch(uniqueTenant(), "east", uniqueDocument())
	require.Equal(t, http.StatusNotFound, r.Status, "a branch needs its tenant: answer %s", r)
	for name, c := range map[string]struct{ body, field string }{
		"no document":    {`{"id":"x","name":"x"}`, "document"},
		"empty document": {`{"id":"x","name":"x","document":" ./- "}`, "document"},
		"bad document":   {`{"id":"x","name":"x","document":"12#3"}`, "document"},
		"bad id":         {`{"id":"x y","name":"x","document":"1"}`, "id"},
	} {
		r := e.send(req{method: "POST", path: "/v1/tenants/" + e.tenant + "/branches", body: c.body, headers: []string{"Idempotency-Key", newKey()}})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: answer %s", name, r)
		assert.Equal(t, c.field, r.problem(t).Field, name)
	}

	path := "/v1/tenants/" + e.tenant + "/branches/east"
	r = e.send(req{method: "GET", path: path})
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, b, decodeAs[writer.Branch](t, r))
	assert.Equal(t, `"1"`, r.Header.Get("ETag"))

	// The listing is one Query on the tenant's branch partition: strongly
	// consistent, in id order, paged.
	e.addBranches("a1", "z9")
	var ids []string
	cursor := ""
	for {
		p := "/v1/tenants/" + e.tenant + "/branches?limit=2"
		if cursor != "" {
			p += "&cursor=" + cursor
		}
		r := e.send(req{method: "GET", path: p})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
		page := decodeAs[writer.BranchPage](t, r)
		for _, x := range page.Items {
			ids = append(ids, x.ID)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	assert.Equal(t, []string{"a1", "east", "north", "south", "z9"}, ids)
	other := newEnv(t, e.table)
	r = other.send(req{method: "GET", path: "/v1/tenants/" + other.tenant + "/branches?cursor=" + cursor})
	require.Equal(t, http.StatusBadRequest, r.Status, "another tenant's cursor: answer %s", r)
	assert.Equal(t, writer.ProblemInvalidCursor, r.problem(t).Type)

	// PATCH: If-Match, 412 on a stale version.
	r = e.send(req{method: "PATCH", path: path, body: `{"name":"East"}`})
	require.Equal(t, http.StatusPreconditionRequired, r.Status)
	r = e.send(req{method: "PATCH", path: path, body: `{"name":"East"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "East", decodeAs[writer.Branch](t, r).Name)
	assert.Equal(t, `"2"`, r.Header.Get("ETag"))
	r = e.send(req{method: "PATCH", path: path, body: `{"name":"Nope"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusPreconditionFailed, r.Status)
	assert.Equal(t, int64(2), *r.problem(t).CurrentVersion)
	r = e.send(req{method: "PATCH", path: path, body: `{"document":null}`, headers: []string{"If-Match", `"2"`}})
	require.Equal(t, http.StatusBadRequest, r.Status)
	e.requireConsistentBranch(e.tenant, "east", doc)
}

// requireConsistentBranch checks that the branch holds document and the
// document's owner item names the branch.
func (e *env) requireConsistentBranch(tenant, branch, document string) {
	e.t.Helper()
	st := e.directoryState()
	assert.Equal(e.t, document, st.branches[tenant+"/"+branch])
	assert.Equal(e.t, tenant+"/"+branch, st.documentOwners[document])
}

func TestBranchDocument_UniqueAcrossTenantsFreedOnChangeAndDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	other := e.newTenant()
	x, y := uniqueDocument(), uniqueDocument()
	r := e.postBranch(e.tenant, "b1", x)
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)

	r = e.postBranch(other, "b1", x)
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	p := r.problem(t)
	assert.Equal(t, writer.ProblemDocumentTaken, p.Type)
	assert.Equal(t, "document", p.Field)
	assert.NotContains(t, p.Detail, e.tenant, "the holder is not disclosed")
	require.Equal(t, http.StatusNotFound, e.asAdmin(req{method: "GET", path: "/v1/tenants/" + other + "/branches/b1"}).Status, "nothing written")

	// Changing the document frees the old one and takes the new one, in one transaction.
	path := "/v1/tenants/" + e.tenant + "/branches/b1"
	r = e.asAdmin(req{method: "PATCH", path: path, body: `{"document":"` + y + `"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, y, decodeAs[writer.Branch](t, r).Document)
	r = e.postBranch(other, "b1", x)
	require.Equal(t, http.StatusCreated, r.Status, "the old document is free: answer %s", r)
	r = e.postBranch(other, "b2", y)
	require.Equal(t, http.StatusConflict, r.Status, "the new one is taken: answer %s", r)
	// Moving onto a taken document is 409 and changes nothing.
	r = e.asAdmin(req{method: "PATCH", path: path, body: `{"document":"` + x + `","name":"Moved"}`, headers: []string{"If-Match", "2"}})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemDocumentTaken, r.problem(t).Type)
	r = e.send(req{method: "GET", path: path})
	assert.Equal(t, int64(2), decodeAs[writer.Branch](t, r).Version)
	e.requireConsistentBranch(e.tenant, "b1", y)
	e.requireConsistentBranch(other, "b1", x)

	// The lookup by document (admin, GSI2) names the branch and its tenant.
	r = e.asAdmin(req{method: "GET", path: "/v1/branches:lookup?document=" + x})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	found := decodeAs[writer.Branch](t, r)
	assert.Equal(t, other, found.Tenant)
	assert.Equal(t, "b1", found.ID)

	// Deleting a branch without transactions frees its document.
	r = e.send(req{method: "DELETE", path: path, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	r = e.send(req{method: "DELETE", path: path, headers: []string{"If-Match", "2"}})
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	require.Equal(t, http.StatusNotFound, e.send(req{method: "DELETE", path: path}).Status)
	r = e.postBranch(other, "b2", y)
	require.Equal(t, http.StatusCreated, r.Status, "the deleted branch's document is free: answer %s", r)
	r = e.asAdmin(req{method: "GET", path: "/v1/branches:lookup?document=" + uniqueDocument()})
	require.Equal(t, http.StatusNotFound, r.Status)
}

func TestBranchDocument_50ConcurrentCreatesExactlyOneWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ownTable(t))
	doc := uniqueDocument()
	const n = 50
	tenants := make([]string, 5)
	for i := range tenants {
		tenants[i] = e.newTenant()
	}
	replies := make([]reply, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i] = e.postBranch(tenants[i%len(tenants)], "b"+strconv.Itoa(i), doc)
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, r := range replies {
		switch r.Status {
		case http.StatusCreated:
			require.Equal(t, -1, winner, "a second create won: %s", r)
			winner = i
		case http.StatusConflict:
			assert.Equal(t, writer.ProblemDocumentTaken, r.problem(t).Type)
		default:
			t.Errorf("unexpected answer %s", r)
		}
	}
	require.NotEqual(t, -1, winner, "one create wins")
	st := e.requireConsistent()
	want := tenants[winner%len(tenants)] + "/b" + strconv.Itoa(winner)
	assert.Equal(t, want, st.documentOwners[doc])
	holders := 0
	for _, d := range st.branches {
		if d == doc {
			holders++
		}
	}
	assert.Equal(t, 1, holders, "exactly one branch holds the document")
}

func TestTransactions_NeedAnExistingActiveTenantAndBranch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"5","category":"a","createdAt":"2026-01-05T10:00:00Z"}`)
	post := func(branch string) reply {
		return e.send(req{method: "POST", path: "/v1/tenants/" + e.tenant + "/branches/" + branch + "/transactions", body: createBody,
			headers: []string{"Idempotency-Key", newKey()}})
	}

	r := post("nowhere")
	require.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
	assert.Contains(t, r.problem(t).Detail, "branch nowhere")
	stranger := uniqueTenant()
	r = e.send(req{method: "POST", path: "/v1/tenants/" + stranger + "/branches/north/transactions", body: createBody,
		headers: []string{"Idempotency-Key", newKey(), "Authorization", "Bearer " + e.tokenFor(stranger)}})
	require.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
	assert.Contains(t, r.problem(t).Detail, "tenant")

	// Suspend the branch: 409 with the reason; reads still served.
	branch := "/v1/tenants/" + e.tenant + "/branches/north"
	r = e.send(req{method: "PATCH", path: branch, body: `{"status":"suspended"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = post("north")
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	p := r.problem(t)
	assert.Equal(t, writer.ProblemBranchSuspended, p.Type)
	assert.Contains(t, p.Detail, "suspended")
	require.Equal(t, http.StatusOK, e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID}).Status)
	require.Equal(t, http.StatusOK, e.send(req{method: "GET", path: e.base() + "/transactions"}).Status)
	require.Equal(t, http.StatusOK, e.send(req{method: "GET", path: e.base() + "/reports?period=MONTHLY&from=2026-01&to=2026-01"}).Status)
	require.Equal(t, http.StatusCreated, post("south").Status, "other branches take transactions")
	assert.Equal(t, 1, e.countTransactions(e.tenant, "north"))

	// Reactivated, it takes transactions again.
	r = e.send(req{method: "PATCH", path: branch, body: `{"status":"active"}`, headers: []string{"If-Match", "2"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	require.Equal(t, http.StatusCreated, post("north").Status)

	// A suspended tenant takes none in any branch.
	r = e.asAdmin(req{method: "PATCH", path: "/v1/tenants/" + e.tenant, body: `{"status":"suspended"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	for _, b := range []string{"north", "south"} {
		r = post(b)
		require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
		assert.Equal(t, writer.ProblemTenantSuspended, r.problem(t).Type)
	}
	assert.Equal(t, 2, e.countTransactions(e.tenant, "north"))
	assert.Equal(t, 1, e.countTransactions(e.tenant, "south"))
	require.Equal(t, http.StatusOK, e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID}).Status)
}

func TestBranchDelete_RefusedOnceTheBranchHasTransactions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	path := "/v1/tenants/" + e.tenant + "/branches/north"
	r := e.send(req{method: "GET", path: path})
	assert.False(t, decodeAs[writer.Branch](t, r).HasTransactions)
	tx := e.create(createBody)
	r = e.send(req{method: "GET", path: path})
	b := decodeAs[writer.Branch](t, r)
	assert.True(t, b.HasTransactions, "the first transaction marks its branch")
	assert.Equal(t, int64(1), b.Version, "the marker is not a change of the branch")

	r = e.send(req{method: "DELETE", path: path})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	p := r.problem(t)
	assert.Equal(t, writer.ProblemBranchHasTransactions, p.Type)
	assert.Contains(t, p.Detail, "suspend")

	// The marker stays when the transactions go: the branch has reports.
	r = e.send(req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID})
	require.Equal(t, http.StatusNoContent, r.Status)
	r = e.send(req{method: "DELETE", path: path})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)

	// A PATCH (an UpdateItem) keeps the marker.
	r = e.send(req{method: "PATCH", path: path, body: `{"name":"N"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.True(t, decodeAs[writer.Branch](t, e.send(req{method: "GET", path: path})).HasTransactions)
	e.requireConsistentBranch(e.tenant, "north", b.Document)
}

// TestBranchDelete_RacingTheFirstTransactionNeverOrphansIt races a branch's
// first transaction against its deletion, many times: either the delete
// wins and the create finds no branch, or the create wins and the delete is
// refused. Never both.
func TestBranchDelete_RacingTheFirstTransactionNeverOrphansIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	outcomes := map[string]int{}
	for i := range 25 {
		id := "race" + strconv.Itoa(i)
		e.addBranches(id)
		var created, deleted reply
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			created = e.send(req{method: "POST", path: "/v1/tenants/" + e.tenant + "/branches/" + id + "/transactions", body: createBody,
				headers: []string{"Idempotency-Key", newKey()}})
		}()
		go func() {
			defer wg.Done()
			// Staggered, so that each side wins some rounds.
			time.Sleep(time.Duration(i%6) * 4 * time.Millisecond)
			deleted = e.send(req{method: "DELETE", path: "/v1/tenants/" + e.tenant + "/branches/" + id})
		}()
		wg.Wait()
		n := e.countTransactions(e.tenant, id)
		switch {
		case created.Status == http.StatusCreated:
			require.Equal(t, http.StatusConflict, deleted.Status, "round %d: the create won, the delete must fail: %s", i, deleted)
			assert.Equal(t, writer.ProblemBranchHasTransactions, deleted.problem(t).Type)
			assert.Equal(t, 1, n)
			require.Equal(t, http.StatusOK, e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches/" + id}).Status)
			outcomes["create won"]++
		case deleted.Status == http.StatusNoContent:
			require.Equal(t, http.StatusNotFound, created.Status, "round %d: the delete won, the create must fail: %s", i, created)
			assert.Zero(t, n)
			outcomes["delete won"]++
		default:
			t.Fatalf("round %d: create %s, delete %s", i, created, deleted)
		}
	}
	t.Logf("outcomes: %v", outcomes)
}
