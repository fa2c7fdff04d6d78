package poller

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readsToCover is how many GetRecords an idle shard makes while idle for
// span: a read, then the wait after it, until the waits cover span.
func readsToCover(p *Poller, span time.Duration, grow bool) int {
	var idle time.Duration
	n := 0
	for idle < span {
		n++
		idle += p.idleBackoff(n, grow)
	}
	return n
}

// An idle shard's reads over an idle period grow with its logarithm up to
// MaxIdleBackoff (the waits double), then by one per MaxIdleBackoff; with
// MaxIdleBackoff equal to IdleBackoff (before issue 23) they grow linearly,
// one per IdleBackoff. A drain's and a closed shard's waits (no growth)
// never pass IdleBackoff.
func TestIdleBackoff_ReadsGrowLogarithmicallyUpToTheCap(t *testing.T) {
	for _, tc := range []struct {
		name      string
		idle, max time.Duration
	}{
		{"default", 0, 0},
		{"up to ten minutes", time.Second, 10 * time.Minute},
		{"fast start", 100 * time.Millisecond, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Config{Table: "t", StreamARN: "arn", Owner: "o", IdleBackoff: tc.idle, MaxIdleBackoff: tc.max}.withDefaults()
			require.NoError(t, err)
			p := &Poller{cfg: cfg}
			base := max(cfg.MinReadInterval, 50*time.Millisecond)
			// Below the cap: doubling the idle time costs at most two more
			// reads (one wait of the doubled step covers it; jitter may
			// take a second), and the reads are bounded by the logarithm
			// of the idle time over the first wait.
			prev := 0
			for span := cfg.IdleBackoff; span <= cfg.MaxIdleBackoff; span *= 2 {
				n := readsToCover(p, span, true)
				bound := int(math.Ceil(math.Log2(float64(span)/(0.75*float64(base))+1))) + 1
				assert.LessOrEqual(t, n, bound, "reads over %s idle", span)
				if prev > 0 {
					assert.LessOrEqual(t, n-prev, 2, "reads from %s to %s idle", span/2, span)
				}
				prev = n
			}
			// Past the cap: one read per 3/4 to 1 MaxIdleBackoff.
			hour := readsToCover(p, time.Hour, true) - readsToCover(p, 2*cfg.MaxIdleBackoff, true)
			perHour := float64(time.Hour-2*cfg.MaxIdleBackoff) / float64(cfg.MaxIdleBackoff)
			assert.GreaterOrEqual(t, float64(hour), math.Floor(perHour), "reads per hour at the cap")
			assert.LessOrEqual(t, float64(hour), math.Ceil(perHour/0.75)+1, "reads per hour at the cap")
			// Without growth (a drain, a closed shard; or MaxIdleBackoff =
			// IdleBackoff): linear, one read per IdleBackoff.
			for n := 1; n < 100; n++ {
				d := p.idleBackoff(n, false)
				require.LessOrEqual(t, d, cfg.IdleBackoff, "wait %d without growth", n)
				g := p.idleBackoff(n, true)
				require.LessOrEqual(t, g, cfg.MaxIdleBackoff, "wait %d", n)
				require.GreaterOrEqual(t, g, d, "wait %d: growth never waits less", n)
			}
			span := 64 * cfg.IdleBackoff
			fixed := readsToCover(p, span, false)
			assert.GreaterOrEqual(t, fixed, 64, "without growth, one read per IdleBackoff")
			assert.Less(t, readsToCover(p, span, true), fixed/4, "growth reads a fraction of it")
		})
	}
}

// The figures of BENCHMARKS.md's "Issue 23: adaptive idle backoff":
// GetRecords per idle shard in its first idle hour and per hour once at
// the cap, for a few settings of MaxIdleBackoff (IdleBackoff 1s,
// MinReadInterval 200ms, the defaults), against the model 3,600 /
// (0.875 × MaxIdleBackoff) at the cap (each wait drawn in [3/4, 1] of it).
func TestIdleBackoff_ReadsPerIdleHour(t *testing.T) {
	for _, top := range []time.Duration{time.Second, 2 * time.Second, 10 * time.Second, time.Minute, 10 * time.Minute} {
		cfg, err := Config{Table: "t", StreamARN: "arn", Owner: "o", MaxIdleBackoff: top}.withDefaults()
		require.NoError(t, err)
		p := &Poller{cfg: cfg}
		first := readsToCover(p, time.Hour, true)
		// A day at the cap, per hour: the ramp's share is negligible.
		steady := float64(readsToCover(p, 25*time.Hour, true)-readsToCover(p, time.Hour, true)) / 24
		model := 3600 / top.Seconds()
		if top > cfg.IdleBackoff {
			model /= 0.875
		}
		t.Logf("max-idle-backoff %s: %d GetRecords in the first idle hour, %.0f per hour at the cap (model %.0f)", top, first, steady, model)
		assert.InEpsilon(t, model, steady, 0.05, "reads per hour at the cap, max-idle-backoff %s", top)
	}
}
