package writer

import (
	"fmt"
	"testing"
)

// The largest grant must fit a shard's bucket whatever the rate: rates that
// do not divide a second evenly once made it miss by a microsecond, and
// every grant failed (and failed open).
func TestBudgetConfig_TheLargestGrantFitsAShard(t *testing.T) {
	for _, c := range []BudgetConfig{
		{Rate: 30, Burst: 60, Shards: 4},
		{Rate: 7, Shards: 3},
		{Rate: 1.0 / 3600, Burst: 30, Shards: 1, MaxGrant: 8},
		{Rate: 300, Burst: 600},
		{Rate: 1000, Burst: 13, Shards: 7},
		{Rate: 0.3, Burst: 11, Shards: 9},
		{Rate: 999_999, Burst: 1_000_000, Shards: 100},
	} {
		t.Run(fmt.Sprintf("%v/%v/%d", c.Rate, c.Burst, c.Shards), func(t *testing.T) {
			c, err := c.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			b := c.bucket()
			if !b.Holds(c.MaxGrant) {
				t.Fatalf("a grant of %v does not fit a shard (interval %v, tolerance %v)", c.MaxGrant, b.Interval, b.Tolerance)
			}
			if b.Holds(c.Burst/float64(c.Shards) + 0.5) {
				t.Fatalf("more than a shard's burst (%v) fits", c.Burst/float64(c.Shards))
			}
		})
	}
}
