package writer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ledger-dev/ledger/table"
)

// DynamoDB is the part of the DynamoDB API the writer calls.
type DynamoDB interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ DynamoDB = (*dynamodb.Client)(nil)

// Defaults of Config.
const (
	DefaultFlagsTTL       = 5 * time.Second
	DefaultDirectoryTTL   = 5 * time.Second
	DefaultRequestTimeout = 10 * time.Second
	DefaultMaxBodyBytes   = 16 << 10
	DefaultListLimit      = 50
	MaxListLimit          = 200
	DefaultIdempotencyTTL = 24 * time.Hour
	// MinCursorKeyLength is the shortest cursor signing key accepted.
	MinCursorKeyLength = 32
)

// Config configures a Server. Zero fields take the documented defaults.
type Config struct {
	// Table is the ledger table. Required.
	Table string
	// Auth verifies bearer tokens. Required.
	Auth *Authenticator
	// CursorKey signs list cursors, at least MinCursorKeyLength bytes.
	// Servers sharing a key accept each other's cursors. Required.
	CursorKey []byte
	// FlagsTTL is how long the flags singleton is cached (default 5s): a
	// change takes effect on every server within it.
	FlagsTTL time.Duration
	// FlagsTimeout bounds one read of the flags item (default 2s); a read
	// that fails or times out refuses mutations until the next read.
	FlagsTimeout time.Duration
	// DirectoryTTL is how long the status of a tenant or branch is cached on
	// the transaction path (default 5s; negative: read on every request),
	// so the bound within which a suspension is honoured (dircache.go).
	DirectoryTTL time.Duration
	// RequestTimeout bounds the DynamoDB work of one request (default 10s).
	RequestTimeout time.Duration
	// MaxBodyBytes bounds request bodies (default 16 KiB).
	MaxBodyBytes int64
	// IdempotencyTTL is how long idempotency records live (default 24h).
	IdempotencyTTL time.Duration
	// Gatherer serves /metrics; nil serves no /metrics.
	Gatherer prometheus.Gatherer
	// Logger receives server errors (5xx) and start-up notes (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Entropy is the random source of transaction ids (default crypto/rand);
	// it must be safe for concurrent use.
	Entropy io.Reader
	// TenantRate is how many requests a second one tenant may send to this
	// server, sustained (ratelimit.go); 0 or less: no limit.
	TenantRate float64
	// TenantBurst is how many requests a tenant may send at once above
	// TenantRate (default: twice the rate, at least 1).
	TenantBurst int
	// TenantBudget is the per-tenant limit across all writers, counted in
	// requests and capacity units (budget.go); its Rate 0 (the default)
	// turns it off.
	TenantBudget BudgetConfig
	// BudgetTable holds the tenant budget's buckets (default: the ledger
	// table's coordination table, table.CoordinationTableName(Table)):
	// PK/SK string keys, and no stream, so that a grant is no record the
	// consumers read. It may not be Table.
	BudgetTable string
	// MaxTenantCurrencies is how many currencies (ISO codes) one tenant's
	// branches may use (currencycap.go): each is one more roll-up the
	// consumers write for it, uncharged. 0: DefaultMaxTenantCurrencies;
	// negative: no cap.
	MaxTenantCurrencies int
}

