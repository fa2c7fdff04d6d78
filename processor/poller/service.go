package poller

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Service is a poller as a process runs it: the processor and the poller
// over one table, their metrics in a registry of their own (with the Go and
// process collectors), and the HTTP handler serving /metrics, /healthz and
// /readyz. cmd/poller and `ledgerctl run` both start one, so they share this
// wiring and Config's defaults.
type Service struct {
	Poller    *Poller
	Registry  *prometheus.Registry
	StreamARN string
}

// NewService wires a poller for cfg.Table with the AWS configuration aws.
// An empty cfg.StreamARN is resolved from the table (ResolveStream), which
// refuses a table without a NEW_AND_OLD_IMAGES stream.
func NewService(ctx context.Context, awsCfg aws.Config, cfg Config) (*Service, error) {
	db := dynamodb.NewFromConfig(awsCfg)
	if cfg.StreamARN == "" {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		arn, err := ResolveStream(rctx, db, cfg.Table)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("refusing to start: %w", err)
		}
		cfg.StreamARN = arn
	}
	if cfg.Table != "" && cfg.CoordinationTable == "" {
		cfg.CoordinationTable = table.CoordinationTableName(cfg.Table)
	}
	if err := checkCoordination(ctx, db, cfg); err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	proc, err := processor.New(db, processor.Config{Table: cfg.Table, CoordinationTable: cfg.CoordinationTable, NoRollups: cfg.NoRollups}, processor.NewMetrics(reg))
	if err != nil {
		return nil, err
	}
	// Protocol 4 in the flags before this poller's first fence
	// (docs/exactly-once.md, "F as built (session 25)").
	if _, err := proc.RaiseProtocol(ctx); err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	p, err := New(NewStreamsClient(awsCfg), db, proc, cfg, NewMetrics(reg))
	if err != nil {
		return nil, err
	}
	return &Service{Poller: p, Registry: reg, StreamARN: cfg.StreamARN}, nil
}

// checkCoordination makes sure the coordination table is there and the
// ledger table holds no checkpoint of the stream from before it (reading
// the stream again from an empty coordination table would apply its
// records twice).
func checkCoordination(ctx context.Context, db *dynamodb.Client, cfg Config) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := table.CheckCoordinationTable(cfg.Table, cfg.CoordinationTable); err != nil {
		return err
	}
	if err := table.ValidateCoordinationTable(ctx, db, cfg.CoordinationTable); err != nil {
		return err
	}
	return table.RefuseLegacyStreamState(ctx, db, cfg.Table, cfg.StreamARN)
}

// Handler serves /metrics (Prometheus text format), /healthz (the
// coordinator is alive and reaching the table) and /readyz (shards and
// leases are known, not shutting down).
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{Registry: s.Registry}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Poller.Healthy() {
			http.Error(w, "not reaching the table", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Poller.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}
