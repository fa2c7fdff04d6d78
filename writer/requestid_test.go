package writer_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/writer"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRequestID_AWellFormedClientIDIsEchoedAndIsTheProblemsInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	for _, id := range []string{"a", "req-42", "01J1Z7ZZZZZZZZZZZZZZZZZZZZ", "trace:abc.def_1-2", strings.Repeat("x", 128)} {
		ok := e.send(req{method: "GET", path: e.base() + "/transactions", headers: []string{"X-Request-Id", id}})
		require.Equal(t, http.StatusOK, ok.Status, "answer %s", ok)
		assert.Equal(t, id, ok.Header.Get("X-Request-Id"), "a 200 echoes the client's id")

		bad := e.send(req{method: "GET", path: e.base() + "/transactions/nope", headers: []string{"X-Request-Id", id}})
		require.Equal(t, http.StatusBadRequest, bad.Status, "answer %s", bad)
		assert.Equal(t, id, bad.Header.Get("X-Request-Id"))
		assert.Equal(t, "urn:ledger:request:"+id, bad.problem(t).Instance)
	}
}

func TestRequestID_AMalformedClientIDIsReplacedByAFreshULIDNeverEchoed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	for _, id := range []string{"has space", "ünïcode", strings.Repeat("x", 129), "semi;colon", "<script>", "a/b"} {
		r := e.send(req{method: "GET", path: e.base() + "/transactions/nope", headers: []string{"X-Request-Id", id}})
		require.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
		got := r.Header.Get("X-Request-Id")
		assert.NotEqual(t, id, got)
		_, err := ulid.ParseStrict(got)
		assert.NoError(t, err, "id %q for the malformed %q", got, id)
		assert.Equal(t, "urn:ledger:request:"+got, r.problem(t).Instance)
		assert.NotContains(t, string(r.Body), id)
	}
	// Given twice: neither is taken.
	hr, err := http.NewRequest("GET", e.http.URL+e.base()+"/transactions", nil)
	require.NoError(t, err)
	hr.Header.Set("Authorization", "Bearer "+e.token)
	hr.Header.Add("X-Request-Id", "one")
	hr.Header.Add("X-Request-Id", "two")
	resp, err := e.http.Client().Do(hr)
	require.NoError(t, err)
	resp.Body.Close()
	_, err = ulid.ParseStrict(resp.Header.Get("X-Request-Id"))
	assert.NoError(t, err)
}

// Every answer has an id, fresh for each request: the writer's own
// (unknown route, wrong method, no token, health) as well as the API's.
func TestRequestID_EveryAnswerCarriesAFreshOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	seen := map[string]bool{}
	for _, rq := range []req{
		{method: "GET", path: "/nowhere"},
		{method: "PUT", path: e.base() + "/transactions"},
		{method: "GET", path: e.base() + "/transactions", noAuth: true},
		{method: "GET", path: "/healthz", noAuth: true},
		{method: "GET", path: "/v1/openapi.json", noAuth: true},
		{method: "GET", path: e.base() + "/transactions"},
		{method: "GET", path: e.base() + "/transactions"},
	} {
		r := e.send(rq)
		id := r.Header.Get("X-Request-Id")
		_, err := ulid.ParseStrict(id)
		require.NoError(t, err, "%s %s answered %d with X-Request-Id %q", rq.method, rq.path, r.Status, id)
		assert.False(t, seen[id], "id %s given twice", id)
		seen[id] = true
		if r.Status >= 400 {
			assert.Equal(t, "urn:ledger:request:"+id, r.problem(t).Instance, "%s %s", rq.method, rq.path)
		}
	}
}

// The log line of a failed request names it by the id its answer gave.
func TestRequestID_TheLogLineOfAFailedRequestCarriesIt(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	e := newEnv(t, sharedTable(t), func(c *writer.Config) { c.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	e.calls.Decide = func(op string) ledgertest.Fault {
		if op == "Query" {
			return ledgertest.Throttle
		}
		return ledgertest.Pass
	}
	r := e.send(req{method: "GET", path: e.base() + "/transactions", headers: []string{"X-Request-Id", "find-me-7"}})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "answer %s", r)
	assert.Equal(t, "urn:ledger:request:find-me-7", r.problem(t).Instance)
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "log line %s", line)
		if rec["request_id"] == "find-me-7" {
			found = true
		}
	}
	assert.True(t, found, "no log line with request_id find-me-7 in:\n%s", logs)
}
