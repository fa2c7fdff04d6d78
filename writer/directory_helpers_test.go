package writer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/writer"
)

// adminToken is an admin-scoped token naming no tenant.
func (e *env) adminToken() string {
	e.t.Helper()
	tok, err := writer.NewToken([]byte(testSecret), writer.TokenOptions{Admin: true})
	require.NoError(e.t, err)
	return tok
}

// asAdmin sends rq with an admin token.
func (e *env) asAdmin(rq req) reply {
	e.t.Helper()
	rq.headers = append(rq.headers, "Authorization", "Bearer "+e.adminToken())
	return e.send(rq)
}

func decodeAs[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(r.Body, &v), "answer %s", r)
	return v
}

// newTenant creates a tenant with a fresh id (admin) and returns the id.
func (e *env) newTenant() string {
	e.t.Helper()
	id := uniqueTenant()
	e.seed.tenant(id)
	e.own[id] = true
	return id
}

// postAccount creates an account in tenant with a fresh Idempotency-Key.
func (e *env) postAccount(tenant, body string) reply {
	e.t.Helper()
	return e.asAdmin(req{method: "POST", path: "/v1/tenants/" + tenant + "/accounts", body: body, headers: []string{"Idempotency-Key", newKey()}})
}

// account creates an account with one verified primary address and
// requires 201.
func (e *env) account(tenant, address string) writer.Account {
	e.t.Helper()
	r := e.postAccount(tenant, fmt.Sprintf(`{"firstName":"Ana","lastName":"Silva","emails":[{"address":%q,"verified":true}]}`, address))
	require.Equal(e.t, http.StatusCreated, r.Status, "answer %s", r)
	return decodeAs[writer.Account](e.t, r)
}

func accountPath(a writer.Account) string { return "/v1/tenants/" + a.Tenant + "/accounts/" + a.ID }

func emailPath(a writer.Account, address string) string {
	return accountPath(a) + "/emails/" + url.PathEscape(address)
}

// scanTable reads every item of the env's table (strongly consistent).
func (e *env) scanTable() []map[string]ddbAV {
	e.t.Helper()
	var items []map[string]ddbAV
	p := dynamodb.NewScanPaginator(e.ddb, &dynamodb.ScanInput{TableName: &e.table, ConsistentRead: ptr(true)})
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		require.NoError(e.t, err)
		items = append(items, out.Items...)
	}
	return items
}

func str(item map[string]ddbAV, name string) string {
	if v, ok := item[name].(*ddbtypes.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func flag(item map[string]ddbAV, name string) bool {
	v, ok := item[name].(*ddbtypes.AttributeValueMemberBOOL)
	return ok && v.Value
}

// directoryState is what a scan of the table says about the directory.
type directoryState struct {
	// emailOwners: address → tenant/account named by its owner item.
	emailOwners map[string]string
	// emailItems: address → tenant/account of every email item holding it;
	// verifiedItems: of those that are verified.
	emailItems, verifiedItems map[string][]string
	// accounts: tenant/account → its profile and email items.
	accounts map[string]*scannedAccount
	// documentOwners: document → tenant/branch named by its owner item.
	documentOwners map[string]string
	// branches: tenant/branch → document.
	branches map[string]string
}

type scannedAccount struct {
	profile map[string]ddbAV
	emails  []map[string]ddbAV
}

func (e *env) directoryState() directoryState {
	e.t.Helper()
	st := directoryState{emailOwners: map[string]string{}, emailItems: map[string][]string{}, verifiedItems: map[string][]string{}, accounts: map[string]*scannedAccount{},
		documentOwners: map[string]string{}, branches: map[string]string{}}
	acc := func(id string) *scannedAccount {
		if st.accounts[id] == nil {
			st.accounts[id] = &scannedAccount{}
		}
		return st.accounts[id]
	}
	for _, item := range e.scanTable() {
		if !e.own[str(item, "tenantId")] {
			continue // another test's, written while the scan read the table
		}
		switch str(item, "entityType") {
		case aggregates.EntityEmailOwner:
			st.emailOwners[str(item, "email")] = str(item, "tenantId") + "/" + str(item, "accountId")
		case aggregates.EntityAccountEmail:
			id := str(item, "tenantId") + "/" + str(item, "accountId")
			st.emailItems[str(item, "email")] = append(st.emailItems[str(item, "email")], id)
			if flag(item, "isVerified") {
				st.verifiedItems[str(item, "email")] = append(st.verifiedItems[str(item, "email")], id)
			}
			acc(id).emails = append(acc(id).emails, item)
		case aggregates.EntityAccount:
			acc(str(item, "tenantId") + "/" + str(item, "id")).profile = item
		case aggregates.EntityDocumentOwner:
			st.documentOwners[str(item, "document")] = str(item, "tenantId") + "/" + str(item, "branchId")
		case aggregates.EntityBranch:
			st.branches[str(item, "tenantId")+"/"+str(item, "id")] = str(item, "document")
		}
	}
	return st
}

// requireConsistent checks the directory's invariants on a scan of the
// table: every owner item names an account (branch) that holds the address
// (document), and every address (document) held has an owner item naming
// its holder; every account has one to MaxEmailsPerAccount addresses,
// exactly one primary, verified, equal to its profile's email, and as many
// as its emailCount; email items are indexed under their address.
func (e *env) requireConsistent() directoryState {
	e.t.Helper()
	t := e.t
	st := e.directoryState()
	// Only verified addresses are reserved: each has an owner item naming
	// the one account that verified it; unverified copies reserve nothing.
	for address, owner := range st.emailOwners {
		assert.Equal(t, []string{owner}, st.verifiedItems[address], "owner item of %s names %s; verified email items: %v", address, owner, st.verifiedItems[address])
	}
	for address, holders := range st.verifiedItems {
		assert.Len(t, holders, 1, "verified address %s held by %v", address, holders)
		assert.Equal(t, st.emailOwners[address], holders[0], "verified address %s has no owner item naming its holder", address)
	}
	for id, a := range st.accounts {
		if !assert.NotNil(t, a.profile, "email items of %s without a profile", id) {
			continue
		}
		primaries := 0
		for _, em := range a.emails {
			tenant, _, _ := strings.Cut(id, "/")
			assert.Equal(t, "ACCOUNT#"+str(em, "email"), str(em, "GSI1PK"), "%s", id)
			assert.Equal(t, "TENANT#"+tenant, str(em, "GSI1SK"), "%s", id)
			if flag(em, "isPrimary") {
				primaries++
				assert.True(t, flag(em, "isVerified"), "%s: primary %s not verified", id, str(em, "email"))
				assert.Equal(t, str(a.profile, "email"), str(em, "email"), "%s: profile's email is not the primary", id)
			}
		}
		assert.Equal(t, 1, primaries, "%s: %d primaries", id, primaries)
		assert.NotEmpty(t, a.emails, "%s has no address", id)
		assert.LessOrEqual(t, len(a.emails), aggregates.MaxEmailsPerAccount, "%s", id)
		assert.Equal(t, fmt.Sprint(len(a.emails)), a.profile["emailCount"].(*ddbtypes.AttributeValueMemberN).Value, "%s: emailCount", id)
	}
	for doc, owner := range st.documentOwners {
		assert.Equal(t, doc, st.branches[owner], "owner item of document %s names %s", doc, owner)
	}
	for b, doc := range st.branches {
		assert.Equal(t, b, st.documentOwners[doc], "branch %s holds document %s without its owner item", b, doc)
	}
	return st
}
