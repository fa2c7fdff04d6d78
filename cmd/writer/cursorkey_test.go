package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// The cursor key is a secret of its own (--cursor-key-arn): a writer
// started before a rotation of the JWT secret and one started after it
// sign and accept the same cursors. (Until issue 26 the key was derived
// from the JWT secret's current version, so they refused each other's.)
func TestMain_CursorsSurviveAJWTSecretRotation(t *testing.T) {
	const (
		first     = "first-secret-0123456789abcdef-0123456789"
		second    = "second-secret-0123456789abcdef-012345678"
		cursorKey = "cursor-key-0123456789abcdef-0123456789ab"
		keyID     = "arn:aws:secretsmanager:us-east-1:123456789012:secret:ledger-cursor-key-AbCdEf"
	)
	sm := &fakeSecretsManager{id: "arn:aws:secretsmanager:us-east-1:123456789012:secret:ledger-jwt-AbCdEf", cur: first,
		others: map[string]string{keyID: cursorKey}}
	fake := httptest.NewServer(sm)
	t.Cleanup(fake.Close)
	env := localEnv(t)
	delete(env, "LEDGER_JWT_SECRET")
	env["LEDGER_JWT_SECRET_ARN"] = sm.id
	env["LEDGER_CURSOR_KEY_ARN"] = keyID
	env["AWS_ENDPOINT_URL_SECRETS_MANAGER"] = fake.URL
	start := func() *Main {
		var logs syncBuffer
		m := NewMain(getenv(env), io.Discard, &logs)
		require.NoError(t, m.ParseFlags(nil))
		require.NoError(t, m.Run(context.Background()))
		t.Cleanup(func() { _ = m.Close() })
		assert.NotContains(t, logs.String(), cursorKey, "the key is never logged")
		return m
	}
	old := start()
	admin, err := writer.NewToken([]byte(first), writer.TokenOptions{Admin: true})
	require.NoError(t, err)
	postAdmin(t, old.URL()+"/v1/tenants", admin, `{"id":"acme","name":"Acme"}`)
	postAdmin(t, old.URL()+"/v1/tenants/acme/branches", admin, `{"id":"north","name":"North","document":"11111111000111"}`)
	postAdmin(t, old.URL()+"/v1/tenants/acme/branches", admin, `{"id":"south","name":"South","document":"22222222000122"}`)
	tok, err := writer.NewToken([]byte(first), writer.TokenOptions{Tenant: "acme"})
	require.NoError(t, err)
	status, body := getBody(t, old.URL()+"/v1/tenants/acme/branches?limit=1", tok)
	require.Equal(t, http.StatusOK, status, "answer %s", body)
	var page struct{ NextCursor string }
	require.NoError(t, json.Unmarshal(body, &page))
	require.NotEmpty(t, page.NextCursor)

	sm.rotate(second) // a new instance reads second as AWSCURRENT, first as AWSPREVIOUS
	fresh := start()
	for name, m := range map[string]*Main{"the old instance": old, "the new instance": fresh} {
		status, body := getBody(t, m.URL()+"/v1/tenants/acme/branches?limit=1&cursor="+url.QueryEscape(page.NextCursor), tok)
		assert.Equal(t, http.StatusOK, status, "%s takes the cursor: %s", name, body)
	}
}

func getBody(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

func TestMain_CursorKeyFromSecretsManagerIsRequiredAtStart(t *testing.T) {
	sm := &fakeSecretsManager{id: "ledger-jwt", cur: secret, others: map[string]string{"short-key": "short"}}
	fake := httptest.NewServer(sm)
	t.Cleanup(fake.Close)
	env := localEnv(t)
	delete(env, "LEDGER_JWT_SECRET")
	env["LEDGER_JWT_SECRET_ARN"] = "ledger-jwt"
	env["AWS_ENDPOINT_URL_SECRETS_MANAGER"] = fake.URL
	ctx := context.Background() // every case fails before serving
	for id, want := range map[string]string{"short-key": "needs at least 32", "no-such-key": "ResourceNotFoundException"} {
		env["LEDGER_CURSOR_KEY_ARN"] = id
		var stderr syncBuffer
		assert.Equal(t, exitError, Run(ctx, nil, getenv(env), io.Discard, &stderr), id)
		assert.Contains(t, stderr.String(), want, id)
	}
}
