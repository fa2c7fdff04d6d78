package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// WorkloadRun is a workload and how many changes of it a run writes.
type WorkloadRun struct {
	Spec    WorkloadSpec
	Changes int
}

// Config configures a benchmark run. Full and Quick return the two
// documented ones.
type Config struct {
	Quick      bool
	Seed       uint64
	Workloads  []WorkloadRun
	BatchSizes []int
	// PollerBatches are further batch sizes for the poller alone, above
	// GetRecords' 1,000: pages of 1,000 folded into one batch while behind
	// (poller.Config.BatchRecords).
	PollerBatches []int
	// TumblingWindow is the tumbling Lambda's TumblingWindowInSeconds,
	// whole seconds (LedgerTumbling; 0: DefaultTumblingWindow).
	TumblingWindow time.Duration
	// WriteRateTime is how long each measurement of DynamoDB Local's own
	// item-write rate runs (0: skipped); WriteRateWorkers is the larger
	// number of concurrent writers it measures besides one (0: 4).
	WriteRateTime    time.Duration
	WriteRateWorkers int
	// LagSeconds is how long each approach is fed at the steady rate;
	// LagRate is that rate in changes per second (0: half the slowest
	// approach's backlog throughput on workload b, between 2 and 50).
	LagSeconds int
	LagRate    int
	// CPURecords is how many recorded records the CPU benchmark decodes
	// and folds per iteration; CPUTime bounds each benchmark's duration.
	CPURecords int
	CPUTime    time.Duration
	// Backlog is the size of the backlog the poller binary drains for the
	// memory figure (0: skipped).
	Backlog int
	// PollerBinary is a built cmd/poller; empty builds one with `go build`.
	PollerBinary string
	// LedgerctlBinary is a built cmd/ledgerctl for the memory
	// measurement's reconcile; empty builds one with `go build`.
	LedgerctlBinary string
	// ReconcileParallel is the memory measurement's `ledgerctl reconcile
	// --parallel` (0: ledgerctl's default).
	ReconcileParallel int
	// FreshInstances starts a DynamoDB Local per measured approach and
	// workload; otherwise one instance serves everything, its tables all
	// created before any data is written.
	FreshInstances bool
	// DynamoDBLocalDir is passed to ddblocal.Start (empty: its default).
	DynamoDBLocalDir string
	// Only, when set, limits the backlog measurements to these approaches.
	Only []Approach
	// PeriodChanges is how many changes of workload b the period-types
	// measurement (issue 22) writes: its transactions stamped in
	// BenchCalendar with 3, 5 and 7 period types, and not stamped, each
	// consumed by ledger's poller (0: skipped). PeriodBatches are the
	// poller's batch sizes there (nil: its default, 10,000).
	PeriodChanges int
	PeriodBatches []int
	// RebucketTransactions is how many transactions the rebucket
	// measurement (issue 22) moves from the default calendar with 3 period
	// types into BenchCalendar with 7 (0: skipped); RebucketBatches are
	// the batch sizes of the poller that then drains the moves (nil:
	// 10,000), one rebucket each.
	RebucketTransactions int
	RebucketBatches      []int
	// SkipBacklogs, SkipLag and SkipCPU leave those measurements out
	// (SkipBacklogs: every approach's backlog, for the memory measurement
	// alone).
	SkipBacklogs, SkipLag, SkipCPU bool
	// Command is how the run was started, for the report.
	Command string
	// Log receives progress lines (nil: discarded).
	Log io.Writer `json:"-"`
}

// DefaultTumblingWindow is the tumbling Lambda's window in a full run.
const DefaultTumblingWindow = 60 * time.Second

