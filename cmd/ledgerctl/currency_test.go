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
