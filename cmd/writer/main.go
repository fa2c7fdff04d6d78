// Command writer serves the ledger's HTTP API (package writer, docs/api.md):
// transactions in, reports out, over the ledger table.
//
// Configuration is flags with environment fallbacks (writer --help lists
// them); the JWT secret and cursor key come from the environment or
// Secrets Manager (by ARN), never from flags. AWS
// access is the standard SDK environment (AWS_REGION, AWS_ENDPOINT_URL,
// credentials). It refuses to start without a way to verify tokens.
//
// On SIGTERM or SIGINT it stops answering /readyz with 200, waits
// --drain-delay for load balancers to notice, lets in-flight requests
// finish (up to --shutdown-timeout) and exits 0.
package main

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // failed to start or while serving
	exitUsage = 2 // bad flags or environment
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") != "" { // in AWS Lambda: serve API Gateway events (lambda.go)
		os.Exit(runLambda(ctx, os.Getenv, os.Stdout, os.Stderr))
	}
	code := Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Run runs the writer until ctx is done (SIGTERM, SIGINT) and returns its
// exit status.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	m := NewMain(getenv, stdout, stderr)
	if err := m.ParseFlags(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "writer: %v\n\nRun 'writer --help' for the flags.\n", err)
		return exitUsage
	}
	if err := m.Run(ctx); err != nil {
		m.logger.Error("writer failed to start", "error", err.Error())
		return exitError
	}
	code := exitOK
	select {
	case <-ctx.Done():
	case err := <-m.Failed():
		m.logger.Error("writer stopped serving", "error", err.Error())
		code = exitError
	}
	if err := m.Close(); err != nil {
		m.logger.Error("shutdown", "error", err.Error())
		code = exitError
	}
	return code
}

// Main is the writer program, split so that tests can run the real thing:
// ParseFlags, Run (returns once listening), URL, Close.
type Main struct {
	getenv         func(string) string
	stdout, stderr io.Writer
	logger         *slog.Logger

	addr            string
	table           string
	secret          []byte
	jwks            []byte
	issuer          string
	audience        string
	cursorKey       []byte
	flagsTTL        time.Duration
	directoryTTL    time.Duration
	requestTimeout  time.Duration
	shutdownTimeout time.Duration
	drainDelay      time.Duration
	tenantRate      float64
	tenantBurst     int
	maxCurrencies   int // writer.Config.MaxTenantCurrencies
	budget          writer.BudgetConfig
	coordination    string
	secretARN       string
	cursorKeyARN    string
	secretRefresh   time.Duration
	stopRefresh     context.CancelFunc

	svc *writer.Service
}

// NewMain returns a program that reads its environment through getenv and
// logs to stderr.
func NewMain(getenv func(string) string, stdout, stderr io.Writer) *Main {
	return &Main{getenv: getenv, stdout: stdout, stderr: stderr, logger: slog.New(slog.NewTextHandler(stderr, nil))}
}

const usageHead = `usage: writer [flags]

Serves the ledger HTTP API (docs/api.md) over the ledger table.

Environment only (secrets stay out of the process list):
  LEDGER_JWT_SECRET   HS256 secret verifying bearer tokens, at least 32 bytes
                      (local use; in AWS use --jwt-secret-arn)
  LEDGER_CURSOR_KEY   key signing list cursors, at least 32 bytes (in AWS
                      use --cursor-key-arn); default derived from
                      LEDGER_JWT_SECRET; required with --jwks-file alone,
                      and it or --cursor-key-arn with --jwt-secret-arn
  AWS_REGION, AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_SECRETS_MANAGER, AWS
  credentials: the standard AWS SDK settings

At least one of LEDGER_JWT_SECRET, --jwt-secret-arn and --jwks-file is
required; LEDGER_JWT_SECRET and --jwt-secret-arn exclude each other.

Flags (each falls back to the environment variable named, then the default):
`

