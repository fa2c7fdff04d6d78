package processor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestStuckRule: which waiting roll-up delta items reconcile names stuck
// (docs/exactly-once.md, S17-R1): every one under the quiescent procedure;
// else one older than StuckAfter (0: the default hour) or without a
// readable time, and none when StuckAfter < 0.
func TestStuckRule(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for _, tc := range []struct {
		name  string
		opts  ReconcileOptions
		since time.Time
		want  bool
	}{
		{"young, default hour", ReconcileOptions{}, ago(59 * time.Minute), false},
		{"exactly the hour is not past it", ReconcileOptions{}, ago(time.Hour), false},
		{"older than the default hour", ReconcileOptions{}, ago(time.Hour + time.Second), true},
		{"older than a StuckAfter given", ReconcileOptions{StuckAfter: 10 * time.Minute}, ago(11 * time.Minute), true},
		{"younger than a StuckAfter given", ReconcileOptions{StuckAfter: 2 * time.Hour}, ago(90 * time.Minute), false},
		{"never by age", ReconcileOptions{StuckAfter: -1}, ago(48 * time.Hour), false},
		{"a time from the future (a committer's clock ahead)", ReconcileOptions{}, now.Add(5 * time.Minute), false},
		{"no readable time", ReconcileOptions{}, time.Time{}, true},
		{"no readable time, never by age", ReconcileOptions{StuckAfter: -1}, time.Time{}, false},
		{"quiescent: a fresh one too", ReconcileOptions{Quiescent: true}, now, true},
		{"quiescent, never by age", ReconcileOptions{Quiescent: true, StuckAfter: -1}, now, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Now = clock
			assert.Equal(t, tc.want, newStuckRule(tc.opts).stuck(tc.since))
		})
	}
}
