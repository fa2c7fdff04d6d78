package ledgertest

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Fault is what a FaultTransport does to one request.
type Fault int

// The faults. LoseAnswer is the one that matters most for exactly-once: the
// request reaches DynamoDB and is applied, and the caller sees an error.
const (
	Pass       Fault = iota // forward, return the answer
	Drop                    // fail without forwarding (the write never lands)
	LoseAnswer              // forward, discard the answer, return an error (the write lands)
	Throttle                // answer ProvisionedThroughputExceededException without forwarding
)

// ErrInjected is the error a FaultTransport returns for an injected fault.
var ErrInjected = errors.New("ledgertest: injected transport fault")

// FaultTransport forwards DynamoDB requests to the real transport and injects
// faults chosen by Decide. It is safe for concurrent use.
type FaultTransport struct {
	Next http.RoundTripper
	// Decide picks the fault for a request to operation op (the X-Amz-Target
	// operation name, e.g. "TransactWriteItems"). nil passes everything.
	Decide func(op string) Fault

	mu    sync.Mutex
	calls map[string]int
}

// Calls returns how many requests of op went through (faulted or not).
func (f *FaultTransport) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// RoundTrip implements http.RoundTripper.
func (f *FaultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := req.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(op, '.'); i >= 0 {
		op = op[i+1:]
	}
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[op]++
	decide := f.Decide
	f.mu.Unlock()
	fault := Pass
	if decide != nil {
		fault = decide(op)
	}
	switch fault {
	case Drop:
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, ErrInjected
	case Throttle:
		if req.Body != nil {
			_ = req.Body.Close()
		}
		body := `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"injected throttle"}`
		return &http.Response{
			StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{"Content-Type": []string{"application/x-amz-json-1.0"}},
			Body:          io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: req,
		}, nil
	case LoseAnswer:
		resp, err := f.Next.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, ErrInjected
	}
	return f.Next.RoundTrip(req)
}
