package poller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// A poller's DescribeStream rate is the fleet's budget times its own
// weight over the weights it counts; a weight above 1 (a granted first
// listing) holds only while its heartbeat's validity runs, checked at
// each call's turn (docs/exactly-once.md, "The first listing's share of
// DescribeStream", claim 2).
func TestDescribeBudget_AListersWeightHoldsOnlyWhileItsValidityRuns(t *testing.T) {
	b := newDescribeBudget(8, NewMetrics(prometheus.NewRegistry()))
	until := time.Now().Add(time.Hour)
	valid := func() time.Time { return until }
	for _, tc := range []struct {
		name        string
		self, total float64
		until       time.Time
		want        rate.Limit
	}{
		{"alone", 1, 1, until, 8},
		{"eight pollers, nobody listing", 1, 8, until, 1},
		{"a non-lister counting a lister among eight", 1, 15, until, 8.0 / 15},
		{"a granted lister among eight", listingWeight, 15, until, 8 * 8.0 / 15},
		{"a granted lister whose validity ended", listingWeight, 15, time.Now().Add(-time.Second), 8.0 / 15},
		{"eight granted listers", listingWeight, 64, until, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			until = tc.until
			b.share(tc.self, tc.total, valid)
			b.mu.Lock()
			got := b.limitAt(time.Now())
			b.mu.Unlock()
			if diff := float64(got - tc.want); diff > 1e-9 || diff < -1e-9 {
				t.Fatalf("rate %v; want %v", got, tc.want)
			}
		})
	}
}