// ParseFlags reads the flags and the environment and checks them; it
// returns flag.ErrHelp when help was asked for. Everything that can be
// wrong with the configuration is reported here, all at once.
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("writer", flag.ContinueOnError)
	fs.SetOutput(m.stderr)
	env := func(name, def string) string {
		if v := strings.TrimSpace(m.getenv(name)); v != "" {
			return v
		}
		return def
	}
	var jwksFile, flagsTTL, directoryTTL, reqTimeout, shutdown, drain, level, tenantRate, tenantBurst, secretRefresh string
	var budget, budgetBurst, budgetShards, budgetGrant, budgetGrantTTL, budgetTimeout, currencies string
	fs.StringVar(&m.addr, "addr", env("LEDGER_ADDR", ":8080"), "listen `ADDR`ess; port 0 picks a free port, which is logged (env LEDGER_ADDR)")
	fs.StringVar(&m.table, "table", env("LEDGER_TABLE", table.DefaultTableName), "the ledger `TABLE` (env LEDGER_TABLE)")
	fs.StringVar(&jwksFile, "jwks-file", env("LEDGER_JWKS_FILE", ""), "`FILE` holding a JSON Web Key Set of public keys verifying RS*/PS*/ES*/EdDSA tokens, read at start (env LEDGER_JWKS_FILE)")
	fs.StringVar(&m.secretARN, "jwt-secret-arn", env("LEDGER_JWT_SECRET_ARN", ""), "Secrets Manager secret (`ARN` or name) holding the HS256 secret, read at start and every --secret-refresh (env LEDGER_JWT_SECRET_ARN)")
	fs.StringVar(&m.cursorKeyARN, "cursor-key-arn", env("LEDGER_CURSOR_KEY_ARN", ""), "Secrets Manager secret (`ARN` or name) holding the key signing list cursors, at least 32 bytes, read at start: a secret of its own, so a rotation of the JWT secret leaves cursors valid (env LEDGER_CURSOR_KEY_ARN)")
	fs.StringVar(&secretRefresh, "secret-refresh", env("LEDGER_SECRET_REFRESH", "5m"), "how often the --jwt-secret-arn secret is read again, a `DURATION` (env LEDGER_SECRET_REFRESH)")
	fs.StringVar(&m.issuer, "jwt-issuer", env("LEDGER_JWT_ISSUER", writer.DefaultIssuer), "required token `ISSUER` (iss) (env LEDGER_JWT_ISSUER)")
	fs.StringVar(&m.audience, "jwt-audience", env("LEDGER_JWT_AUDIENCE", writer.DefaultAudience), "required token `AUDIENCE` (aud) (env LEDGER_JWT_AUDIENCE)")
	fs.StringVar(&flagsTTL, "flags-ttl", env("LEDGER_FLAGS_TTL", "5s"), "how long the flags singleton is cached, a `DURATION` (env LEDGER_FLAGS_TTL)")
	fs.StringVar(&directoryTTL, "directory-ttl", env("LEDGER_DIRECTORY_TTL", "5s"), "how long a tenant's or branch's status is cached for its transactions, a `DURATION`: the bound within which a suspension is honoured; 0 reads it on every request (env LEDGER_DIRECTORY_TTL)")
	fs.StringVar(&reqTimeout, "request-timeout", env("LEDGER_REQUEST_TIMEOUT", "10s"), "`DURATION` bounding one request's DynamoDB work (env LEDGER_REQUEST_TIMEOUT)")
	fs.StringVar(&shutdown, "shutdown-timeout", env("LEDGER_SHUTDOWN_TIMEOUT", "25s"), "on SIGTERM, the `DURATION` in-flight requests may take to finish (env LEDGER_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&drain, "drain-delay", env("LEDGER_DRAIN_DELAY", "0s"), "on SIGTERM, the `DURATION` /readyz answers 503 before the listener closes (env LEDGER_DRAIN_DELAY)")
	fs.StringVar(&tenantRate, "tenant-rate", env("LEDGER_TENANT_RATE", "100"), "requests a `RATE` per second one tenant may send to this process, sustained; 0 turns the limit off (env LEDGER_TENANT_RATE)")
	fs.StringVar(&tenantBurst, "tenant-burst", env("LEDGER_TENANT_BURST", "200"), "requests a tenant may send at once above its rate, a `COUNT` (env LEDGER_TENANT_BURST)")
	fs.StringVar(&m.coordination, "coordination-table", env("LEDGER_COORDINATION_TABLE", ""), "the `TABLE` without a stream that holds the tenant budget's buckets (default: the ledger table's name + \""+table.CoordinationSuffix+"\", the consumers' coordination table; env LEDGER_COORDINATION_TABLE)")
	fs.StringVar(&budget, "tenant-budget", env("LEDGER_TENANT_BUDGET", "0"), "units a `RATE` per second one tenant may spend across all writers (one per request plus the read and write capacity units it consumes), kept in the table; 0 turns it off (env LEDGER_TENANT_BUDGET)")
	fs.StringVar(&budgetBurst, "tenant-budget-burst", env("LEDGER_TENANT_BUDGET_BURST", "0"), "units a tenant may spend at once above its budget, a `COUNT`; 0: twice --tenant-budget (env LEDGER_TENANT_BUDGET_BURST)")
	fs.StringVar(&budgetShards, "tenant-budget-shards", env("LEDGER_TENANT_BUDGET_SHARDS", strconv.Itoa(writer.DefaultBudgetShards)), "bucket items per tenant, a `COUNT` from 1 to 100: each is written at most 1/COUNT of the tenant's grant rate (env LEDGER_TENANT_BUDGET_SHARDS)")
	fs.StringVar(&budgetGrant, "tenant-budget-grant", env("LEDGER_TENANT_BUDGET_GRANT", strconv.Itoa(writer.DefaultBudgetMaxGrant)), "most units one grant takes from the table, a `COUNT` (env LEDGER_TENANT_BUDGET_GRANT)")
	fs.StringVar(&budgetGrantTTL, "tenant-budget-grant-ttl", env("LEDGER_TENANT_BUDGET_GRANT_TTL", writer.DefaultBudgetGrantTTL.String()), "how long a process spends a grant, a `DURATION`; what is left then is forfeited (env LEDGER_TENANT_BUDGET_GRANT_TTL)")
	fs.StringVar(&budgetTimeout, "tenant-budget-timeout", env("LEDGER_TENANT_BUDGET_TIMEOUT", writer.DefaultBudgetTimeout.String()), "`DURATION` bounding the budget's own UpdateItem; when it fails the tenant is admitted for one grant (fail open) (env LEDGER_TENANT_BUDGET_TIMEOUT)")
	fs.StringVar(&currencies, "tenant-currencies", env("LEDGER_TENANT_CURRENCIES", strconv.Itoa(writer.DefaultMaxTenantCurrencies)), "most currencies (ISO codes) one tenant's branches may use, a `COUNT`: each is one more roll-up the consumers write for the tenant; a branch past it is 422 too-many-currencies; 0 turns the cap off (env LEDGER_TENANT_CURRENCIES)")
	fs.StringVar(&level, "log-level", env("LEDGER_LOG_LEVEL", "info"), "log `LEVEL`: debug, info, warn or error (env LEDGER_LOG_LEVEL)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}

	var errs []error
	dur := func(name, v string, dst *time.Duration, min, max time.Duration) {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--%s %q: not a duration (e.g. 500ms, 2s)", name, v))
		case d < min || d > max:
			errs = append(errs, fmt.Errorf("--%s %s: want between %s and %s", name, d, min, max))
		default:
			*dst = d
		}
	}
	dur("flags-ttl", flagsTTL, &m.flagsTTL, 10*time.Millisecond, time.Minute)
	dur("directory-ttl", directoryTTL, &m.directoryTTL, 0, time.Minute)
	if m.directoryTTL == 0 {
		m.directoryTTL = -1 // writer.Config: read on every request
	}
	dur("request-timeout", reqTimeout, &m.requestTimeout, 100*time.Millisecond, 5*time.Minute)
	dur("shutdown-timeout", shutdown, &m.shutdownTimeout, 0, 10*time.Minute)
	dur("drain-delay", drain, &m.drainDelay, 0, 5*time.Minute)
	dur("secret-refresh", secretRefresh, &m.secretRefresh, 100*time.Millisecond, 24*time.Hour)
	if v, err := strconv.ParseFloat(tenantRate, 64); err != nil || v < 0 || v > 1e6 || v != v {
		errs = append(errs, fmt.Errorf("--tenant-rate %q: want requests per second from 0 (no limit) to 1000000", tenantRate))
	} else {
		m.tenantRate = v
	}
	if n, err := strconv.Atoi(tenantBurst); err != nil || n < 1 || n > 1_000_000 {
		errs = append(errs, fmt.Errorf("--tenant-burst %q: want a whole number from 1 to 1000000", tenantBurst))
	} else {
		m.tenantBurst = n
	}
	num := func(name, v string, dst *float64, min, max float64) {
		f, err := strconv.ParseFloat(v, 64)
		switch {
		case err != nil || f != f:
			errs = append(errs, fmt.Errorf("--%s %q: not a number", name, v))
		case f < min || f > max:
			errs = append(errs, fmt.Errorf("--%s %v: want from %v to %v", name, f, min, max))
		default:
			*dst = f
		}
	}
	switch n, err := strconv.Atoi(currencies); {
	case err != nil || n < 0 || n > 1000:
		errs = append(errs, fmt.Errorf("--tenant-currencies %q: want a whole number from 0 (no cap) to 1000", currencies))
	case n == 0:
		m.maxCurrencies = -1 // writer.Config: no cap
	default:
		m.maxCurrencies = n
	}
	var shards float64
	num("tenant-budget", budget, &m.budget.Rate, 0, 1e6)
	num("tenant-budget-burst", budgetBurst, &m.budget.Burst, 0, 1e7)
	num("tenant-budget-shards", budgetShards, &shards, 1, 100)
	num("tenant-budget-grant", budgetGrant, &m.budget.MaxGrant, 1, 1e6)
	m.budget.Shards = int(shards)
	if float64(m.budget.Shards) != shards {
		errs = append(errs, fmt.Errorf("--tenant-budget-shards %v: want a whole number", shards))
	}
	dur("tenant-budget-grant-ttl", budgetGrantTTL, &m.budget.GrantTTL, 10*time.Millisecond, time.Minute)
	dur("tenant-budget-timeout", budgetTimeout, &m.budget.Timeout, 10*time.Millisecond, 10*time.Second)
	if m.coordination != "" {
		if err := table.CheckCoordinationTable(m.table, m.coordination); err != nil {
			errs = append(errs, fmt.Errorf("--coordination-table: %w", err))
		}
	}
	if b := m.budget; b.Rate > 0 && b.Shards > 0 {
		if burst := cmp.Or(b.Burst, 2*b.Rate); burst/float64(b.Shards) < 1 {
			errs = append(errs, fmt.Errorf("--tenant-budget-burst %v over --tenant-budget-shards %d leaves less than one unit a shard", burst, b.Shards))
		}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", level))
	}
	m.logger = slog.New(slog.NewTextHandler(m.stderr, &slog.HandlerOptions{Level: lvl}))
	if strings.TrimSpace(m.table) == "" {
		errs = append(errs, errors.New("--table: must not be empty"))
	}
	if _, _, err := net.SplitHostPort(m.addr); err != nil {
		errs = append(errs, fmt.Errorf("--addr %q: want host:port (e.g. :8080, 127.0.0.1:0)", m.addr))
	}

	m.secret = []byte(m.getenv("LEDGER_JWT_SECRET"))
	if jwksFile != "" {
		b, err := os.ReadFile(jwksFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--jwks-file: %w", err))
		}
		m.jwks = b
	}
	switch {
	case len(m.secret) > 0 && m.secretARN != "":
		errs = append(errs, errors.New("LEDGER_JWT_SECRET and --jwt-secret-arn (LEDGER_JWT_SECRET_ARN) both set: give the HS256 secret one way"))
	case len(m.secret) == 0 && m.secretARN == "" && jwksFile == "":
		errs = append(errs, errors.New("no way to verify tokens: set LEDGER_JWT_SECRET (HS256, at least 32 bytes), --jwt-secret-arn (LEDGER_JWT_SECRET_ARN) or --jwks-file (LEDGER_JWKS_FILE)"))
	case len(m.secret) > 0 && len(m.secret) < writer.MinSecretLength:
		errs = append(errs, fmt.Errorf("LEDGER_JWT_SECRET has %d bytes; it needs at least %d", len(m.secret), writer.MinSecretLength))
	}
	m.cursorKey = []byte(m.getenv("LEDGER_CURSOR_KEY"))
	switch {
	case len(m.cursorKey) > 0 && m.cursorKeyARN != "":
		errs = append(errs, errors.New("LEDGER_CURSOR_KEY and --cursor-key-arn (LEDGER_CURSOR_KEY_ARN) both set: give the cursor key one way"))
	case len(m.cursorKey) > 0 && len(m.cursorKey) < writer.MinCursorKeyLength:
		errs = append(errs, fmt.Errorf("LEDGER_CURSOR_KEY has %d bytes; it needs at least %d", len(m.cursorKey), writer.MinCursorKeyLength))
	case len(m.cursorKey) > 0 || m.cursorKeyARN != "":
		// Given (--cursor-key-arn: read in Run).
	case m.secretARN != "":
		// Not derived from a secret that rotates: writers started before and
		// after a rotation would refuse each other's cursors.
		errs = append(errs, errors.New("--jwt-secret-arn (LEDGER_JWT_SECRET_ARN) needs a cursor key of its own: set --cursor-key-arn (LEDGER_CURSOR_KEY_ARN) or LEDGER_CURSOR_KEY (at least 32 bytes), so that rotating the JWT secret leaves cursors valid"))
	case len(m.secret) >= writer.MinSecretLength:
		m.cursorKey = deriveCursorKey(m.secret)
	case jwksFile != "":
		errs = append(errs, errors.New("LEDGER_CURSOR_KEY (at least 32 bytes) is required when tokens are verified with --jwks-file only: every writer must sign cursors with the same key"))
	}
	return errors.Join(errs...)
}

