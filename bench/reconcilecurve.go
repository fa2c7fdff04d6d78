package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// ReconcileCurveConfig configures the reconcile curve (issue 25): the peak
// RSS and time of `ledgerctl reconcile` over tables of growing size on
// dynalite.
type ReconcileCurveConfig struct {
	// Sizes are the tables' sizes in transactions, one table each.
	Sizes []int
	// Seed makes the transactions (workload b's shape, inserts only).
	Seed uint64
	// DynaliteDir is where dynalite is installed (infra/dynalite, after
	// npm ci --prefix).
	DynaliteDir string
	// DataDir holds each size's LevelDB directory, DataDir/<size>. A
	// directory a finished load left (its loadedMarker says the same size
	// and seed) is reconciled again without loading; others are loaded
	// afresh. Empty: a temporary directory, removed at the end.
	DataDir string
	// LedgerctlBinary is the built cmd/ledgerctl to measure (empty: go
	// build one).
	LedgerctlBinary string
	// Parallel is ledgerctl reconcile's --parallel (0: its default, 4).
	Parallel int
	// Workers is how many BatchWriteItem calls the load keeps in flight
	// (0: 8).
	Workers int
	// Log receives progress lines (nil: none).
	Log io.Writer
}

// ReconcilePoint is one table of the curve.
type ReconcilePoint struct {
	Transactions int           `json:"transactions"`
	Branches     int           `json:"branches"`
	Reports      int           `json:"reports"` // report items written
	LoadTook     time.Duration `json:"loadTook"`
	Loaded       bool          `json:"loaded"` // false: a loaded directory reused
	// DataBytes is the size of dynalite's LevelDB directory after the
	// load.
	DataBytes int64 `json:"dataBytes"`
	// Command is the ledgerctl command line measured (without the
	// binary's directory).
	Command string        `json:"command"`
	Took    time.Duration `json:"took"`
	// PeakRSS is ledgerctl's own peak resident set size in bytes, from the
	// kernel: its ru_maxrss as GNU time reports it (see gnuTime).
	PeakRSS int64 `json:"peakRSS"`
	Exit    int   `json:"exit"`
	// What ledgerctl reconcile --json printed: the counts, the items read
	// and read units its reads consumed.
	Counted     int     `json:"counted"`
	Invalid     int     `json:"invalid"`
	ReportsRead int     `json:"reportsRead"`
	ItemsRead   int     `json:"itemsRead"`
	ReadUnits   float64 `json:"readUnits"`
	// Seeded are the keys of the differences the load planted (pk|sk);
	// Found the keys reconcile named. Exact is Found == Seeded and every
	// transaction counted.
	Seeded []string `json:"seeded"`
	Found  []string `json:"found"`
	Exact  bool     `json:"exact"`
	// DynaliteRSS is dynalite's peak resident set size over the load and
	// the reconcile (or the reconcile alone when the load was reused).
	DynaliteRSS int64 `json:"dynaliteRSS"`
}

// loadedMarker is the file a finished load leaves in its data directory.
const loadedMarker = "ledger-reconcile-curve.json"

type loadedInfo struct {
	Transactions int      `json:"transactions"`
	Seed         uint64   `json:"seed"`
	Branches     int      `json:"branches"`
	Reports      int      `json:"reports"`
	Seeded       []string `json:"seeded"`
	LoadTook     string   `json:"loadTook"`
}

// curveTable is the table the curve loads.
const curveTable = "ledger"

