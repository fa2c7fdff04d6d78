// Command lambda is ledger's stream consumer as an AWS Lambda function (a
// custom runtime, provided.al2023, on the table's stream event source
// mapping): the thin main of processor/handler.
//
// At cold start it reads its configuration from the environment (see
// envHelp, docs/lambda.md) and the standard AWS SDK environment, and builds
// the processor, its metrics on a fresh Prometheus registry and the
// handler; a bad value is posted to the Runtime API as an init error and
// the process exits 1. Then lambda.Start serves invocations. After each one
// the handler writes one CloudWatch Embedded Metric Format line on stdout;
// logs are JSON on stderr.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
	"github.com/ledger-dev/ledger/processor/poller"
)

func main() {
	os.Exit(Main(context.Background(), os.Getenv, os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitInitError = 1 // configuration rejected (and reported to the Runtime API)
	exitNoRuntime = 2 // not started by Lambda: no AWS_LAMBDA_RUNTIME_API
)

// initErrorType is the errorType of init errors, shown in the function's
// INIT_REPORT and logs.
const initErrorType = "Ledger.InvalidConfiguration"

// unsafeMappingErrorType is the errorType of an init error for unsafe (or
// unreadable) event source mapping settings.
const unsafeMappingErrorType = "Ledger.UnsafeEventSourceMapping"

// Main builds the function from getenv and serves invocations from the
// Runtime API at $AWS_LAMBDA_RUNTIME_API until the process is stopped. It
// returns only when the function cannot start: exitInitError after posting
// the reason as an init error, exitNoRuntime outside Lambda.
func Main(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) int {
	runtimeAPI := getenv("AWS_LAMBDA_RUNTIME_API")
	if runtimeAPI == "" {
		fmt.Fprintf(stderr, "ledger lambda: AWS_LAMBDA_RUNTIME_API is not set: this program runs inside AWS Lambda (or a Runtime API emulator)\n\n%s\n", envHelp)
		return exitNoRuntime
	}
	h, log, err := build(ctx, getenv, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "ledger lambda: %v\n", err)
		typ := initErrorType
		if errors.Is(err, errUnsafeMapping) {
			typ = unsafeMappingErrorType
		}
		if perr := postInitError(runtimeAPI, typ, err.Error()); perr != nil {
			fmt.Fprintf(stderr, "ledger lambda: report init error: %v\n", perr)
		}
		return exitInitError
	}
	log.Debug("started")
	lambda.StartWithOptions(h, lambda.WithContext(ctx)) // returns only by exiting
	return 0
}

// build reads the configuration, wires the handler and, unless
// LEDGER_ESM_CHECK=off, checks the function's event source mappings
// (esmcheck.go) and puts that check in front of the handler.
func build(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) (lambda.Handler, *slog.Logger, error) {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return nil, nil, err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	if v := getenv("LEDGER_STATE_LIMIT_BYTES"); v != "" {
		log.Warn("LEDGER_STATE_LIMIT_BYTES is ignored since tumbling windows read their records from the stream instead of carrying them; LEDGER_BATCH_RECORDS bounds a commit", "value", v)
	}
	awsCfg, err := infra.LoadConfig(ctx)
	if err != nil {
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	metrics := processor.NewMetrics(reg)
	p, err := processor.New(dynamodb.NewFromConfig(awsCfg), cfg.processor, metrics)
	if err != nil {
		return nil, nil, err
	}
	fn := cfg.functionName
	if fn == "" {
		fn = "unknown"
	}
	emf, err := handler.NewEMF(reg, stdout, "ledger", map[string]string{"FunctionName": fn, "Mode": string(cfg.mode)}, nil)
	if err != nil {
		return nil, nil, err
	}
	h, err := handler.New(p, handler.Config{
		Mode:           cfg.mode,
		Streams:        poller.NewStreamsClient(awsCfg),
		BatchRecords:   cfg.batchRecords,
		DeadlineMargin: cfg.margin,
		Metrics:        metrics,
		EMF:            emf,
		Logger:         log,
	})
	if err != nil {
		return nil, nil, err
	}
	var out lambda.Handler = h
	if cfg.esmCheck == esmOff {
		log.Warn("event source mapping check disabled (LEDGER_ESM_CHECK=off): the exactly-once commits rely on settings nobody verifies")
	} else {
		gate := &esmGate{
			next: h, api: awslambda.NewFromConfig(awsCfg), function: cfg.functionName, mode: cfg.mode,
			policy: cfg.esmCheck, interval: cfg.esmInterval, timeout: 10 * time.Second, log: log, now: time.Now,
		}
		if err := gate.check(ctx); err != nil {
			return nil, nil, err
		}
		out = gate
	}
	return out, log, nil
}

// postInitError reports why the function could not start
// (POST /2018-06-01/runtime/init/error); Lambda then fails the invocation
// that caused the cold start and logs the reason.
func postInitError(runtimeAPI, errType, msg string) error {
	body, err := json.Marshal(map[string]string{"errorMessage": msg, "errorType": errType})
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+runtimeAPI+"/2018-06-01/runtime/init/error", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Lambda-Runtime-Function-Error-Type", errType)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("runtime API answered %s", resp.Status)
	}
	return nil
}