func (c Config) withDefaults() (Config, error) {
	if c.Table == "" {
		return c, errors.New("writer config: table name is required")
	}
	if c.Auth == nil {
		return c, errors.New("writer config: an authenticator is required")
	}
	if len(c.CursorKey) < MinCursorKeyLength {
		return c, fmt.Errorf("writer config: the cursor key has %d bytes; it needs at least %d", len(c.CursorKey), MinCursorKeyLength)
	}
	if c.FlagsTimeout <= 0 {
		c.FlagsTimeout = 2 * time.Second
	}
	if c.FlagsTTL <= 0 {
		c.FlagsTTL = DefaultFlagsTTL
	}
	if c.DirectoryTTL == 0 {
		c.DirectoryTTL = DefaultDirectoryTTL
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.IdempotencyTTL <= 0 {
		c.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxTenantCurrencies == 0 {
		c.MaxTenantCurrencies = DefaultMaxTenantCurrencies
	}
	if c.Entropy == nil {
		c.Entropy = rand.Reader
	}
	if c.TenantRate > 0 && c.TenantBurst <= 0 {
		c.TenantBurst = max(1, int(2*c.TenantRate))
	}
	var err error
	if c.TenantBudget, err = c.TenantBudget.withDefaults(); err != nil {
		return c, err
	}
	if c.BudgetTable == "" {
		c.BudgetTable = table.CoordinationTableName(c.Table)
	}
	if err := table.CheckCoordinationTable(c.Table, c.BudgetTable); err != nil {
		return c, fmt.Errorf("writer config: budget table: %w", err)
	}
	return c, nil
}

// Server is the writer's HTTP API over the ledger table. It is an
// http.Handler; docs/api.md describes the API.
type Server struct {
	cfg     Config
	api     DynamoDB
	metrics *Metrics
	flags   *flagCache
	cursors cursorCodec
	mux     *http.ServeMux
	// notCanonical answers a path that is not canonical (canonicalPath).
	notCanonical http.Handler
	limiter      *tenantLimiter // nil: no per-tenant limit
	budget       *tenantBudget  // nil: no tenant budget
	statuses     *statusCache
	draining     atomic.Bool
}

// New returns a Server over api configured by cfg. metrics may be nil (then
// they are kept but not registered anywhere).
func New(api DynamoDB, cfg Config, metrics *Metrics) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if _, err := OpenAPI(); err != nil {
		return nil, err
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	raw := api
	if cfg.TenantBudget.Rate > 0 {
		api = meteredDynamoDB{next: raw}
	}
	s := &Server{cfg: cfg, api: api, metrics: metrics, cursors: cursorCodec{key: cfg.CursorKey}, mux: http.NewServeMux()}
	s.flags = &flagCache{api: api, table: cfg.Table, ttl: cfg.FlagsTTL, errTTL: min(time.Second, cfg.FlagsTTL),
		timeout: cfg.FlagsTimeout, now: cfg.Now, metrics: metrics}
	s.statuses = newStatusCache(cfg.DirectoryTTL, cfg.Now)
	if cfg.TenantRate > 0 {
		s.limiter = newTenantLimiter(cfg.TenantRate, cfg.TenantBurst, cfg.Now)
	}
	if cfg.TenantBudget.Rate > 0 {
		s.budget = newTenantBudget(raw, cfg.BudgetTable, cfg.TenantBudget, cfg.Now, metrics, cfg.Logger)
	}
	s.routes()
	return s, nil
}

// The route patterns, also the values of the route metric label.
const (
	routeTenants       = "/v1/tenants"
	routeTenant        = "/v1/tenants/{tenant}"
	routeBranches      = "/v1/tenants/{tenant}/branches"
	routeBranch        = "/v1/tenants/{tenant}/branches/{branch}"
	routeBranchLookup  = "/v1/branches:lookup"
	routeAccounts      = "/v1/tenants/{tenant}/accounts"
	routeAccount       = "/v1/tenants/{tenant}/accounts/{account}"
	routeAccountEmails = "/v1/tenants/{tenant}/accounts/{account}/emails"
	routeAccountEmail  = "/v1/tenants/{tenant}/accounts/{account}/emails/{email}"
	routeAccountLookup = "/v1/accounts:lookup"
	routeTransactions  = "/v1/tenants/{tenant}/branches/{branch}/transactions"
	routeTransaction   = "/v1/tenants/{tenant}/branches/{branch}/transactions/{id}"
	routeHistory       = "/v1/tenants/{tenant}/branches/{branch}/transactions/{id}/history"
	routeReports       = "/v1/tenants/{tenant}/branches/{branch}/reports"
	routeReport        = "/v1/tenants/{tenant}/branches/{branch}/reports/{period}/{value}"
	routeRollups       = "/v1/tenants/{tenant}/reports"
	routeRollup        = "/v1/tenants/{tenant}/reports/{period}/{value}"
	routeOpenAPI       = "/v1/openapi.json"
	routeHealthz       = "/healthz"
	routeReadyz        = "/readyz"
	routeMetrics       = "/metrics"
	routeOther         = "other"
)

type handlers = map[string]http.HandlerFunc

func (s *Server) routes() {
	// api serves route with a token: for the methods in admin an
	// admin-scoped one, for the others one for the path's tenant (or admin).
	api := func(route string, methods handlers, admin ...string) {
		s.mux.Handle(route, s.instrument(route, s.authenticate(admin, s.timeout(byMethod(methods)))))
	}
	get, post, patch, del := http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete
	api(routeTenants, handlers{get: s.listTenants, post: s.createTenant}, get, post)
	api(routeTenant, handlers{get: s.getTenant, patch: s.patchTenant}, patch)
	api(routeBranches, handlers{get: s.listBranches, post: s.createBranch})
	api(routeBranch, handlers{get: s.getBranch, patch: s.patchBranch, del: s.deleteBranch})
	api(routeBranchLookup, handlers{get: s.lookupBranch}, get)
	api(routeAccounts, handlers{get: s.listAccounts, post: s.createAccount})
	api(routeAccount, handlers{get: s.getAccount, patch: s.patchAccount, del: s.deleteAccount})
	api(routeAccountEmails, handlers{post: s.addEmail})
	api(routeAccountEmail, handlers{get: s.getEmail, patch: s.patchEmail, del: s.removeEmail})
	api(routeAccountLookup, handlers{get: s.lookupAccount}, get)
	api(routeTransactions, handlers{get: s.listTransactions, post: s.createTransaction})
	api(routeTransaction, handlers{get: s.getTransaction, patch: s.patchTransaction, del: s.deleteTransaction})
	api(routeHistory, handlers{get: s.transactionHistory})
	api(routeReports, handlers{get: s.reportRange})
	api(routeReport, handlers{get: s.getReport})
	api(routeRollups, handlers{get: s.rollupRange})
	api(routeRollup, handlers{get: s.getRollup})
	s.mux.Handle(routeOpenAPI, s.instrument(routeOpenAPI, byMethod(handlers{get: s.openAPI})))
	s.mux.Handle(routeHealthz, s.instrument(routeHealthz, byMethod(handlers{get: s.healthz})))
	s.mux.Handle(routeReadyz, s.instrument(routeReadyz, byMethod(handlers{get: s.ready})))
	if s.cfg.Gatherer != nil {
		s.mux.Handle(routeMetrics, s.instrument(routeMetrics, byMethod(handlers{get: promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}).ServeHTTP})))
	}
	s.mux.Handle("/", s.instrument(routeOther, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem(http.StatusNotFound, ProblemNotFound, "no such resource").write(w)
	})))
	s.notCanonical = s.instrument(routeOther, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem(http.StatusNotFound, ProblemNotFound, "no such resource: the path has an empty, \".\" or \"..\" segment").write(w)
	}))
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = withReceivedAt(withRequestID(w, r), s.cfg.Now())
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.cfg.Logger.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "request_id", requestIDOf(r), "panic", v, "stack", string(debug.Stack()))
			problem(http.StatusInternalServerError, ProblemInternal, "internal error").write(w)
		}
	}()
	if r.Method != http.MethodConnect && !canonicalPath(r.URL.EscapedPath()) {
		s.notCanonical.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// canonicalPath reports whether p is a path ServeMux serves as it is: it
// answers any other (an empty, "." or ".." segment) with a 307 redirect to
// the cleaned path, which the document does not describe and a client
// following it would resend a POST or PATCH to; the writer answers 404
// not-found instead (docs/api.md "Conventions"). The cleaning is
// ServeMux's: path.Clean, keeping a trailing slash.
func canonicalPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	clean := path.Clean(p)
	if p[len(p)-1] == '/' && clean != "/" {
		clean += "/"
	}
	return clean == p
}

