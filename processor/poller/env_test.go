package poller_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

// The package's tables are all created before any test writes: one per
// test that makes one (53: five lineage, four window, three lease, three
// closed-shard, two batch, two fault, two not-found, two idle-backoff, two
// held-records budget, one damage, one lag, one quarantine, one memory
// measurement, six emulation tests, one of discovery through leases, two
// from the coordination table's review, two from the review of session
// 15, four more of the incarnation (HB6, session 19: the owner test of
// session 15, in two lease modes, is one of its five), three under AWS's transaction conflicts, one
// of a checkpoint fenced by a migration and two of the share-bounded
// pass, one of
// its review's R5, six of the worker heartbeat, three of the review of
// session 17 (discovery), four of the review of the late heartbeat
// (session 17: review_s17hb_*_test.go), six of the review of session
// 19 (review_s19_test.go), three of the review of HB6 (session 19:
// review_s19hb6_test.go), one of its follow-up HB6-L1
// (review_s19hb6left_test.go), two of the S17-D3 and S17-D4 fixes (session 19:
// review_s19_d34_test.go), the share review's R2 (no longer gated), those
// of the review of session 20 (review_s20_test.go: three), a joiner's
// takes before its first listing (joiner_test.go: one) and their review
// (review_s20_joiner_test.go: three, J1's two cases each), the offer watch
// (offerwatch_test.go: one) and its review (review_s21_watch_test.go:
// three), the review of offerLeft (review_s22_offerleft_test.go: three),
// the drains while shards keep closing (emu_drain_test.go: two), the
// fleet's paced coordination writes (pace_test.go: one) and its review
// (review_s23_pace_test.go: two), a trim met after a position the
// checkpoint passed (trim_s23_test.go: one) and its review's second trim
// (review_s23_trim_test.go: one), the review of the drain's promise
// (review_s23_drain_test.go: two, one skipped as a finding), a drain that
// found a shard gone unfinished (drainloss_test.go: one), the givers'
// overshoot (overshoot_test.go: one) and its review
// (review_s23_overshoot_test.go: one), a commit meeting a hold as long
// as a loaded DynamoDB Local's answer (conflict_emu_test.go: two), and
// four to spare. A test that
// gets a later table is slow enough for 3-second leases to expire, so an
// exhausted pool fails the test (ddbtest.Pool.Table).
var tables = ddbtest.Pool{Size: 130} // +1 review s28 K1 (review_s28_stopkids_test.go): a stop offers no child it could not register; +1 a stop offers the children of the shards it finished (stopkids_test.go); +1 review s28 W1 (review_s28_weight_test.go): a drain's first listing counts the fleet; +4 review s27 J1, J2, J3 (review_s27_join_test.go): a lister not granted by an older version's inherited acknowledgement; an acknowledgement holds its count until its removal landed, twice; a drain counts the fleet in its DescribeStream rate; +1 a rebase while the poller runs (rebase_test.go); +1 a store move raises the protocol (review_s25_readx_test.go); +2 review s25 ask (review_s25_ask_test.go, review_s25_askclear_test.go): a drain tells an owner again; +1 review s25 drain (review_s25_drain_test.go): empty pages counted across a reopen; +1 review s25 X4/F1 (review_s25_readx_test.go): a protocol-fenced shard is given up; +1 a joiner lists at the fleet's unused rate (joinlisting_test.go)

func newTableName(t testing.TB) string { return tables.Table(t) }

// env is a real table on DynamoDB Local and a scripted stream in front of
// the poller: the poller's shard logic reads the fake, its commits, leases
// and checkpoints go to the real table.
type env struct {
	ddb    *dynamodb.Client
	table  string
	stream *fakeStream
	rec    *recorder
	w      *ledgertest.Workload
}

func newEnv(t testing.TB, seed uint64) *env {
	t.Helper()
	e := &env{ddb: ddbtest.Client(t), table: newTableName(t), w: ledgertest.NewWorkload(seed)}
	e.stream = newFakeStream("arn:aws:dynamodb:us-east-1:000000000000:table/" + e.table + "/stream/2026-01-01T00:00:00.000")
	e.rec = &recorder{api: e.ddb}
	return e
}

// write runs n workload steps against the table and returns the stream
// records they produced.
func (e *env) write(t testing.TB, n int) []st.Record {
	t.Helper()
	require.NoError(t, e.w.Run(context.Background(), e.rec, e.table, n))
	return e.rec.take()
}

// logSink collects a poller's JSON log lines.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) lines() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.buf.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// testPoller is one poller instance of a test.
type testPoller struct {
	*poller.Poller
	reg  *prometheus.Registry
	pm   *processor.Metrics
	m    *poller.Metrics
	logs *logSink
}

