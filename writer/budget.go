package writer

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// The tenant budget: the per-tenant limit that holds across writer
// processes and counts what requests cost (docs/design.md, "Tenant
// budget"; docs/api.md, "Rate limits").
//
// A tenant's budget is Rate units a second (bursts of Burst) for all
// writers together, kept as Shards token buckets (table/budget.go) in the
// coordination table (Config.BudgetTable), each refilled at Rate/Shards. A request costs one unit
// when it is admitted, and after it is served the read and write capacity
// units its DynamoDB calls consumed (as DynamoDB reports them, asked with
// ReturnConsumedCapacity): a report range of 1 MiB costs hundreds of units,
// a transaction written about 5. A process does not go to the table for every
// request: it takes a grant of up to MaxGrant units from one shard (chosen
// at random per grant) with one conditional UpdateItem, and spends it
// locally for GrantTTL. What a request costs beyond what is left of its
// grant is debt, charged with the next grant (whose take then waits until
// the shard has paid it back). A refused grant says how long until the
// units are there (a refused grant asks one other shard first, so that
// chance in the choice of shards does not refuse a tenant below its rate);
// until then, and at least for GrantTTL, the process answers the tenant 429
// without another call.
//
// Grant sizes adapt: a grant spent before it expires doubles the next (up
// to MaxGrant), one that expires unspent halves it (down to 1), so a busy
// tenant costs the limiter a fraction of a write unit per request and a
// quiet one, whose unspent units are forfeited when the grant expires, is
// not charged much beyond what it uses.
//
// The limiter fails open, bounded: when its UpdateItem fails (throttled,
// timed out after Timeout, any error; it is not retried) the process admits
// the tenant as if granted MaxGrant units for GrantTTL, counted in
// ledger_writer_tenant_budget_calls_total{outcome="error"} and
// ledger_writer_tenant_budget_requests_total{outcome="fail_open"}, and
// tries the table again after that. So a failing limiter costs no request
// more than Timeout, and admits at most MaxGrant units per GrantTTL per
// process and tenant, behind the per-process bucket (ratelimit.go), which
// stays the first line.

// Defaults of BudgetConfig.
const (
	DefaultBudgetShards   = 4
	DefaultBudgetMaxGrant = 50
	DefaultBudgetGrantTTL = time.Second
	DefaultBudgetTimeout  = 250 * time.Millisecond
)

// BudgetConfig configures the tenant budget. Zero fields take the
// documented defaults; Rate 0 turns the budget off.
type BudgetConfig struct {
	// Rate is the units a second one tenant may spend, all writers
	// together; 0 or less: no budget.
	Rate float64
	// Burst is the units a tenant may spend at once above Rate (default
	// twice Rate); each shard holds Burst/Shards, at least 1.
	Burst float64
	// Shards is the number of bucket items per tenant (default 4): each is
	// written at most 1/Shards of the tenant's grant rate.
	Shards int
	// MaxGrant bounds the units one grant takes (default 50, at most a
	// shard's burst, Burst/Shards).
	MaxGrant float64
	// GrantTTL is how long a process spends a grant (default 1s); what is
	// unspent then is forfeited.
	GrantTTL time.Duration
	// Timeout bounds one UpdateItem of the limiter (default 250ms).
	Timeout time.Duration
}

func (c BudgetConfig) withDefaults() (BudgetConfig, error) {
	if c.Rate <= 0 {
		return BudgetConfig{}, nil
	}
	if c.Shards <= 0 {
		c.Shards = DefaultBudgetShards
	}
	if c.Burst <= 0 {
		c.Burst = 2 * c.Rate
	}
	if c.MaxGrant <= 0 {
		c.MaxGrant = DefaultBudgetMaxGrant
	}
	if c.GrantTTL <= 0 {
		c.GrantTTL = DefaultBudgetGrantTTL
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultBudgetTimeout
	}
	shardBurst := c.Burst / float64(c.Shards)
	if shardBurst < 1 {
		return c, fmt.Errorf("writer config: a tenant budget burst of %v over %d shards leaves less than one unit a shard", c.Burst, c.Shards)
	}
	c.MaxGrant = min(c.MaxGrant, shardBurst)
	return c, nil
}