// Drain makes /readyz answer 503 from now on, so load balancers stop
// sending requests before the server shuts down.
func (s *Server) Drain() { s.draining.Store(true) }

// byMethod dispatches on the method, answering 405 with Allow otherwise.
func byMethod(methods map[string]http.HandlerFunc) http.Handler {
	allowed := make([]string, 0, len(methods))
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete} {
		if methods[m] != nil {
			allowed = append(allowed, m)
		}
	}
	allow := strings.Join(allowed, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := methods[r.Method]; h != nil {
			h(w, r)
			return
		}
		problem(http.StatusMethodNotAllowed, ProblemMethodNotAllowed, r.Method+" is not allowed here; allowed: "+allow).
			withHeader("Allow", allow).write(w)
	})
}

// statusWriter records the status code written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument counts and times requests under the route label.
func (s *Server) instrument(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		s.metrics.InFlight.Inc()
		defer s.metrics.InFlight.Dec()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		method := r.Method
		switch method {
		case http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodPut, http.MethodOptions:
		default:
			method = "other"
		}
		s.metrics.Requests.WithLabelValues(route, method, strconv.Itoa(sw.status)).Inc()
		s.metrics.Duration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
	})
}

type claimsKey struct{}

// authenticate requires a valid bearer token: admin-scoped for the methods
// in admin, otherwise one whose tenant claim is the path's tenant or an
// admin-scoped one. Nothing is read before these checks pass, so a 401 or
// 403 says nothing about what exists.
func (s *Server) authenticate(admin []string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			s.metrics.AuthFailures.WithLabelValues("missing").Inc()
			problem(http.StatusUnauthorized, ProblemUnauthenticated, "send Authorization: Bearer <token>").
				withHeader("WWW-Authenticate", `Bearer realm="ledger"`).write(w)
			return
		}
		claims, err := s.cfg.Auth.Authenticate(strings.TrimSpace(token))
		if err != nil {
			s.metrics.AuthFailures.WithLabelValues("invalid").Inc()
			problem(http.StatusUnauthorized, ProblemUnauthenticated, "the bearer token is not valid (signature, expiry, issuer, audience or tenant claim)").
				withHeader("WWW-Authenticate", `Bearer realm="ledger", error="invalid_token"`).write(w)
			return
		}
		switch {
		case slices.Contains(admin, r.Method):
			if !claims.Admin() {
				s.metrics.AuthFailures.WithLabelValues("scope").Inc()
				problem(http.StatusForbidden, ProblemForbidden, "this operation needs an admin-scoped token (scope \"admin\")").write(w)
				return
			}
		case !claims.MayActFor(r.PathValue("tenant")):
			s.metrics.AuthFailures.WithLabelValues("tenant").Inc()
			problem(http.StatusForbidden, ProblemForbidden, "the token does not grant access to this tenant").write(w)
			return
		}
		// The per-process bucket first: it refuses a flood without I/O.
		if p := s.rateLimited(r, claims); p != nil {
			p.write(w)
			return
		}
		r, charge, p := s.overBudget(r, claims)
		if p != nil {
			p.write(w)
			return
		}
		defer charge()
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimsKey{}, claims)))
	})
}

