package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/cmd/ledgerctl/internal/writerapi"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/writer"
)

// directoryEnv serves a writer over a fresh table and returns the
// environment that points ledgerctl at it.
func directoryEnv(t *testing.T) map[string]string {
	t.Helper()
	secret := strings.Repeat("k", 40)
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	auth, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(secret)})
	require.NoError(t, err)
	srv, err := writer.New(c, writer.Config{Table: table, Auth: auth, CursorKey: []byte(secret), FlagsTimeout: 30 * time.Second}, nil)
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return map[string]string{"LEDGER_WRITER_URL": hs.URL, "LEDGER_JWT_SECRET": secret}
}

func TestDirectory_CreateGetListThroughTheWriter(t *testing.T) {
	env := directoryEnv(t)

	code, out, errOut := run(t, env, "tenant", "create", "--id", "acme", "--name", "Acme Ltd")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "acme")
	assert.Contains(t, out, "Acme Ltd")
	code, _, errOut = run(t, env, "tenant", "create", "--id", "acme", "--name", "Acme Ltd")
	assert.Equal(t, exitDiff, code, "exists")
	assert.Contains(t, errOut, "409 already-exists")
	code, _, errOut = run(t, env, "tenant", "create", "--id", "acme", "--name", "Acme Ltd", "--exist-ok")
	assert.Equal(t, exitOK, code, "the same tenant, --exist-ok: %s", errOut)
	code, _, errOut = run(t, env, "tenant", "create", "--id", "acme", "--name", "Other", "--exist-ok")
	assert.Equal(t, exitDiff, code)
	assert.Contains(t, errOut, "another name")

	code, out, errOut = run(t, env, "branch", "create", "--tenant", "acme", "--id", "north", "--name", "North", "--document", "12.345.678/0001-90", "--json")
	require.Equal(t, exitOK, code, errOut)
	var b writer.Branch
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	assert.Equal(t, "12345678000190", b.Document)
	code, _, errOut = run(t, env, "branch", "create", "--tenant", "acme", "--id", "north", "--name", "North", "--document", "12345678000190", "--exist-ok")
	assert.Equal(t, exitOK, code, errOut)
	code, _, errOut = run(t, env, "branch", "create", "--tenant", "acme", "--id", "south", "--name", "South", "--document", "12345678000190")
	assert.Equal(t, exitDiff, code)
	assert.Contains(t, errOut, "document-taken")
	code, _, errOut = run(t, env, "branch", "create", "--tenant", "nobody", "--id", "x", "--name", "X", "--document", "1")
	assert.Equal(t, exitDiff, code)
	assert.Contains(t, errOut, "404")
	code, _, errOut = run(t, env, "branch", "create", "--tenant", "acme", "--id", "x", "--name", "X", "--document", "#")
	assert.Equal(t, exitError, code, "a 400 is an error")
	assert.Contains(t, errOut, "invalid-field")

	code, out, errOut = run(t, env, "account", "create", "--tenant", "acme", "--first-name", "Ana", "--last-name", "Silva",
		"--email", "Ana@Acme.example", "--email", "ana@home.example", "--role", "owner", "--json")
	require.Equal(t, exitOK, code, errOut)
	var a writer.Account
	require.NoError(t, json.Unmarshal([]byte(out), &a))
	assert.Equal(t, "ana@acme.example", a.Email)
	assert.Len(t, a.Emails, 2)
	// A verified address is held (an unverified one, ana@home.example,
	// reserves nothing since issue 13).
	code, _, errOut = run(t, env, "account", "create", "--tenant", "acme", "--first-name", "B", "--last-name", "C", "--email", "ANA@acme.example")
	assert.Equal(t, exitDiff, code)
	assert.Contains(t, errOut, "email-taken")

	code, out, errOut = run(t, env, "account", "get", "--tenant", "acme", "--id", a.ID)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "ana@home.example (unverified)")
	code, _, _ = run(t, env, "account", "get", "--tenant", "acme", "--id", "01J1Z7ZZZZZZZZZZZZZZZZZZZZ")
	assert.Equal(t, exitDiff, code, "not found")

	// Lists follow the cursors: more than one page of branches.
	for _, id := range []string{"b1", "b2", "b3"} {
		code, _, errOut := run(t, env, "branch", "create", "--tenant", "acme", "--id", id, "--name", id, "--document", "DOC-"+id)
		require.Equal(t, exitOK, code, errOut)
	}
	code, out, errOut = run(t, env, "branch", "list", "--tenant", "acme", "--json")
	require.Equal(t, exitOK, code, errOut)
	var branches []writer.Branch
	require.NoError(t, json.Unmarshal([]byte(out), &branches))
	assert.Len(t, branches, 4)
	code, out, _ = run(t, env, "branch", "list", "--tenant", "acme")
	require.Equal(t, exitOK, code)
	assert.Equal(t, 5, strings.Count(out, "\n"), "a header and four rows: %s", out)
	code, out, _ = run(t, env, "account", "list", "--tenant", "acme")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, a.ID)
	code, out, _ = run(t, env, "tenant", "get", "--id", "acme", "--json")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, `"status": "active"`)
	// GSI1, eventually consistent: the tenant shows up in the listing.
	require.Eventually(t, func() bool {
		code, out, _ := run(t, env, "tenant", "list")
		return code == exitOK && strings.Contains(out, "Acme Ltd")
	}, 5*time.Second, 50*time.Millisecond)

	// A tenant token is enough for its own branches, not for tenants.
	tok, err := writer.NewToken([]byte(env["LEDGER_JWT_SECRET"]), writer.TokenOptions{Tenant: "acme"})
	require.NoError(t, err)
	tenantEnv := map[string]string{"LEDGER_WRITER_URL": env["LEDGER_WRITER_URL"], "LEDGER_TOKEN": tok}
	code, _, errOut = run(t, tenantEnv, "branch", "get", "--tenant", "acme", "--id", "north")
	assert.Equal(t, exitOK, code, errOut)
	code, _, errOut = run(t, tenantEnv, "tenant", "list")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "403")

	// Business calendars: a tenant's report periods and a branch's
	// calendar at creation, compared by --exist-ok.
	code, out, errOut = run(t, env, "tenant", "create", "--id", "cal", "--name", "Cal", "--report-periods", "yearly, WEEKLY,DAILY", "--json")
	require.Equal(t, exitOK, code, errOut)
	var tn writer.Tenant
	require.NoError(t, json.Unmarshal([]byte(out), &tn))
	assert.Equal(t, []string{"DAILY", "WEEKLY", "YEARLY"}, tn.ReportPeriods)
	code, _, errOut = run(t, env, "tenant", "create", "--id", "cal", "--name", "Cal", "--report-periods", "DAILY,WEEKLY,YEARLY", "--exist-ok")
	assert.Equal(t, exitOK, code, errOut)
	code, _, errOut = run(t, env, "tenant", "create", "--id", "cal", "--name", "Cal", "--report-periods", "DAILY", "--exist-ok")
	assert.Equal(t, exitDiff, code)
	assert.Contains(t, errOut, "another reportPeriods")
	code, _, errOut = run(t, env, "tenant", "create", "--id", "cal2", "--name", "Cal", "--report-periods", "DAILY,HOURLY")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "--report-periods")

	code, out, errOut = run(t, env, "branch", "create", "--tenant", "cal", "--id", "sp", "--name", "SP", "--document", "DOC-sp",
		"--time-zone", "America/Sao_Paulo", "--day-starts-at", "04:00", "--fiscal-year-start-month", "7", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	assert.Equal(t, writer.Calendar{TimeZone: "America/Sao_Paulo", DayStartsAt: "04:00", WeekStartsOn: "MONDAY", FiscalYearStartMonth: 7}, b.Calendar)
	code, _, errOut = run(t, env, "branch", "create", "--tenant", "cal", "--id", "sp", "--name", "SP", "--document", "DOC-sp",
		"--time-zone", "America/Sao_Paulo", "--exist-ok")
	assert.Equal(t, exitOK, code, errOut)
	code, _, errOut = run(t, env, "branch", "create", "--tenant", "cal", "--id", "sp", "--name", "SP", "--document", "DOC-sp",
		"--day-starts-at", "05:00", "--exist-ok")
	assert.Equal(t, exitDiff, code)
	assert.Contains(t, errOut, "another calendar dayStartsAt")
	code, _, errOut = run(t, env, "branch", "create", "--tenant", "cal", "--id", "x", "--name", "X", "--document", "DOC-x", "--time-zone", "Mars/Base")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "422 invalid-calendar")
	assert.Contains(t, errOut, "(calendar.timeZone)")
	code, out, _ = run(t, env, "branch", "get", "--tenant", "cal", "--id", "sp")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "America/Sao_Paulo, days from 04:00, weeks from MONDAY, fiscal years from month 7")

	// update: a calendar member and the report periods change at the
	// version read; the other members keep theirs; rebucket is named.
	code, out, errOut = run(t, env, "branch", "update", "--tenant", "cal", "--id", "sp", "--day-starts-at", "05:30", "--week-starts-on", "sunday", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	assert.Equal(t, writer.Calendar{TimeZone: "America/Sao_Paulo", DayStartsAt: "05:30", WeekStartsOn: "SUNDAY", FiscalYearStartMonth: 7}, b.Calendar)
	assert.Equal(t, int64(2), b.Version)
	assert.Contains(t, errOut, "ledgerctl rebucket --tenant cal --branch sp")
	code, out, errOut = run(t, env, "tenant", "update", "--id", "cal", "--report-periods", "yearly,daily", "--json")
	require.Equal(t, exitOK, code, errOut)
	var updated writer.Tenant
	require.NoError(t, json.Unmarshal([]byte(out), &updated))
	assert.Equal(t, []string{"DAILY", "YEARLY"}, updated.ReportPeriods)
	assert.Contains(t, errOut, "ledgerctl rebucket --tenant cal")
	code, _, errOut = run(t, env, "branch", "update", "--tenant", "cal", "--id", "sp", "--name", "Stale", "--if-match", "1")
	assert.Equal(t, exitDiff, code, "a stale version is refused")
	assert.Contains(t, errOut, "412")
	code, _, errOut = run(t, env, "branch", "update", "--tenant", "cal", "--id", "sp", "--time-zone", "Mars/Base")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "(calendar.timeZone)")
	code, _, errOut = run(t, env, "branch", "update", "--tenant", "cal", "--id", "nope", "--name", "N")
	assert.Equal(t, exitDiff, code, errOut)
}