// Full is the configuration of `make bench`.
func Full() Config {
	return Config{
		Seed: 6,
		Workloads: []WorkloadRun{
			{WorkloadA, 3000}, {WorkloadB, 10000}, {WorkloadC, 3000}, {WorkloadD, 3000}, {WorkloadE, 10000},
		},
		BatchSizes:     []int{100, 1000},
		PollerBatches:  []int{10000},
		TumblingWindow: DefaultTumblingWindow,
		WriteRateTime:  3 * time.Second,
		LagSeconds:     30,
		CPURecords:     100_000,
		CPUTime:        3 * time.Second,
		Backlog:        1_000_000,
		FreshInstances: true,
		// Issue 22: workload b at the poller's default batch; rebucket.
		PeriodChanges:        10000,
		RebucketTransactions: 10000,
	}
}

// Quick is the configuration of `make bench-quick`: every measurement on
// small workloads, in well under a minute, for CI.
func Quick() Config {
	return Config{
		Quick: true,
		Seed:  6,
		Workloads: []WorkloadRun{
			{WorkloadA, 20}, {WorkloadB, 120}, {WorkloadC, 20}, {WorkloadD, 20}, {WorkloadE, 120},
		},
		BatchSizes:    []int{100, 1000},
		PollerBatches: []int{10000},
		// A short window, so that the lag measurement does not wait for a
		// minute's window to close (DynamoDB Local stamps records to the
		// minute: a 5 s window has ended before most of its records are
		// read, and is committed at once).
		TumblingWindow:       5 * time.Second,
		WriteRateTime:        time.Second,
		LagSeconds:           1,
		LagRate:              10,
		CPURecords:           10_000,
		CPUTime:              200 * time.Millisecond,
		PeriodChanges:        120,
		RebucketTransactions: 100,
	}
}

// Row is one approach on one workload at one batch size.
type Row struct {
	Workload string
	Approach Approach
	Batch    int // 0 when the approach does not depend on it
	Changes  int
	Cost     Cost
	// Baseline is, for approach 3, the WCU the writer's plain writes would
	// have cost (subtracted from its aggregation cost).
	Baseline    int
	Took        time.Duration
	RawRecords  int
	RawTook     time.Duration
	Delivered   int
	Redelivered int
	// Diffs is how many reports differ from the fold of the table's
	// transactions after the run (reconcile); TotalsOnly when only totals
	// and counts were compared (approach 3 keeps no breakdowns).
	Diffs      int
	Reports    int
	TotalsOnly bool
	// Sizes are the sizes of the report partitions' items after the run
	// (ledger's approaches only).
	Sizes *ItemSizes
}

// ItemSizes describes the items of the report partitions: report items and
// entry items, their counts and the p50, p99 and largest report item size
// in bytes (DynamoDB's rules).
type ItemSizes struct {
	ReportItems, EntryItems int
	P50, P99, Max           int
}

// itemSizes scans the report partitions of table.
func itemSizes(ctx context.Context, db *dynamodb.Client, table string) (*ItemSizes, error) {
	out := &ItemSizes{}
	var sizes []int
	p := dynamodb.NewScanPaginator(db, &dynamodb.ScanInput{TableName: &table})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, item := range page.Items {
			pk, _ := item[ledgertable.AttrPK].(*ddbtypes.AttributeValueMemberS)
			sk, _ := item[ledgertable.AttrSK].(*ddbtypes.AttributeValueMemberS)
			if pk == nil || sk == nil {
				continue
			}
			ref, err := aggregates.ParseReportItemKey(aggregates.Key{PK: pk.Value, SK: sk.Value})
			if err != nil || !strings.HasSuffix(pk.Value, "#REPORTING") {
				continue
			}
			switch ref.Kind {
			case aggregates.ReportHeader:
				out.ReportItems++
				sizes = append(sizes, ledgertable.ItemSize(item))
			case aggregates.ReportEntry:
				out.EntryItems++
			}
		}
	}
	if len(sizes) > 0 {
		slices.Sort(sizes)
		out.P50, out.P99, out.Max = sizes[len(sizes)/2], sizes[len(sizes)*99/100], sizes[len(sizes)-1]
	}
	return out, nil
}

func per1000(v float64, changes int) float64 { return v * 1000 / float64(changes) }