// ReconcileCurve measures `ledgerctl reconcile --json` over a table of
// each size in turn (one at a time, each in its own dynalite), and returns
// one point per size.
func ReconcileCurve(ctx context.Context, cfg ReconcileCurveConfig) ([]ReconcilePoint, error) {
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	if len(cfg.Sizes) == 0 {
		return nil, errors.New("reconcile curve: no sizes")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	bin := cfg.LedgerctlBinary
	if bin == "" {
		var err error
		if bin, err = buildCommand(ctx, "ledgerctl"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(filepath.Dir(bin))
	}
	dataDir := cfg.DataDir
	if dataDir == "" {
		tmp, err := os.MkdirTemp("", "ledger-reconcile-curve-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dataDir = tmp
	}
	var out []ReconcilePoint
	for _, size := range cfg.Sizes {
		p, err := reconcilePoint(ctx, cfg, bin, filepath.Join(dataDir, strconv.Itoa(size)), size, logf)
		if err != nil {
			return out, fmt.Errorf("reconcile curve at %d transactions: %w", size, err)
		}
		logf("%d transactions: reconcile took %s, peak RSS %.1f MiB, read %d items (%g read units), found %d of %d seeded differences",
			size, p.Took.Round(time.Millisecond), float64(p.PeakRSS)/(1<<20), p.ItemsRead, p.ReadUnits, len(p.Found), len(p.Seeded))
		out = append(out, p)
	}
	return out, nil
}

func reconcilePoint(ctx context.Context, cfg ReconcileCurveConfig, bin, dir string, size int, logf func(string, ...any)) (ReconcilePoint, error) {
	p := ReconcilePoint{Transactions: size}
	var info loadedInfo
	reuse := false
	if b, err := os.ReadFile(filepath.Join(dir, loadedMarker)); err == nil {
		if json.Unmarshal(b, &info) == nil && info.Transactions == size && info.Seed == cfg.Seed {
			reuse = true
		}
	}
	if !reuse {
		if err := os.RemoveAll(dir); err != nil {
			return p, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return p, err
		}
	}
	if _, err := os.Stat(gnuTime); err != nil {
		return p, fmt.Errorf("the peak RSS is measured by GNU time (Debian package time): %w", err)
	}
	dl, err := startDynalite(ctx, cfg.DynaliteDir, dir)
	if err != nil {
		return p, err
	}
	defer func() { _ = dl.Stop() }()
	awsCfg, err := infra.LocalConfig(ctx, dl.Endpoint)
	if err != nil {
		return p, err
	}
	db := dynamodb.NewFromConfig(awsCfg)
	if reuse {
		logf("%d transactions: reusing the table loaded in %s (%s)", size, dir, info.LoadTook)
		p.LoadTook, _ = time.ParseDuration(info.LoadTook)
	} else {
		logf("%d transactions: loading into dynalite (%s)", size, dir)
		start := time.Now()
		if err := createCurveTable(ctx, db); err != nil {
			return p, err
		}
		if info, err = loadCurveTable(ctx, db, curveTable, size, cfg.Seed, cfg.Workers, logf); err != nil {
			return p, err
		}
		p.Loaded = true
		p.LoadTook = time.Since(start)
		info.LoadTook = p.LoadTook.Round(time.Second).String()
		b, err := json.MarshalIndent(info, "", "  ")
		if err != nil {
			return p, err
		}
		if err := os.WriteFile(filepath.Join(dir, loadedMarker), b, 0o644); err != nil {
			return p, err
		}
	}
	p.Branches, p.Reports, p.Seeded = info.Branches, info.Reports, info.Seeded
	p.DataBytes = dirSize(dir)

	args := []string{"reconcile", "--json"}
	if cfg.Parallel > 0 {
		args = append(args, "--parallel", strconv.Itoa(cfg.Parallel))
	}
	p.Command = strings.Join(append([]string{"ledgerctl"}, args...), " ")
	logf("%d transactions: %s %s", size, bin, strings.Join(args, " "))
	rssDir, err := os.MkdirTemp("", "ledger-reconcile-rss-")
	if err != nil {
		return p, err
	}
	defer os.RemoveAll(rssDir)
	rssFile := filepath.Join(rssDir, "maxrss")
	cmd := exec.CommandContext(ctx, gnuTime, append([]string{"-f", "%M", "-o", rssFile, bin}, args...)...)
	cmd.Env = append(os.Environ(), "AWS_ENDPOINT_URL="+dl.Endpoint, "AWS_REGION="+infra.LocalRegion,
		"AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "LEDGER_TABLE="+curveTable)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	dieWithParent(cmd)
	start := time.Now()
	err = cmd.Run()
	p.Took = time.Since(start)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		p.Exit = exit.ExitCode()
	case err != nil:
		return p, fmt.Errorf("ledgerctl reconcile: %w", err)
	}
	if p.PeakRSS, err = readMaxRSS(rssFile); err != nil {
		return p, fmt.Errorf("ledgerctl reconcile exited %d: %w: %s", p.Exit, err, tail(stderr.String(), 2000))
	}
	if p.Exit != 0 && p.Exit != 1 {
		return p, fmt.Errorf("ledgerctl reconcile exited %d: %s", p.Exit, tail(stderr.String(), 2000))
	}
	var view struct {
		Transactions, Invalid, Reports int
		ItemsRead                      int     `json:"itemsRead"`
		ReadUnits                      float64 `json:"readUnits"`
		Differences                    []struct{ PK, SK string }
	}
	if err := json.Unmarshal(stdout.Bytes(), &view); err != nil {
		return p, fmt.Errorf("ledgerctl reconcile --json: %w: %s", err, tail(stdout.String(), 2000))
	}
	p.Counted, p.Invalid, p.ReportsRead, p.ItemsRead, p.ReadUnits = view.Transactions, view.Invalid, view.Reports, view.ItemsRead, view.ReadUnits
	for _, d := range view.Differences {
		p.Found = append(p.Found, d.PK+"|"+d.SK)
	}
	slices.Sort(p.Found)
	p.Exact = slices.Equal(p.Found, p.Seeded) && p.Counted == size
	_ = dl.Stop()
	p.DynaliteRSS = dl.PeakRSS()
	return p, nil
}

// gnuTime runs the measured ledgerctl and writes its peak resident set
// size. The kernel's ru_maxrss of a child that Go starts directly is no
// measure of the child: Go starts it with clone(CLONE_VM|CLONE_VFORK), and
// exec records the high-water mark of the memory it leaves, the parent's,
// in the child's ru_maxrss (a 2,000-transaction reconcile read 47 MiB so,
// 27 MiB under GNU time, its own). GNU time forks the command from its
// own small process and reports the command's own ru_maxrss.
const gnuTime = "/usr/bin/time"

// readMaxRSS reads GNU time's %M (KiB) from file: its last line (a
// command that exits non-zero gets a line about it first). It returns
// bytes.
func readMaxRSS(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("read peak RSS: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	kib, err := strconv.ParseInt(strings.TrimSpace(lines[len(lines)-1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read peak RSS: %q is not GNU time's %%M: %w", string(b), err)
	}
	return kib << 10, nil
}

// curveWorkload is the shape of the curve's transactions: workload b's.
var curveWorkload = WorkloadB

// createCurveTable creates the ledger table without its stream (dynalite
// has none; table.CreateTable also turns TTL on, which dynalite does not
// serve, and nothing here expires).
func createCurveTable(ctx context.Context, db *dynamodb.Client) error {
	in := ledgertable.CreateTableInput(curveTable)
	in.StreamSpecification = nil
	if _, err := db.CreateTable(ctx, in); err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(curveTable)}, time.Minute); err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	return nil
}

