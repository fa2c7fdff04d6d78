package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

// The poller's batching window at a steady write rate: for each window,
// workload b's changes are written at a steady rate to a fresh table while
// one poller with that window (and otherwise its defaults) keeps the
// reports; the row shows the write cost per 1,000 changes (AWS billing,
// the meter) and the write → commit lag, and the reports are checked
// against the table afterwards. A measurement, not part of `go test`: it
// runs only when LEDGER_BENCH_WINDOWS lists the windows (0: none), e.g.
//
//	LEDGER_BENCH_WINDOWS=0,1s LEDGER_BENCH_RATE=16 LEDGER_BENCH_SECONDS=30 \
//	  go test -count=1 -run PollerWindow -v ./bench/
func TestPollerWindow_SteadyRateCostAndLag(t *testing.T) {
	spec := os.Getenv("LEDGER_BENCH_WINDOWS")
	if spec == "" {
		t.Skip("a measurement: set LEDGER_BENCH_WINDOWS (e.g. 0,1s) to run it")
	}
	var windows []time.Duration
	for _, s := range strings.Split(spec, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		require.NoError(t, err, "LEDGER_BENCH_WINDOWS")
		windows = append(windows, d)
	}
	rate, secs := envPositive(t, "LEDGER_BENCH_RATE", 16), envPositive(t, "LEDGER_BENCH_SECONDS", 30)
	ctx := context.Background()
	r := &runner{cfg: Config{DynamoDBLocalDir: os.Getenv("LEDGER_DYNAMODB_LOCAL_DIR")}, res: &Result{}}
	defer r.close()
	tables := make([]string, len(windows))
	for i := range windows {
		tables[i] = "window-" + strconv.Itoa(i)
	}
	db, streams, stop, err := r.instance(ctx, tables...) // every table before any data
	require.NoError(t, err)
	defer stop()
	ops := WorkloadB.Generate(rate*secs, 17)

	var out strings.Builder
	fmt.Fprintf(&out, "\n| window | changes | measured | TransactWriteItems | write requests / 1k changes | item writes / 1k changes | floor: distinct report items per window / 1k changes | WCU / 1k changes | p50 | p99 | kept up |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for i, w := range windows {
		arn, err := poller.ResolveStream(ctx, db, tables[i])
		require.NoError(t, err)
		clock := newLagClock()
		m := NewMeter(db)
		proc, err := processor.New(commitHook{Meter: m, clock: clock}, processor.Config{Table: tables[i]}, nil)
		require.NoError(t, err)
		window := w
		if w == 0 {
			window = -1 // no window
		}
		p, err := poller.New(newStreamHook(streams, arn, "", false, clock), m, proc, poller.Config{
			Table: tables[i], StreamARN: arn, Owner: "window", BatchWindow: window, Logger: discard,
		}, nil)
		require.NoError(t, err)
		pctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Run(pctx) }()
		time.Sleep(time.Second) // the poller reaches the empty stream's end

		expected := withEffect(ops)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		for _, op := range ops {
			<-tick.C
			require.NoError(t, Put(ctx, db, tables[i], op, time.Now()))
		}
		tick.Stop()
		deadline := time.Now().Add(30 * time.Second)
		for n, _, _ := clock.percentiles(); n < expected && time.Now().Before(deadline); n, _, _ = clock.percentiles() {
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		require.NoError(t, <-done)
		n, p50, p99 := clock.percentiles()
		cost := m.Cost()
		require.NoError(t, m.Err())
		require.NoError(t, m.Check(ctx, tables[i]), "reports exact afterwards")
		label := w.String()
		if w == 0 {
			label = "none"
		}
		floor := "—"
		if w > 0 {
			floor = fmt.Sprintf("%.0f", per1000(float64(distinctPerWindow(ops, int(float64(rate)*w.Seconds()+0.5))), len(ops)))
		}
		fmt.Fprintf(&out, "| %s | %d | %d | %d | %.0f | %.0f | %s | %.0f | %.0f ms | %.0f ms | %v |\n", label, len(ops), n, cost.Requests["TransactWriteItems"],
			per1000(float64(cost.Writes()), len(ops)), per1000(float64(cost.ItemWrites), len(ops)), floor, per1000(float64(cost.Units), len(ops)),
			p50*1000, p99*1000, n >= expected)
	}
	t.Logf("poller at %d changes/s of workload b for %ds per window:%s", rate, secs, out.String())
}

// distinctPerWindow is the least number of report item writes for ops
// committed in windows of size changes each: the distinct report items of
// each window, summed.
func distinctPerWindow(ops []Op, size int) int {
	n := 0
	for i := 0; i < len(ops); i += max(size, 1) {
		f := aggregates.NewFold()
		for _, op := range ops[i:min(i+max(size, 1), len(ops))] {
			f.AddChange(txOf(op.Old), txOf(op.New))
		}
		n += len(f.Keys())
	}
	return n
}

func envPositive(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}
