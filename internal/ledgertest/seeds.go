package ledgertest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Seeds returns the seeds of a randomized test: those of $LEDGER_SEEDS
// (comma separated, read with getenv), or defaults, so that CI runs a fixed
// set and a failure can be replayed with its seed.
func Seeds(getenv func(string) string, defaults ...uint64) ([]uint64, error) {
	v := getenv("LEDGER_SEEDS")
	if v == "" {
		return defaults, nil
	}
	var out []uint64
	for _, f := range strings.Split(v, ",") {
		s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("LEDGER_SEEDS %q: %w", v, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// ChaosTime is how long each seed's world runs in the randomized tests
// with kills: LEDGER_CHAOS_SECONDS (whole seconds), or def when unset.
func ChaosTime(getenv func(string) string, def time.Duration) (time.Duration, error) {
	v := getenv("LEDGER_CHAOS_SECONDS")
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v + "s")
	if err != nil {
		return 0, fmt.Errorf("LEDGER_CHAOS_SECONDS %q: %w", v, err)
	}
	return d, nil
}
