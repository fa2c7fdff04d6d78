package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

// Every table the package uses is created before any test writes, the
// tables the poller must refuse (no stream, keys only) among them. One
// table per test that takes one: 8, and 1 for
// TestPoller_CountedRepairsAtRandomMomentsWhileKilled.
var (
	noStream, keysOnly string
	tables             = ddbtest.Pool{Size: 9, Setup: func(t testing.TB, c *dynamodb.Client) {
		noStream, keysOnly = ddbtest.TableName(t), ddbtest.TableName(t)
		for name, spec := range map[string]*ddbtypes.StreamSpecification{
			noStream: nil,
			keysOnly: {StreamEnabled: aws.Bool(true), StreamViewType: ddbtypes.StreamViewTypeKeysOnly},
		} {
			in := table.CreateTableInput(name)
			in.StreamSpecification = spec
			_, err := c.CreateTable(context.Background(), in)
			require.NoError(t, err)
		}
	}}
)

func newTableName(t *testing.T) string { return tables.Table(t) }

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) lines() []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// waitFor polls the log until a line with msg appears and returns it.
func (b *syncBuffer) waitFor(t *testing.T, msg string, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, l := range b.lines() {
			if l["msg"] == msg {
				return l
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %q in the log after %s:\n%s", msg, timeout, b)
	return nil
}

func TestRun_FlagErrorsExitTwoAndHelpExitsZero(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"bad values", nil, []string{"--start-position", "now", "--idle-backoff", "3", "--log-format", "xml", "--lease-duration", "1ms"},
			[]string{`--start-position: start position "now"`, `--idle-backoff "3": not a duration`, `--log-format "xml"`, "--lease-duration 1ms: want between"}},
		{"bad env", map[string]string{"LEDGER_DRAIN": "maybe", "LEDGER_METRICS_ADDR": "9102"}, nil,
			[]string{`LEDGER_DRAIN "maybe"`, `--metrics-addr "9102"`}},
		{"batch records", map[string]string{"LEDGER_BATCH_RECORDS": "999"}, nil, []string{`--batch-records "999": want a number from 1000 to 10000`}},
		{"batch records not a number", nil, []string{"--batch-records", "lots"}, []string{`--batch-records "lots"`}},
		{"batch window too long", map[string]string{"LEDGER_BATCH_WINDOW": "10m"}, nil, []string{"--batch-window 10m0s: want between 1ms and 5m0s"}},
		{"batch window negative", nil, []string{"--batch-window", "-1s"}, []string{"--batch-window -1s: want between 1ms and 5m0s"}},
		{"batch window not a duration", nil, []string{"--batch-window", "2"}, []string{`--batch-window "2": not a duration`}},
		{"max idle backoff under the idle backoff", nil, []string{"--idle-backoff", "2s", "--max-idle-backoff", "1s"},
			[]string{"--max-idle-backoff 1s: want at least --idle-backoff 2s"}},
		{"max idle backoff past an iterator's life", map[string]string{"LEDGER_MAX_IDLE_BACKOFF": "20m"}, nil,
			[]string{"--max-idle-backoff 20m0s: want between 10ms and 10m0s"}},
		{"offer watch too fast", nil, []string{"--offer-watch", "10ms"}, []string{"--offer-watch 10ms: want between 100ms and 1m0s"}},
		{"offer watch not a duration", map[string]string{"LEDGER_OFFER_WATCH": "often"}, nil, []string{`--offer-watch "often": not a duration`}},
		{"max held records", nil, []string{"--max-held-records", "0"}, []string{`--max-held-records "0": want a number from 1 to 10000000`}},
		{"max held bytes under a page", nil, []string{"--max-held-bytes", "1000"}, []string{`--max-held-bytes "1000": want a number from 1048576 to 1099511627776`}},
		{"max held records not a number", map[string]string{"LEDGER_MAX_HELD_RECORDS": "1GB"}, nil, []string{`--max-held-records "1GB"`}},
		{"lease scan page", nil, []string{"--lease-scan-page", "0"}, []string{`--lease-scan-page "0": want a number from 1 to 100000`}},
		{"describe rate", nil, []string{"--describe-rate", "0"}, []string{`--describe-rate "0": want a number from 1 to 1000`}},
		{"coordination write rate", map[string]string{"LEDGER_COORDINATION_WRITE_RATE": "0"}, nil, []string{`--coordination-write-rate "0": want a number from 1 to 100000`}},
		{"drain empty pages", map[string]string{"LEDGER_DRAIN_EMPTY_PAGES": "0"}, nil, []string{`--drain-empty-pages "0": want a number from 1 to 100`}},
		{"drain empty pages not a number", nil, []string{"--drain-empty-pages", "few"}, []string{`--drain-empty-pages "few"`}},
		{"lease mode", map[string]string{"LEDGER_LEASE_MODE": "beat"}, nil, []string{`--lease-mode "beat": want heartbeat or renew`}},
		{"unknown flag", nil, []string{"--nope"}, []string{"flag provided but not defined: -nope"}},
		{"arguments", nil, []string{"extra"}, []string{"unexpected arguments: extra"}},
		{"empty table", map[string]string{}, []string{"--table", ""}, []string{"--table: must not be empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Run(context.Background(), tt.args, func(k string) string { return tt.env[k] }, &out, &errOut)
			assert.Equal(t, exitUsage, code)
			for _, w := range tt.want {
				assert.Contains(t, errOut.String(), w)
			}
		})
	}
	var out, errOut bytes.Buffer
	require.Equal(t, exitOK, Run(context.Background(), []string{"--help"}, func(string) string { return "" }, &out, &errOut))
	for _, f := range []string{"-table", "LEDGER_TABLE", "-metrics-addr", "LEDGER_METRICS_ADDR", ":9102", "-start-position", "TRIM_HORIZON",
		"-idle-backoff", "-lease-duration", "-owner", "hostname-pid", "-log-format", "-drain", "-batch-records", "LEDGER_BATCH_RECORDS", "-batch-window", "LEDGER_BATCH_WINDOW",
		"-max-idle-backoff", "LEDGER_MAX_IDLE_BACKOFF", "-max-held-records", "LEDGER_MAX_HELD_RECORDS",
		"-max-held-bytes", "LEDGER_MAX_HELD_BYTES", "-drain-empty-pages", "LEDGER_DRAIN_EMPTY_PAGES", "-offer-watch", "LEDGER_OFFER_WATCH", "AWS_ENDPOINT_URL"} {
		assert.Contains(t, errOut.String(), f)
	}
}

