package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	for _, flag := range []string{"-quick", "-o FILE", "-poller BINARY", "-backlog RECORDS", "-only LIST", "-skip LIST", "-workloads LIST", "-reconcile-parallel N", "-json FILE", "-charts DIR", "-from FILE", "-tumbling-window SECONDS", "lambda-tumbling", "writerate", "-periods CHANGES", "-rebucket TRANSACTIONS", "-calendar-batches LIST", "periods, rebucket"} {
		assert.Contains(t, errOut, flag)
	}
	for _, bad := range [][]string{{"-only", "poller,nonsense"}, {"-skip", "memory"}, {"-workloads", "b,z"}, {"-skip", "calendar"}} {
		code, _, errOut = run(t, bad...)
		assert.Equal(t, exitError, code)
		assert.Contains(t, errOut, "unknown", "%v", bad)
	}
	for _, bad := range []string{"901", "-5"} {
		code, _, errOut = run(t, "-tumbling-window", bad)
		assert.Equal(t, exitError, code)
		assert.Contains(t, errOut, "want 1 to 900 seconds", bad)
	}
	code, _, errOut = run(t, "-calendar-batches", "1000,x")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, `-calendar-batches: "x" is not a batch size`)
	code, _, errOut = run(t, "-reconcile-parallel", "-1")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "-reconcile-parallel: -1 is not a number of segments")
}

// reconcile-curve has its own flags, checked before anything is loaded.
func TestReconcileCurve_RefusesBadFlagsAndDocumentsThem(t *testing.T) {
	code, _, errOut := run(t, "reconcile-curve", "-h")
	assert.Equal(t, exitError, code)
	for _, flag := range []string{"-sizes LIST", "-seed SEED", "-dynalite DIR", "-data DIR", "-ledgerctl BINARY", "-parallel N", "-load-workers N", "-o FILE", "-json FILE", "dynalite"} {
		assert.Contains(t, errOut, flag)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"now"}, `unexpected argument "now"`},
		{[]string{"-sizes", "1000,x"}, `-sizes: "x" is not a number of transactions`},
		{[]string{"-sizes", "0"}, `-sizes: "0" is not a number of transactions`},
		{[]string{"-parallel", "65"}, "-parallel 65: want 1 to 64"},
		{[]string{"-load-workers", "0"}, "-load-workers 0: want at least 1"},
		{[]string{"-sizes", "10", "-dynalite", t.TempDir(), "-ledgerctl", "/bin/true"}, "dynalite is not installed"},
	} {
		code, _, errOut := run(t, append([]string{"reconcile-curve"}, tc.args...)...)
		assert.Equal(t, exitError, code, "%v", tc.args)
		assert.Contains(t, errOut, tc.want, "%v", tc.args)
	}
	code, _, errOut = run(t, "-h")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "ledgerbench reconcile-curve [flags]")
}

// -from draws the charts of a results file and measures nothing.
func TestBench_FromDrawsTheChartsOfAResultsFile(t *testing.T) {
	results := filepath.Join("..", "..", "bench", "charts", "testdata", "results.json")
	code, _, errOut := run(t, "-from", results)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "-from needs -charts DIR")

	code, _, errOut = run(t, "-from", filepath.Join(t.TempDir(), "missing.json"), "-charts", t.TempDir())
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "missing.json")

	dir := t.TempDir()
	code, out, errOut := run(t, "-from", results, "-charts", dir)
	require.Equal(t, exitOK, code, errOut)
	assert.Empty(t, out, "nothing measured, no markdown")
	for _, f := range []string{"write-units.svg", "throughput.svg", "lag.svg"} {
		assert.FileExists(t, filepath.Join(dir, f))
		assert.Contains(t, errOut, "wrote "+filepath.Join(dir, f))
	}
}

// recordingMeter records what a command reports.
type recordingMeter struct {
	log  bytes.Buffer
	sets []string
}

func (r *recordingMeter) Set(done, total int64, status string) {
	if total > 0 {
		status += fmt.Sprintf(", %d%%", min(100, done*100/total))
	}
	r.sets = append(r.sets, status)
}
func (r *recordingMeter) Write(p []byte) (int, error) { return r.log.Write(p) }
func (r *recordingMeter) Stop()                       {}

