package main

import (
	"context"
	"io"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// get sends GET path with token to the writer at base.
func get(t *testing.T, base, path, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestMain_TenantRateLimitFromTheEnvironment(t *testing.T) {
	env := localEnv(t)
	env["LEDGER_TENANT_RATE"], env["LEDGER_TENANT_BURST"] = "0.001", "2"
	m := NewMain(getenv(env), io.Discard, io.Discard)
	require.NoError(t, m.ParseFlags(nil))
	require.NoError(t, m.Run(context.Background()))
	t.Cleanup(func() { _ = m.Close() })
	token, err := writer.NewToken([]byte(secret), writer.TokenOptions{Tenant: "acme"})
	require.NoError(t, err)
	for range 2 {
		assert.NotEqual(t, http.StatusTooManyRequests, get(t, m.URL(), "/v1/tenants/acme/branches", token).StatusCode)
	}
	resp := get(t, m.URL(), "/v1/tenants/acme/branches", token)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
}

func TestParseFlags_TenantRateLimit(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tenant-rate", "fast"}, "--tenant-rate"},
		{[]string{"--tenant-rate", "-1"}, "--tenant-rate"},
		{[]string{"--tenant-rate", "NaN"}, "--tenant-rate"},
		{[]string{"--tenant-burst", "0"}, "--tenant-burst"},
		{[]string{"--tenant-burst", "1.5"}, "--tenant-burst"},
		{[]string{"--directory-ttl", "2m"}, "--directory-ttl"},
		{[]string{"--directory-ttl", "soon"}, "--directory-ttl"},
	} {
		m := NewMain(getenv(map[string]string{"LEDGER_JWT_SECRET": secret}), io.Discard, io.Discard)
		err := m.ParseFlags(c.args)
		require.Error(t, err, "%v", c.args)
		assert.Contains(t, err.Error(), c.want)
	}
	m := NewMain(getenv(map[string]string{"LEDGER_JWT_SECRET": secret}), io.Discard, io.Discard)
	require.NoError(t, m.ParseFlags(nil))
	assert.Equal(t, 100.0, m.tenantRate, "default")
	assert.Equal(t, 200, m.tenantBurst, "default")
	assert.Equal(t, 5*time.Second, m.directoryTTL, "default")
	require.NoError(t, m.ParseFlags([]string{"--tenant-rate", "0"}), "0 turns the limit off")
	require.NoError(t, m.ParseFlags([]string{"--directory-ttl", "0s"}))
	assert.Negative(t, m.directoryTTL, "0: read on every request")
}

func TestParseFlags_TenantBudget(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tenant-budget", "lots"}, "--tenant-budget"},
		{[]string{"--tenant-budget", "-5"}, "--tenant-budget"},
		{[]string{"--tenant-budget", "NaN"}, "--tenant-budget"},
		{[]string{"--tenant-budget-burst", "-1"}, "--tenant-budget-burst"},
		{[]string{"--tenant-budget-shards", "0"}, "--tenant-budget-shards"},
		{[]string{"--tenant-budget-shards", "2.5"}, "--tenant-budget-shards"},
		{[]string{"--tenant-budget-shards", "101"}, "--tenant-budget-shards"},
		{[]string{"--tenant-budget-grant", "0"}, "--tenant-budget-grant"},
		{[]string{"--tenant-budget-grant-ttl", "2h"}, "--tenant-budget-grant-ttl"},
		{[]string{"--tenant-budget-timeout", "soon"}, "--tenant-budget-timeout"},
		{[]string{"--tenant-budget", "1", "--tenant-budget-burst", "3", "--tenant-budget-shards", "4"}, "less than one unit a shard"},
		{[]string{"--table", "ledger", "--coordination-table", "ledger"}, "--coordination-table"},
	} {
		m := NewMain(getenv(map[string]string{"LEDGER_JWT_SECRET": secret}), io.Discard, io.Discard)
		err := m.ParseFlags(c.args)
		require.Error(t, err, "%v", c.args)
		assert.Contains(t, err.Error(), c.want, "%v", c.args)
	}
	m := NewMain(getenv(map[string]string{"LEDGER_JWT_SECRET": secret}), io.Discard, io.Discard)
	require.NoError(t, m.ParseFlags(nil))
	assert.Equal(t, writer.BudgetConfig{Shards: 4, MaxGrant: 50, GrantTTL: time.Second, Timeout: 250 * time.Millisecond}, m.budget, "defaults: off")
	m = NewMain(getenv(map[string]string{"LEDGER_JWT_SECRET": secret, "LEDGER_TENANT_BUDGET": "400", "LEDGER_TENANT_BUDGET_BURST": "800",
		"LEDGER_TENANT_BUDGET_SHARDS": "8", "LEDGER_TENANT_BUDGET_GRANT": "20", "LEDGER_TENANT_BUDGET_GRANT_TTL": "2s", "LEDGER_TENANT_BUDGET_TIMEOUT": "100ms"}), io.Discard, io.Discard)
	require.NoError(t, m.ParseFlags(nil))
	assert.Equal(t, writer.BudgetConfig{Rate: 400, Burst: 800, Shards: 8, MaxGrant: 20, GrantTTL: 2 * time.Second, Timeout: 100 * time.Millisecond}, m.budget, "from the environment")
}

func TestParseFlags_TenantCurrencies(t *testing.T) {
	for _, c := range []string{"-1", "eight", "2.5", "1001"} {
		m := NewMain(getenv(map[string]string{"LEDGER_JWT_SECRET": secret}), io.Discard, io.Discard)
		err := m.ParseFlags([]string{"--tenant-currencies", c})
		require.Error(t, err, c)
		assert.Contains(t, err.Error(), "--tenant-currencies", c)
	}
	for _, c := range []struct {
		env  map[string]string
		args []string
		want int
	}{
		{nil, nil, writer.DefaultMaxTenantCurrencies},
		{nil, []string{"--tenant-currencies", "3"}, 3},
		{map[string]string{"LEDGER_TENANT_CURRENCIES": "20"}, nil, 20},
		{nil, []string{"--tenant-currencies", "0"}, -1}, // writer.Config: no cap
	} {
		env := map[string]string{"LEDGER_JWT_SECRET": secret}
		maps.Copy(env, c.env)
		m := NewMain(getenv(env), io.Discard, io.Discard)
		require.NoError(t, m.ParseFlags(c.args))
		assert.Equal(t, c.want, m.maxCurrencies, "%v %v", c.env, c.args)
	}
}