// The batching window and batch size: flag over environment over the
// defaults of poller's settings; 0 turns the window off.
func TestParseFlags_BatchWindowAndBatchRecords(t *testing.T) {
	for _, tt := range []struct {
		name       string
		env        map[string]string
		args       []string
		wantWindow time.Duration
		wantBatch  int
	}{
		{"defaults", nil, nil, poller.BatchWindowSetting.Default, poller.BatchRecordsSetting.Default},
		{"environment", map[string]string{"LEDGER_BATCH_WINDOW": "250ms", "LEDGER_BATCH_RECORDS": "2000"}, nil, 250 * time.Millisecond, 2000},
		{"flag over environment", map[string]string{"LEDGER_BATCH_WINDOW": "250ms"}, []string{"--batch-window", "2s"}, 2 * time.Second, poller.BatchRecordsSetting.Default},
		{"zero turns the window off", nil, []string{"--batch-window", "0"}, -1, poller.BatchRecordsSetting.Default},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			require.NoError(t, err)
			assert.Equal(t, tt.wantWindow, o.batchWindow)
			assert.Equal(t, tt.wantBatch, o.batchRecords)
		})
	}
}

// The offer watch: flag over environment over the default; 0 turns it
// off (-1 in poller.Config).
func TestParseFlags_OfferWatch(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string
		want time.Duration
	}{
		{"default", nil, nil, poller.OfferWatchSetting.Default},
		{"environment", map[string]string{"LEDGER_OFFER_WATCH": "500ms"}, nil, 500 * time.Millisecond},
		{"flag over environment", map[string]string{"LEDGER_OFFER_WATCH": "500ms"}, []string{"--offer-watch", "5s"}, 5 * time.Second},
		{"zero turns it off", nil, []string{"--offer-watch", "0"}, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			require.NoError(t, err)
			assert.Equal(t, tt.want, o.offerWatch)
		})
	}
}