// loadCurveTable loads into table size inserts of workload b's shape (50 branches, 90 days, 5%
// backdated by up to 60 days; unstamped, as issue 11's backlog) with
// BatchWriteItem, then every report they make, exact, as a repair would
// write it (table.EncodeRepair), except four planted differences:
// a report one transaction short in its count, a report item missing, a
// report of a day without transactions and a stray item in a report
// partition. It returns the keys of the four, sorted.
func loadCurveTable(ctx context.Context, db *dynamodb.Client, table string, size int, seed uint64, workers int, logf func(string, ...any)) (loadedInfo, error) {
	info := loadedInfo{Transactions: size, Seed: seed}
	want := aggregates.NewFold()
	branches := map[string]bool{}
	next := time.Now().Add(30 * time.Second)
	for i := 0; i < size; i += backlogChunk {
		n := min(backlogChunk, size-i)
		ops := curveWorkload.generateFrom(i, n, size, seed)
		for _, op := range ops {
			want.AddChange(nil, txOf(op.New))
			branches[op.Key.PK] = true
		}
		if err := Load(ctx, db, table, ops, workers); err != nil {
			return info, err
		}
		if time.Now().After(next) {
			logf("    %d of %d transactions written", i+n, size)
			next = time.Now().Add(30 * time.Second)
		}
	}
	info.Branches = len(branches)

	keys := want.Keys()
	slices.SortFunc(keys, func(a, b aggregates.ReportKey) int {
		return strings.Compare(a.Key().PK+"|"+a.Key().SK, b.Key().PK+"|"+b.Key().SK)
	})
	if len(keys) < 2 {
		return info, fmt.Errorf("%d transactions make %d reports: too few to plant differences", size, len(keys))
	}
	stamp := time.Now().UTC().Format(time.RFC3339Nano)
	var items []map[string]ddbtypes.AttributeValue
	add := func(k aggregates.ReportKey, r *aggregates.Report) {
		ri := ledgertable.EncodeRepair(k, r, nil, stamp)
		items = append(items, ri.Item)
		items = append(items, ri.Entries...)
	}
	seeded := func(k aggregates.Key) { info.Seeded = append(info.Seeded, k.PK+"|"+k.SK) }
	for i, k := range keys {
		r := want.Report(k)
		r.Prune()
		switch i {
		case 0: // one transaction too many in its count
			wrong := *r
			wrong.Totals.Count++
			add(k, &wrong)
			seeded(k.Key())
		case 1: // the report item missing
			seeded(k.Key())
		default:
			add(k, r)
			info.Reports++
		}
	}
	// A report of a day without transactions (years before the workload),
	// and an item of a report partition that is no report.
	orphan := aggregates.ReportKey{Tenant: keys[0].Tenant, Branch: keys[0].Branch, Period: aggregates.Period{Type: aggregates.Daily, Value: "2001-01-01"}}
	add(orphan, &aggregates.Report{Totals: aggregates.Totals{Count: 1}})
	seeded(orphan.Key())
	stray := aggregates.Key{PK: aggregates.ReportPK(keys[0].Tenant, keys[0].Branch), SK: "JUNK"}
	items = append(items, map[string]ddbtypes.AttributeValue{"PK": sAV(stray.PK), "SK": sAV(stray.SK)})
	seeded(stray)
	slices.Sort(info.Seeded)
	logf("    %d transactions of %d branches written; writing %d report items (%d reports)", size, info.Branches, len(items), info.Reports+2)
	if err := putItems(ctx, db, table, items, workers); err != nil {
		return info, err
	}
	return info, nil
}

