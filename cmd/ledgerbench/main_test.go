package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The benchmark itself runs in package bench's tests (the quick run); here
// only the command's surface.
func TestBench_RefusesArgumentsAndDocumentsItsFlags(t *testing.T) {
	code, _, errOut := run(t, "now")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, `unexpected argument "now"`)

	code, _, errOut = run(t, "-h")
	assert.Equal(t, exitError, code)
	for _, flag := range []string{"-quick", "-o FILE", "-poller BINARY", "-backlog RECORDS", "-only LIST", "-skip LIST"} {
		assert.Contains(t, errOut, flag)
	}
	for _, bad := range [][]string{{"-only", "poller,nonsense"}, {"-skip", "memory"}} {
		code, _, errOut = run(t, bad...)
		assert.Equal(t, exitError, code)
		assert.Contains(t, errOut, "unknown", "%v", bad)
	}
}
