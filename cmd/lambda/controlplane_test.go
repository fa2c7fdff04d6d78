package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeControlPlane is the part of the Lambda control-plane API the
// function calls (ListEventSourceMappings, REST JSON), serving mappings
// the test sets, a page at a time, or an error.
type fakeControlPlane struct {
	srv *httptest.Server

	mu       sync.Mutex
	mappings []map[string]any
	pageSize int
	status   int    // when set, every call fails with it
	errType  string // X-Amzn-ErrorType of the failure
	calls    int
	function []string // FunctionName of each call
}

const testStreamARN = "arn:aws:dynamodb:us-east-1:123456789012:table/ledger/stream/2026-01-01T00:00:00.000"

// safeMapping is a DynamoDB stream mapping with the settings
// docs/lambda.md asks for, in mode.
func safeMapping(uuid, mode string) map[string]any {
	m := map[string]any{
		"UUID": uuid, "EventSourceArn": testStreamARN, "State": "Enabled",
		"FunctionArn":                "arn:aws:lambda:us-east-1:123456789012:function:ledger-test",
		"FunctionResponseTypes":      []string{"ReportBatchItemFailures"},
		"BisectBatchOnFunctionError": false, "ParallelizationFactor": 1,
		"MaximumRetryAttempts": -1, "MaximumRecordAgeInSeconds": -1,
		"BatchSize": 100, "StartingPosition": "TRIM_HORIZON",
	}
	if mode == "tumbling" {
		m["TumblingWindowInSeconds"] = 60
	}
	return m
}

func newFakeControlPlane(t *testing.T, mappings ...map[string]any) *fakeControlPlane {
	cp := &fakeControlPlane{mappings: mappings, pageSize: 50}
	cp.srv = httptest.NewServer(http.HandlerFunc(cp.serve))
	t.Cleanup(cp.srv.Close)
	return cp
}

func (cp *fakeControlPlane) set(mappings ...map[string]any) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.mappings, cp.status = mappings, 0
}

func (cp *fakeControlPlane) fail(status int, errType string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.status, cp.errType = status, errType
}

func (cp *fakeControlPlane) callCount() int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.calls
}

func (cp *fakeControlPlane) serve(w http.ResponseWriter, r *http.Request) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if r.Method != http.MethodGet || strings.TrimSuffix(r.URL.Path, "/") != "/2015-03-31/event-source-mappings" {
		http.Error(w, "fake control plane: "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	cp.calls++
	cp.function = append(cp.function, r.URL.Query().Get("FunctionName"))
	w.Header().Set("Content-Type", "application/json")
	if cp.status != 0 {
		w.Header().Set("X-Amzn-ErrorType", cp.errType)
		w.WriteHeader(cp.status)
		_ = json.NewEncoder(w).Encode(map[string]string{"Message": "fake: " + cp.errType})
		return
	}
	start, _ := strconv.Atoi(r.URL.Query().Get("Marker"))
	end := min(start+cp.pageSize, len(cp.mappings))
	out := map[string]any{"EventSourceMappings": cp.mappings[start:end]}
	if end < len(cp.mappings) {
		out["NextMarker"] = strconv.Itoa(end)
	}
	_ = json.NewEncoder(w).Encode(out)
}
