package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/writer"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

const secret = "cmd-writer-test-secret-0123456789abcdef"

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func getenv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

func localEnv(t *testing.T) map[string]string {
	c := ddbtest.Client(t)
	return map[string]string{
		"LEDGER_TABLE": ddbtest.NewTable(t, c), "AWS_ENDPOINT_URL": ddbtest.Endpoint(t),
		"LEDGER_JWT_SECRET": secret, "LEDGER_ADDR": "127.0.0.1:0",
	}
}

func TestMain_ServesOnPort0AndFinishesInFlightRequestsOnClose(t *testing.T) {
	env := localEnv(t)
	var logs syncBuffer
	m := NewMain(getenv(env), io.Discard, &logs)
	require.NoError(t, m.ParseFlags(nil))
	require.NoError(t, m.Run(context.Background()))
	base := m.URL()
	assert.Contains(t, logs.String(), "writer listening")

	for path, status := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/v1/tenants/acme/branches/north/transactions": 401} {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, status, resp.StatusCode, path)
	}

	createDirectory(t, base, "acme", "north")
	token, err := writer.NewToken([]byte(secret), writer.TokenOptions{Tenant: "acme"})
	require.NoError(t, err)
	post := func(body io.Reader) (*http.Response, error) {
		req, err := http.NewRequest("POST", base+"/v1/tenants/acme/branches/north/transactions", body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", time.Now().Format(time.RFC3339Nano))
		return http.DefaultClient.Do(req)
	}
	resp, err := post(strings.NewReader(`{"type":"INCOME","amount":"1.5","category":"a"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	// A request whose body is still arriving when Close starts completes.
	pr, pw := io.Pipe()
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := post(pr)
		assert.NoError(t, err)
		done <- resp
	}()
	_, err = pw.Write([]byte(`{"type":"EXPENSE",`))
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond) // the request is in the handler
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	time.Sleep(100 * time.Millisecond) // Close is waiting for it
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the in-flight request finished", err)
	default:
	}
	_, err = pw.Write([]byte(`"amount":"2","category":"b"}`))
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	resp = <-done
	require.NotNil(t, resp)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode, "in-flight request answered: %s", body)
	require.NoError(t, <-closed)
	_, err = http.Get(base + "/healthz")
	assert.Error(t, err, "the listener is closed")
}

// createDirectory creates tenant and its branch through the running writer
// with an admin token: transactions need both to exist and be active.
func createDirectory(t *testing.T, base, tenant, branch string) {
	t.Helper()
	admin, err := writer.NewToken([]byte(secret), writer.TokenOptions{Admin: true})
	require.NoError(t, err)
	postAdmin(t, base+"/v1/tenants", admin, `{"id":"`+tenant+`","name":"Acme"}`)
	postAdmin(t, base+"/v1/tenants/"+tenant+"/branches", admin, `{"id":"`+branch+`","name":"North","document":"12.345.678/0001-90"}`)
}

func postAdmin(t *testing.T, url, token, body string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", time.Now().Format(time.RFC3339Nano))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "POST %s: %s", url, raw)
}

func TestRun_ExitsZeroOnSignal(t *testing.T) {
	env := localEnv(t)
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- Run(ctx, []string{"--drain-delay", "50ms"}, getenv(env), io.Discard, &logs) }()
	addr := regexp.MustCompile(`writer listening"? addr=(\S+)`)
	var m []string
	require.Eventually(t, func() bool { m = addr.FindStringSubmatch(logs.String()); return m != nil }, 30*time.Second, 20*time.Millisecond, logs.String())
	resp, err := http.Get("http://" + m[1] + "/readyz")
	require.NoError(t, err)
	var ready map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ready))
	resp.Body.Close()
	assert.Equal(t, map[string]any{"status": "ready", "writesEnabled": true}, ready)
	cancel()
	select {
	case c := <-code:
		assert.Equal(t, exitOK, c, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	assert.Contains(t, logs.String(), "writer stopped")
}

func TestParseFlags_RefusesToStartWithoutAWayToVerifyTokens(t *testing.T) {
	dir := t.TempDir()
	jwks := filepath.Join(dir, "jwks.json")
	require.NoError(t, os.WriteFile(jwks, []byte(`{"keys":[]}`), 0o600))
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no secret, no key set", map[string]string{}, nil, "set LEDGER_JWT_SECRET"},
		{"short secret", map[string]string{"LEDGER_JWT_SECRET": "short"}, nil, "at least 32"},
		{"missing key set file", map[string]string{}, []string{"--jwks-file", filepath.Join(dir, "nope.json")}, "--jwks-file"},
		{"key set without cursor key", map[string]string{}, []string{"--jwks-file", jwks}, "LEDGER_CURSOR_KEY"},
		{"short cursor key", map[string]string{"LEDGER_JWT_SECRET": secret, "LEDGER_CURSOR_KEY": "x"}, nil, "LEDGER_CURSOR_KEY"},
		{"secret ARN without cursor key", map[string]string{"LEDGER_JWT_SECRET_ARN": "ledger-jwt"}, nil, "--cursor-key-arn"},
		{"cursor key two ways", map[string]string{"LEDGER_JWT_SECRET": secret, "LEDGER_CURSOR_KEY": secret, "LEDGER_CURSOR_KEY_ARN": "ledger-cursor"}, nil, "both set"},
		{"bad address", map[string]string{"LEDGER_JWT_SECRET": secret, "LEDGER_ADDR": "8080"}, nil, "--addr"},
		{"bad duration", map[string]string{"LEDGER_JWT_SECRET": secret}, []string{"--flags-ttl", "soon"}, "--flags-ttl"},
		{"stray argument", map[string]string{"LEDGER_JWT_SECRET": secret}, []string{"serve"}, "unexpected arguments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := Run(context.Background(), c.args, getenv(c.env), io.Discard, &stderr)
			assert.Equal(t, exitUsage, code)
			assert.Contains(t, stderr.String(), c.want)
		})
	}

	// An empty key set parses as flags but the authenticator refuses it.
	var stderr bytes.Buffer
	code := Run(context.Background(), []string{"--jwks-file", jwks}, getenv(map[string]string{"LEDGER_CURSOR_KEY": secret}), io.Discard, &stderr)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr.String(), "key set has no keys")

	stderr.Reset()
	assert.Equal(t, exitOK, Run(context.Background(), []string{"--help"}, getenv(nil), io.Discard, &stderr))
	assert.Contains(t, stderr.String(), "LEDGER_JWT_SECRET")
}
