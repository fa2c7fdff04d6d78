package writer_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// A path with an empty, "." or ".." segment is 404 not-found, a problem
// like any other answer, where ServeMux would redirect (307) to the cleaned
// path: the document has no 3xx, and a client following the redirect would
// resend a POST or PATCH somewhere it did not name. The answer comes before
// authentication and any read (the server here has no table).
func TestServer_NonCanonicalPathIsNotFoundNotARedirect(t *testing.T) {
	t.Parallel()
	auth, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(testSecret)})
	require.NoError(t, err)
	srv, err := writer.New(nil, writer.Config{Table: "t", Auth: auth, CursorKey: cursorKey, Gatherer: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler)}, nil)
	require.NoError(t, err)
	admin, err := writer.NewToken([]byte(testSecret), writer.TokenOptions{Admin: true})
	require.NoError(t, err)
	h := validated(t, srv)

	for _, tc := range []struct{ method, target string }{
		{"GET", "/v1//tenants"},
		{"GET", "/v1/./tenants"},
		{"GET", "/v1/tenants/x/../acme"},
		{"GET", "/v1/tenants/acme/."},
		{"POST", "/v1/tenants/acme/branches/north/../south/transactions"},
		{"PATCH", "/v1/tenants//acme"},
		{"GET", "//healthz"},
		{"GET", "/v1/openapi.json/.."},
		{"GET", "/v1/tenants/acme/branches/north/transactions/./?limit=1"},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.target, strings.NewReader(`{}`))
			r.Header.Set("Authorization", "Bearer "+admin)
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Idempotency-Key", "k1")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			require.Equal(t, http.StatusNotFound, rec.Code, "answer: %s", rec.Body)
			assert.Empty(t, rec.Header().Get("Location"))
			assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
			var p writer.Problem
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
			assert.Equal(t, writer.ProblemNotFound, p.Type)
			id := rec.Header().Get(writer.RequestIDHeader)
			require.NotEmpty(t, id)
			assert.Equal(t, writer.RequestInstance(id), p.Instance)
		})
	}

	// Canonical paths are served as before; a trailing slash is not a
	// route, and ServeMux does not redirect it either (404 from "/").
	for target, want := range map[string]int{"/healthz": 200, "/v1/openapi.json": 200, "/v1/tenants/": 404} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", target, nil)
		r.Header.Set("Authorization", "Bearer "+admin)
		h.ServeHTTP(rec, r)
		assert.Equal(t, want, rec.Code, target)
	}
}
