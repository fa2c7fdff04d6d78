package writer_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/writer"
)

// Tests of the per-tenant currency cap (issue 24, hole 9; currencycap.go):
// through the real HTTP server, against DynamoDB Local.

func withMaxCurrencies(n int) envOption {
	return func(c *writer.Config) { c.MaxTenantCurrencies = n }
}

// storedCurrencySet is the tenant's currency set as stored, sorted (nil
// when the item is absent).
func (e *env) storedCurrencySet(tenant string) []string {
	e.t.Helper()
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.table, ConsistentRead: ptr(true),
		Key: map[string]ddbAV{"PK": s(aggregates.TenantKey(tenant).PK), "SK": s("CURRENCIES")}})
	require.NoError(e.t, err)
	if out.Item == nil {
		return nil
	}
	ss, ok := out.Item["currencies"].(*ddbtypes.AttributeValueMemberSS)
	if !ok {
		return []string{}
	}
	v := slices.Clone(ss.Value)
	slices.Sort(v)
	return v
}

func TestTenantCurrencyCap_ABranchPastTheCapIs422AndWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), withMaxCurrencies(3))
	for i, c := range []string{"BRL", "JPY", "EUR", "BRL"} {
		r := e.postCurrencyBranch(fmt.Sprintf("b%d", i), `,"currency":"`+c+`"`)
		require.Equal(t, http.StatusCreated, r.Status, "%s: answer %s", c, r)
	}
	require.Equal(t, http.StatusCreated, e.postCurrencyBranch("plain", "").Status, "a branch without a currency is not counted")
	assert.Equal(t, []string{"BRL", "EUR", "JPY"}, e.storedCurrencySet(e.tenant))

	r := e.postCurrencyBranch("usd", `,"currency":"USD"`)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "a fourth currency: answer %s", r)
	p := r.problem(t)
	assert.Equal(t, writer.ProblemTooManyCurrencies, p.Type)
	assert.Equal(t, "currency", p.Field)
	assert.Contains(t, p.Detail, "3 currencies (BRL, EUR, JPY)")
	assert.Contains(t, p.Detail, "USD")
	assert.Equal(t, http.StatusNotFound, e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches/usd"}).Status, "nothing written")

	// A PATCH to a fourth currency is refused the same way, before the
	// branch's first transaction; to one of the three it is not.
	r = e.patchBranch("plain", 1, `{"currency":"USD"}`)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemTooManyCurrencies, r.problem(t).Type)
	r = e.patchBranch("plain", 1, `{"currency":"JPY"}`)
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, []string{"BRL", "EUR", "JPY"}, e.storedCurrencySet(e.tenant))

	// Another tenant has its own set.
	other := newEnv(t, sharedTable(t), withMaxCurrencies(3))
	require.Equal(t, http.StatusCreated, other.postCurrencyBranch("usd", `,"currency":"USD"`).Status)
	assert.Equal(t, []string{"USD"}, other.storedCurrencySet(other.tenant))
}

// TestTenantCurrencyCap_ConcurrentCreationsCannotPassIt: a tenant that
// creates branches in many currencies at once gets exactly the cap's worth;
// a count by Query would let every racer through.
func TestTenantCurrencyCap_ConcurrentCreationsCannotPassIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), withMaxCurrencies(2))
	codes := []string{"BRL", "JPY", "EUR", "USD", "GBP", "CHF", "CAD", "AUD", "MXN", "ARS"}
	statuses := make([]int, len(codes))
	var wg sync.WaitGroup
	for i, c := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = e.postCurrencyBranch("c"+c, `,"currency":"`+c+`"`).Status
		}()
	}
	wg.Wait()
	var created []string
	for i, st := range statuses {
		switch st {
		case http.StatusCreated:
			created = append(created, codes[i])
		case http.StatusUnprocessableEntity:
		default:
			t.Errorf("%s: status %d", codes[i], st)
		}
	}
	slices.Sort(created)
	assert.Len(t, created, 2, "exactly the cap's worth of currencies: %v", created)
	assert.Equal(t, created, e.storedCurrencySet(e.tenant))
}

// TestTenantCurrencyCap_SeededFromTheBranchesOfBefore: a tenant whose
// branches had more currencies than the cap before it keeps them and may
// add branches in them; a new code is refused, naming them all.
func TestTenantCurrencyCap_SeededFromTheBranchesOfBefore(t *testing.T) {
	t.Parallel()
	table := sharedTable(t)
	before := newEnv(t, table, withMaxCurrencies(-1)) // no cap: no set item
	for _, c := range []string{"BRL", "JPY", "EUR", "USD"} {
		require.Equal(t, http.StatusCreated, before.postCurrencyBranch("old"+c, `,"currency":"`+c+`"`).Status)
	}
	require.Nil(t, before.storedCurrencySet(before.tenant), "no cap writes no set")

	e := newEnv(t, table, withMaxCurrencies(3))
	e.tenant, e.token = before.tenant, before.token
	r := e.postCurrencyBranch("gbp", `,"currency":"GBP"`)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "answer %s", r)
	assert.Contains(t, r.problem(t).Detail, "4 currencies (BRL, EUR, JPY, USD)")
	assert.Equal(t, []string{"BRL", "EUR", "JPY", "USD"}, e.storedCurrencySet(e.tenant), "seeded from the branches")
	require.Equal(t, http.StatusCreated, e.postCurrencyBranch("jpy2", `,"currency":"JPY"`).Status, "a code it has")
}