// claimsOf returns the verified claims of the request's token (every /v1
// handler runs behind authenticate).
func claimsOf(r *http.Request) *Claims {
	c, _ := r.Context().Value(claimsKey{}).(*Claims)
	if c == nil {
		return &Claims{}
	}
	return c
}

// timeout bounds the request's DynamoDB work.
func (s *Server) timeout(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// backendError is a failed DynamoDB call, classified.
type backendError struct {
	op    string
	class string // throttle, timeout, other
	err   error
}

func (e *backendError) Error() string { return "dynamodb " + e.op + ": " + e.err.Error() }
func (e *backendError) Unwrap() error { return e.err }

var throttleCodes = map[string]bool{
	"ProvisionedThroughputExceededException": true, "ThrottlingException": true, "RequestLimitExceeded": true,
	"Throttling": true, "TransactionInProgressException": true,
}

// dynamoError classifies and counts a failed DynamoDB call.
func (s *Server) dynamoError(op string, err error) error {
	class := "other"
	var apiErr smithy.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		class = "timeout"
	case errors.As(err, &apiErr) && throttleCodes[apiErr.ErrorCode()]:
		class = "throttle"
	}
	s.metrics.DynamoDBErrors.WithLabelValues(op, class).Inc()
	return &backendError{op: op, class: class, err: err}
}

// fail answers a request that failed on err: 503 for throttling and
// timeouts (retryable), 500 otherwise. Server errors are logged.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var be *backendError
	if errors.As(err, &be) && be.class != "other" {
		if r.Context().Err() == nil || be.class == "throttle" {
			s.cfg.Logger.Warn("dynamodb unavailable", "method", r.Method, "path", r.URL.Path, "request_id", requestIDOf(r), "err", err)
		}
		problem(http.StatusServiceUnavailable, ProblemUnavailable, "the table is busy or slow to answer; retry shortly").
			withHeader("Retry-After", "1").write(w)
		return
	}
	s.cfg.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "request_id", requestIDOf(r), "err", err)
	problem(http.StatusInternalServerError, ProblemInternal, "internal error").write(w)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	jsonResponse(status, v).write(w, false)
}
