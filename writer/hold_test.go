package writer_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// A branch whose writes a rebase holds (ledgerctl reconcile --rebase
// --hold: table.AttrWriteHold on its directory item) answers its
// transaction writes 503 writes-disabled, counted as held, reads served;
// released, they go through. (Seen within DirectoryTTL: a branch without
// transactions is never cached, so here at once.)
func TestHold_ARebaseHoldsTheBranchsTransactionWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), func(c *writer.Config) { c.DirectoryTTL = -1 })
	ctx := context.Background()
	tx := e.create(createBody)
	_, err := e.ddb.UpdateItem(ctx, table.HoldBranch(e.table, e.tenant, e.branch, "rb-test-hold"))
	require.NoError(t, err)

	r := e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemWritesDisabled, r.problem(t).Type)
	assert.Contains(t, r.String(), "rb-test-hold")
	r = e.send(req{method: "DELETE", path: e.base() + "/transactions/" + tx.ID})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "answer %s", r)
	assert.Equal(t, http.StatusOK, e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID}).Status, "reads are served")
	assert.Equal(t, 2.0, testutil.ToFloat64(e.metrics.WritesRefused.WithLabelValues("held")))

	_, err = e.ddb.UpdateItem(ctx, table.ReleaseBranch(e.table, e.tenant, e.branch, "rb-test-hold"))
	require.NoError(t, err)
	e.create(createBody)
}
