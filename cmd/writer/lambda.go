package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ledger-dev/ledger/writer"
)

// In AWS Lambda (AWS_LAMBDA_RUNTIME_API set) the writer serves API Gateway
// HTTP API events (payload format 2.0) instead of a listener: the same
// configuration (environment only; flags cannot be passed), the same
// handler, one request per invocation. infra/template.yaml deploys it so;
// docs/deploy.md says why a Lambda rather than a container.

// runLambda builds the writer from the environment and serves invocations
// until the process is stopped. It returns only when the writer cannot
// start (exit 1, or 2 for a bad configuration).
func runLambda(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) int {
	m := NewMain(getenv, stdout, stderr)
	// The listener is unused in Lambda; the loopback keeps it private.
	if err := m.ParseFlags([]string{"--addr", "127.0.0.1:0"}); err != nil {
		fmt.Fprintf(stderr, "writer: %v\n", err)
		return exitUsage
	}
	if err := m.Run(ctx); err != nil {
		m.logger.Error("writer failed to start", "error", err.Error())
		return exitError
	}
	lambda.StartWithOptions(apiGatewayHandler(m.svc.Handler()), lambda.WithContext(ctx))
	return exitOK
}

// apiGatewayHandler adapts an http.Handler to API Gateway HTTP API events
// (payload format 2.0): the request is rebuilt from the event (method, raw
// path and query, headers, cookies, body), served in memory, and the
// response returned whole (bodies that are not UTF-8 base64-encoded). An
// event no request can be made of is answered 400 invalid-request, a
// problem like the writer's other answers (docs/api.md "Errors").
func apiGatewayHandler(h http.Handler) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		w := &responseRecorder{header: http.Header{}}
		req, err := requestFromEvent(ctx, ev)
		if err != nil { // answered as the writer answers: a problem with a request id
			writer.WriteInvalidRequest(w, eventHeader(ev, writer.RequestIDHeader), "the request cannot be read: "+err.Error())
			return w.event(), nil
		}
		h.ServeHTTP(w, req)
		return w.event(), nil
	}
}

// eventHeader is the event's header name (API Gateway lower-cases names;
// a test event may not), "" when absent.
func eventHeader(ev events.APIGatewayV2HTTPRequest, name string) string {
	for k, v := range ev.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

func requestFromEvent(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (*http.Request, error) {
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(ev.Body); err != nil {
			return nil, fmt.Errorf("body is not base64: %w", err)
		}
	}
	path := ev.RawPath
	if path == "" {
		path = "/"
	}
	u := &url.URL{Path: path, RawQuery: ev.RawQueryString}
	if p, err := url.PathUnescape(path); err == nil {
		u.Path, u.RawPath = p, path
	}
	method := ev.RequestContext.HTTP.Method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range ev.Headers {
		req.Header.Set(k, v)
	}
	if len(ev.Cookies) > 0 {
		req.Header.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	req.Host = ev.RequestContext.DomainName
	req.RemoteAddr = ev.RequestContext.HTTP.SourceIP
	req.RequestURI = u.RequestURI()
	req.ContentLength = int64(len(body))
	return req, nil
}

// responseRecorder collects a response in memory.
type responseRecorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *responseRecorder) Header() http.Header { return r.header }

func (r *responseRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *responseRecorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

func (r *responseRecorder) event() events.APIGatewayV2HTTPResponse {
	out := events.APIGatewayV2HTTPResponse{StatusCode: r.status, Headers: map[string]string{}}
	if out.StatusCode == 0 {
		out.StatusCode = http.StatusOK
	}
	for k, vs := range r.header {
		if http.CanonicalHeaderKey(k) == "Set-Cookie" {
			out.Cookies = append(out.Cookies, vs...)
			continue
		}
		out.Headers[k] = strings.Join(vs, ", ")
	}
	if b := r.body.Bytes(); utf8.Valid(b) {
		out.Body = string(b)
	} else {
		out.Body, out.IsBase64Encoded = base64.StdEncoding.EncodeToString(b), true
	}
	return out
}
