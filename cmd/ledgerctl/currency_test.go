package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// TestBranchCurrency_CreateUpdateListThroughTheWriter: --currency on branch
// create (compared by --exist-ok) and update, refused once the branch has a
// transaction, shown by get and list.
func TestBranchCurrency_CreateUpdateListThroughTheWriter(t *testing.T) {
	env := directoryEnv(t)
	code, _, errOut := run(t, env, "tenant", "create", "--id", "chain", "--name", "Chain")
	require.Equal(t, exitOK, code, errOut)

	code, out, errOut := run(t, env, "branch", "create", "--tenant", "chain", "--id", "sp", "--name", "SP", "--document", "DOC-sp", "--currency", "BRL", "--json")
	require.Equal(t, exitOK, code, errOut)
	var b writer.Branch
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	assert.Equal(t, "BRL", b.Currency)
	code, _, errOut = run(t, env, "branch", "create", "--tenant", "chain", "--id", "sp", "--name", "SP", "--document", "DOC-sp", "--currency", "BRL", "--exist-ok")
	assert.Equal(t, exitOK, code, errOut)
	code, _, errOut = run(t, env, "branch", "create", "--tenant", "chain", "--id", "sp", "--name", "SP", "--document", "DOC-sp", "--currency", "GBP", "--exist-ok")
	assert.Equal(t, exitDiff, code)
	assert.Contains(t, errOut, "another currency")
	code, _, errOut = run(t, env, "branch", "create", "--tenant", "chain", "--id", "x", "--name", "X", "--document", "DOC-x", "--currency", "brl")
	assert.Equal(t, exitError, code, "a 422 is an error")
	assert.Contains(t, errOut, "422 invalid-field")
	assert.Contains(t, errOut, "upper case (BRL)")

	code, out, errOut = run(t, env, "branch", "update", "--tenant", "chain", "--id", "sp", "--currency", "JPY", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	assert.Equal(t, "JPY", b.Currency)

	// The first transaction freezes it.
	tok, err := writer.NewToken([]byte(env["LEDGER_JWT_SECRET"]), writer.TokenOptions{Tenant: "chain"})
	require.NoError(t, err)
	rq, err := http.NewRequest("POST", env["LEDGER_WRITER_URL"]+"/v1/tenants/chain/branches/sp/transactions", strings.NewReader(`{"type":"INCOME","amount":"1500","category":"sales"}`))
	require.NoError(t, err)
	rq.Header.Set("Authorization", "Bearer "+tok)
	rq.Header.Set("Content-Type", "application/json")
	rq.Header.Set("Idempotency-Key", "currency-test-1")
	resp, err := http.DefaultClient.Do(rq)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	code, _, errOut = run(t, env, "branch", "update", "--tenant", "chain", "--id", "sp", "--currency", "BRL")
	assert.Equal(t, exitDiff, code, "refused: %s", errOut)
	assert.Contains(t, errOut, "409 branch-has-transactions")

	code, out, _ = run(t, env, "branch", "list", "--tenant", "chain")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "CURRENCY")
	assert.Contains(t, out, "JPY")
}

// TestSample_BranchesInTheirCurrenciesAndAnEarlierSampleKept: on an empty
// table the sample's branches are created in BRL, GBP and JPY and every
// request of the workload is accepted (the yen amounts are whole); on a
// table holding an earlier sample (branches without a currency, some with
// transactions) ensureDirectory sets the currency of those without
// transactions only, and fails on none.
func TestSample_BranchesInTheirCurrenciesAndAnEarlierSampleKept(t *testing.T) {
	client := func(env map[string]string) *apiClient {
		tok, err := writer.NewToken([]byte(env["LEDGER_JWT_SECRET"]), writer.TokenOptions{Admin: true})
		require.NoError(t, err)
		return &apiClient{base: env["LEDGER_WRITER_URL"], token: tok, http: http.DefaultClient}
	}
	ctx := t.Context()

	fresh := client(directoryEnv(t))
	dir, err := ensureDirectory(ctx, fresh)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"north": "BRL", "south": "GBP", "online": "JPY"}, dir.currencies)
	posted, err := fresh.postSample(ctx, func(int, int) {})
	require.NoError(t, err, "every request of the workload is accepted in its branch's currency")
	assert.True(t, posted)

	earlier := client(directoryEnv(t))
	require.NoError(t, earlier.do(ctx, http.MethodPost, "/v1/tenants", map[string]string{"Idempotency-Key": "t"}, `{"id":"demo","name":"Demo"}`, nil))
	for _, b := range sampleBranches {
		body := `{"id":"` + b + `","name":"` + b + `","document":"` + sampleBranchInfo[b].document + `"}`
		require.NoError(t, earlier.do(ctx, http.MethodPost, "/v1/tenants/demo/branches", map[string]string{"Idempotency-Key": "b-" + b}, body, nil))
	}
	for _, b := range []string{"north", "online"} {
		require.NoError(t, earlier.do(ctx, http.MethodPost, branchURL("demo", b)+"/transactions", map[string]string{"Idempotency-Key": "x-" + b},
			`{"type":"INCOME","amount":"12.34","category":"sales"}`, nil))
	}
	dir, err = ensureDirectory(ctx, earlier)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"north": "", "south": "GBP", "online": ""}, dir.currencies)
	assert.True(t, dir.recalendared, "the calendars were set")
	dir, err = ensureDirectory(ctx, earlier)
	require.NoError(t, err, "again: nothing left to change")
	assert.False(t, dir.recalendared)
}