// --rollups (issue 24): on by default; off by the flag or LEDGER_ROLLUPS,
// the flag over the environment; a value that is no boolean is refused.
func TestParseFlags_Rollups(t *testing.T) {
	for _, tt := range []struct {
		name    string
		env     map[string]string
		args    []string
		want    bool
		wantErr string
	}{
		{"default on", nil, nil, true, ""},
		{"environment off", map[string]string{"LEDGER_ROLLUPS": "false"}, nil, false, ""},
		{"flag over environment", map[string]string{"LEDGER_ROLLUPS": "false"}, []string{"--rollups=true"}, true, ""},
		{"flag off", nil, []string{"--rollups=false"}, false, ""},
		{"bad environment", map[string]string{"LEDGER_ROLLUPS": "maybe"}, nil, true, `LEDGER_ROLLUPS "maybe": want true or false`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, o.rollups)
		})
	}
}

func TestParseFlags_LeaseMode(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string
		want poller.LeaseMode
	}{
		{"default heartbeat", nil, nil, poller.LeaseModeHeartbeat},
		{"environment renew", map[string]string{"LEDGER_LEASE_MODE": "renew"}, nil, poller.LeaseModeRenew},
		{"flag over environment", map[string]string{"LEDGER_LEASE_MODE": "renew"}, []string{"--lease-mode", "heartbeat"}, poller.LeaseModeHeartbeat},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			require.NoError(t, err)
			assert.Equal(t, tt.want, o.leaseMode)
		})
	}
}

// The idle backoff's cap and the records budget: flag over environment
// over the defaults (an unset cap is the poller's: 10s, or --idle-backoff
// when longer).
func TestParseFlags_MaxIdleBackoffAndMaxHeldRecords(t *testing.T) {
	for _, tt := range []struct {
		name     string
		env      map[string]string
		args     []string
		wantIdle time.Duration // 0: the poller's default
		wantHeld int
	}{
		{"defaults", nil, nil, 0, poller.MaxHeldRecordsSetting.Default},
		{"environment", map[string]string{"LEDGER_MAX_IDLE_BACKOFF": "1m", "LEDGER_MAX_HELD_RECORDS": "5000"}, nil, time.Minute, 5000},
		{"flag over environment", map[string]string{"LEDGER_MAX_IDLE_BACKOFF": "1m"}, []string{"--max-idle-backoff", "1s", "--max-held-records", "100"}, time.Second, 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			require.NoError(t, err)
			assert.Equal(t, tt.wantIdle, o.maxIdleBackoff)
			assert.Equal(t, tt.wantHeld, o.maxHeldRecords)
			assert.Equal(t, poller.MaxHeldBytesSetting.Default, o.maxHeldBytes)
		})
	}
}

// The drain's empty pages in a row: flag over environment over the
// poller's default.
func TestParseFlags_DrainEmptyPages(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string
		want int
	}{
		{"default", nil, nil, poller.DrainEmptyPagesSetting.Default},
		{"environment", map[string]string{"LEDGER_DRAIN_EMPTY_PAGES": "1"}, nil, 1},
		{"flag over environment", map[string]string{"LEDGER_DRAIN_EMPTY_PAGES": "1"}, []string{"--drain-empty-pages", "5"}, 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			require.NoError(t, err)
			assert.Equal(t, tt.want, o.drainEmptyPages)
		})
	}
}