func TestBenchLog_MovesAlongTheMeasurementsAndKeepsTheLog(t *testing.T) {
	m := &recordingMeter{}
	l := &benchLog{m: m}
	for _, line := range []string{
		"10:00:00 bench: [1/4] workload a (500 changes), poller, batch 100\n",
		"10:00:09 bench:     900 changes/s (raw drain 1200 records/s)\n",
		"10:00:10 bench: [2/4] workload a (500 changes), lambda, batch 100\n",
		"10:01:00 bench: lag: poller at 50 changes/s for 10s\n",
	} {
		n, err := l.Write([]byte(line))
		require.NoError(t, err)
		assert.Equal(t, len(line), n)
	}
	assert.Equal(t, []string{
		"[1/4] workload a (500 changes), poller, batch 100, 0%",
		"[1/4] workload a (500 changes), poller, batch 100, 0%",
		"[2/4] workload a (500 changes), lambda, batch 100, 25%",
		"lag: poller at 50 changes/s for 10s, 25%",
	}, m.sets)
	assert.Equal(t, 4, strings.Count(m.log.String(), "\n"))
}

// ledgerbench fleet (issue 23) documents its flags and refuses bad ones
// before starting anything; the run itself is package bench's
// TestFleet_SmallestConfigurationRunsExactly.
func TestBenchFleet_RefusesBadFlagsAndDocumentsThem(t *testing.T) {
	code, _, errOut := run(t, "fleet", "-h")
	assert.Equal(t, exitError, code)
	for _, flag := range []string{"-shards SHARDS", "-pollers N", "-rate SECOND", "-duration TIME", "-idle TIME", "-compression FACTOR", "-history TIME", "-drain-timeout TIME", "-json FILE", "-o FILE", "-lease-mode MODE", "nice -n 19"} {
		assert.Contains(t, errOut, flag)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fleet", "extra"}, `unexpected argument "extra"`},
		{[]string{"fleet", "-shards", "0"}, "-shards 0: want 1 to 10000"},
		{[]string{"fleet", "-pollers", "1"}, "-pollers 1: want at least 2"},
		{[]string{"fleet", "-rate", "0"}, "-rate 0: want at least 1"},
		{[]string{"fleet", "-duration", "0s"}, "must be positive"},
		{[]string{"fleet", "-compression", "0.5"}, "-compression 0.5: want at least 1"},
		{[]string{"fleet", "-history", "-1h"}, "want 0 or more"},
		{[]string{"fleet", "-lease-mode", "sometimes"}, `-lease-mode "sometimes": want heartbeat or renew`},
	} {
		code, _, errOut := run(t, c.args...)
		assert.Equal(t, exitError, code, "%v", c.args)
		assert.Contains(t, errOut, c.want, "%v", c.args)
	}
	_, _, errOut = run(t, "-h")
	assert.Contains(t, errOut, "ledgerbench fleet", "the main usage names the subcommand")
}

// ledgerbench rollups (issue 24): its flags documented, bad ones refused
// before anything starts, and -from prints a results file's tables again,
// measuring nothing (docs/bench/rollups/live.json: the run BENCHMARKS.md
// reports).
func TestBenchRollups_RefusesBadFlagsDocumentsThemAndPrintsAResultsFile(t *testing.T) {
	code, _, errOut := run(t, "rollups", "-h")
	assert.Equal(t, exitError, code)
	for _, flag := range []string{"-shards COUNTS", "-changes CHANGES", "-rate SECOND", "-days DAYS", "-pollers POLLERS", "-phase PHASE", "-timeout TIME", "-from FILE", "-json FILE", "-o FILE", "nice -n 19"} {
		assert.Contains(t, errOut, flag)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rollups", "extra"}, `unexpected argument "extra"`},
		{[]string{"rollups", "-shards", "1,0"}, `-shards "1,0": want counts from 1 to 1024`},
		{[]string{"rollups", "-shards", "four"}, `-shards "four"`},
		{[]string{"rollups", "-changes", "0"}, "must be at least 1"},
		{[]string{"rollups", "-days", "0"}, "must be at least 1"},
		{[]string{"rollups", "-phase", "both-ways"}, `-phase "both-ways": want live, catch-up or both`},
		{[]string{"rollups", "-timeout", "0s"}, "-timeout 0s: want a positive duration"},
		{[]string{"rollups", "-from", filepath.Join(t.TempDir(), "none.json")}, "no such file"},
	} {
		code, _, errOut := run(t, c.args...)
		assert.Equal(t, exitError, code, "%v", c.args)
		assert.Contains(t, errOut, c.want, "%v", c.args)
	}
	code, out, errOut := run(t, "rollups", "-from", filepath.Join("..", "..", "docs", "bench", "rollups", "live.json"))
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "#### Write units per 1,000 changes, roll-ups on and off")
	assert.Contains(t, out, "| live | 16 | on |")
	assert.Contains(t, out, "#### Hole 8: the bound in commits a second")
	_, _, errOut = run(t, "-h")
	assert.Contains(t, errOut, "ledgerbench rollups", "the main usage names the subcommand")
}
