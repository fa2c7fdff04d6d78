package writer_test

import (
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

func TestOpenAPI_ServedWithoutATokenAsTheEmbeddedDocument(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	r := e.send(req{method: "GET", path: "/v1/openapi.json", noAuth: true})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
	want, err := writer.OpenAPI()
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(r.Body))
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &doc))
	assert.Equal(t, "3.1.0", doc.OpenAPI)
	assert.Contains(t, doc.Paths, "/v1/tenants/{tenant}/branches/{branch}/transactions")
}

// Every path and method the writer serves is an operation of the document,
// and every operation one it serves: each method is sent to each route of
// a server with no table (a 405 means "not served"; a served one fails or
// refuses the empty request).
func TestOpenAPI_DocumentsEveryRouteAndMethodTheServerHas(t *testing.T) {
	t.Parallel()
	auth, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(testSecret)})
	require.NoError(t, err)
	srv, err := writer.New(nil, writer.Config{Table: "t", Auth: auth, CursorKey: cursorKey, Gatherer: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler)}, nil)
	require.NoError(t, err)
	admin, err := writer.NewToken([]byte(testSecret), writer.TokenOptions{Admin: true})
	require.NoError(t, err)
	raw, err := writer.OpenAPI()
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	// The routes of server.go (its route constants, the metric label values).
	routes := []string{"/v1/tenants", "/v1/tenants/{tenant}", "/v1/tenants/{tenant}/branches", "/v1/tenants/{tenant}/branches/{branch}",
		"/v1/branches:lookup", "/v1/tenants/{tenant}/accounts", "/v1/tenants/{tenant}/accounts/{account}",
		"/v1/tenants/{tenant}/accounts/{account}/emails", "/v1/tenants/{tenant}/accounts/{account}/emails/{email}", "/v1/accounts:lookup",
		"/v1/tenants/{tenant}/branches/{branch}/transactions", "/v1/tenants/{tenant}/branches/{branch}/transactions/{id}",
		"/v1/tenants/{tenant}/branches/{branch}/transactions/{id}/history",
		"/v1/tenants/{tenant}/branches/{branch}/reports", "/v1/tenants/{tenant}/branches/{branch}/reports/{period}/{value}",
		"/v1/openapi.json", "/healthz", "/readyz", "/metrics"}
	assert.ElementsMatch(t, routes, slices.Collect(maps.Keys(doc.Paths)), "the document's paths are the server's routes")
	fill := strings.NewReplacer("{tenant}", "acme", "{branch}", "north", "{account}", "01J1Z7ZZZZZZZZZZZZZZZZZZZZ", "{email}", "a@b.example",
		"{id}", "01HV5Z6Q8X3N2M4K7J9B0C1D2E", "{period}", "MONTHLY", "{value}", "2026-01")
	for _, route := range routes {
		for _, method := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(method, fill.Replace(route), nil)
			r.Header.Set("Authorization", "Bearer "+admin) // a method is dispatched after authentication
			srv.ServeHTTP(rec, r)
			_, documented := doc.Paths[route][strings.ToLower(method)]
			assert.Equal(t, documented, rec.Code != http.StatusMethodNotAllowed, "%s %s: answered %d", method, route, rec.Code)
		}
	}
}

// docs/openapi.yaml is a link to the one source, never a copy that drifts.
func TestOpenAPI_DocsLinkIsTheEmbeddedSource(t *testing.T) {
	t.Parallel()
	fi, err := os.Lstat("../docs/openapi.yaml")
	require.NoError(t, err)
	require.Equal(t, os.ModeSymlink, fi.Mode().Type(), "docs/openapi.yaml must link to writer/openapi.yaml")
	target, err := os.Readlink("../docs/openapi.yaml")
	require.NoError(t, err)
	assert.Equal(t, "../writer/openapi.yaml", target)
}

