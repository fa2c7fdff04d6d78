package streamemu

import (
	"sync"
	"time"
)

// Clock is the stream's time: shard schedules, record ages (retention) and
// iterator ages are measured on it. Call rates (Limits) are measured on the
// wall clock whatever the Clock: a consumer's pacing is real time.
type Clock interface {
	Now() time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Compressed is a Clock that runs Factor times faster than the wall clock
// from its first reading: with Factor 1440 a day passes in a minute.
type Compressed struct {
	Factor float64

	once  sync.Once
	start time.Time // wall clock at the first reading
}

// Now returns the compressed time: the first reading is the wall clock's,
// later ones are ahead of it by (Factor - 1) × the wall time since.
func (c *Compressed) Now() time.Time {
	c.once.Do(func() { c.start = time.Now() })
	elapsed := time.Since(c.start)
	return c.start.Add(time.Duration(float64(elapsed) * c.Factor))
}

// Manual is a Clock that moves only when told: tests jump a day ahead in
// one call. The zero value starts at 2026-01-01T00:00:00Z.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// NewManual returns a manual clock at t.
func NewManual(t time.Time) *Manual { return &Manual{now: t} }

// Now returns the clock's time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.now.IsZero() {
		m.now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return m.now
}

// Advance moves the clock d ahead.
func (m *Manual) Advance(d time.Duration) {
	now := m.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = now.Add(d)
}