// bucket is one shard's bucket as table.TakeBudget wants it.
func (c BudgetConfig) bucket() table.BudgetBucket {
	return table.BudgetBucket{
		Interval:  time.Duration(math.Round(float64(time.Second) * float64(c.Shards) / c.Rate)),
		Tolerance: time.Duration(math.Round(float64(time.Second) * c.Burst / c.Rate)).Round(time.Microsecond),
	}
}

// tenantBudget is a process's side of the budget: the grants it holds, per
// tenant.
type tenantBudget struct {
	cfg     BudgetConfig
	bucket  table.BudgetBucket
	api     table.BudgetAPI
	table   string
	now     func() time.Time
	metrics *Metrics
	log     *slog.Logger

	mu      sync.Mutex
	tenants map[string]*grant
}

// grant is what a process holds of one tenant's budget.
type grant struct {
	mu      sync.Mutex // held across the take: one take per tenant at a time
	units   float64    // left of the current grant; negative: debt
	expires time.Time  // when the current grant ends
	size    float64    // units the next grant takes
	blocked time.Time  // refused: no take before
	hints   []int64    // each shard's tat as last seen
}

func newTenantBudget(api table.BudgetAPI, tableName string, cfg BudgetConfig, now func() time.Time, m *Metrics, log *slog.Logger) *tenantBudget {
	return &tenantBudget{cfg: cfg, bucket: cfg.bucket(), api: noRetry{api}, table: tableName, now: now, metrics: m, log: log, tenants: map[string]*grant{}}
}

func (b *tenantBudget) grantOf(tenant string) *grant {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.tenants[tenant]
	if g == nil {
		if len(b.tenants) >= MaxTenantLimiters {
			b.sweep()
		}
		g = &grant{size: 1, hints: make([]int64, b.cfg.Shards)}
		b.tenants[tenant] = g
	}
	return g
}

// sweep drops the grants that hold nothing: expired, no debt, not blocked.
// If none is, it drops them all, forgetting their debts, which errs
// towards admitting.
func (b *tenantBudget) sweep() {
	now := b.now()
	for t, g := range b.tenants {
		if g.mu.TryLock() {
			idle := !now.Before(g.expires) && g.units >= 0 && !now.Before(g.blocked)
			g.mu.Unlock()
			if idle {
				delete(b.tenants, t)
			}
		}
	}
	if len(b.tenants) >= MaxTenantLimiters {
		clear(b.tenants)
	}
}

// admit takes the unit of one request of tenant: from the grant held, or
// from a new grant. It reports whether the request may proceed and, when
// not, how long until it may.
func (b *tenantBudget) admit(ctx context.Context, tenant string) (ok bool, retryAfter time.Duration) {
	g := b.grantOf(tenant)
	g.mu.Lock()
	defer g.mu.Unlock()
	now := b.now()
	if now.Before(g.blocked) {
		b.metrics.TenantBudget.WithLabelValues("limited").Inc()
		return false, g.blocked.Sub(now)
	}
	if now.Before(g.expires) && g.units >= 1 {
		g.units--
		b.metrics.TenantBudget.WithLabelValues("allowed").Inc()
		return true, 0
	}
	// A new grant. The last one spent: take more; expired unspent: less.
	// A fraction of a unit left of a live grant is kept; debt is charged
	// with the grant.
	debt, left := 0.0, 0.0
	switch {
	case g.units < 0:
		debt = -g.units
	case now.Before(g.expires):
		left = g.units
	}
	if !g.expires.IsZero() {
		if now.Before(g.expires) {
			g.size = min(2*g.size, b.cfg.MaxGrant)
		} else if g.units >= 1 {
			g.size = max(g.size/2, 1)
		}
	}
	shard := rand.IntN(b.cfg.Shards)
	res, err := b.take(ctx, tenant, g, shard, now, debt)
	if err == nil && !res.Granted && b.cfg.Shards > 1 {
		// One shard refusing while another has units is chance (grants land
		// on shards at random), not the tenant's rate: ask one other shard
		// before refusing. A failure of that second call refuses, as the
		// first did.
		other := (shard + 1 + rand.IntN(b.cfg.Shards-1)) % b.cfg.Shards
		if res2, err2 := b.take(ctx, tenant, g, other, now, debt); err2 == nil {
			if res2.Granted || res2.Wait < res.Wait {
				res = res2
			}
		}
	}
	switch {
	case err != nil:
		// Fail open, for one grant: the debt is forgiven, the table tried
		// again when the grant expires.
		b.metrics.TenantBudget.WithLabelValues("fail_open").Inc()
		b.log.Warn("tenant budget unavailable, admitting (fail open)", "grant", b.cfg.MaxGrant, "for", b.cfg.GrantTTL.String(), "err", err)
		g.units, g.expires = b.cfg.MaxGrant-1, now.Add(b.cfg.GrantTTL)
		return true, 0
	case !res.Granted:
		b.metrics.TenantBudget.WithLabelValues("limited").Inc()
		// Blocked for the wait, and at least a grant's time: a tenant far
		// over its budget costs the table one refused take per process and
		// grant time, however short the waits (Retry-After is whole seconds
		// anyway).
		wait := max(res.Wait, b.cfg.GrantTTL)
		g.units, g.expires = left-debt, time.Time{}
		g.blocked = now.Add(wait)
		return false, wait
	}
	b.metrics.TenantBudget.WithLabelValues("allowed").Inc()
	g.units, g.expires = left+g.size-1, now.Add(b.cfg.GrantTTL)
	return true, 0
}