// AggregationUnits is the WCU of keeping the reports, per 1,000 changes.
func (r Row) AggregationUnits() float64 {
	return per1000(float64(r.Cost.Units-r.Baseline), r.Changes)
}

// Throughput is changes aggregated per second.
func (r Row) Throughput() float64 { return float64(r.Changes) / r.Took.Seconds() }

// RawRate is the raw drain rate of the same stream, records per second
// (0 without a stream).
func (r Row) RawRate() float64 {
	if r.RawTook <= 0 {
		return 0
	}
	return float64(r.RawRecords) / r.RawTook.Seconds()
}

// Result is everything a run measured.
type Result struct {
	Config  Config
	Machine Machine
	Rows    []Row
	Lag     []LagRow
	LagRate int
	// WriteRates are DynamoDB Local's own item-write rates, measured in
	// the run (measureWriteRates).
	WriteRates []WriteRate
	CPU        []CPURow
	// Periods and Rebucket are issue 22's measurements (calendar.go).
	Periods  []PeriodRow
	Rebucket []RebucketRow
	Memory   *MemoryResult
	Started  time.Time
	Duration time.Duration
	// Err is the error that ended an incomplete run.
	Err string
}

// Machine describes where the run happened.
type Machine struct {
	CPUs                   int
	MemoryGiB              float64
	GoVersion              string
	LoadBefore, LoadAfter  string
	DynamoDBLocal, Java    string
	Endpoint, Instructions string
}

// Run runs the benchmark. When a measurement fails it returns the error
// with the result so far (Result.Err says what is missing).
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	res = &Result{Config: cfg, Started: time.Now(), Machine: machine()}
	r := &runner{cfg: cfg, res: res}
	defer r.close()
	defer func() {
		res.Machine.LoadAfter = loadavg()
		res.Duration = time.Since(res.Started)
		if err != nil {
			res.Err = err.Error()
		}
	}()
	cells := r.cells()
	periodCells, err := r.periodCells()
	if err != nil {
		return res, err
	}
	if !cfg.FreshInstances {
		// One instance for everything: every table first, then the data
		// (DynamoDB Local slows down writes to stream tables created after
		// many stream records exist).
		var names []string
		for _, c := range cells {
			names = append(names, c.table())
		}
		for _, c := range periodCells {
			names = append(names, c.table())
		}
		for _, b := range r.rebucketBatches() {
			names = append(names, rebucketTable(b))
		}
		for _, a := range Approaches {
			names = append(names, lagTable(a))
		}
		names = append(names, writeRateTable)
		if _, _, _, err := r.instance(ctx, names...); err != nil {
			return res, err
		}
	}
	if cfg.WriteRateTime > 0 {
		if err := r.writeRates(ctx, "before"); err != nil {
			return res, err
		}
	}
	if err := r.backlogs(ctx, cells); err != nil {
		return res, err
	}
	if cfg.WriteRateTime > 0 {
		if err := r.writeRates(ctx, "after"); err != nil {
			return res, err
		}
	}
	if !cfg.SkipLag {
		if err := r.lag(ctx); err != nil {
			return res, err
		}
	}
	if !cfg.SkipCPU {
		if err := r.cpu(); err != nil {
			return res, err
		}
	}
	if err := r.periods(ctx, periodCells); err != nil {
		return res, err
	}
	if err := r.rebuckets(ctx); err != nil {
		return res, err
	}
	if cfg.Backlog > 0 {
		m, err := r.memory(ctx)
		if err != nil {
			return res, err
		}
		res.Memory = m
	}
	return res, nil
}

