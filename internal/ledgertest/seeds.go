package ledgertest

import (
	"fmt"
	"strconv"
	"strings"
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
