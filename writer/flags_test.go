package writer_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

const createBody = `{"type":"INCOME","amount":"1","category":"a"}`

func (e *env) post() reply {
	return e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}})
}

// eventually retries f until it holds or the flags cache surely expired.
func eventually(t *testing.T, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 3s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFlags_WritesDisabledRefusesMutationsButServesReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ownTable(t))
	ctx := context.Background()
	tx := e.create(createBody)

	f, err := table.GetFlags(ctx, e.ddb, e.table)
	require.NoError(t, err)
	require.True(t, f.WritesEnabled(), "ledgerctl table create writes the default flags")
	_, err = table.SetFlags(ctx, e.ddb, e.table, map[string]bool{table.FlagWritesEnabled: false}, f.Version, time.Now())
	require.NoError(t, err)

	eventually(t, func() bool { return e.post().Status == http.StatusServiceUnavailable })
	count := e.countTransactions(e.tenant, e.branch) // posts before the cache expired went through
	for _, rq := range []req{
		{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}},
		{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, body: `{"amount":"2"}`, headers: []string{"If-Match", "1"}},
		{method: "DELETE", path: e.base() + "/transactions/" + tx.ID},
	} {
		r := e.send(rq)
		require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s: answer %s", rq.method, r)
		p := r.problem(t)
		assert.Equal(t, writer.ProblemWritesDisabled, p.Type)
		assert.Contains(t, p.Detail, "maintenance")
		assert.NotEmpty(t, r.Header.Get("Retry-After"))
	}
	r := e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID})
	require.Equal(t, http.StatusOK, r.Status, "reads are served")
	assert.Equal(t, tx, r.transaction(t))
	assert.Equal(t, count, e.countTransactions(e.tenant, e.branch))
	assert.Positive(t, testutil.ToFloat64(e.metrics.WritesRefused.WithLabelValues("disabled")))

	_, err = table.SetFlags(ctx, e.ddb, e.table, map[string]bool{table.FlagWritesEnabled: true}, f.Version+1, time.Now())
	require.NoError(t, err)
	eventually(t, func() bool { return e.post().Status == http.StatusCreated })
}

func TestFlags_MissingItemFailsClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ownTable(t))
	k := aggregates.FlagsKey()
	_, err := e.ddb.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: &e.table, Key: map[string]ddbAV{"PK": s(k.PK), "SK": s(k.SK)}})
	require.NoError(t, err)
	r := e.post()
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "answer %s", r)
	p := r.problem(t)
	assert.Equal(t, writer.ProblemWritesDisabled, p.Type)
	assert.Contains(t, p.Detail, "missing")
	assert.Zero(t, e.countTransactions(e.tenant, e.branch))

	r = e.send(req{method: "GET", path: "/readyz", noAuth: true})
	require.Equal(t, http.StatusOK, r.Status, "the table answers: ready, with writes off")
	assert.JSONEq(t, `{"status":"ready","writesEnabled":false}`, string(r.Body))

	// Creating it (version 0 = only if absent) turns writes on again.
	_, err = table.SetFlags(context.Background(), e.ddb, e.table, map[string]bool{table.FlagWritesEnabled: true}, 0, time.Now())
	require.NoError(t, err)
	eventually(t, func() bool { return e.post().Status == http.StatusCreated })
}

func TestFlags_UnreadableFailsClosedAndRecovers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	var mu sync.Mutex
	broken := true
	e.calls.Decide = func(op string) ledgertest.Fault {
		mu.Lock()
		defer mu.Unlock()
		if broken && op == "GetItem" {
			return ledgertest.Drop
		}
		return ledgertest.Pass
	}
	r := e.post()
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemFlagsUnavailable, r.problem(t).Type)
	assert.Zero(t, e.countTransactions(e.tenant, e.branch))
	assert.Positive(t, testutil.ToFloat64(e.metrics.FlagsReads.WithLabelValues("error")))
	r = e.send(req{method: "GET", path: e.base() + "/transactions"})
	require.Equal(t, http.StatusOK, r.Status, "reads that need no GetItem are still served")

	mu.Lock()
	broken = false
	mu.Unlock()
	eventually(t, func() bool { return e.post().Status == http.StatusCreated })
}

func TestFlags_CachedBetweenReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), func(c *writer.Config) { c.FlagsTTL = time.Hour })
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.Equal(t, http.StatusCreated, e.post().Status)
		}()
	}
	wg.Wait()
	assert.Equal(t, 1.0, testutil.ToFloat64(e.metrics.FlagsReads.WithLabelValues("ok")), "one read serves every request within the TTL")
}