// deriveCursorKey derives the cursor key from a static HS256 secret
// (LEDGER_JWT_SECRET, local use), so every writer sharing the secret
// accepts the others' cursors, and knowing a cursor key reveals nothing of
// the secret. A secret from Secrets Manager, which rotates, is never
// derived from: the cursor key is then a secret of its own.
func deriveCursorKey(secret []byte) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("ledger list cursor key v1"))
	return mac.Sum(nil)
}

// Run connects to DynamoDB (and Secrets Manager), builds the server and
// starts serving; it returns once the listener is open. Errors are start-up
// failures.
func (m *Main) Run(ctx context.Context) error {
	var awsOpts []func(*config.LoadOptions) error
	if ep := m.getenv("AWS_ENDPOINT_URL"); ep != "" {
		awsOpts = append(awsOpts, config.WithBaseEndpoint(ep))
	}
	if region := m.getenv("AWS_REGION"); region != "" {
		awsOpts = append(awsOpts, config.WithRegion(region))
	}
	cfg, err := infra.LoadConfig(ctx, awsOpts...)
	if err != nil {
		return err
	}
	reg := writer.NewRegistry()
	authCfg := writer.AuthConfig{Secret: m.secret, JWKS: m.jwks, Issuer: m.issuer, Audience: m.audience}
	if m.secretARN != "" {
		cache, err := m.secretsFromManager(ctx, cfg, reg)
		if err != nil {
			return err
		}
		authCfg.Secrets = cache.current
	}
	if m.cursorKeyARN != "" {
		if m.cursorKey, err = m.cursorKeyFromManager(ctx, cfg); err != nil {
			return err
		}
	}
	auth, err := writer.NewAuthenticator(authCfg)
	if err != nil {
		return err
	}
	api, err := writer.New(dynamodb.NewFromConfig(cfg), writer.Config{
		Table: m.table, Auth: auth, CursorKey: m.cursorKey, FlagsTTL: m.flagsTTL, DirectoryTTL: m.directoryTTL,
		RequestTimeout: m.requestTimeout, Gatherer: reg, Logger: m.logger,
		TenantRate: m.tenantRate, TenantBurst: m.tenantBurst, TenantBudget: m.budget,
		BudgetTable: m.coordination, MaxTenantCurrencies: m.maxCurrencies,
	}, writer.NewMetrics(reg))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", m.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	m.svc = writer.Serve(ctx, api, ln, m.logger)
	m.logger.Info("writer listening", "addr", ln.Addr().String(), "table", m.table)
	return nil
}

