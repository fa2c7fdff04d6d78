package poller

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The balance plan: every poller computes the same moves from the same
// registry, and the moves bring every owner within [floor, ceiling] where
// that is possible, one lease at a time from the most to the fewest.
func TestPlan_MovesFromTheMostToTheFewestUntilEveryoneIsWithinTheShare(t *testing.T) {
	for _, tc := range []struct {
		name   string
		held   map[string]int
		lo, hi int
		want   []move
	}{
		{"balanced: nothing moves", map[string]int{"a": 2, "b": 2}, 2, 2, nil},
		{"a joiner below its floor gets one from an owner at the ceiling (4 shards, 3 pollers)",
			map[string]int{"a": 2, "b": 2, "c": 0}, 1, 2, []move{{"a", "c"}}},
		{"a joiner gets its share from everyone above it",
			map[string]int{"a": 3, "b": 3, "c": 3, "d": 0}, 2, 3, []move{{"a", "d"}, {"b", "d"}}},
		{"free leases left (floor 0): only the owner over the ceiling gives",
			map[string]int{"a": 5, "b": 1, "c": 0}, 0, 4, []move{{"a", "c"}}},
		{"free leases left and nobody over the ceiling: nothing moves (the others take free ones)",
			map[string]int{"a": 4, "b": 1, "c": 0}, 0, 4, nil},
		{"one apart is as even as it gets", map[string]int{"a": 3, "b": 2, "c": 2}, 2, 3, nil},
		{"a leaver's share spread over the rest, the fewest first",
			map[string]int{"b": 8, "c": 6, "d": 6}, 6, 7, []move{{"b", "c"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := plan(tc.held, tc.lo, tc.hi)
			assert.Equal(t, tc.want, got)
			again := plan(tc.held, tc.lo, tc.hi)
			assert.Equal(t, got, again, "the plan is the same for every poller that reads the same registry")
		})
	}
}
