package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor/handler"
)

// lambdaClient is the SDK's Lambda client pointed at the fake control plane.
func lambdaClient(cp *fakeControlPlane) *awslambda.Client {
	return awslambda.New(awslambda.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(cp.srv.URL),
		Credentials:      aws.AnonymousCredentials{},
		RetryMaxAttempts: 1,
	})
}

func TestCheckMappings_SafeMappingsPass(t *testing.T) {
	for _, mode := range []handler.Mode{handler.Standard, handler.Tumbling} {
		cp := newFakeControlPlane(t, safeMapping("m1", string(mode)),
			// Other sources and disabled mappings are not ours to judge.
			map[string]any{"UUID": "sqs", "EventSourceArn": "arn:aws:sqs:us-east-1:123456789012:q", "State": "Enabled"},
			func() map[string]any {
				m := safeMapping("off", string(mode))
				m["State"], m["MaximumRetryAttempts"], m["EventSourceArn"] = "Disabled", 3, testStreamARN+"x"
				return m
			}())
		cp.pageSize = 1 // every mapping on a page of its own: the markers are followed
		problems, err := checkMappings(context.Background(), lambdaClient(cp), "ledger-test", mode)
		require.NoError(t, err)
		assert.Empty(t, problems, "mode %s", mode)
		assert.Equal(t, 3, cp.callCount(), "one call per page")
		assert.Equal(t, "ledger-test", cp.function[0])
	}
}

// Every setting the exactly-once argument needs is checked and named.
func TestCheckMappings_NamesEachUnsafeSetting(t *testing.T) {
	tests := []struct {
		name    string
		mode    handler.Mode
		change  func(m map[string]any)
		mention string
	}{
		{"no ReportBatchItemFailures", handler.Standard, func(m map[string]any) { delete(m, "FunctionResponseTypes") }, "FunctionResponseTypes"},
		{"bisect", handler.Standard, func(m map[string]any) { m["BisectBatchOnFunctionError"] = true }, "BisectBatchOnFunctionError is true"},
		{"parallel", handler.Standard, func(m map[string]any) { m["ParallelizationFactor"] = 2 }, "ParallelizationFactor is 2"},
		{"finite retries", handler.Standard, func(m map[string]any) { m["MaximumRetryAttempts"] = 10000 }, "MaximumRetryAttempts is 10000"},
		{"retries unset", handler.Standard, func(m map[string]any) { delete(m, "MaximumRetryAttempts") }, "MaximumRetryAttempts is unset"},
		{"record age", handler.Standard, func(m map[string]any) { m["MaximumRecordAgeInSeconds"] = 604800 }, "MaximumRecordAgeInSeconds is 604800"},
		{"window in standard mode", handler.Standard, func(m map[string]any) { m["TumblingWindowInSeconds"] = 60 }, "TumblingWindowInSeconds is 60"},
		{"no window in tumbling mode", handler.Tumbling, func(m map[string]any) { delete(m, "TumblingWindowInSeconds") }, "TumblingWindowInSeconds is unset"},
		{"one-record batches", handler.Standard, func(m map[string]any) { m["BatchSize"] = 1 }, "BatchSize is 1"},
		{"filter", handler.Standard, func(m map[string]any) {
			m["FilterCriteria"] = map[string]any{"Filters": []map[string]string{{"Pattern": `{"eventName":["INSERT"]}`}}}
		}, "FilterCriteria is 1 filter(s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := safeMapping("m-"+strings.ReplaceAll(tt.name, " ", "-"), string(tt.mode))
			tt.change(m)
			cp := newFakeControlPlane(t, m)
			problems, err := checkMappings(context.Background(), lambdaClient(cp), "ledger-test", tt.mode)
			require.NoError(t, err)
			require.Len(t, problems, 1, "%v", problems)
			assert.Contains(t, problems[0], tt.mention)
			assert.Contains(t, problems[0], m["UUID"].(string), "the mapping is named")
		})
	}
	t.Run("two mappings on one stream", func(t *testing.T) {
		cp := newFakeControlPlane(t, safeMapping("a", "standard"), safeMapping("b", "standard"))
		problems, err := checkMappings(context.Background(), lambdaClient(cp), "ledger-test", handler.Standard)
		require.NoError(t, err)
		require.Len(t, problems, 1)
		assert.Contains(t, problems[0], "2 enabled mappings")
	})
}

func TestCheckMappings_UnreadableIsAnError(t *testing.T) {
	cp := newFakeControlPlane(t)
	cp.fail(http.StatusForbidden, "AccessDeniedException")
	_, err := checkMappings(context.Background(), lambdaClient(cp), "ledger-test", handler.Standard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "AccessDenied")
	_, err = checkMappings(context.Background(), lambdaClient(cp), "", handler.Standard)
	assert.ErrorContains(t, err, "AWS_LAMBDA_FUNCTION_NAME")
}

// countingHandler is the handler behind the gate.
type countingHandler struct {
	mu    sync.Mutex
	calls int
}

func (h *countingHandler) Invoke(context.Context, []byte) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	return []byte(`{}`), nil
}

// The gate fails closed: unreadable or unsafe settings refuse the event
// (enforce), a warn policy logs and runs; settings are read again once the
// interval has passed, so a console edit is caught without a cold start.
func TestESMGate_RechecksAndFailsClosed(t *testing.T) {
	ctx := context.Background()
	cp := newFakeControlPlane(t, safeMapping("m1", "standard"))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	next := &countingHandler{}
	g := &esmGate{next: next, api: lambdaClient(cp), function: "ledger-test", mode: handler.Standard, policy: esmEnforce,
		interval: 5 * time.Minute, timeout: 10 * time.Second, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		now: func() time.Time { return now }}
	require.NoError(t, g.check(ctx))
	_, err := g.Invoke(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, cp.callCount(), "not read again within the interval")

	// Someone turns bisection on in the console.
	bad := safeMapping("m1", "standard")
	bad["BisectBatchOnFunctionError"] = true
	cp.set(bad)
	_, err = g.Invoke(ctx, nil)
	require.NoError(t, err, "the change is seen at the next check")
	now = now.Add(5 * time.Minute)
	_, err = g.Invoke(ctx, nil)
	require.ErrorIs(t, err, errUnsafeMapping)
	assert.Contains(t, err.Error(), "BisectBatchOnFunctionError")
	assert.Equal(t, 2, next.calls, "the unsafe mapping's event never reached the handler")
	_, err = g.Invoke(ctx, nil)
	require.ErrorIs(t, err, errUnsafeMapping, "refused until the next check")

	// Fixed, then unreadable: enforce refuses, warn runs.
	cp.set(safeMapping("m1", "standard"))
	now = now.Add(5 * time.Minute)
	_, err = g.Invoke(ctx, nil)
	require.NoError(t, err)
	cp.fail(http.StatusForbidden, "AccessDeniedException")
	now = now.Add(5 * time.Minute)
	_, err = g.Invoke(ctx, nil)
	require.ErrorIs(t, err, errUnsafeMapping)
	assert.Contains(t, err.Error(), "LEDGER_ESM_CHECK")
	g.policy = esmWarn
	now = now.Add(5 * time.Minute)
	_, err = g.Invoke(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, 4, next.calls)
	assert.False(t, errors.Is(g.err, errUnsafeMapping))
}
