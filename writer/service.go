package writer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewRegistry returns the registry a writer process serves on /metrics: the
// Go and process collectors, plus whatever the caller registers (the
// Server's Metrics, the secret reads).
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Service is the writer as a process runs it: the API on a listener with
// bounded header, read, write and idle times, and a graceful Close.
// cmd/writer and `ledgerctl run` both start one, so they share this wiring.
type Service struct {
	api    *Server
	ln     net.Listener
	http   *http.Server
	log    *slog.Logger
	failed chan error
}

// Serve starts serving api on ln and returns at once. Requests' contexts
// derive from ctx without its cancellation: a SIGTERM drains them (Close)
// rather than cancelling them. A response's write may take the API's
// request timeout plus 5 s.
func Serve(ctx context.Context, api *Server, ln net.Listener, log *slog.Logger) *Service {
	s := &Service{api: api, ln: ln, log: log, failed: make(chan error, 1)}
	s.http = &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      api.cfg.RequestTimeout + 5*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	go func() {
		if err := s.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.failed <- err
		}
	}()
	return s
}

// Handler is the API the service serves (the Lambda serves it per event).
func (s *Service) Handler() http.Handler { return s.api }

// Addr is the address the service listens on.
func (s *Service) Addr() net.Addr { return s.ln.Addr() }

// Failed delivers the error that stopped the server from serving, if any.
func (s *Service) Failed() <-chan error { return s.failed }

// Close shuts the service down gracefully: /readyz answers 503 for
// drainDelay (so load balancers stop sending), then the listener closes and
// in-flight requests get up to shutdownTimeout to finish.
func (s *Service) Close(drainDelay, shutdownTimeout time.Duration) error {
	s.api.Drain()
	s.log.Info("draining", "delay", drainDelay.String())
	time.Sleep(drainDelay)
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		_ = s.http.Close()
		return fmt.Errorf("in-flight requests did not finish within %s: %w", shutdownTimeout, err)
	}
	s.log.Info("writer stopped")
	return nil
}
