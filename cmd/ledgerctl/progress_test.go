package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vbauerster/mpb/v8"

	"github.com/ledger-dev/ledger/infra/ddblocal"
	"github.com/ledger-dev/ledger/processor/processortest"
)

// TestReconcile_JSONOnStdoutProgressOnStderr runs reconcile --json with a
// progress line on every step (LEDGER_PROGRESS_EVERY=0, as a long reconcile
// prints every 5 s): the lines are on stderr, stdout is one JSON object,
// before and after a report is corrupted.
func TestReconcile_JSONOnStdoutProgressOnStderr(t *testing.T) {
	ctx := context.Background()
	c := ddblocal.Client(t)
	table := ddblocal.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddblocal.Endpoint(t), "LEDGER_PROGRESS_EVERY": "0"}
	require.NoError(t, processortest.NewWorkload(5).Run(ctx, c, table, 100))

	code, out, errOut := run(t, env, "reconcile", "--json")
	require.Equal(t, exitDiff, code, out+errOut) // no consumer ran: every report is missing
	var v reconcileView
	require.NoError(t, json.Unmarshal([]byte(out), &v), "stdout: %s", out)
	assert.Equal(t, table, v.Table)
	assert.Positive(t, v.Transactions)
	require.NotEmpty(t, v.Differences)
	d := v.Differences[0]
	assert.Equal(t, "acme", d.Tenant)
	assert.True(t, strings.HasPrefix(d.PK, "TENANT#acme#BRANCH#"+d.Branch), d.PK)
	assert.Equal(t, d.Period, d.SK)
	assert.NotEmpty(t, d.Lines)

	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	assert.Contains(t, lines[0], "reconcile: scanning keys: ")
	last := lines[len(lines)-1]
	assert.Contains(t, last, "reconcile: ")
	assert.Contains(t, last, "differences, 100% (")
	for _, l := range lines {
		assert.True(t, strings.HasPrefix(l, "reconcile: "), "stderr line %q", l)
	}

	// One branch (no key scan), a stray item in a report partition.
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]ddbtypes.AttributeValue{
		"PK": &ddbtypes.AttributeValueMemberS{Value: "TENANT#acme#BRANCH#north#REPORTING"},
		"SK": &ddbtypes.AttributeValueMemberS{Value: "NOT-A-PERIOD"},
	}})
	require.NoError(t, err)
	code, out, errOut = run(t, env, "reconcile", "--json", "--tenant", "acme", "--branch", "north")
	require.Equal(t, exitDiff, code, out+errOut)
	v = reconcileView{}
	require.NoError(t, json.Unmarshal([]byte(out), &v), "stdout: %s", out)
	var stray *differenceView
	for i := range v.Differences {
		if v.Differences[i].Stray {
			stray = &v.Differences[i]
		}
	}
	require.NotNil(t, stray, out)
	assert.Equal(t, "NOT-A-PERIOD", stray.SK)
	assert.Empty(t, stray.Tenant)
	assert.NotContains(t, errOut, "scanning keys")
	assert.Contains(t, errOut, "reconcile: 1/1 branches")

	code, _, errOut = run(t, env, "reconcile", "--json", "--repair")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "--json")
}

// TestReplay_ProgressOnStderrResultsOnStdout replays the fixture directory
// with a progress line on every step: files and records on stderr, one
// result line per file on stdout.
func TestReplay_ProgressOnStderrResultsOnStdout(t *testing.T) {
	c := ddblocal.Client(t)
	table := ddblocal.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddblocal.Endpoint(t), "LEDGER_PROGRESS_EVERY": "0"}
	files, err := filepath.Glob(filepath.Join(fixtureEvents, "*.json"))
	require.NoError(t, err)

	code, out, errOut := run(t, env, "replay", fixtureEvents)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, errOut, "replay: reading 0/")
	assert.Contains(t, errOut, "replay: 0/")
	assert.NotContains(t, out, "replay: ")
	assert.Len(t, strings.Split(strings.TrimSpace(out), "\n"), len(files)+1, "a line per file and the total: %s", out)

	env["LEDGER_PROGRESS_EVERY"] = "off"
	code, _, errOut = run(t, env, "replay", fixtureEvents)
	require.Equal(t, exitOK, code, errOut)
	assert.Empty(t, errOut)
}

func TestLineMeter_PrintsWhenNothingWasPrintedForTheInterval(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every string
		want  []string
	}{
		{"every step", "0", []string{"work: scanning (", "log line", "work: 1 of 4, 25% (", "work: 4 of 4, 100% ("}},
		{"an interval longer than the work", "1h", []string{"log line"}},
		{"off", "off", []string{"log line"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			e := &environment{getenv: func(string) string { return tc.every }, stderr: &stderr}
			m := e.meter("work")
			m.set(0, 0, "scanning")
			_, err := m.Write([]byte("log line\n"))
			require.NoError(t, err)
			m.set(1, 4, "1 of 4")
			m.set(4, 4, "4 of 4")
			m.stop()
			got := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			require.Len(t, got, len(tc.want), stderr.String())
			for i, w := range tc.want {
				assert.True(t, strings.HasPrefix(got[i], w), "line %d: got %q; want %q…", i, got[i], w)
			}
		})
	}
}

func TestLineMeter_BadIntervalFallsBackToTheDefault(t *testing.T) {
	var stderr bytes.Buffer
	e := &environment{getenv: func(string) string { return "soon" }, stderr: &stderr}
	m := e.meter("work")
	m.set(1, 2, "half")
	assert.Equal(t, "ledgerctl: LEDGER_PROGRESS_EVERY \"soon\": want a duration (e.g. 5s), 0 or off; using 5s\n", stderr.String())
	assert.Equal(t, progressEveryDefault, m.(*lineMeter).every)
}

// TestBarMeter_LogLinesAboveTheBarAndNothingAfterStop drives the terminal
// meter into a buffer (mpb refreshing as on a terminal): log lines are
// printed, the bar shows the name and the status, and stop returns with the
// bar completed.
func TestBarMeter_LogLinesAboveTheBarAndNothingAfterStop(t *testing.T) {
	var out bytes.Buffer
	m := newBarMeter(&out, "replay", 0, mpb.WithAutoRefresh())
	_, err := m.Write([]byte("before the bar\n"))
	require.NoError(t, err)
	m.set(1, 4, "1/4 files")
	_, err = m.Write([]byte("file one: 3 records\n"))
	require.NoError(t, err)
	m.set(4, 4, "4/4 files")
	m.stop()
	m.stop() // a second stop is harmless
	_, err = m.Write([]byte("after the bar\n"))
	require.NoError(t, err)
	m.set(4, 4, "not shown")

	s := out.String()
	assert.True(t, strings.HasPrefix(s, "before the bar\n"), s)
	assert.Contains(t, s, "file one: 3 records\n")
	assert.Contains(t, s, "replay ")
	assert.Contains(t, s, "files")
	assert.True(t, strings.HasSuffix(s, "after the bar\n"), s)
	assert.NotContains(t, s, "not shown")
}

// recordingMeter records what a command reports.
type recordingMeter struct {
	log  bytes.Buffer
	sets []string
}

func (r *recordingMeter) set(done, total int64, status string) {
	r.sets = append(r.sets, status+fraction(done, total))
}
func (r *recordingMeter) Write(p []byte) (int, error) { return r.log.Write(p) }
func (r *recordingMeter) stop()                       {}

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