func TestDirectory_RefusesBadUsage(t *testing.T) {
	env := map[string]string{"LEDGER_JWT_SECRET": strings.Repeat("k", 40)}
	for _, args := range [][]string{
		{"tenant"}, {"tenant", "delete"}, {"tenant", "create", "--name", "x"}, {"tenant", "get"},
		{"branch", "list"}, {"branch", "create", "--tenant", "t", "--id", "b", "--name", "n"},
		{"account", "create", "--tenant", "t", "--first-name", "a", "--last-name", "b"},
		{"tenant", "list", "extra"}, {"tenant", "list", "--url", "ftp://x"},
		{"tenant", "update"}, {"branch", "update", "--id", "b"}, {"account", "update", "--tenant", "t", "--id", "a"},
	} {
		code, _, _ := run(t, env, args...)
		assert.Equal(t, exitError, code, "%v", args)
	}
	code, _, errOut := run(t, map[string]string{}, "tenant", "list")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "LEDGER_TOKEN")
}

func TestToken_AdminScope(t *testing.T) {
	secret := strings.Repeat("s", 40)
	code, out, errOut := run(t, map[string]string{"LEDGER_JWT_SECRET": secret}, "token", "--admin")
	require.Equal(t, exitOK, code, errOut)
	a, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(secret)})
	require.NoError(t, err)
	c, err := a.Authenticate(strings.TrimSpace(out))
	require.NoError(t, err)
	assert.True(t, c.Admin())
	assert.Empty(t, c.Tenant)
	assert.True(t, c.MayActFor("any-tenant"))

	code, out, _ = run(t, map[string]string{"LEDGER_JWT_SECRET": secret}, "token", "--tenant", "acme")
	require.Equal(t, exitOK, code)
	c, err = a.Authenticate(strings.TrimSpace(out))
	require.NoError(t, err)
	assert.False(t, c.Admin())
	assert.False(t, c.MayActFor("other"))
}