// take asks shard for g.size units and debt, counting the call.
func (b *tenantBudget) take(ctx context.Context, tenant string, g *grant, shard int, now time.Time, debt float64) (table.BudgetTake, error) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.Timeout)
	defer cancel()
	res, err := table.TakeBudget(tctx, b.api, b.table, aggregates.BudgetKey(tenant, shard), b.bucket, now, g.size, debt, g.hints[shard])
	b.metrics.TenantBudgetWriteUnits.Add(res.WriteUnits)
	switch {
	case err != nil:
		b.metrics.TenantBudgetCalls.WithLabelValues("error").Inc()
	case res.Granted:
		b.metrics.TenantBudgetCalls.WithLabelValues("granted").Inc()
		g.hints[shard] = res.TAT
	default:
		b.metrics.TenantBudgetCalls.WithLabelValues("refused").Inc()
		g.hints[shard] = res.TAT
	}
	return res, err
}

// charge spends what a request cost beyond its unit: the capacity units
// its DynamoDB calls consumed. It may leave the grant in debt.
func (b *tenantBudget) charge(tenant string, c *capacity) {
	read, write := c.units()
	b.metrics.TenantBudgetCharged.WithLabelValues("read").Add(read)
	b.metrics.TenantBudgetCharged.WithLabelValues("write").Add(write)
	if read+write == 0 {
		return
	}
	g := b.grantOf(tenant)
	g.mu.Lock()
	g.units -= read + write
	g.mu.Unlock()
}

// overBudget answers 429 when the request's tenant has spent its budget;
// nil when it may proceed (or is not limited). The request's context then
// carries the meter its DynamoDB calls add their capacity to, and done
// charges it.
func (s *Server) overBudget(r *http.Request, claims *Claims) (*http.Request, func(), *Problem) {
	tenant := r.PathValue("tenant")
	if s.budget == nil || tenant == "" || claims.Admin() {
		return r, func() {}, nil
	}
	ok, wait := s.budget.admit(r.Context(), tenant)
	if !ok {
		secs := max(int64(math.Ceil(wait.Seconds())), 1)
		return r, nil, problem(http.StatusTooManyRequests, ProblemRateLimited,
			"this tenant has spent its budget ("+strconv.FormatFloat(s.budget.cfg.Rate, 'g', -1, 64)+
				" units a second: one per request plus the read and write capacity units it consumes); retry after Retry-After seconds").
			withHeader("Retry-After", strconv.FormatInt(secs, 10))
	}
	s.budget.metrics.TenantBudgetCharged.WithLabelValues("request").Inc()
	c := &capacity{}
	r = r.WithContext(context.WithValue(r.Context(), capacityKey{}, c))
	return r, func() { s.budget.charge(tenant, c) }, nil
}

// noRetry makes the limiter's UpdateItem a single attempt: a throttled or
// failing table is not asked again within the request (the limiter fails
// open instead) and gets no retries from the limiter on top of its load.
type noRetry struct{ next table.BudgetAPI }

func (n noRetry) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return n.next.UpdateItem(ctx, in, append(opts, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })...)
}