// The contract check itself fails on what the document does not describe:
// a check that could not fail would prove nothing about the writer's tests.
func TestOpenAPIContract_RefusesUndocumentedExchanges(t *testing.T) {
	t.Parallel()
	c, err := loadContract()
	require.NoError(t, err)
	tenant := `{"id":"acme","name":"Acme","status":"active","reportPeriods":["DAILY","MONTHLY","YEARLY"],"createdAt":"2026-01-31T12:00:00.123Z","updatedAt":"2026-01-31T12:00:00.123Z","version":1}`
	problem := func(slug string, status int) string {
		b, _ := json.Marshal(writer.Problem{Type: writer.ProblemBase + slug, Title: "t", Status: status, Detail: "d"})
		return string(b)
	}
	jsonHeader := func(extra ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}, "Cache-Control": {"no-store"}, "X-Request-Id": {"01J1Z7ZZZZZZZZZZZZZZZZZZZZ"}}
		for i := 0; i+1 < len(extra); i += 2 {
			h.Set(extra[i], extra[i+1])
		}
		return h
	}
	problemHeader := http.Header{"Content-Type": {"application/problem+json"}, "Cache-Control": {"no-store"}, "X-Content-Type-Options": {"nosniff"},
		"X-Request-Id": {"01J1Z7ZZZZZZZZZZZZZZZZZZZZ"}}
	withoutRequestID := problemHeader.Clone()
	withoutRequestID.Del("X-Request-Id")
	withAllow := problemHeader.Clone()
	withAllow.Set("Allow", "GET, PATCH")
	withAuthenticate := problemHeader.Clone()
	withAuthenticate.Set("WWW-Authenticate", `Bearer realm="ledger"`)
	type exchange struct {
		method, path, body string
		reqHeader          []string
		status             int
		header             http.Header
		respBody           string
	}
	auth := []string{"Authorization", "Bearer x"}
	create := []string{"Authorization", "Bearer x", "Content-Type", "application/json", "Idempotency-Key", "k1"}
	cases := []struct {
		name  string
		x     exchange
		wrong string // "" when the exchange is documented; else a part of the error
	}{
		{"documented get", exchange{method: "GET", path: "/v1/tenants/acme", reqHeader: auth, status: 200,
			header: jsonHeader("ETag", `"1"`), respBody: tenant}, ""},
		{"documented create", exchange{method: "POST", path: "/v1/tenants", body: `{"id":"acme","name":"Acme"}`, reqHeader: create, status: 201,
			header: jsonHeader("ETag", `"1"`, "Location", "/v1/tenants/acme"), respBody: tenant}, ""},
		{"documented problem", exchange{method: "GET", path: "/v1/tenants/acme", reqHeader: auth, status: 404,
			header: problemHeader, respBody: problem("not-found", 404)}, ""},
		{"documented unknown route", exchange{method: "GET", path: "/v1/nowhere", reqHeader: auth, status: 404,
			header: problemHeader, respBody: problem("not-found", 404)}, ""},
		{"documented 405", exchange{method: "PUT", path: "/v1/tenants/acme", reqHeader: auth, status: 405,
			header: withAllow, respBody: problem("method-not-allowed", 405)}, ""},
		{"documented 401 before the 405", exchange{method: "PUT", path: "/v1/tenants/acme", status: 401,
			header: withAuthenticate, respBody: problem("unauthenticated", 401)}, ""},
		{"undocumented field", exchange{method: "GET", path: "/v1/tenants/acme", reqHeader: auth, status: 200,
			header: jsonHeader("ETag", `"1"`), respBody: strings.Replace(tenant, `"version":1`, `"version":1,"secret":"x"`, 1)}, "secret"},
		{"undocumented status", exchange{method: "GET", path: "/v1/tenants/acme", reqHeader: auth, status: 418,
			header: problemHeader, respBody: problem("not-found", 418)}, "418"},
		{"undocumented route", exchange{method: "GET", path: "/v1/nowhere", reqHeader: auth, status: 200,
			header: jsonHeader(), respBody: `{}`}, "undocumented route"},
		{"undocumented method", exchange{method: "PUT", path: "/v1/tenants/acme", reqHeader: auth, status: 200,
			header: jsonHeader(), respBody: tenant}, "undocumented method"},
		{"undocumented header", exchange{method: "GET", path: "/v1/tenants/acme", reqHeader: auth, status: 200,
			header: jsonHeader("ETag", `"1"`, "X-Debug", "1"), respBody: tenant}, "X-Debug"},
		{"undocumented problem type", exchange{method: "GET", path: "/v1/tenants/acme", reqHeader: auth, status: 404,
			header: problemHeader, respBody: problem("teapot", 404)}, "type"},
		{"problem type of another status", exchange{method: "GET", path: "/v1/tenants/acme", reqHeader: auth, status: 404,
			header: problemHeader, respBody: problem("invalid-field", 404)}, "type"},
		{"405 without Allow", exchange{method: "PUT", path: "/v1/tenants/acme", reqHeader: auth, status: 405,
			header: problemHeader, respBody: problem("method-not-allowed", 405)}, "Allow"},
		{"request id missing", exchange{method: "GET", path: "/v1/tenants/acme", reqHeader: auth, status: 404,
			header: withoutRequestID, respBody: problem("not-found", 404)}, "X-Request-Id"},
		{"required header missing", exchange{method: "POST", path: "/v1/tenants", body: `{"id":"acme","name":"Acme"}`, reqHeader: create, status: 201,
			header: jsonHeader("ETag", `"1"`), respBody: tenant}, "Location"},
		{"forbidden request accepted", exchange{method: "POST", path: "/v1/tenants", body: `{"id":"acme","name":"Acme","color":"red"}`, reqHeader: create, status: 201,
			header: jsonHeader("ETag", `"1"`, "Location", "/v1/tenants/acme"), respBody: tenant}, "accepted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.x.method, tc.x.path, strings.NewReader(tc.x.body))
			for i := 0; i+1 < len(tc.x.reqHeader); i += 2 {
				r.Header.Set(tc.x.reqHeader[i], tc.x.reqHeader[i+1])
			}
			err := c.check(r, []byte(tc.x.body), tc.x.status, tc.x.header, []byte(tc.x.respBody))
			if tc.wrong == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wrong)
		})
	}
}
