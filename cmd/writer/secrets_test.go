package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// fakeSecretsManager answers GetSecretValue over HTTP as AWS Secrets
// Manager does (awsJson1_1): the AWSCURRENT and AWSPREVIOUS versions of
// one secret, which the test rotates.
type fakeSecretsManager struct {
	id    string
	mu    sync.Mutex
	cur   string
	prev  string
	fail  bool
	calls atomic.Int64
	// others are further secrets (id → AWSCURRENT value) served alongside.
	others map[string]string
}

func (f *fakeSecretsManager) rotate(next string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prev, f.cur = f.cur, next
}

func (f *fakeSecretsManager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	var in struct{ SecretId, VersionStage string }
	if r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" || json.NewDecoder(r.Body).Decode(&in) != nil {
		http.Error(w, `{"__type":"InvalidRequestException","Message":"unexpected call"}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := func(status int, typ, msg string) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"__type":"`+typ+`","Message":"`+msg+`"}`)
	}
	value := map[string]string{"AWSCURRENT": f.cur, "AWSPREVIOUS": f.prev}[in.VersionStage]
	if v, ok := f.others[in.SecretId]; ok && in.VersionStage == "AWSCURRENT" {
		in.SecretId, value = f.id, v
	}
	switch {
	case f.fail:
		fail(http.StatusBadRequest, "AccessDeniedException", "not authorized to perform secretsmanager:GetSecretValue")
	case in.SecretId != f.id:
		fail(http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
	case value == "":
		fail(http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret value for staging label: "+in.VersionStage)
	default:
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_ = json.NewEncoder(w).Encode(map[string]any{"ARN": f.id, "Name": "ledger-jwt", "SecretString": value,
			"VersionId": "v-" + value[:4], "VersionStages": []string{in.VersionStage}, "CreatedDate": 1.7e9})
	}
}

func TestMain_JWTSecretFromSecretsManagerRotatesWithoutRestart(t *testing.T) {
	const (
		first  = "first-secret-0123456789abcdef-0123456789"
		second = "second-secret-0123456789abcdef-012345678"
		third  = "third-secret-0123456789abcdef-0123456789"
	)
	sm := &fakeSecretsManager{id: "arn:aws:secretsmanager:us-east-1:123456789012:secret:ledger-jwt-AbCdEf", cur: first}
	fake := httptest.NewServer(sm)
	t.Cleanup(fake.Close)

	env := localEnv(t)
	delete(env, "LEDGER_JWT_SECRET")
	env["LEDGER_JWT_SECRET_ARN"] = sm.id
	env["LEDGER_CURSOR_KEY"] = "cursor-key-0123456789abcdef-0123456789ab"
	env["AWS_ENDPOINT_URL_SECRETS_MANAGER"] = fake.URL
	env["LEDGER_SECRET_REFRESH"] = "100ms"
	var logs syncBuffer
	m := NewMain(getenv(env), io.Discard, &logs)
	require.NoError(t, m.ParseFlags(nil))
	require.NoError(t, m.Run(context.Background()))
	t.Cleanup(func() { _ = m.Close() })
	assert.NotContains(t, logs.String(), first, "the secret is never logged")

	status := func(secret string) int {
		tok, err := writer.NewToken([]byte(secret), writer.TokenOptions{Tenant: "acme"})
		require.NoError(t, err)
		return get(t, m.URL(), "/v1/tenants/acme/branches", tok).StatusCode
	}
	require.Equal(t, http.StatusOK, status(first), "the secret read at start verifies tokens")
	require.Equal(t, http.StatusUnauthorized, status(second))

	// Rotated: the new secret is picked up without a restart, and tokens
	// minted with the previous one still verify during the rotation.
	sm.rotate(second)
	require.Eventually(t, func() bool { return status(second) == http.StatusOK }, time.Minute, 20*time.Millisecond)
	require.Equal(t, http.StatusOK, status(first), "AWSPREVIOUS verifies too")
	sm.rotate(third)
	require.Eventually(t, func() bool { return status(first) == http.StatusUnauthorized }, time.Minute, 20*time.Millisecond)
	require.Equal(t, http.StatusOK, status(third))
	require.Equal(t, http.StatusOK, status(second))

	// A failing refresh keeps the secrets read last, and says so.
	sm.mu.Lock()
	sm.fail = true
	sm.mu.Unlock()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "refreshing the JWT secret failed") }, time.Minute, 20*time.Millisecond)
	require.Equal(t, http.StatusOK, status(third))
	resp, err := http.Get(m.URL() + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), `ledger_writer_secret_reads_total{outcome="error"}`)
	assert.Contains(t, string(body), `ledger_writer_secret_reads_total{outcome="ok"}`)
	assert.NotContains(t, logs.String(), third)
}

func TestMain_JWTSecretFromSecretsManagerIsRequiredAtStart(t *testing.T) {
	sm := &fakeSecretsManager{id: "ledger-jwt", cur: "short"}
	fake := httptest.NewServer(sm)
	t.Cleanup(fake.Close)
	env := localEnv(t)
	delete(env, "LEDGER_JWT_SECRET")
	env["LEDGER_JWT_SECRET_ARN"] = "ledger-jwt"
	env["LEDGER_CURSOR_KEY"] = "cursor-key-0123456789abcdef-0123456789ab"
	env["AWS_ENDPOINT_URL_SECRETS_MANAGER"] = fake.URL

	var stderr syncBuffer
	ctx := context.Background() // every case fails before serving
	assert.Equal(t, exitError, Run(ctx, nil, getenv(env), io.Discard, &stderr), "a secret under 32 bytes")
	assert.Contains(t, stderr.String(), "needs at least 32")

	sm.mu.Lock()
	sm.fail = true
	sm.cur = "long-enough-secret-0123456789abcdef-0123"
	sm.mu.Unlock()
	assert.Equal(t, exitError, Run(ctx, nil, getenv(env), io.Discard, &stderr), "Secrets Manager refuses")
	assert.Contains(t, stderr.String(), "AccessDeniedException")

	env["LEDGER_JWT_SECRET"] = secret
	stderr = syncBuffer{}
	assert.Equal(t, exitUsage, Run(ctx, nil, getenv(env), io.Discard, &stderr), "both ways at once")
	assert.Contains(t, stderr.String(), "both set")
}

// The template hands the writer the secret's ARN, never its value, and
// lets it read that one secret.
func TestTemplate_WriterReadsTheSecretAtRunTime(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "infra", "template.yaml"))
	require.NoError(t, err)
	tpl := string(raw)
	assert.NotContains(t, tpl, "resolve:secretsmanager", "no secret value in the function configuration")
	assert.NotContains(t, tpl, "LEDGER_JWT_SECRET:")
	assert.Contains(t, tpl, "LEDGER_JWT_SECRET_ARN: !Ref WriterJwtSecret")
	assert.Regexp(t, `Sid: JwtSecret\s+Effect: Allow\s+Action: secretsmanager:GetSecretValue\s+Resource: !Ref WriterJwtSecret`, tpl)
	// The cursor key is a secret of its own, not derived from the JWT
	// secret, which rotates.
	assert.NotContains(t, tpl, "LEDGER_CURSOR_KEY:")
	assert.Contains(t, tpl, "LEDGER_CURSOR_KEY_ARN: !Ref WriterCursorKey")
	assert.Regexp(t, `Sid: CursorKey\s+Effect: Allow\s+Action: secretsmanager:GetSecretValue\s+Resource: !Ref WriterCursorKey`, tpl)
	assert.Regexp(t, `WriterCursorKey:\s+Type: AWS::SecretsManager::Secret`, tpl)
}