// fastConfig shortens every interval so tests run in seconds.
func fastConfig(table, arn, owner string) poller.Config {
	return poller.Config{
		Table: table, StreamARN: arn, Owner: owner,
		MinReadInterval: time.Millisecond, IdleBackoff: 20 * time.Millisecond,
		ThrottleBackoff: time.Millisecond, MaxThrottleBackoff: 10 * time.Millisecond,
		LeaseDuration: 3 * time.Second, DiscoverInterval: 100 * time.Millisecond,
		CheckpointInterval: 100 * time.Millisecond, ShutdownTimeout: 10 * time.Second,
		BatchWindow: 30 * time.Millisecond, // pages are gathered, as in production (default 1s)
		// DescribeStream unpaced: the scripted streams have no rate, and
		// listings of many small pages stay instant; the tests of the
		// pacing set it back (discovery_rate_test.go).
		DescribeRate: poller.DescribeRateSetting.Max,
		// Coordination writes unpaced for the same reason: the tests of
		// the pacing set it back (pace_test.go).
		CoordinationWriteRate: poller.CoordinationWriteRateSetting.Max,
	}
}

func (e *env) poller(t *testing.T, owner string, streams poller.Streams, api *dynamodb.Client, mutate func(*poller.Config)) *testPoller {
	t.Helper()
	return e.pollerWith(t, owner, streams, api, processor.Config{}, mutate)
}

// pollerWith is poller with the processor's limits of pc (its table is
// the env's, and so are its backoffs unless pc sets them).
func (e *env) pollerWith(t testing.TB, owner string, streams poller.Streams, api *dynamodb.Client, pc processor.Config, mutate func(*poller.Config)) *testPoller {
	t.Helper()
	if streams == nil {
		streams = e.stream.client(owner)
	}
	if api == nil {
		api = e.ddb
	}
	tp := &testPoller{reg: prometheus.NewRegistry(), logs: &logSink{}}
	tp.pm = processor.NewMetrics(tp.reg)
	tp.m = poller.NewMetrics(tp.reg)
	pc.Table = e.table
	if pc.BaseBackoff == 0 && pc.MaxBackoff == 0 { // the tests' backoffs unless the caller sets its own
		pc.BaseBackoff, pc.MaxBackoff = time.Millisecond, 20*time.Millisecond
	}
	proc, err := processor.New(api, pc, tp.pm)
	require.NoError(t, err)
	cfg := fastConfig(e.table, e.stream.arn, owner)
	cfg.Logger = slog.New(slog.NewJSONHandler(tp.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if mutate != nil {
		mutate(&cfg)
	}
	tp.Poller, err = poller.New(streams, api, proc, cfg, tp.m)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", owner, tp.logs)
		}
	})
	return tp
}

// drain runs a drain poller to completion.
func (e *env) drain(t *testing.T, owner string, mutate func(*poller.Config)) *testPoller {
	t.Helper()
	tp, err := e.drainLoss(t, owner, mutate)
	require.NoError(t, err)
	return tp
}

// drainLoss is drain for a drain that may report records it could not
// commit: it returns Run's error (a *poller.DrainLossError, or nil) and
// fails the test only when the drain did not exit.
func (e *env) drainLoss(t *testing.T, owner string, mutate func(*poller.Config)) (*testPoller, error) {
	t.Helper()
	tp := e.poller(t, owner, nil, nil, func(c *poller.Config) {
		c.Drain = true
		if mutate != nil {
			mutate(c)
		}
	})
	// A liveness bound, not a timing: Run returns nil when its context
	// ends, so a drain that did not exit is named as such, not left to
	// show as reconcile differences (seen at load 40).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := tp.Run(ctx)
	require.NoError(t, ctx.Err(), "the drain did not exit")
	return tp, err
}

// requireDrainLost requires err to be a drain's DrainLossError
// (errors.Is ErrDrainLost) whose trims are all on the shards named, each
// met at least once, and that names every one in its message.
func requireDrainLost(t *testing.T, err error, shards ...string) *poller.DrainLossError {
	t.Helper()
	require.ErrorIs(t, err, poller.ErrDrainLost)
	var lost *poller.DrainLossError
	require.ErrorAs(t, err, &lost)
	met := map[string]bool{}
	for _, tr := range lost.Trims {
		met[tr.Shard] = true
	}
	want := map[string]bool{}
	for _, s := range shards {
		want[s] = true
		assert.Contains(t, err.Error(), s, "the error names the shard")
	}
	assert.Equal(t, want, met, "the shards the drain met trims on: %v", err)
	assert.Contains(t, err.Error(), "ledgerctl reconcile --repair")
	return lost
}