func TestRun_RefusesToStartWithoutAUsableStream(t *testing.T) {
	endpoint := ddbtest.Endpoint(t)
	newTableName(t) // creates the refused tables too
	for _, tt := range []struct{ table, want string }{
		{"no-such-table", "table no-such-table does not exist"},
		{noStream, "has no stream"},
		{keysOnly, "has stream view type KEYS_ONLY; the poller needs NEW_AND_OLD_IMAGES"},
	} {
		t.Run(tt.table, func(t *testing.T) {
			var out, errOut bytes.Buffer
			env := map[string]string{"AWS_ENDPOINT_URL": endpoint, "LEDGER_TABLE": tt.table}
			code := Run(context.Background(), []string{"--metrics-addr", "127.0.0.1:0"}, func(k string) string { return env[k] }, &out, &errOut)
			assert.Equal(t, exitError, code)
			assert.Contains(t, errOut.String(), "refusing to start")
			assert.Contains(t, errOut.String(), tt.want)
		})
	}
}

// Two pollers given one --owner (docs/exactly-once.md, review of the
// heartbeat, HB6), in process: the newer one's claim of the worker item
// stops the older, which exits 3 saying why and what to do; the newer
// takes the shard over, brings the reports up to date, and exits 0 on
// SIGTERM. Before the incarnation both ran on, reading the shard twice.
func TestRun_APollerWhoseOwnerAnotherProcessTookOverExitsThree(t *testing.T) {
	ctx := context.Background()
	endpoint := ddbtest.Endpoint(t)
	table := newTableName(t)
	require.NoError(t, ledgertest.NewWorkload(2).Run(ctx, ddbtest.Client(t), table, 40))
	env := map[string]string{"AWS_ENDPOINT_URL": endpoint, "LEDGER_TABLE": table, "LEDGER_OWNER": "twin"}
	args := []string{"--metrics-addr", "127.0.0.1:0", "--log-format", "json", "--lease-duration", "3s"}
	run := func(ctx context.Context, logs *syncBuffer) chan int {
		done := make(chan int, 1)
		go func() { done <- Run(ctx, args, func(k string) string { return env[k] }, io.Discard, logs) }()
		return done
	}
	older := &syncBuffer{}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	olderDone := run(octx, older)
	older.waitFor(t, "shard reader started", 20*time.Second)
	newer := &syncBuffer{}
	nctx, ncancel := context.WithCancel(ctx)
	defer ncancel()
	newerDone := run(nctx, newer)
	select {
	case code := <-olderDone:
		assert.Equal(t, exitOwnerInUse, code, older.String())
	case <-time.After(time.Minute):
		t.Fatalf("the older poller did not exit within a minute of the newer one's start:\n%s", older)
	}
	assert.Contains(t, older.String(), `owner \"twin\" is in use by another poller process`)
	assert.Contains(t, older.String(), "Owners must be unique among the live pollers")
	assert.Contains(t, older.String(), `"msg":"poller stopped: its owner name is in use by another live poller process"`)
	newer.waitFor(t, "shard reader started", 30*time.Second)
	require.Eventually(t, func() bool {
		diffs, _, err := processor.Reconcile(ctx, ddbtest.Client(t), table, processor.Scope{})
		return err == nil && len(diffs) == 0
	}, time.Minute, 500*time.Millisecond, "the newer poller brings the reports up to date")
	ncancel()
	select {
	case code := <-newerDone:
		assert.Equal(t, exitOK, code, newer.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the newer poller did not exit within 30s of SIGTERM")
	}
	assert.NotContains(t, newer.String(), "in use by another")
}

// In process: /metrics, /healthz and /readyz on a free port, the metrics
// pass `promtool check metrics`, and SIGTERM (context cancellation) stops
// the poller with exit 0.
func TestRun_ServesMetricsHealthAndReadinessThatPromtoolAccepts(t *testing.T) {
	ctx := context.Background()
	endpoint := ddbtest.Endpoint(t)
	table := newTableName(t)
	require.NoError(t, ledgertest.NewWorkload(1).Run(ctx, ddbtest.Client(t), table, 100))
	env := map[string]string{"AWS_ENDPOINT_URL": endpoint, "LEDGER_TABLE": table}
	logs := &syncBuffer{}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() {
		done <- Run(rctx, []string{"--metrics-addr", "127.0.0.1:0", "--log-format", "json", "--lease-duration", "3s"},
			func(k string) string { return env[k] }, io.Discard, logs)
	}()
	addr := logs.waitFor(t, "serving metrics", 20*time.Second)["addr"].(string)
	base := "http://" + addr
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { c, _ := get("/readyz"); return c == 200 }, 10*time.Second, 50*time.Millisecond)
	code, _ := get("/healthz")
	assert.Equal(t, 200, code)
	// Wait for the backlog to be applied.
	require.Eventually(t, func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, `ledger_commits_total{outcome="committed"} `) && !strings.Contains(body, `ledger_commits_total{outcome="committed"} 0`)
	}, 20*time.Second, 100*time.Millisecond)
	_, metrics := get("/metrics")
	for _, name := range []string{"ledger_stream_iterator_age_seconds{shard=", "ledger_stream_lag_seconds_bucket", "ledger_records_total",
		"ledger_poller_leases_held 1", "ledger_stream_get_records_total", "go_goroutines", "process_cpu_seconds_total"} {
		assert.Contains(t, metrics, name)
	}

	if promtool, err := exec.LookPath("promtool"); err != nil {
		t.Log("promtool not on PATH (Debian: apt-get install prometheus): skipping `promtool check metrics`")
	} else {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(metrics)
		out, err := cmd.CombinedOutput()
		assert.NoError(t, err, "promtool check metrics:\n%s", out)
		assert.Empty(t, strings.TrimSpace(string(out)), "promtool lint findings")
	}

	cancel()
	select {
	case code := <-done:
		assert.Equal(t, exitOK, code, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of cancellation")
	}
	assert.Contains(t, logs.String(), `"msg":"lease released"`)
	diffs, _, err := processor.Reconcile(ctx, ddbtest.Client(t), table, processor.Scope{})
	require.NoError(t, err)
	assert.Empty(t, diffs)
}

