package writer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// The contract: every request the package's tests send through newEnv's
// server (and its seeder) and every answer are checked against the writer's
// OpenAPI document (openapi.yaml, as GET /v1/openapi.json serves it) with
// kin-openapi's openapi3filter. A test fails when the server answers on a
// route, with a status, a header or a body member the document does not
// describe, or accepts (2xx) a request the document forbids.

// contract is the loaded document and its router.
type contract struct {
	doc    *openapi3.T
	router routers.Router
}

var loadContract = sync.OnceValues(func() (*contract, error) {
	raw, err := writer.OpenAPI()
	if err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is not valid: %w", err)
	}
	closeForTheWriter(doc)
	// Route by path alone: the tests' servers listen on ports of their own.
	doc.Servers = openapi3.Servers{{URL: "/"}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route the OpenAPI document: %w", err)
	}
	return &contract{doc: doc, router: router}, nil
})

// The published document is open to additive change (docs/api.md
// "Compatibility"): answer objects do not set additionalProperties, answer
// fields list their values in x-extensible-enum rather than enum, and it
// describes API Gateway's own answers beside the writer's. The contract is
// what this writer sends, so closeForTheWriter closes the loaded copy:
//   - an object schema with properties and no additionalProperties gets
//     additionalProperties: false (an undocumented member fails);
//   - x-extensible-enum becomes enum (an undocumented value fails);
//   - a header marked x-ledger-writer-always is required (the writer always
//     sends it; API Gateway's own answers do not);
//   - the GatewayError and GatewayErrorText bodies (API Gateway's, never
//     the writer's) are removed, and with them the answers only API Gateway
//     gives;
//   - a schema marked x-ledger-accepts-json-number also takes a JSON number
//     (Amount: the writer takes "12.50" and, from older clients, 12.50).
func closeForTheWriter(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if s.Type.Is(openapi3.TypeObject) && len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			s.AdditionalProperties = openapi3.AdditionalProperties{Has: openapi3.Ptr(false)}
		}
		if values, ok := s.Extensions["x-extensible-enum"].([]any); ok {
			s.Enum = values
		}
		if accepts, _ := s.Extensions["x-ledger-accepts-json-number"].(bool); accepts {
			s.Type = &openapi3.Types{openapi3.TypeString, openapi3.TypeNumber}
		}
		for _, p := range s.Properties {
			walk(p)
		}
		for _, list := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
			for _, el := range list {
				walk(el)
			}
		}
		walk(s.Items)
		walk(s.Not)
		walk(s.AdditionalProperties.Schema)
	}
	for _, ref := range doc.Components.Schemas {
		walk(ref)
	}
	for _, h := range doc.Components.Headers {
		if always, _ := h.Value.Extensions["x-ledger-writer-always"].(bool); always {
			h.Value.Required = true
		}
	}
	gatewayOnly := map[*openapi3.Response]bool{}
	writersOwn := func(resp *openapi3.ResponseRef) bool { // false: only API Gateway gives this answer
		if gatewayOnly[resp.Value] {
			return false
		}
		removed := false
		for ct, mt := range resp.Value.Content {
			if mt.Schema != nil && (strings.HasSuffix(mt.Schema.Ref, "/GatewayError") || strings.HasSuffix(mt.Schema.Ref, "/GatewayErrorText")) {
				delete(resp.Value.Content, ct)
				removed = true
			}
		}
		for _, mt := range resp.Value.Content {
			walk(mt.Schema)
		}
		if removed && len(resp.Value.Content) == 0 { // a body-less answer (204) stays
			gatewayOnly[resp.Value] = true
			return false
		}
		return true
	}
	for name, resp := range doc.Components.Responses {
		if !writersOwn(resp) {
			delete(doc.Components.Responses, name)
		}
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for status, resp := range op.Responses.Map() {
				if !writersOwn(resp) {
					op.Responses.Delete(status)
				}
			}
		}
	}
}

// transportHeaders are set by net/http, not by the writer; every other
// response header must be documented for the response it is on.
var transportHeaders = []string{"Content-Type", "Content-Length", "Date", "Transfer-Encoding", "Connection"}