// putItems writes items with BatchWriteItem, workers calls at a time.
func putItems(ctx context.Context, db *dynamodb.Client, table string, items []map[string]ddbtypes.AttributeValue, workers int) error {
	var batches [][]ddbtypes.WriteRequest
	for i := 0; i < len(items); i += 25 {
		var reqs []ddbtypes.WriteRequest
		for _, it := range items[i:min(i+25, len(items))] {
			reqs = append(reqs, ddbtypes.WriteRequest{PutRequest: &ddbtypes.PutRequest{Item: it}})
		}
		batches = append(batches, reqs)
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(batches) && errs[w] == nil; i += workers {
				pending := map[string][]ddbtypes.WriteRequest{table: batches[i]}
				for attempt := 0; len(pending) > 0; attempt++ {
					if attempt > 10 {
						errs[w] = errors.New("put items: still unprocessed after 10 attempts")
						break
					}
					out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
					if err != nil {
						errs[w] = fmt.Errorf("put items: %w", err)
						break
					}
					pending = out.UnprocessedItems
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// dirSize is the size of the files under dir in bytes.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// WriteReconcileCurve writes the curve as a markdown table.
func WriteReconcileCurve(w io.Writer, points []ReconcilePoint) {
	fmt.Fprintln(w, "| transactions | branches | reports | command | reconcile took | transactions/s | peak RSS (ledgerctl) | items read | read units | differences found (of the planted) | table loaded in | LevelDB on disk | dynalite's peak RSS |")
	fmt.Fprintln(w, "|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
	for _, p := range points {
		found := fmt.Sprintf("%d of %d", len(p.Found), len(p.Seeded))
		if p.Exact {
			found += ", exactly those"
		} else {
			found += ", **not exactly those**"
		}
		load := p.LoadTook.Round(time.Second).String()
		if !p.Loaded {
			load += " (earlier run)"
		}
		fmt.Fprintf(w, "| %d | %d | %d | `%s` | %s | %.0f | %.1f MiB | %d | %g | %s | %s | %.0f MiB | %.0f MiB |\n",
			p.Transactions, p.Branches, p.Reports+2, p.Command, p.Took.Round(100*time.Millisecond), float64(p.Counted)/p.Took.Seconds(),
			float64(p.PeakRSS)/(1<<20), p.ItemsRead, p.ReadUnits, found, load, float64(p.DataBytes)/(1<<20), float64(p.DynaliteRSS)/(1<<20))
	}
}
