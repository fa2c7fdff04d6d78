package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

func apiEvent(method, rawPath, query string, headers map[string]string, body string) events.APIGatewayV2HTTPRequest {
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "ANY /v1/{proxy+}", RawPath: rawPath, RawQueryString: query, Headers: headers, Body: body}
	ev.RequestContext.HTTP.Method = method
	ev.RequestContext.HTTP.SourceIP = "203.0.113.7"
	ev.RequestContext.DomainName = "abc.execute-api.us-east-1.amazonaws.com"
	return ev
}

func TestAPIGatewayHandler_ServesTheWriterThroughEvents(t *testing.T) {
	env := localEnv(t)
	m := NewMain(getenv(env), io.Discard, io.Discard)
	require.NoError(t, m.ParseFlags(nil))
	require.NoError(t, m.Run(context.Background()))
	defer m.Close()
	h := apiGatewayHandler(m.svc.Handler())
	ctx := context.Background()

	resp, err := h(ctx, apiEvent("GET", "/healthz", "", nil, ""))
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	resp, err = h(ctx, apiEvent("GET", "/v1/tenants/acme/branches/north/transactions", "", nil, ""))
	require.NoError(t, err)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, "application/problem+json", resp.Headers["Content-Type"])

	createDirectory(t, m.URL(), "acme", "north") // transactions need their tenant and branch
	token, err := writer.NewToken([]byte(secret), writer.TokenOptions{Tenant: "acme"})
	require.NoError(t, err)
	auth := map[string]string{"authorization": "Bearer " + token}
	// API Gateway lower-cases header names and may base64-encode bodies.
	body := base64.StdEncoding.EncodeToString([]byte(`{"type":"INCOME","amount":"10.50","category":"sales","createdAt":"2026-01-31T12:00:00Z"}`))
	ev := apiEvent("POST", "/v1/tenants/acme/branches/north/transactions", "",
		map[string]string{"authorization": "Bearer " + token, "content-type": "application/json", "idempotency-key": "k-1"}, body)
	ev.IsBase64Encoded = true
	resp, err = h(ctx, ev)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode, resp.Body)
	assert.False(t, resp.IsBase64Encoded)
	var created writer.Transaction
	require.NoError(t, json.Unmarshal([]byte(resp.Body), &created))
	assert.Equal(t, "10.5", created.Amount)
	assert.Equal(t, `"1"`, resp.Headers["Etag"])
	assert.Equal(t, "/v1/tenants/acme/branches/north/transactions/"+created.ID, resp.Headers["Location"])

	// The raw query string reaches the handler.
	resp, err = h(ctx, apiEvent("GET", "/v1/tenants/acme/branches/north/transactions", "category=sales&limit=5", auth, ""))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, resp.Body)
	var page writer.ListPage
	require.NoError(t, json.Unmarshal([]byte(resp.Body), &page))
	require.Len(t, page.Items, 1)
	assert.Equal(t, created.ID, page.Items[0].ID)

	ev = apiEvent("POST", "/v1/tenants/acme/branches/north/transactions", "", auth, "!")
	ev.IsBase64Encoded = true
	resp, err = h(ctx, ev)
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "a body that is not base64")
}

func TestResponseRecorder_BinaryBodiesAndCookies(t *testing.T) {
	h := apiGatewayHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "a=1; b=2", r.Header.Get("Cookie"))
		assert.Equal(t, "/x y", r.URL.Path)
		http.SetCookie(w, &http.Cookie{Name: "s", Value: "v"})
		w.Header().Add("Vary", "A")
		w.Header().Add("Vary", "B")
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte{0xff, 0xfe})
	}))
	ev := apiEvent("GET", "/x%20y", "", nil, "")
	ev.Cookies = []string{"a=1", "b=2"}
	resp, err := h(context.Background(), ev)
	require.NoError(t, err)
	assert.Equal(t, http.StatusTeapot, resp.StatusCode)
	assert.True(t, resp.IsBase64Encoded)
	assert.Equal(t, base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe}), resp.Body)
	assert.Equal(t, []string{"s=v"}, resp.Cookies)
	assert.Equal(t, "A, B", resp.Headers["Vary"])
}

// An event the adapter cannot make a request of is answered as the writer
// answers: 400 invalid-request, application/problem+json, with a request id
// (the client's when well-formed) as X-Request-Id and instance; it used to
// be a text/plain Go error.
func TestAPIGatewayHandler_UnreadableEventIsAProblem(t *testing.T) {
	h := apiGatewayHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the writer was called with an unreadable event")
	}))
	notBase64 := apiEvent("POST", "/v1/tenants/acme/branches/north/transactions", "", map[string]string{"x-request-id": "client-7"}, "!")
	notBase64.IsBase64Encoded = true
	badMethod := apiEvent("GE T", "/v1/tenants", "", map[string]string{"x-request-id": "no spaces allowed"}, "")
	for _, tc := range []struct {
		name   string
		ev     events.APIGatewayV2HTTPRequest
		wantID string // "" when a fresh id is expected
		detail string
	}{
		{"body not base64", notBase64, "client-7", "base64"},
		{"invalid method", badMethod, "", "method"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := h(context.Background(), tc.ev)
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, resp.Body)
			assert.Equal(t, "application/problem+json", resp.Headers["Content-Type"])
			assert.Equal(t, "no-store", resp.Headers["Cache-Control"])
			id := resp.Headers[writer.RequestIDHeader]
			if tc.wantID != "" {
				assert.Equal(t, tc.wantID, id)
			} else {
				assert.Len(t, id, 26, "a fresh ULID, not the malformed client id")
			}
			var p writer.Problem
			require.NoError(t, json.Unmarshal([]byte(resp.Body), &p))
			assert.Equal(t, writer.ProblemInvalidRequest, p.Type)
			assert.Equal(t, http.StatusBadRequest, p.Status)
			assert.Equal(t, writer.RequestInstance(id), p.Instance)
			assert.Contains(t, p.Detail, tc.detail)
		})
	}
}
