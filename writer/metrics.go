package writer

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the writer's Prometheus metrics: HTTP figures under
// ledger_http_ and the writer's own under ledger_writer_. Every label has a
// bounded set of values (routes are patterns, never paths; no tenant,
// branch or id ever becomes a label). docs/api.md lists them.
type Metrics struct {
	// Requests counts finished requests by route, method and status code.
	Requests *prometheus.CounterVec
	// Duration is the time to answer, by route and method.
	Duration *prometheus.HistogramVec
	// InFlight is the number of requests being served.
	InFlight prometheus.Gauge

	// IdempotentReplays counts responses replayed from an idempotency
	// record instead of executing the request again.
	IdempotentReplays prometheus.Counter
	// IdempotencyRejections counts requests refused because of their
	// Idempotency-Key: reason "mismatch" (422, another request used the
	// key) or "in_flight" (409, a request with the key is being executed).
	IdempotencyRejections *prometheus.CounterVec
	// VersionConflicts counts 412 answers: If-Match named a version that
	// is not the resource's current one.
	VersionConflicts prometheus.Counter
	// ConditionalCheckFailures counts writes DynamoDB refused on their
	// condition, by operation (the Writes operations, and idempotency).
	ConditionalCheckFailures *prometheus.CounterVec
	// TransactionConflicts counts TransactWriteItems cancelled because
	// another transaction was changing the same item.
	TransactionConflicts prometheus.Counter
	// Writes counts committed writes by operation: create, update, delete
	// (transactions); tenant_create, tenant_update; branch_create,
	// branch_update, branch_delete; account_create, account_update,
	// account_delete; email_add, email_update, email_remove.
	Writes *prometheus.CounterVec
	// WritesRefused counts mutations refused by the flags, by reason
	// ("disabled", "flags_unavailable"), and transaction writes of a
	// branch a rebase holds ("held").
	WritesRefused *prometheus.CounterVec
	// FlagsReads counts reads of the flags singleton by outcome ("ok",
	// "missing", "error").
	FlagsReads *prometheus.CounterVec
	// AuthFailures counts refused credentials by reason ("missing",
	// "invalid", "tenant": a token for another tenant, "scope": not
	// admin-scoped where that is required).
	AuthFailures *prometheus.CounterVec
	// DynamoDBErrors counts DynamoDB calls that failed other than on a
	// condition, by operation and class ("throttle", "timeout", "other").
	DynamoDBErrors *prometheus.CounterVec
	// RateLimit counts the per-tenant rate limit's decisions by outcome
	// ("allowed", "limited": 429); never by tenant.
	RateLimit *prometheus.CounterVec
	// TenantBudget counts the tenant budget's decisions on requests by
	// outcome ("allowed", "limited": 429, "fail_open": admitted because the
	// limiter's own call failed); never by tenant.
	TenantBudget *prometheus.CounterVec
	// TenantBudgetCalls counts the budget's UpdateItem grants by outcome
	// ("granted", "refused", "error").
	TenantBudgetCalls *prometheus.CounterVec
	// TenantBudgetWriteUnits is the write capacity the budget's own calls
	// consumed: divided by TenantBudget's requests, its cost per request.
	TenantBudgetWriteUnits prometheus.Counter
	// TenantBudgetCharged counts the units charged to tenants by kind
	// ("request": one per admitted request, "read", "write": the capacity
	// units their DynamoDB calls consumed).
	TenantBudgetCharged *prometheus.CounterVec
	// DirectoryCache counts lookups of a tenant's or branch's status on the
	// transaction path by result ("hit", "miss": read from the table).
	DirectoryCache *prometheus.CounterVec
}

// NewMetrics creates the writer's metrics and registers them with reg
// (nil: not registered, for tests that do not look at them).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "ledger", Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route pattern and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ledger", Subsystem: "http", Name: "requests_in_flight",
			Help: "HTTP requests being served.",
		}),
		IdempotentReplays: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "idempotent_replays_total",
			Help: "Responses replayed from an idempotency record instead of executing the request again.",
		}),
		IdempotencyRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "idempotency_rejections_total",
			Help: "Requests refused because of their Idempotency-Key: mismatch (422) or in_flight (409).",
		}, []string{"reason"}),
		VersionConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "version_conflicts_total",
			Help: "Requests answered 412 because If-Match named a version other than the current one.",
		}),
		ConditionalCheckFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "conditional_check_failures_total",
			Help: "Writes refused by their DynamoDB condition, by operation.",
		}, []string{"operation"}),
		TransactionConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "transaction_conflicts_total",
			Help: "TransactWriteItems cancelled because another transaction changed the same item.",
		}),
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "writes_total",
			Help: "Committed writes by operation: create, update, delete (transactions), tenant_*, branch_*, account_*, email_*.",
		}, []string{"operation"}),
		WritesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "writes_refused_total",
			Help: "Mutations refused by the flags singleton: disabled, or flags_unavailable (fail closed); held: a transaction write of a branch a rebase holds.",
		}, []string{"reason"}),
		FlagsReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "flags_reads_total",
			Help: "Reads of the flags singleton by outcome: ok, missing, error.",
		}, []string{"outcome"}),
		AuthFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "auth_failures_total",
			Help: "Requests refused for their credentials: missing, invalid, tenant (token for another tenant) or scope (not admin).",
		}, []string{"reason"}),
		DynamoDBErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "dynamodb_errors_total",
			Help: "DynamoDB calls that failed other than on a condition, by operation and class (throttle, timeout, other).",
		}, []string{"operation", "class"}),
		RateLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "rate_limit_total",
			Help: "Requests the per-tenant rate limit decided on, by outcome: allowed, limited (429).",
		}, []string{"outcome"}),
		TenantBudget: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "tenant_budget_requests_total",
			Help: "Requests the distributed tenant budget decided on, by outcome: allowed, limited (429), fail_open (the limiter's call failed).",
		}, []string{"outcome"}),
		TenantBudgetCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "tenant_budget_calls_total",
			Help: "Grants the tenant budget asked the table for, by outcome: granted, refused, error.",
		}, []string{"outcome"}),
		TenantBudgetWriteUnits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "tenant_budget_write_units_total",
			Help: "Write capacity units the tenant budget's own UpdateItem calls consumed.",
		}),
		TenantBudgetCharged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "tenant_budget_charged_units_total",
			Help: "Units charged to tenant budgets, by kind: request (one per admitted request), read, write (capacity units consumed).",
		}, []string{"kind"}),
		DirectoryCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ledger", Subsystem: "writer", Name: "directory_cache_total",
			Help: "Lookups of a tenant's or branch's status on the transaction path, by result: hit, miss (read from the table).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Duration, m.InFlight, m.IdempotentReplays, m.IdempotencyRejections,
			m.VersionConflicts, m.ConditionalCheckFailures, m.TransactionConflicts, m.Writes, m.WritesRefused,
			m.FlagsReads, m.AuthFailures, m.DynamoDBErrors, m.RateLimit, m.TenantBudget, m.TenantBudgetCalls, m.TenantBudgetWriteUnits,
			m.TenantBudgetCharged, m.DirectoryCache)
	}
	return m
}
