package writer

import (
	"testing"
	"time"
)

// The per-tenant buckets: one per tenant, refilled over time, and dropped
// (as good as new) once full again when too many tenants are kept.
func TestTenantLimiter_BucketsPerTenantRefillAndSweep(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newTenantLimiter(1, 2, func() time.Time { return now })
	for i := range 2 {
		if ok, _ := l.allow("a"); !ok {
			t.Fatalf("request %d of a burst of 2 refused", i+1)
		}
	}
	ok, wait := l.allow("a")
	if ok || wait != time.Second {
		t.Fatalf("third request: ok %v, retry after %s; want refused, 1s", ok, wait)
	}
	if ok, _ := l.allow("b"); !ok {
		t.Fatal("another tenant has a bucket of its own")
	}
	now = now.Add(time.Second)
	if ok, _ := l.allow("a"); !ok {
		t.Fatal("a token a second")
	}
	// Full again after 2s: swept when the map is at its bound.
	now = now.Add(10 * time.Second)
	l.sweep(now)
	if len(l.buckets) != 0 {
		t.Fatalf("%d full buckets kept", len(l.buckets))
	}
	l.allow("a")
	l.sweep(now)
	if len(l.buckets) != 1 {
		t.Fatalf("a bucket in use was dropped")
	}
}
