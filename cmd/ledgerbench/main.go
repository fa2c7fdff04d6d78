// Command ledgerbench runs the side-by-side benchmark of BENCHMARKS.md
// (package bench): ledger's consumers next to the per-record and
// synchronous designs users would otherwise pick. It is a developer's
// tool, kept out of the operator's binary (ledgerctl) so that no product
// binary links the benchmark, its rival designs or package testing.
//
//	make bench            # the full run (over an hour on 2 cores)
//	make bench-quick      # every measurement on small workloads (CI smoke)
//	make bench-reconcile  # ledgerbench reconcile-curve: reconcile's memory and time up to 1,000,000 transactions, on dynalite
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ledger-dev/ledger/bench"
	"github.com/ledger-dev/ledger/bench/charts"
	"github.com/ledger-dev/ledger/cmd/internal/progress"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses: 0 the run completed, 2 bad usage or a failed measurement.
const (
	exitOK    = 0
	exitError = 2
)

const help = `usage: ledgerbench [flags]
       ledgerbench reconcile-curve [flags]   (-h for its own)
       ledgerbench fleet [flags]   (issue 23's fleet benchmark: ledgerbench fleet -h)
       ledgerbench rollups [flags] (issue 24's roll-up cost on the real consumers: ledgerbench rollups -h)

Runs issue 6's benchmark and prints its tables as markdown on stdout
(progress on stderr): the project's consumer (the poller, and the Lambda
handler fed the same batches) next to the approaches users would otherwise
pick (per-record updates as seed 003 writes them, the same with Powertools-
style idempotency markers, and seed 003's synchronous createWithReport), on
workloads a-e, at batch sizes 100 and 1,000 (the Lambda handler in standard
mode and in tumbling-window mode): write requests and write units
per 1,000 changes (AWS billing rules, cross-checked against DynamoDB
Local's ConsumedCapacity), end-to-end throughput against the raw stream
drain rate and DynamoDB Local's own item-write rate measured in the same
run, exactness under 1% duplicate delivery (reconcile), lag at a
steady rate, CPU-only decoding and folding, and the poller binary's peak
memory draining a 1,000,000-record backlog, then ledgerctl reconcile's
over the drained table (-skip backlogs,lag,cpu,periods,rebucket measures
that alone).

Issue 22's business calendars: the poller's write units per 1,000 changes
on workload b with its transactions stamped in America/Sao_Paulo's
calendar with 3, 5 and 7 period types (and unstamped), side by side
(-periods CHANGES), and rebucket moving a history from the default calendar
with 3 types into that calendar with 7: its throughput and write units per
transaction, its own and those of the poller's commits of the moves
(-rebucket TRANSACTIONS). They alone:

  ledgerbench -skip backlogs,lag,cpu,writerate -backlog 0

With -json FILE it also writes the results as JSON, and with -charts DIR
it draws BENCHMARKS.md's charts (write units per 1,000 changes by approach
and workload, throughput against the raw drain, lag) as SVG files; -from
FILE -charts DIR draws them from a results file without measuring.

It starts its own DynamoDB Local instances (infra/ddblocal; run 'make deps'
once) and ignores LEDGER_TABLE and AWS_ENDPOINT_URL. BENCHMARKS.md explains
the numbers. A full run takes over an hour on 2 cores; -quick runs every
measurement on small workloads in well under a minute (CI smoke).
`

