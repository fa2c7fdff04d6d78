package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The benchmark itself runs in processor/bench's tests (the quick run);
// here only the command's surface.
func TestBench_RefusesArgumentsAndDocumentsItsFlags(t *testing.T) {
	code, _, errOut := run(t, nil, "bench", "now")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, `unexpected argument "now"`)

	code, _, errOut = run(t, nil, "bench", "-h")
	assert.Equal(t, exitError, code)
	for _, flag := range []string{"-quick", "-o FILE", "-poller BINARY", "-backlog RECORDS", "-only LIST", "-skip LIST"} {
		assert.Contains(t, errOut, flag)
	}
	for _, bad := range [][]string{{"-only", "poller,nonsense"}, {"-skip", "memory"}} {
		code, _, errOut = run(t, nil, append([]string{"bench"}, bad...)...)
		assert.Equal(t, exitError, code)
		assert.Contains(t, errOut, "unknown", "%v", bad)
	}

	code, out, _ := run(t, nil, "help")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "bench [-quick]")
}