// secretsFromManager reads the HS256 secret from Secrets Manager and keeps
// it fresh (secrets.go) until Close. The client's endpoint is
// AWS_ENDPOINT_URL_SECRETS_MANAGER when set.
func (m *Main) secretsFromManager(ctx context.Context, cfg aws.Config, reg prometheus.Registerer) (*secretCache, error) {
	reads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "ledger", Subsystem: "writer", Name: "secret_reads_total",
		Help: "Reads of the JWT secret from Secrets Manager by outcome: ok, error (the secrets read last stay in use).",
	}, []string{"outcome"})
	reg.MustRegister(reads)
	cache := &secretCache{api: m.secretsClient(cfg), id: m.secretARN, logger: m.logger, reads: reads, timeout: 10 * time.Second}
	if err := cache.refresh(ctx); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.stopRefresh = cancel
	go cache.run(rctx, m.secretRefresh)
	m.logger.Info("JWT secret read from Secrets Manager", "secret", m.secretARN, "refresh", m.secretRefresh.String())
	return cache, nil
}

// secretsClient is the Secrets Manager client; its endpoint is
// AWS_ENDPOINT_URL_SECRETS_MANAGER when set.
func (m *Main) secretsClient(cfg aws.Config) *secretsmanager.Client {
	return secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) {
		if ep := m.getenv("AWS_ENDPOINT_URL_SECRETS_MANAGER"); ep != "" {
			o.BaseEndpoint = aws.String(ep)
		}
	})
}