func TestRun_PromtoolIsAvailableInCI(t *testing.T) {
	if _, err := exec.LookPath("promtool"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not on PATH in CI: .ci/run installs Debian's prometheus package")
		}
		t.Skip("promtool not on PATH (Debian: apt-get install prometheus)")
	}
}

// binary builds cmd/poller once per test binary.
var binary struct {
	once sync.Once
	path string
	err  error
}

func pollerBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "poller-bin-")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "poller")
		out, err := exec.Command("go", "build", "-o", binary.path, ".").CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, binary.err)
	return binary.path
}

// proc is one run of the built poller.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logs    *syncBuffer
	done    chan struct{}
	killed  time.Time
	started time.Time
}

func startPoller(t *testing.T, table, name string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"--metrics-addr", "127.0.0.1:0", "--log-format", "json", "--lease-duration", "2s",
		"--owner", name, "--checkpoint-interval", "1s"}, extra...)
	cmd := exec.Command(pollerBinary(t), args...)
	cmd.Env = append(os.Environ(), "AWS_ENDPOINT_URL="+ddbtest.Endpoint(t), "LEDGER_TABLE="+table)
	p := &proc{name: name, cmd: cmd, logs: &syncBuffer{}, done: make(chan struct{}), started: time.Now()}
	cmd.Stderr = p.logs
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, p.logs)
		}
	})
	return p
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	p.killed = time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done
}

// term sends SIGTERM and requires exit 0 within 30 s.
func (p *proc) term(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s of SIGTERM", p.name)
	}
	require.Equal(t, 0, p.cmd.ProcessState.ExitCode(), "%s exit status after SIGTERM", p.name)
	return time.Since(start)
}