type runner struct {
	cfg      Config
	res      *Result
	shared   *ddblocal.Instance
	tables   map[string]bool
	recorded []byte // Lambda-JSON records of workload b, for the CPU benchmark
	recordN  int
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (r *runner) close() {
	if r.shared != nil {
		_ = r.shared.Stop()
	}
}

// instance returns a DynamoDB Local for tables: a fresh one (stopped by the
// returned func) or the shared one, on which every table of the run was
// created before any data.
func (r *runner) instance(ctx context.Context, tables ...string) (*dynamodb.Client, poller.Streams, func(), error) {
	start := func() (*ddblocal.Instance, error) {
		in, err := ddblocal.Start(ctx, ddblocal.Options{Dir: r.cfg.DynamoDBLocalDir})
		if err != nil {
			return nil, err
		}
		if r.res.Machine.DynamoDBLocal == "" {
			r.res.Machine.DynamoDBLocal, r.res.Machine.Java = dynamoDBLocalVersion(r.cfg.DynamoDBLocalDir)
		}
		return in, nil
	}
	var in *ddblocal.Instance
	stop := func() {}
	if r.cfg.FreshInstances || r.shared == nil {
		var err error
		if in, err = start(); err != nil {
			return nil, nil, nil, err
		}
		if r.cfg.FreshInstances {
			stop = func() { _ = in.Stop() }
		} else {
			r.shared = in
		}
	} else {
		in = r.shared
	}
	cfg, err := infra.LocalConfig(ctx, in.Endpoint)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	db := dynamodb.NewFromConfig(cfg)
	if r.tables == nil {
		r.tables = map[string]bool{}
	}
	for _, t := range tables {
		if r.tables[in.Endpoint+"/"+t] {
			continue
		}
		if err := ledgertable.CreateTables(ctx, db, t); err != nil {
			stop()
			return nil, nil, nil, err
		}
		r.tables[in.Endpoint+"/"+t] = true
	}
	return db, poller.NewStreamsClient(cfg), stop, nil
}

type cell struct {
	w     WorkloadRun
	a     Approach
	batch int
	ops   []Op
	// variant names a variant of the workload's items (the period types
	// they are stamped with, calendar.go): part of the table's name, ""
	// for the workload as generated.
	variant string
}

func (c cell) table() string {
	if c.variant != "" {
		return fmt.Sprintf("bench-%s-%s-%s-%d", c.w.Spec.Name, c.variant, c.a.id(), c.batch)
	}
	return fmt.Sprintf("bench-%s-%s-%d", c.w.Spec.Name, c.a.id(), c.batch)
}

func (r *runner) cells() []cell {
	if r.cfg.SkipBacklogs {
		return nil
	}
	var out []cell
	for _, w := range r.cfg.Workloads {
		ops := w.Spec.Generate(w.Changes, r.cfg.Seed)
		for _, a := range Approaches {
			if len(r.cfg.Only) > 0 && !slices.Contains(r.cfg.Only, a) || w.Spec.LedgerOnly && a.batchless() {
				continue
			}
			if a.batchless() {
				b := perRecordBatch
				if a == SyncTransaction {
					b = 0
				}
				out = append(out, cell{w: w, a: a, batch: b, ops: ops})
				continue
			}
			batches := r.cfg.BatchSizes
			if a == LedgerPoller {
				batches = append(slices.Clip(batches), r.cfg.PollerBatches...)
			}
			for _, b := range batches {
				out = append(out, cell{w: w, a: a, batch: b, ops: ops})
			}
		}
	}
	return out
}

// window is the tumbling Lambda's window.
func (r *runner) window() time.Duration {
	if r.cfg.TumblingWindow > 0 {
		return r.cfg.TumblingWindow
	}
	return DefaultTumblingWindow
}

// writeRates measures DynamoDB Local's own item-write rate, the ceiling of
// every consumer here (each report write is an item write), on a table of
// its own, when (before or after) the backlogs.
func (r *runner) writeRates(ctx context.Context, when string) error {
	db, _, stop, err := r.instance(ctx, writeRateTable)
	if err != nil {
		return err
	}
	defer stop()
	workers := r.cfg.WriteRateWorkers
	if workers <= 1 {
		workers = 4
	}
	rates, err := measureWriteRates(ctx, db, writeRateTable, workers, r.cfg.WriteRateTime)
	for i := range rates {
		rates[i].When = when
	}
	r.res.WriteRates = append(r.res.WriteRates, rates...)
	for _, w := range rates {
		r.logf("DynamoDB Local item writes %s the backlogs: %s, %s: %.0f item writes/s (%d requests in %s)", w.When, w.Op, writers(w.Workers), w.PerSecond(), w.Requests, w.Took.Round(time.Millisecond))
	}
	return err
}

// backlogs measures every approach on every workload: write the workload as
// a backlog, drain the stream read-only (the ceiling), run the approach
// with 1% duplicate delivery, then reconcile.
func (r *runner) backlogs(ctx context.Context, cells []cell) error {
	for i, c := range cells {
		r.logf("[%d/%d] workload %s (%d changes), %s, batch %d", i+1, len(cells), c.w.Spec.Name, c.w.Changes, c.a, c.batch)
		row, err := r.cell(ctx, c)
		if err != nil {
			return fmt.Errorf("workload %s, %s, batch %d: %w", c.w.Spec.Name, c.a, c.batch, err)
		}
		r.logf("    %.0f changes/s (raw drain %.0f records/s), %d write requests, %d WCU billed, %d report differences",
			row.Throughput(), row.RawRate(), row.Cost.Writes(), row.Cost.Units, row.Diffs)
		r.logf("    DynamoDB calls: %s", row.Cost.TimeSummary())
		for _, m := range row.Cost.Mismatches {
			r.logf("    capacity mismatch: %s", m)
		}
		r.res.Rows = append(r.res.Rows, row)
	}
	return nil
}

func (r *runner) cell(ctx context.Context, c cell) (Row, error) {
	row := Row{Workload: c.w.Spec.Name, Approach: c.a, Batch: c.batch, Changes: len(c.ops)}
	db, streams, stop, err := r.instance(ctx, c.table())
	if err != nil {
		return row, err
	}
	defer stop()
	t := target{db: db, streams: streams, table: c.table(), window: r.window()}
	var got consumed
	if c.a == SyncTransaction {
		if got, err = writeSynchronously(ctx, t, c.ops); err != nil {
			return row, err
		}
	} else {
		if err := Load(ctx, db, t.table, c.ops, 1); err != nil {
			return row, err
		}
		arn, err := poller.ResolveStream(ctx, db, t.table)
		if err != nil {
			return row, err
		}
		// The raw drain rate: the median of three read-only drains.
		var drains []time.Duration
		var last string
		for range 3 {
			n, took, l, err := Drain(ctx, streams, arn, c.batch)
			if err != nil {
				return row, err
			}
			row.RawRecords, last = n, l
			drains = append(drains, took)
		}
		slices.Sort(drains)
		row.RawTook = drains[1]
		if c.w.Spec.Name == "b" && c.variant == "" && r.recorded == nil {
			if err := r.record(ctx, streams, arn); err != nil {
				return row, err
			}
		}
		if got, err = consume(ctx, t, arn, last, c.a, c.batch, nil); err != nil {
			return row, err
		}
	}
	row.Cost, row.Baseline, row.Took = got.cost, got.baseline, got.took
	row.Delivered, row.Redelivered = got.delivered, got.redelivered
	diffs, stats, err := processor.Reconcile(ctx, db, t.table, processor.Scope{})
	if err != nil {
		return row, err
	}
	row.Reports = stats.Reports
	row.TotalsOnly = c.a == SyncTransaction
	if !c.a.batchless() {
		if row.Sizes, err = itemSizes(ctx, db, t.table); err != nil {
			return row, err
		}
	}
	for _, d := range diffs {
		if row.TotalsOnly && d.Stored != nil && d.Stored.Totals.Equal(d.Expected.Totals) {
			continue
		}
		if c.a.batchless() && d.Stored != nil && d.Stored.Equal(d.Expected) {
			continue // the seed designs' own item layout (no entityType): only figures count
		}
		row.Diffs++
	}
	return row, nil
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadBefore: loadavg()}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				_, _ = fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%f", &kb)
			}
		}
		m.MemoryGiB = kb / (1 << 20)
	}
	return m
}

func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