// cursorKeyFromManager reads the cursor key (--cursor-key-arn), the
// AWSCURRENT version, once at start: the writer does not start without it.
// Every writer must sign with the same key, so a rotation of it takes
// effect as writers start, and cursors issued under the old key are
// refused (400 invalid-cursor: the client lists again from the start).
func (m *Main) cursorKeyFromManager(ctx context.Context, cfg aws.Config) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := &secretCache{api: m.secretsClient(cfg), id: m.cursorKeyARN}
	key, err := c.secretValue(ctx, "AWSCURRENT")
	if err != nil {
		return nil, err
	}
	if len(key) < writer.MinCursorKeyLength {
		return nil, fmt.Errorf("secrets manager: the cursor key %s has %d bytes; it needs at least %d", m.cursorKeyARN, len(key), writer.MinCursorKeyLength)
	}
	m.logger.Info("cursor key read from Secrets Manager", "secret", m.cursorKeyARN)
	return key, nil
}

// URL is the base URL the writer serves on (after Run).
func (m *Main) URL() string {
	addr := m.svc.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(addr.Port))
}

// Failed delivers the error that stopped the server from serving, if any.
func (m *Main) Failed() <-chan error {
	if m.svc == nil {
		return nil
	}
	return m.svc.Failed()
}

// Close shuts the server down gracefully: /readyz answers 503 for the drain
// delay, then the listener closes and in-flight requests get up to the
// shutdown timeout to finish.
func (m *Main) Close() error {
	if m.stopRefresh != nil {
		m.stopRefresh()
	}
	if m.svc == nil {
		return nil
	}
	return m.svc.Close(m.drainDelay, m.shutdownTimeout)
}