func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", p.name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// interval is one reader's life on a shard, from a poller's log.
type interval struct {
	owner, shard string
	from, to     time.Time
}

func intervals(t *testing.T, procs []*proc) []interval {
	t.Helper()
	var out []interval
	for _, p := range procs {
		open := map[string]*interval{}
		for _, l := range p.logs.lines() {
			shard, _ := l["shard"].(string)
			ts, err := time.Parse(time.RFC3339Nano, l["time"].(string))
			require.NoError(t, err)
			switch l["msg"] {
			case "shard reader started":
				open[shard] = &interval{owner: p.name, shard: shard, from: ts}
			case "shard reader stopped":
				if iv := open[shard]; iv != nil {
					iv.to = ts
					out = append(out, *iv)
					delete(open, shard)
				}
			}
		}
		for _, iv := range open {
			iv.to = p.killed // a reader still open was killed with its process
			require.False(t, iv.to.IsZero(), "%s: reader of %s never stopped", p.name, iv.shard)
			out = append(out, *iv)
		}
	}
	return out
}

// requireOneReaderAtATime fails when two pollers read one shard at once.
func requireOneReaderAtATime(t *testing.T, ivs []interval) {
	t.Helper()
	require.NotEmpty(t, ivs)
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].from.Before(ivs[j].from) })
	for i := range ivs {
		for j := i + 1; j < len(ivs); j++ {
			a, b := ivs[i], ivs[j]
			if a.shard == b.shard && a.owner != b.owner && b.from.Before(a.to) {
				t.Errorf("shard %s: %s read from %s while %s read until %s", a.shard, b.owner,
					b.from.Format("15:04:05.000"), a.owner, a.to.Format("15:04:05.000"))
			}
		}
	}
}

func requireReconciled(t *testing.T, table string) processor.ReconcileStats {
	t.Helper()
	diffs, stats, err := processor.Reconcile(context.Background(), ddbtest.Client(t), table, processor.Scope{})
	require.NoError(t, err)
	for _, d := range diffs {
		t.Errorf("reconcile difference: %s", d)
	}
	return stats
}

// bulkInsert writes n valid transactions with BatchWriteItem from a few
// goroutines: a backlog of n stream records.
func bulkInsert(t *testing.T, db *dynamodb.Client, table string, n int) {
	t.Helper()
	ctx := context.Background()
	const workers = 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			var batch []ddbtypes.WriteRequest
			flush := func() error {
				for len(batch) > 0 {
					out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddbtypes.WriteRequest{table: batch}})
					if err != nil {
						return err
					}
					batch = out.UnprocessedItems[table]
				}
				return nil
			}
			for i := w; i < n; i += workers {
				batch = append(batch, ddbtypes.WriteRequest{PutRequest: &ddbtypes.PutRequest{Item: genTransaction(rng, i)}})
				if len(batch) == 25 {
					if err := flush(); err != nil {
						errs <- err
						return
					}
				}
			}
			if err := flush(); err != nil {
				errs <- err
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func genTransaction(rng *rand.Rand, i int) map[string]ddbtypes.AttributeValue {
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	tenants, branches := []string{"acme", "globex"}, []string{"north", "south", "east"}
	cats := []string{"food", "rent", "travel", "payroll", "café ☕", "a.b"}
	day := time.Date(2024, 1, 25, 0, 0, 0, 0, time.UTC).AddDate(0, 0, rng.IntN(10))
	created := day.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))))
	id := "b" + strconv.Itoa(i)
	date, _ := aggregates.ParseDate(day.Format("2006-01-02"))
	k := aggregates.TransactionKey(tenants[rng.IntN(2)], branches[rng.IntN(3)], date, id)
	item := map[string]ddbtypes.AttributeValue{
		"PK": s(k.PK), "SK": s(k.SK), "entityType": s("TRANSACTION"), "id": s(id),
		"type": s([]string{"INCOME", "EXPENSE"}[rng.IntN(2)]), "amount": &ddbtypes.AttributeValueMemberN{Value: fmt.Sprintf("%d.%02d", rng.IntN(5000), rng.IntN(100))},
		"category": s(cats[rng.IntN(len(cats))]), "createdAt": s(created.Format(time.RFC3339Nano)),
		"version": &ddbtypes.AttributeValueMemberN{Value: "1"}, "updatedAt": s(time.Now().UTC().Format(time.RFC3339Nano)),
	}
	if rng.IntN(2) == 0 {
		item["paymentMethod"] = s([]string{"card", "cash", "pix"}[rng.IntN(3)])
	}
	if item["amount"].(*ddbtypes.AttributeValueMemberN).Value == "0.00" {
		item["amount"] = &ddbtypes.AttributeValueMemberN{Value: "0.01"}
	}
	return item
}