// check returns nil when the document describes the exchange: r (with its
// body reqBody) answered status, header and body.
func (c *contract) check(r *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	ctx := context.Background()
	r = r.Clone(ctx)
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	if r.URL.Host == "" { // a server-side request: the router wants an absolute URL
		r.URL.Scheme, r.URL.Host = "http", r.Host
	}
	route, params, err := c.router.FindRoute(r)
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		if status != http.StatusNotFound {
			return fmt.Errorf("undocumented route %s %s answered %d", r.Method, r.URL.Path, status)
		}
		return c.checkUnrouted("NotFound", status, header, body)
	case errors.Is(err, routers.ErrMethodNotAllowed):
		// Authentication comes before the method: without a valid token, 401.
		switch status {
		case http.StatusMethodNotAllowed:
			return c.checkUnrouted("MethodNotAllowed", status, header, body)
		case http.StatusUnauthorized, http.StatusForbidden:
			if strings.HasPrefix(r.URL.Path, "/v1/") && r.URL.Path != "/v1/openapi.json" {
				return c.checkUnrouted(map[int]string{401: "Unauthenticated", 403: "Forbidden"}[status], status, header, body)
			}
		}
		return fmt.Errorf("undocumented method %s on %s answered %d", r.Method, r.URL.Path, status)
	case err != nil:
		return fmt.Errorf("route %s %s: %w", r.Method, r.URL.Path, err)
	}
	for name, v := range params { // the router matched the escaped path, as the writer's mux does
		if params[name], err = url.PathUnescape(v); err != nil {
			return fmt.Errorf("path parameter %s: %w", name, err)
		}
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: bearerPresent}}
	if reqErr := openapi3filter.ValidateRequest(ctx, in); reqErr != nil && status < 400 {
		return fmt.Errorf("the server accepted (%d) a request the document forbids: %w", status, reqErr)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header,
		Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true}}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("%s %s answered %d: %w", r.Method, route.Path, status, err)
	}
	resp := route.Operation.Responses.Status(status)
	var documented []string
	for name := range resp.Value.Headers {
		documented = append(documented, name)
	}
	return undocumentedHeaders(header, documented)
}

// checkUnrouted checks an answer of the server's own to a request no
// operation of the document takes: the document's response name (NotFound,
// MethodNotAllowed), body and headers.
func (c *contract) checkUnrouted(name string, status int, header http.Header, body []byte) error {
	resp := c.doc.Components.Responses[name].Value
	ct := header.Get("Content-Type")
	mt := resp.Content.Get(ct)
	if mt == nil {
		return fmt.Errorf("%d with undocumented Content-Type %q", status, ct)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("%d: %w", status, err)
	}
	if err := mt.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("%d: the body is not the documented %s: %w", status, name, err)
	}
	var documented []string
	for h, ref := range resp.Headers {
		if ref.Value.Required && header.Get(h) == "" {
			return fmt.Errorf("%d: header %s missing", status, h)
		}
		documented = append(documented, h)
	}
	return undocumentedHeaders(header, documented)
}

func undocumentedHeaders(header http.Header, documented []string) error {
	for name := range header {
		if slices.Contains(transportHeaders, name) || slices.ContainsFunc(documented, func(d string) bool { return strings.EqualFold(d, name) }) {
			continue
		}
		return fmt.Errorf("undocumented response header %s: %q", name, header.Get(name))
	}
	return nil
}

// bearerPresent stands for the bearer scheme: the request carries a bearer
// token (whether it verifies, and its scope, is the server's to decide).
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme, token, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return in.NewError(errors.New("no bearer token"))
	}
	return nil
}

// validated serves h, checking every exchange against the document; a
// failed check fails t.
func validated(t *testing.T, h http.Handler) http.Handler {
	c, err := loadContract()
	require.NoError(t, err)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqBody, err := io.ReadAll(r.Body)
		if err != nil { // a broken request: pass it on as it came
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(reqBody), errReader{err}))
			h.ServeHTTP(w, r)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if err := c.check(r, reqBody, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			t.Errorf("OpenAPI contract: %s %s: %v\nanswer: %d %s", r.Method, r.URL.RequestURI(), err, rec.Code, truncate(rec.Body.Bytes(), 600))
		}
		for name, values := range rec.Header() {
			w.Header()[name] = values
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