// start runs p in the background; the returned stop cancels it and waits.
func start(t testing.TB, p *testPoller) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(2 * time.Minute): // a liveness bound: a stop hands leases over, writes a loaded table may take seconds each
				t.Fatal("poller did not stop within 2m")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func (e *env) requireReconciled(t testing.TB) {
	t.Helper()
	diffs, stats, err := processor.Reconcile(context.Background(), e.ddb, e.table, processor.Scope{})
	require.NoError(t, err)
	for _, d := range diffs {
		t.Errorf("reconcile difference: %s", d)
	}
	require.NotZero(t, stats.Reports, "no reports at all")
}

func counter(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

// recordsApplied is the sum of ledger_records_total over all labels.
func recordsTotal(t *testing.T, pm *processor.Metrics, outcome string) float64 {
	t.Helper()
	sum := 0.0
	for _, ev := range []string{"INSERT", "MODIFY", "REMOVE", "UNKNOWN"} {
		sum += testutil.ToFloat64(pm.Records.WithLabelValues(ev, outcome))
	}
	return sum
}

// interval is one reader's life on a shard, from the logs.
type interval struct {
	owner, shard string
	from, to     time.Time
}

// readerIntervals pairs "shard reader started/stopped" lines per owner and
// shard; a reader still running (or killed) ends at end.
func readerIntervals(t *testing.T, lines []map[string]any, end time.Time) []interval {
	t.Helper()
	open := map[string]*interval{}
	var out []interval
	for _, l := range lines {
		msg, _ := l["msg"].(string)
		owner, _ := l["owner"].(string)
		shard, _ := l["shard"].(string)
		ts, err := time.Parse(time.RFC3339Nano, l["time"].(string))
		require.NoError(t, err)
		k := owner + "|" + shard
		switch msg {
		case "shard reader started":
			open[k] = &interval{owner: owner, shard: shard, from: ts}
		case "shard reader stopped":
			if iv := open[k]; iv != nil {
				iv.to = ts
				out = append(out, *iv)
				delete(open, k)
			}
		}
	}
	for _, iv := range open {
		iv.to = end
		out = append(out, *iv)
	}
	return out
}

// requireNoOverlap fails when two owners' readers of one shard overlap.
func requireNoOverlap(t *testing.T, ivs []interval) {
	t.Helper()
	by := map[string][]interval{}
	for _, iv := range ivs {
		by[iv.shard] = append(by[iv.shard], iv)
	}
	for shard, list := range by {
		sort.Slice(list, func(i, j int) bool { return list[i].from.Before(list[j].from) })
		for i := 1; i < len(list); i++ {
			prev, cur := list[i-1], list[i]
			if cur.from.Before(prev.to) && cur.owner != prev.owner {
				t.Errorf("shard %s read by %s from %s while %s read it until %s", shard, cur.owner,
					cur.from.Format("15:04:05.000"), prev.owner, prev.to.Format("15:04:05.000"))
			}
		}
	}
}

// chaosClient returns a DynamoDB client whose every call fails once dead
// is set, as if its process had died or lost the network.
func chaosClient(t *testing.T, dead func() bool) *dynamodb.Client {
	t.Helper()
	return faultClient(t, func(string) ledgertest.Fault {
		if dead() {
			return ledgertest.Drop
		}
		return ledgertest.Pass
	})
}

// faultClient returns a DynamoDB client (no SDK retries) whose calls decide
// says what to do with, by operation.
func faultClient(t *testing.T, decide func(op string) ledgertest.Fault) *dynamodb.Client {
	t.Helper()
	ft := &ledgertest.FaultTransport{Decide: decide}
	cfg := ddbtest.Config(t, infra.WithTransportWrapper(func(next http.RoundTripper) http.RoundTripper {
		ft.Next = next
		return ft
	}))
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
}

// deadStreams fails every call once dead says so.
type deadStreams struct {
	poller.Streams
	dead func() bool
}

var errDead = &st.InternalServerError{Message: new(string)}

func (d deadStreams) check() error {
	if d.dead() {
		return errDead
	}
	return nil
}

func eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func logged(lines []map[string]any, msg string) int {
	n := 0
	for _, l := range lines {
		if m, _ := l["msg"].(string); strings.HasPrefix(m, msg) {
			n++
		}
	}
	return n
}

func (d deadStreams) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	return d.Streams.DescribeStream(ctx, in, opts...)
}

func (d deadStreams) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	return d.Streams.GetShardIterator(ctx, in, opts...)
}

func (d deadStreams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	return d.Streams.GetRecords(ctx, in, opts...)
}
