package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/ledger-dev/ledger/processor/handler"
)

// The exactly-once argument (docs/exactly-once.md, assumption 4) holds only
// under certain settings of the function's event source mapping. Nothing
// stops a mapping created by hand, by another template or edited in the
// console from having others, and a wrong one double counts or loses
// records silently. So the function reads its own mappings
// (lambda:ListEventSourceMappings) at cold start and again every
// LEDGER_ESM_CHECK_INTERVAL, and refuses to run with an unsafe one.

// ESM check modes (LEDGER_ESM_CHECK).
const (
	// esmEnforce (default): an unsafe mapping, or a failure to read the
	// mappings, is an init error at cold start and fails every invocation
	// afterwards (the mapping retries them: nothing is lost).
	esmEnforce = "enforce"
	// esmWarn reads and logs what is unsafe or unreadable, and runs anyway.
	esmWarn = "warn"
	// esmOff skips the check: for a function whose role may not read its
	// mappings, when the operator has checked them by other means.
	esmOff = "off"
)

// errUnsafeMapping is wrapped by every verdict of the check.
var errUnsafeMapping = errors.New("event source mapping check failed")

// MappingLister is the part of the Lambda control-plane API the check
// calls.
type MappingLister interface {
	ListEventSourceMappings(ctx context.Context, in *awslambda.ListEventSourceMappingsInput, opts ...func(*awslambda.Options)) (*awslambda.ListEventSourceMappingsOutput, error)
}

// minStandardBatchSize: a standard-mode mapping whose BatchSize is 1 can
// stall a shard for good (docs/exactly-once.md, "Shorter redelivery": a
// one-record batch that starts a longer committed run can only be answered
// "redeliver from this record"). Two records always progress.
const minStandardBatchSize = 2

// checkMappings lists the event source mappings of function and returns
// every setting that breaks the exactly-once argument for mode, one
// message per problem, naming the mapping. Mappings of other sources than
// DynamoDB streams, and disabled ones, are skipped. An error means the
// mappings could not be read.
func checkMappings(ctx context.Context, api MappingLister, function string, mode handler.Mode) ([]string, error) {
	if function == "" {
		return nil, errors.New("AWS_LAMBDA_FUNCTION_NAME is not set: cannot find the function's event source mappings")
	}
	var problems []string
	streams := map[string][]string{} // stream ARN → mapping UUIDs
	in := &awslambda.ListEventSourceMappingsInput{FunctionName: aws.String(function)}
	for pages := 0; ; pages++ {
		if pages >= 100 {
			return nil, errors.New("list event source mappings: more than 100 pages")
		}
		out, err := api.ListEventSourceMappings(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list event source mappings of %s: %w", function, err)
		}
		for i := range out.EventSourceMappings {
			m := &out.EventSourceMappings[i]
			arn := aws.ToString(m.EventSourceArn)
			if !strings.Contains(arn, ":dynamodb:") || !strings.Contains(arn, "/stream/") {
				continue
			}
			switch aws.ToString(m.State) {
			case "Disabled", "Disabling", "Deleting":
				continue // delivers nothing; the periodic check sees it when enabled
			}
			id := aws.ToString(m.UUID)
			streams[arn] = append(streams[arn], id)
			problems = append(problems, mappingProblems(m, mode)...)
		}
		if aws.ToString(out.NextMarker) == "" {
			break
		}
		in.Marker = out.NextMarker
	}
	for arn, ids := range streams {
		if len(ids) > 1 {
			problems = append(problems, fmt.Sprintf("stream %s has %d enabled mappings to this function (%s): each keeps its own position, so the stream would be consumed twice; keep one",
				arn, len(ids), strings.Join(ids, ", ")))
		}
	}
	return problems, nil
}