// Behind API Gateway some answers are the gateway's own, application/json
// {"message": …} (docs/api.md "Errors"): the directory client retries its
// throttle (429) and timeout (504) with the create's Idempotency-Key, and
// reports its other answers as the gateway's, not as an unreadable problem.
func TestDirectoryClient_APIGatewaysOwnAnswers(t *testing.T) {
	t.Parallel()
	tenant := `{"id":"acme","name":"Acme","status":"active","reportPeriods":["DAILY","MONTHLY","YEARLY"],"createdAt":"2026-01-31T12:00:00Z","updatedAt":"2026-01-31T12:00:00Z","version":1}`
	type answer struct {
		status int
		body   string
	}
	for _, tc := range []struct {
		name    string
		answers []answer
		wantErr string // "" when the create succeeds
	}{
		{"throttled then timed out then created", []answer{{429, `{"message":"Too Many Requests"}`}, {504, `{"message":"Gateway Timeout"}`}, {201, tenant}}, ""},
		{"function failed", []answer{{500, `{"message":"Internal Server Error"}`}}, "500 gateway-500: API Gateway: Internal Server Error"},
		{"the writer's problem", []answer{{409, `{"type":"` + writer.ProblemAlreadyExists + `","title":"Already exists","status":409,"detail":"tenant acme exists"}`}}, "409 already-exists: tenant acme exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var keys []string
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n := len(keys)
				keys = append(keys, r.Header.Get("Idempotency-Key"))
				mu.Unlock()
				a := tc.answers[min(n, len(tc.answers)-1)]
				w.Header().Set("Content-Type", "application/json")
				if strings.Contains(a.body, `"type"`) {
					w.Header().Set("Content-Type", "application/problem+json")
				}
				w.WriteHeader(a.status)
				_, _ = w.Write([]byte(a.body))
			}))
			t.Cleanup(hs.Close)
			e := &environment{getenv: func(k string) string { return map[string]string{"LEDGER_TOKEN": "t"}[k] }}
			c, err := e.directoryClient(hs.URL)
			require.NoError(t, err)
			got, err := c.send(context.Background(), true, func(ctx context.Context, key string) (writerAnswer, error) {
				return c.api.CreateTenantWithResponse(ctx, &writerapi.CreateTenantParams{IdempotencyKey: key}, writerapi.TenantCreate{Id: "acme", Name: "Acme"})
			})
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tc.wantErr, err.Error())
				assert.Len(t, keys, 1, "not retried")
				return
			}
			require.NoError(t, err)
			assert.JSONEq(t, tenant, string(got))
			require.Len(t, keys, len(tc.answers))
			for _, k := range keys {
				assert.Equal(t, keys[0], k, "every retry carries the create's Idempotency-Key")
			}
		})
	}
}
