package writer_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
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
		"/v1/tenants/{tenant}/reports", "/v1/tenants/{tenant}/reports/{period}/{value}",
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
	txn := `{"id":"01J1Z7ZZZZZZZZZZZZZZZZZZZZ","tenant":"acme","branch":"b1","type":"EXPENSE","amount":"12.5","category":"food","createdAt":"2026-01-31T12:00:00.123Z","businessDate":"2026-01-31","updatedAt":"2026-01-31T12:00:00.123Z","version":1}`
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
		{"documented delete (204, no body)", exchange{method: "DELETE", path: "/v1/tenants/acme/branches/b1/transactions/01J1Z7ZZZZZZZZZZZZZZZZZZZZ", reqHeader: auth, status: 204,
			header: http.Header{"Cache-Control": {"no-store"}, "X-Request-Id": {"01J1Z7ZZZZZZZZZZZZZZZZZZZZ"}}}, ""},
		{"amount as a string", exchange{method: "POST", path: "/v1/tenants/acme/branches/b1/transactions", body: `{"type":"EXPENSE","amount":"12.50","category":"food"}`, reqHeader: create, status: 201,
			header: jsonHeader("ETag", `"1"`, "Location", "/v1/tenants/acme/branches/b1/transactions/01J1Z7ZZZZZZZZZZZZZZZZZZZZ"), respBody: txn}, ""},
		{"amount as a JSON number (x-ledger-accepts-json-number)", exchange{method: "POST", path: "/v1/tenants/acme/branches/b1/transactions", body: `{"type":"EXPENSE","amount":12.50,"category":"food"}`, reqHeader: create, status: 201,
			header: jsonHeader("ETag", `"1"`, "Location", "/v1/tenants/acme/branches/b1/transactions/01J1Z7ZZZZZZZZZZZZZZZZZZZZ"), respBody: txn}, ""},
		{"amount the document forbids accepted", exchange{method: "POST", path: "/v1/tenants/acme/branches/b1/transactions", body: `{"type":"EXPENSE","amount":"012.5","category":"food"}`, reqHeader: create, status: 201,
			header: jsonHeader("ETag", `"1"`, "Location", "/v1/tenants/acme/branches/b1/transactions/01J1Z7ZZZZZZZZZZZZZZZZZZZZ"), respBody: txn}, "accepted"},
		{"undocumented enum value (x-extensible-enum closed)", exchange{method: "GET", path: "/v1/tenants/acme", reqHeader: auth, status: 200,
			header: jsonHeader("ETag", `"1"`), respBody: strings.Replace(tenant, `"status":"active"`, `"status":"archived"`, 1)}, "archived"},
		{"undocumented member in a nested object", exchange{method: "GET", path: "/v1/tenants/acme/branches/b1/transactions/01J1Z7ZZZZZZZZZZZZZZZZZZZZ", reqHeader: auth, status: 200,
			header: jsonHeader("ETag", `"1"`), respBody: strings.Replace(txn, `"version":1`, `"version":1,"secret":"x"`, 1)}, "secret"},
		{"API Gateway's body from the writer", exchange{method: "GET", path: "/v1/tenants/acme", reqHeader: auth, status: 429,
			header: jsonHeader("Retry-After", "1", "X-Content-Type-Options", "nosniff"), respBody: `{"message":"Too Many Requests"}`}, "Content-Type has unexpected value"},
		{"429 without Retry-After (x-ledger-writer-always)", exchange{method: "GET", path: "/v1/tenants/acme", reqHeader: auth, status: 429,
			header: problemHeader, respBody: problem("rate-limited", 429)}, "Retry-After"},
		{"504, API Gateway's only", exchange{method: "GET", path: "/v1/tenants/acme", reqHeader: auth, status: 504,
			header: problemHeader, respBody: problem("unavailable", 504)}, "status is not supported"},
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