// A backlog of tens of thousands of records (bulk inserts, then a
// randomized mix of modifies, deletes, poison items and non-transaction
// items) drained by the built binary with --drain: exit 0, zero reconcile
// differences. LEDGER_DRAIN_RECORDS sets the bulk size (default 20000).
func TestPoller_DrainsABacklogOfTensOfThousandsOfRecords(t *testing.T) {
	ctx := context.Background()
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("LEDGER_DRAIN_RECORDS")); err == nil && v > 0 {
		n = v
	}
	db := ddbtest.Client(t)
	table := newTableName(t)
	pollerBinary(t)
	start := time.Now()
	bulkInsert(t, db, table, n)
	w := ledgertest.NewWorkload(7)
	require.NoError(t, w.Run(ctx, db, table, 1500))
	total := n + 1500 + 1 // and the flags item
	t.Logf("wrote %d changes in %s", total, time.Since(start).Round(time.Millisecond))

	// One poller alone: a lease a slowed renewal cannot lose on a loaded
	// machine (a lost lease restarts the reader and logs an ERROR).
	p := startPoller(t, table, "drainer", "--drain", "--lease-duration", "60s")
	require.Equal(t, 0, p.wait(t, 3*time.Minute), p.logs.String())
	elapsed := time.Since(p.started)
	stats := requireReconciled(t, table)
	t.Logf("drained %d records in %s: %.0f records/s (process start to exit, DynamoDB Local); %d transactions, %d reports",
		total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), stats.Transactions, stats.Reports)
	assert.Contains(t, p.logs.String(), "drain complete")
	assert.Equal(t, 0, strings.Count(p.logs.String(), `"level":"ERROR"`))
}

