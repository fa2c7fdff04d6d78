package writer

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Per-tenant rate limiting. Every /v1 request for a tenant (a path with
// {tenant}) made with that tenant's token takes a token from the tenant's
// bucket (golang.org/x/time/rate: TenantRate tokens a second, at most
// TenantBurst held); an empty bucket is 429 rate-limited with Retry-After,
// decided after authentication (so nobody can drain another tenant's
// bucket with requests that do not verify) and before anything is read.
// Admin-scoped tokens, the platform's, are not limited. The limit is per
// writer process: N processes (Lambda instances) admit up to N times it;
// API Gateway's throttling bounds the whole API (docs/deploy.md).

// MaxTenantLimiters bounds the buckets kept: when more tenants are active
// at once, buckets that are full (as good as new) are dropped first.
const MaxTenantLimiters = 100_000

type tenantLimiter struct {
	rate  rate.Limit
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newTenantLimiter(perSecond float64, burst int, now func() time.Time) *tenantLimiter {
	return &tenantLimiter{rate: rate.Limit(perSecond), burst: burst, now: now, buckets: map[string]*rate.Limiter{}}
}

// allow takes a token from tenant's bucket: ok, or the wait until one is
// there.
func (l *tenantLimiter) allow(tenant string) (ok bool, retryAfter time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[tenant]
	if b == nil {
		if len(l.buckets) >= MaxTenantLimiters {
			l.sweep(now)
		}
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[tenant] = b
	}
	if b.AllowN(now, 1) {
		return true, 0
	}
	r := b.ReserveN(now, 1)
	defer r.CancelAt(now)
	if !r.OK() {
		return false, time.Hour
	}
	return false, r.DelayFrom(now)
}

// sweep drops the buckets that are full again: a new bucket is the same.
// If none is, it drops them all, which errs towards admitting.
func (l *tenantLimiter) sweep(now time.Time) {
	for t, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, t)
		}
	}
	if len(l.buckets) >= MaxTenantLimiters {
		clear(l.buckets)
	}
}

// rateLimited answers 429 when the request's tenant has no token left; nil
// when it may proceed (or is not limited).
func (s *Server) rateLimited(r *http.Request, claims *Claims) *Problem {
	tenant := r.PathValue("tenant")
	if s.limiter == nil || tenant == "" || claims.Admin() {
		return nil
	}
	ok, wait := s.limiter.allow(tenant)
	if ok {
		s.metrics.RateLimit.WithLabelValues("allowed").Inc()
		return nil
	}
	s.metrics.RateLimit.WithLabelValues("limited").Inc()
	secs := int64(math.Ceil(wait.Seconds()))
	if secs < 1 {
		secs = 1
	}
	return problem(http.StatusTooManyRequests, ProblemRateLimited,
		"this tenant is sending more than its rate allows ("+strconv.FormatFloat(float64(s.limiter.rate), 'g', -1, 64)+
			" requests a second, bursts of "+strconv.Itoa(s.limiter.burst)+"); retry after Retry-After seconds").
		withHeader("Retry-After", strconv.FormatInt(secs, 10))
}