// The published document is open to additive change (docs/api.md
// "Compatibility"): an answer with a member or an enumerated value this
// version does not list is still valid against it, so strict generated
// clients keep working when one is added; only the tests' copy is closed
// (closeForTheWriter). Request schemas stay closed: the server refuses
// unknown members. It also describes API Gateway's own answers.
func TestOpenAPI_PublishedDocumentIsOpenToAdditiveChange(t *testing.T) {
	t.Parallel()
	raw, err := writer.OpenAPI()
	require.NoError(t, err)
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()))

	t.Run("no closed answer schema", func(t *testing.T) {
		seen := map[*openapi3.Schema]bool{}
		var walk func(where string, ref *openapi3.SchemaRef)
		walk = func(where string, ref *openapi3.SchemaRef) {
			if ref == nil || ref.Value == nil || seen[ref.Value] {
				return
			}
			s := ref.Value
			seen[s] = true
			if ref.Ref != "" {
				where = ref.Ref
			}
			if s.AdditionalProperties.Has != nil && !*s.AdditionalProperties.Has {
				t.Errorf("%s: additionalProperties: false in an answer", where)
			}
			if len(s.Enum) > 0 {
				t.Errorf("%s: enum %v in an answer (x-extensible-enum keeps it open)", where, s.Enum)
			}
			for name, p := range s.Properties {
				walk(where+"."+name, p)
			}
			for _, list := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
				for _, el := range list {
					walk(where, el)
				}
			}
			walk(where+"[]", s.Items)
			walk(where+"{}", s.AdditionalProperties.Schema)
		}
		for path, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				for status, resp := range op.Responses.Map() {
					for ct, mt := range resp.Value.Content {
						walk(method+" "+path+" "+status+" "+ct, mt.Schema)
					}
				}
			}
		}
		for name, resp := range doc.Components.Responses {
			for ct, mt := range resp.Value.Content {
				walk(name+" "+ct, mt.Schema)
			}
		}
		require.NotEmpty(t, seen)
	})

	t.Run("additions validate", func(t *testing.T) {
		for _, tc := range []struct{ schema, body string }{
			{"Tenant", `{"id":"acme","name":"Acme","status":"archived","reportPeriods":["DAILY","HOURLY"],"createdAt":"2026-01-31T12:00:00Z","updatedAt":"2026-01-31T12:00:00Z","version":1,"region":"eu"}`},
			{"Transaction", `{"id":"01J1Z7ZZZZZZZZZZZZZZZZZZZZ","tenant":"acme","branch":"b1","type":"TRANSFER","amount":"12.5","category":"food","createdAt":"2026-01-31T12:00:00Z","updatedAt":"2026-01-31T12:00:00Z","version":1,"currency":"EUR"}`},
			{"Problem", `{"type":"https://github.com/ledger-dev/ledger/blob/main/docs/api.md#new-kind","title":"t","status":409,"retryable":true}`},
			{"GatewayError", `{"message":"Too Many Requests"}`},
		} {
			var v any
			require.NoError(t, json.Unmarshal([]byte(tc.body), &v))
			assert.NoError(t, doc.Components.Schemas[tc.schema].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()), tc.schema)
		}
	})

	t.Run("request schemas stay closed", func(t *testing.T) {
		for _, name := range []string{"TenantCreate", "TenantPatch", "BranchCreate", "BranchPatch", "AccountCreate", "AccountPatch", "EmailAdd", "EmailPatch", "TransactionCreate", "TransactionPatch"} {
			ap := doc.Components.Schemas[name].Value.AdditionalProperties
			assert.True(t, ap.Has != nil && !*ap.Has, "%s must be closed", name)
		}
	})

	t.Run("types generators map to strings", func(t *testing.T) {
		amount := doc.Components.Schemas["Amount"].Value
		assert.Equal(t, []string{"string"}, amount.Type.Slice(), "Amount")
		assert.Empty(t, amount.OneOf, "Amount")
		typ := doc.Components.Schemas["Problem"].Value.Properties["type"].Value
		assert.Equal(t, []string{"string"}, typ.Type.Slice(), "Problem.type")
		assert.Equal(t, "uri-reference", typ.Format, "Problem.type")
		// Every problem type the writer has is listed.
		listed, _ := typ.Extensions["x-extensible-enum"].([]any)
		assert.Len(t, listed, len(writer.ProblemTypes()), "Problem.type's x-extensible-enum and writer.ProblemTypes")
		for _, pt := range writer.ProblemTypes() {
			assert.Contains(t, listed, pt)
		}
	})

	t.Run("API Gateway's own answers", func(t *testing.T) {
		// Every operation API Gateway forwards (/v1/{proxy+}, /healthz in
		// infra/template.yaml) lists the statuses API Gateway answers itself
		// with an application/json GatewayError body.
		for path, item := range doc.Paths.Map() {
			if !strings.HasPrefix(path, "/v1/") && path != "/healthz" {
				continue
			}
			for method, op := range item.Operations() {
				for _, status := range []int{413, 429, 500, 503, 504} {
					resp := op.Responses.Status(status)
					if !assert.NotNil(t, resp, "%s %s: %d", method, path, status) {
						continue
					}
					mt := resp.Value.Content.Get("application/json")
					if assert.NotNil(t, mt, "%s %s: %d application/json", method, path, status) {
						assert.Equal(t, "#/components/schemas/GatewayError", mt.Schema.Ref)
					}
				}
			}
		}
	})
}