// Run runs ledgerbench with args (without the program name) and returns
// its exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "ledgerbench: %v\n", err)
		return exitError
	}
	if len(args) > 0 && args[0] == "reconcile-curve" {
		return reconcileCurve(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "fleet" {
		return runFleet(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "rollups" {
		return runRollups(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("ledgerbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, help+"\n")
		fs.PrintDefaults()
	}
	quick := fs.Bool("quick", false, "small workloads, no memory backlog: under a minute")
	out := fs.String("o", "", "also write the markdown to `FILE`")
	jsonOut := fs.String("json", "", "also write the results as JSON to `FILE` (what -from reads)")
	chartDir := fs.String("charts", "", "also draw the headline comparisons as SVG charts into `DIR`")
	from := fs.String("from", "", "measure nothing: read the results `FILE` a run wrote with -json and draw its charts (-charts DIR)")
	poller := fs.String("poller", "", "a built cmd/poller `BINARY` for the memory measurement (default: go build one)")
	ledgerctl := fs.String("ledgerctl", "", "a built cmd/ledgerctl `BINARY` for the memory measurement's reconcile (default: go build one)")
	backlog := fs.Int("backlog", -1, "`RECORDS` in the memory measurement's backlog (default 1,000,000 in a full run; 0 skips it)")
	only := fs.String("only", "", "measure only these approaches' backlogs: `LIST` of perrecord, marker, sync, poller, lambda, lambda-tumbling")
	skip := fs.String("skip", "", "leave out these measurements: `LIST` of backlogs (every approach's), lag, cpu, writerate, periods, rebucket")
	window := fs.Int("tumbling-window", 0, "the tumbling Lambda's TumblingWindowInSeconds, `SECONDS` (default 60; 5 with -quick)")
	workloads := fs.String("workloads", "", "measure only these workloads' backlogs: `LIST` of a, b, c, d, e")
	periods := fs.Int("periods", -1, "`CHANGES` of workload b in the period-types measurement (default 10,000 in a full run, 120 with -quick; 0 skips it)")
	rebucketN := fs.Int("rebucket", -1, "`TRANSACTIONS` the rebucket measurement moves (default 10,000 in a full run, 100 with -quick; 0 skips it)")
	calendarBatches := fs.String("calendar-batches", "", "the poller's batch sizes in the period-types and rebucket measurements: `LIST` of numbers (default 10000, the poller's default)")
	reconcileParallel := fs.Int("reconcile-parallel", 0, "run the memory measurement's reconcile as ledgerctl reconcile --parallel `N` (default: ledgerctl's default)")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if *from != "" {
		if *chartDir == "" {
			return fail(fmt.Errorf("-from needs -charts DIR"))
		}
		res, err := bench.ReadResultFile(*from)
		if err != nil {
			return fail(err)
		}
		if err := drawCharts(res, *chartDir, stderr); err != nil {
			return fail(err)
		}
		return exitOK
	}
	cfg := bench.Full()
	if *quick {
		cfg = bench.Quick()
	}
	if *backlog >= 0 {
		cfg.Backlog = *backlog
	}
	if *periods >= 0 {
		cfg.PeriodChanges = *periods
	}
	if *rebucketN >= 0 {
		cfg.RebucketTransactions = *rebucketN
	}
	if *calendarBatches != "" {
		var batches []int
		for _, f := range strings.Split(*calendarBatches, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fail(fmt.Errorf("-calendar-batches: %q is not a batch size", f))
			}
			batches = append(batches, n)
		}
		cfg.PeriodBatches, cfg.RebucketBatches = batches, batches
	}
	if *only != "" {
		for _, id := range strings.Split(*only, ",") {
			a, ok := bench.ApproachByID(strings.TrimSpace(id))
			if !ok {
				return fail(fmt.Errorf("-only: unknown approach %q (perrecord, marker, sync, poller, lambda, lambda-tumbling)", id))
			}
			cfg.Only = append(cfg.Only, a)
		}
	}
	if *workloads != "" {
		var keep []bench.WorkloadRun
		for _, name := range strings.Split(*workloads, ",") {
			i := slices.IndexFunc(cfg.Workloads, func(w bench.WorkloadRun) bool { return w.Spec.Name == strings.TrimSpace(name) })
			if i < 0 {
				return fail(fmt.Errorf("-workloads: unknown workload %q (a, b, c, d, e)", name))
			}
			keep = append(keep, cfg.Workloads[i])
		}
		cfg.Workloads = keep
	}
	for _, m := range strings.Split(*skip, ",") {
		switch strings.TrimSpace(m) {
		case "":
		case "backlogs":
			cfg.SkipBacklogs = true
		case "lag":
			cfg.SkipLag = true
		case "cpu":
			cfg.SkipCPU = true
		case "writerate":
			cfg.WriteRateTime = 0
		case "periods":
			cfg.PeriodChanges = 0
		case "rebucket":
			cfg.RebucketTransactions = 0
		default:
			return fail(fmt.Errorf("-skip: unknown measurement %q (backlogs, lag, cpu, writerate, periods, rebucket)", m))
		}
	}
	switch {
	case *window < 0 || *window > 900:
		return fail(fmt.Errorf("-tumbling-window %d: want 1 to 900 seconds (the mapping's range)", *window))
	case *window > 0:
		cfg.TumblingWindow = time.Duration(*window) * time.Second
	}
	cfg.PollerBinary = *poller
	cfg.LedgerctlBinary = *ledgerctl
	if *reconcileParallel < 0 {
		return fail(fmt.Errorf("-reconcile-parallel: %d is not a number of segments", *reconcileParallel))
	}
	cfg.ReconcileParallel = *reconcileParallel
	cfg.Command = strings.Join(append([]string{"ledgerbench"}, args...), " ")
	meter := progress.New("bench", stderr, os.Getenv)
	cfg.Log = &benchLog{m: meter}
	res, err := bench.Run(ctx, cfg)
	meter.Stop()
	if res != nil {
		// Print what was measured, even when a later measurement failed.
		md := res.String()
		fmt.Fprint(stdout, md)
		if *out != "" {
			if werr := os.WriteFile(*out, []byte(md), 0o644); werr != nil && err == nil {
				err = werr
			}
		}
		if *jsonOut != "" {
			if werr := writeJSON(*jsonOut, res); werr != nil && err == nil {
				err = werr
			}
		}
		if *chartDir != "" && err == nil {
			err = drawCharts(res, *chartDir, stderr)
		}
	}
	if err != nil {
		return fail(err)
	}
	return exitOK
}

const reconcileCurveHelp = `usage: ledgerbench reconcile-curve [flags]

Issue 25's curve: the peak resident set size and wall time of
'ledgerctl reconcile --json' (read-only) over tables of each -sizes
transactions, one table at a time, each in its own dynalite (a DynamoDB
implementation that keeps its tables in LevelDB on disk: DynamoDB Local
cannot serve a Scan or Query of a million items, BENCHMARKS.md). Each table
holds transactions of workload b's shape (50 branches, 90 days, seeded)
loaded with BatchWriteItem, their reports exact but for four planted
differences (a count one too high, a report item missing, a report of a
day without transactions, a stray item); reconcile must name exactly those
four. Peak RSS is the ledgerctl child's own (rusage), not this process's.

dynalite is pinned in infra/dynalite (package-lock.json): run
'npm ci --prefix infra/dynalite' or 'make bench-reconcile'. Prints a
markdown table on stdout, progress on stderr.
`

// reconcileCurve runs `ledgerbench reconcile-curve`.
func reconcileCurve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, fail := subcommand("reconcile-curve", reconcileCurveHelp, stderr)
	sizes := fs.String("sizes", "100000,200000,500000,1000000", "the tables' sizes: `LIST` of transaction counts, measured in this order")
	seed := fs.Uint64("seed", 25, "the workload's `SEED`")
	dynaliteDir := fs.String("dynalite", "infra/dynalite", "`DIR` where dynalite is installed (npm ci --prefix DIR)")
	dataDir := fs.String("data", "", "keep each table's LevelDB in `DIR`/<size> and reuse a finished load of the same size and seed (default: a temporary directory, removed)")
	ledgerctl := fs.String("ledgerctl", "", "the built cmd/ledgerctl `BINARY` to measure (default: go build one)")
	parallel := fs.Int("parallel", 0, "ledgerctl reconcile --parallel `N` (default: ledgerctl's default)")
	workers := fs.Int("load-workers", 8, "BatchWriteItem calls in flight while loading, `N`")
	out := fs.String("o", "", "also write the markdown to `FILE`")
	jsonOut := fs.String("json", "", "also write the points as JSON to `FILE`")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	cfg := bench.ReconcileCurveConfig{Seed: *seed, DynaliteDir: *dynaliteDir, DataDir: *dataDir, LedgerctlBinary: *ledgerctl,
		Parallel: *parallel, Workers: *workers, Log: stderr}
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fail(fmt.Errorf("-sizes: %q is not a number of transactions", f))
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	if *parallel < 0 || *parallel > 64 {
		return fail(fmt.Errorf("-parallel %d: want 1 to 64", *parallel))
	}
	if *workers < 1 {
		return fail(fmt.Errorf("-load-workers %d: want at least 1", *workers))
	}
	started := time.Now()
	points, err := bench.ReconcileCurve(ctx, cfg)
	var md strings.Builder
	fmt.Fprintf(&md, "Command: `%s`.  \nRun took %s.\n\n", strings.Join(append([]string{"ledgerbench", "reconcile-curve"}, args...), " "),
		time.Since(started).Round(time.Second))
	bench.WriteReconcileCurve(&md, points)
	fmt.Fprint(stdout, md.String())
	if *out != "" {
		if werr := os.WriteFile(*out, []byte(md.String()), 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	if *jsonOut != "" {
		b, jerr := json.MarshalIndent(points, "", "  ")
		if jerr == nil {
			jerr = os.WriteFile(*jsonOut, b, 0o644)
		}
		if jerr != nil && err == nil {
			err = jerr
		}
	}
	if err != nil {
		return fail(err)
	}
	for _, p := range points {
		if !p.Exact {
			return fail(fmt.Errorf("at %d transactions reconcile found %v; want exactly the planted %v", p.Transactions, p.Found, p.Seeded))
		}
	}
	return exitOK
}

// drawCharts renders res's charts into dir and names them on log.
func drawCharts(res *bench.Result, dir string, log io.Writer) error {
	paths, err := charts.Render(res, dir)
	for _, p := range paths {
		fmt.Fprintf(log, "ledgerbench: wrote %s\n", p)
	}
	return err
}

// writeJSON writes res to path as JSON.
func writeJSON(path string, res *bench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := res.WriteJSON(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// benchLog passes the bench's log lines to the progress meter (above its
// line on a terminal, as they are otherwise) and moves it along the
// "[i/n]" of each measurement's first line.
type benchLog struct {
	mu          sync.Mutex
	m           progress.Meter
	done, total int64
	status      string
}

func (l *benchLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.m.Write(p) // first: a plain meter then prints no line of its own
	if _, msg, ok := strings.Cut(strings.TrimRight(string(p), "\n"), " bench: "); ok && !strings.HasPrefix(msg, " ") {
		var i, total int64
		if _, serr := fmt.Sscanf(msg, "[%d/%d]", &i, &total); serr == nil {
			l.done, l.total = i-1, total
		}
		l.status = msg
	}
	l.m.Set(l.done, l.total, l.status)
	return n, err
}

// subcommand returns the flag set of `ledgerbench name`, whose usage prints
// help and the flags, and fail, which prints an error under the
// subcommand's name and returns exitError.
func subcommand(name, help string, stderr io.Writer) (fs *flag.FlagSet, fail func(error) int) {
	fail = func(err error) int {
		fmt.Fprintf(stderr, "ledgerbench %s: %v\n", name, err)
		return exitError
	}
	fs = flag.NewFlagSet("ledgerbench "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, help+"\n")
		fs.PrintDefaults()
	}
	return fs, fail
}

// writeJSONFile writes v as indented JSON to path; "" writes nothing.
func writeJSONFile(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