// mappingProblems returns what is unsafe about one DynamoDB stream mapping.
func mappingProblems(m *lambdatypes.EventSourceMappingConfiguration, mode handler.Mode) []string {
	var out []string
	bad := func(setting, got, want, why string) {
		out = append(out, fmt.Sprintf("mapping %s: %s is %s, want %s (%s)", aws.ToString(m.UUID), setting, got, want, why))
	}
	i32 := func(p *int32) string {
		if p == nil {
			return "unset"
		}
		return fmt.Sprint(*p)
	}
	reports := false
	for _, t := range m.FunctionResponseTypes {
		reports = reports || t == lambdatypes.FunctionResponseTypeReportBatchItemFailures
	}
	if !reports {
		bad("FunctionResponseTypes", fmt.Sprint(m.FunctionResponseTypes), "[ReportBatchItemFailures]",
			"without it a partial answer is taken for success and the records after the named one are lost")
	}
	if aws.ToBool(m.BisectBatchOnFunctionError) {
		bad("BisectBatchOnFunctionError", "true", "false", "a bisected retry can start inside a committed run")
	}
	if p := m.ParallelizationFactor; p != nil && *p != 1 {
		bad("ParallelizationFactor", i32(p), "1", "batches of one shard must be processed one at a time, in order")
	}
	if p := m.MaximumRetryAttempts; p == nil || *p != -1 {
		bad("MaximumRetryAttempts", i32(p), "-1", "a mapping that gives up on a batch discards its records")
	}
	if p := m.MaximumRecordAgeInSeconds; p == nil || *p != -1 {
		bad("MaximumRecordAgeInSeconds", i32(p), "-1", "a mapping that gives up on old records discards them")
	}
	window := m.TumblingWindowInSeconds != nil && *m.TumblingWindowInSeconds > 0
	switch {
	case mode == handler.Tumbling && !window:
		bad("TumblingWindowInSeconds", i32(m.TumblingWindowInSeconds), "1-900", "LEDGER_LAMBDA_MODE=tumbling needs windows")
	case mode != handler.Tumbling && window:
		bad("TumblingWindowInSeconds", i32(m.TumblingWindowInSeconds), "unset or 0", "LEDGER_LAMBDA_MODE=standard; set it to tumbling, or remove the window")
	}
	if mode != handler.Tumbling {
		if p := m.BatchSize; p != nil && *p < minStandardBatchSize {
			bad("BatchSize", i32(p), fmt.Sprintf("at least %d (100-1000 recommended)", minStandardBatchSize),
				"a one-record batch inside a longer committed run stalls the shard")
		}
	}
	if f := m.FilterCriteria; f != nil && len(f.Filters) > 0 {
		bad("FilterCriteria", fmt.Sprintf("%d filter(s)", len(f.Filters)), "none",
			"a filtered-out transaction record is never applied (docs/deploy.md says why the template sets none)")
	}
	return out
}

// esmGate runs the check at cold start and every interval, and refuses to
// hand events to the handler while the last check found the mapping
// unsafe (or, enforcing, could not read it).
type esmGate struct {
	next     lambda.Handler
	api      MappingLister
	function string
	mode     handler.Mode
	policy   string
	interval time.Duration
	timeout  time.Duration
	log      *slog.Logger
	now      func() time.Time

	mu      sync.Mutex
	checked time.Time
	err     error // the last check's verdict (nil: safe, or not enforcing)
}

// check runs the check now and records its verdict. With policy warn the
// verdict is always nil; what is wrong is logged.
func (g *esmGate) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	problems, err := checkMappings(ctx, g.api, g.function, g.mode)
	var verdict error
	switch {
	case err != nil:
		verdict = fmt.Errorf("%w: cannot verify the event source mapping settings the exactly-once commits depend on (grant lambda:ListEventSourceMappings, or set LEDGER_ESM_CHECK=warn or off after checking them yourself; docs/lambda.md): %w", errUnsafeMapping, err)
	case len(problems) > 0:
		verdict = fmt.Errorf("%w: unsafe event source mapping settings (docs/lambda.md, docs/exactly-once.md assumption 4): %s", errUnsafeMapping, strings.Join(problems, "; "))
	}
	if verdict != nil && g.policy == esmWarn {
		g.log.Warn("event source mapping check failed; running anyway (LEDGER_ESM_CHECK=warn)", "error", verdict.Error())
		verdict = nil
	}
	g.mu.Lock()
	g.checked, g.err = g.now(), verdict
	g.mu.Unlock()
	return verdict
}

// Invoke implements lambda.Handler: it re-checks the mappings when the
// last check is older than the interval, and fails the invocation (the
// mapping retries it, nothing is lost) while they are unsafe.
func (g *esmGate) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	g.mu.Lock()
	due := g.now().Sub(g.checked) >= g.interval
	err := g.err
	g.mu.Unlock()
	if due {
		err = g.check(ctx)
	}
	if err != nil {
		g.log.Error("refusing the event", "error", err.Error())
		return nil, fmt.Errorf("ledger lambda: %w", err)
	}
	return g.next.Invoke(ctx, payload)
}