// writeContinuously runs the randomized workload until stopped.
func writeContinuously(t *testing.T, table string, seed uint64) (stop func() int) {
	t.Helper()
	db := ddbtest.Client(t)
	w := ledgertest.NewWorkload(seed)
	quit := make(chan struct{})
	done := make(chan error, 1)
	count := 0
	go func() {
		for {
			select {
			case <-quit:
				done <- nil
				return
			default:
			}
			if _, err := w.Step(context.Background(), db, table); err != nil {
				done <- err
				return
			}
			count++
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() int {
		close(quit)
		require.NoError(t, <-done)
		return count
	}
}

// kill -9 at random moments while writes go on, restarting at once, five
// times; a final --drain run (which takes over the dead poller's lease)
// leaves zero reconcile differences, and no two pollers ever read the
// shard at the same time.
func TestPoller_KilledWithSIGKILLAtRandomMomentsAndRestarted(t *testing.T) {
	table := newTableName(t)
	pollerBinary(t)
	stopWrites := writeContinuously(t, table, 8)
	rng := rand.New(rand.NewPCG(8, 8))
	var procs []*proc
	for i := 0; i < 5; i++ {
		p := startPoller(t, table, "victim-"+strconv.Itoa(i))
		procs = append(procs, p)
		time.Sleep(time.Duration(1500+rng.IntN(2500)) * time.Millisecond)
		p.kill(t)
	}
	writes := stopWrites()
	d := startPoller(t, table, "drainer", "--drain")
	procs = append(procs, d)
	require.Equal(t, 0, d.wait(t, 2*time.Minute))
	requireReconciled(t, table)
	requireOneReaderAtATime(t, intervals(t, procs))
	takeovers := 0
	for _, p := range procs {
		takeovers += strings.Count(p.logs.String(), `"msg":"lease taken_over"`)
	}
	t.Logf("%d writes, 5 kills, %d lease takeovers", writes, takeovers)
	// A victim killed after it took the lease leaves it to expire, and the
	// next poller takes it over; one killed before it got the lease (a slow
	// start on a loaded machine) leaves nothing to take over. So at least
	// one takeover, not one per kill; exactness and one reader at a time are
	// checked above.
	assert.GreaterOrEqual(t, takeovers, 1, "a restart takes the lease of a killed poller over after it expires")
}

// Two pollers at once while writes go on; SIGTERM hands the lease over
// (exit 0 well within 30 s), a restarted poller waits its turn; zero
// reconcile differences, and never two readers of the shard at once.
func TestPoller_TwoPollersAtOnceWithGracefulHandOffs(t *testing.T) {
	table := newTableName(t)
	pollerBinary(t)
	stopWrites := writeContinuously(t, table, 9)
	// Long leases: a hand-off must never wait for one to expire.
	long := []string{"--lease-duration", "6s"}
	a := startPoller(t, table, "A", long...)
	a.logs.waitFor(t, "shard reader started", 20*time.Second)
	b := startPoller(t, table, "B", long...)
	b.logs.waitFor(t, "serving metrics", 20*time.Second)
	time.Sleep(3 * time.Second)
	took := a.term(t)
	t.Logf("A exited %s after SIGTERM", took.Round(time.Millisecond))
	b.logs.waitFor(t, "shard reader started", 10*time.Second)
	a2 := startPoller(t, table, "A2", long...)
	time.Sleep(3 * time.Second)
	took = b.term(t)
	t.Logf("B exited %s after SIGTERM", took.Round(time.Millisecond))
	a2.logs.waitFor(t, "shard reader started", 10*time.Second)
	time.Sleep(2 * time.Second)
	stopWrites()
	a2.term(t)
	d := startPoller(t, table, "drainer", "--drain")
	require.Equal(t, 0, d.wait(t, time.Minute))
	requireReconciled(t, table)
	requireOneReaderAtATime(t, intervals(t, []*proc{a, b, a2, d}))
	for _, p := range []*proc{a, b, a2} {
		// A stopping poller hands its lease to a live one it knows of (the
		// share-bounded pass) or releases it: either way the next poller
		// takes it at once, never after it expired.
		logs := p.logs.String()
		assert.True(t, strings.Contains(logs, `"msg":"lease released"`) || strings.Contains(logs, `"msg":"lease handed_off"`),
			"%s: its lease released or handed over on SIGTERM", p.name)
		assert.NotContains(t, logs, `"msg":"lease taken_over"`, "%s: hand-offs never wait for expiry", p.name)
	}
}

// Review, session 15: the default owner was hostname-pid, which two
// containers sharing their host's network (ECS host mode, docker --network
// host) share: the same host name, pid 1 in each. Two pollers started
// alike now get different owners.
func TestParseFlags_DefaultOwnersOfTwoPollersDiffer(t *testing.T) {
	env := func(string) string { return "" }
	a, err := parseFlags(nil, env, io.Discard)
	require.NoError(t, err)
	b, err := parseFlags(nil, env, io.Discard)
	require.NoError(t, err)
	host, _ := os.Hostname()
	assert.True(t, strings.HasPrefix(a.owner, host+"-"+strconv.Itoa(os.Getpid())+"-"), "owner %q", a.owner)
	assert.NotEqual(t, a.owner, b.owner, "two pollers on one host, each pid 1")
}
