package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// RollupCostConfig is issue 24's cost benchmark on the real consumers
// (BENCHMARKS.md, "Issue 24: roll-up cost on the real consumers"): workload
// c (1,000 branches, its currencies dealt by branch as the layout model
// deals them: RollupCurrencies) consumed by in-process pollers (the real
// processor/poller code) reading an emulated stream of Shards shards
// (internal/streamemu, no rolls) in front of one DynamoDB Local, every
// write of the consumers billed by the write meter. Each shard count is
// run with roll-ups on and off (processor.Config.NoRollups) on the same
// changes: live (written at Rate a second while the pollers run) and as
// a backlog drained at full speed (catch-up). Zero fields take the
// defaults named.
type RollupCostConfig struct {
	// Shards are the stream's shard counts (default 1, 4, 16).
	Shards []int
	// Changes is workload c's changes per cell (default 3,000).
	Changes int
	// Days is the span of the changes' dates (default 1: one live business
	// day, 5% backdated up to 60 days, as the layout model deals workload
	// c; workload c as generated elsewhere spans 90).
	Days int
	// Rate is the live phase's changes a second (default 100).
	Rate int
	// Pollers is the most pollers of a cell (default 4; at most one per
	// shard).
	Pollers int
	// Live and CatchUp choose the phases (both when neither is set).
	Live, CatchUp bool
	// Quiet is how long no commit may land before a cell counts as done
	// (default 4s: the batching window and the idle backoff are 1 s and
	// 500 ms).
	Quiet time.Duration
	// Timeout bounds each cell's wait for its consumers (default 5m).
	Timeout time.Duration
	// Seed seeds the workload (default 24).
	Seed uint64
	// DynamoDBLocalDir is passed to ddblocal.Start (empty: its default).
	DynamoDBLocalDir string
	// Command is how the run was started, for the report.
	Command string
	// Log receives progress lines and the pollers' warnings (nil: none).
	Log io.Writer `json:"-"`
}

func (c RollupCostConfig) withDefaults() RollupCostConfig {
	if len(c.Shards) == 0 {
		c.Shards = []int{1, 4, 16}
	}
	if c.Changes <= 0 {
		c.Changes = 3000
	}
	if c.Rate <= 0 {
		c.Rate = 100
	}
	if c.Days <= 0 {
		c.Days = 1
	}
	if c.Pollers <= 0 {
		c.Pollers = 4
	}
	if !c.Live && !c.CatchUp {
		c.Live, c.CatchUp = true, true
	}
	if c.Quiet <= 0 {
		c.Quiet = 4 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.Seed == 0 {
		c.Seed = 24
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// RollupCurrencies are the currencies workload c's branches are dealt,
// branch n in RollupCurrencies[n mod 3], as bench/rollupmodel_test.go
// deals them. JPY has no fraction digits: its amounts are cut to whole yen.
var RollupCurrencies = []string{"BRL", "EUR", "JPY"}

// The kinds of item the meter splits the consumers' writes by.
const (
	KindBranch       = "branch reports" // branch report and entry items, their parked deltas
	KindLane         = "roll-up deltas" // lane items (TENANT#t#ROLLUPLANE#k)
	KindPartial      = "roll-up partials"
	KindStaging      = "roll-up staging" // plan layout 6's staged branch-count transitions (coordination table, ROLLUPSTAGE#…)
	KindApplied      = "applied counts"  // the branches' applied items and open marks (coordination table, APPLIED#…)
	KindCoordination = "coordination"    // checkpoints, leases and the rest of the coordination table
	KindOther        = "other"           // quarantine items and anything else
)

// RollupKinds are the kinds in report order.
var RollupKinds = []string{KindBranch, KindLane, KindStaging, KindPartial, KindApplied, KindCoordination, KindOther}

// ClassifyRollupKey names the kind of item a partition key holds, for the
// meter (Meter.Classify).
func ClassifyRollupKey(coordinationTable string) func(table, pk string) string {
	return func(table, pk string) string {
		switch {
		case table == coordinationTable && strings.HasPrefix(pk, ledgertable.StagingPrefix):
			return KindStaging
		case table == coordinationTable && strings.HasPrefix(pk, aggregates.AppliedPrefix):
			return KindApplied
		case table == coordinationTable:
			return KindCoordination
		case aggregates.IsRollupLaneKey(pk):
			return KindLane
		case aggregates.IsRollupPK(pk):
			return KindPartial
		case strings.HasSuffix(pk, "#REPORTING"):
			return KindBranch
		}
		return KindOther
	}
}

// RollupCostRow is one cell: a phase, a shard count, roll-ups on or off.
type RollupCostRow struct {
	Phase   string // "live" or "catch-up"
	Shards  int
	Pollers int
	Rollups bool
	Changes int
	// WriteRate is the changes written a second in the live phase.
	WriteRate float64
	// Took is from the first commit to the last.
	Took time.Duration
	// Commits is the commit transactions that landed, PeakCommits the
	// most in one second; Cancelled the ones that did not; DrainCommits
	// the ones of the final drain (included in Commits).
	Commits, PeakCommits, Cancelled, DrainCommits int
	// Units is every write unit the consumers were billed; Kinds splits
	// them by item kind.
	Units int
	Kinds map[string]KindCost
	// Hot is the busiest key of each kind (highest peak in one second).
	Hot map[string]KeyRate
	// Keys counts the partition keys written, by kind.
	Keys map[string]int
	// Differences is what reconcile found after the cell (roll-ups
	// judged when on); Waiting the roll-up deltas left in lanes.
	Differences, Waiting int
	// MeterErr is the meter's modelling error, if any (its bills are then
	// incomplete).
	MeterErr string `json:",omitempty"`
}

// PerThousand is units per 1,000 changes.
func (r RollupCostRow) PerThousand(units int) float64 {
	if r.Changes == 0 {
		return 0
	}
	return float64(units) * 1000 / float64(r.Changes)
}

// CommitsPerSecond is the mean commit rate between the first commit and
// the last.
func (r RollupCostRow) CommitsPerSecond() float64 {
	if r.Took <= 0 {
		return 0
	}
	return float64(r.Commits) / r.Took.Seconds()
}

// RollupCostResult is a whole run.
type RollupCostResult struct {
	Config   RollupCostConfig
	Machine  Machine
	Rows     []RollupCostRow
	Started  time.Time
	Duration time.Duration
	Errors   []string
}

// commitClock counts the commits that land, per second.
type commitClock struct {
	*Meter
	mu        sync.Mutex
	first     time.Time
	last      time.Time
	n, failed int
	perSecond map[int64]int
}

func (c *commitClock) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := c.Meter.TransactWriteItems(ctx, in, opts...)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.failed++
		return out, err
	}
	if c.first.IsZero() {
		c.first = now
	}
	c.last = now
	c.n++
	c.perSecond[now.Unix()]++
	return out, nil
}

func (c *commitClock) snapshot() (first, last time.Time, n, failed, peak int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.perSecond {
		peak = max(peak, v)
	}
	return c.first, c.last, c.n, c.failed, peak
}

// rollupOps is workload c's changes with each branch's currency: branch n
// in RollupCurrencies[n mod 3], JPY amounts cut to whole yen.
func rollupOps(n, days int, seed uint64) []Op {
	spec := WorkloadC
	spec.Days = days
	ops := spec.Generate(n, seed)
	for i := range ops {
		ops[i].New = withCurrency(ops[i].New)
		ops[i].Old = withCurrency(ops[i].Old)
	}
	return ops
}

func withCurrency(item map[string]ddbtypes.AttributeValue) map[string]ddbtypes.AttributeValue {
	if item == nil {
		return nil
	}
	num, err := strconv.Atoi(strings.TrimPrefix(str(item["branchId"]), "br"))
	if err != nil {
		return item
	}
	cur := RollupCurrencies[num%len(RollupCurrencies)]
	out := make(map[string]ddbtypes.AttributeValue, len(item)+1)
	for k, v := range item {
		out[k] = v
	}
	out[aggregates.AttrCurrency] = sAV(cur)
	if cur == "JPY" {
		a := item["amount"].(*ddbtypes.AttributeValueMemberN).Value
		whole, _, _ := strings.Cut(a, ".")
		if whole == "0" || whole == "" {
			whole = "1"
		}
		out["amount"] = nAV(whole)
	}
	return out
}

// RollupCost runs the benchmark: every cell on one DynamoDB Local, its
// tables created before any data.
func RollupCost(ctx context.Context, cfg RollupCostConfig) (*RollupCostResult, error) {
	cfg = cfg.withDefaults()
	res := &RollupCostResult{Config: cfg, Machine: machine(), Started: time.Now()}
	defer func() {
		res.Machine.LoadAfter = loadavg()
		res.Duration = time.Since(res.Started)
	}()
	logf := timedLog(cfg.Log, "rollups")
	loc, err := startLocal(ctx, cfg.DynamoDBLocalDir, &res.Machine)
	if err != nil {
		return res, err
	}
	defer func() { _ = loc.in.Stop() }()
	awsCfg, db := loc.cfg, loc.db
	type cellSpec struct {
		phase   string
		shards  int
		rollups bool
	}
	var cells []cellSpec
	for _, phase := range []string{"live", "catch-up"} {
		if phase == "live" && !cfg.Live || phase == "catch-up" && !cfg.CatchUp {
			continue
		}
		for _, s := range cfg.Shards {
			for _, on := range []bool{true, false} {
				cells = append(cells, cellSpec{phase, s, on})
			}
		}
	}
	name := func(c cellSpec) string {
		return fmt.Sprintf("r24-%s-%d-%v", strings.ReplaceAll(c.phase, "-", ""), c.shards, c.rollups)
	}
	for _, c := range cells {
		if err := ledgertable.CreateTables(ctx, db, name(c)); err != nil {
			return res, err
		}
	}
	ops := rollupOps(cfg.Changes, cfg.Days, cfg.Seed)
	for i, c := range cells {
		logf("[%d/%d] %s, %d shards, roll-ups %v", i+1, len(cells), c.phase, c.shards, c.rollups)
		row, err := rollupCell(ctx, cfg, db, awsCfg, name(c), c.phase, c.shards, c.rollups, ops, logf)
		if err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("%s %d shards roll-ups %v: %v", c.phase, c.shards, c.rollups, err))
			if ctx.Err() != nil {
				return res, err
			}
			continue
		}
		logf("    %d commits in %s (%.1f/s, peak %d/s), %d WCU (%.0f per 1,000 changes), %d differences",
			row.Commits, row.Took.Round(100*time.Millisecond), row.CommitsPerSecond(), row.PeakCommits, row.Units, row.PerThousand(row.Units), row.Differences)
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

func rollupCell(ctx context.Context, cfg RollupCostConfig, db *dynamodb.Client, awsCfg aws.Config, table, phase string, shards int, rollups bool,
	ops []Op, logf func(string, ...any)) (RollupCostRow, error) {
	row := RollupCostRow{Phase: phase, Shards: shards, Rollups: rollups, Changes: len(ops), Pollers: min(cfg.Pollers, shards)}
	arn, err := poller.ResolveStream(ctx, db, table)
	if err != nil {
		return row, err
	}
	coordTable := ledgertable.CoordinationTableName(table)
	if phase == "catch-up" {
		// The backlog first: every change in the stream before a poller
		// starts.
		if err := Load(ctx, db, table, ops, 4); err != nil {
			return row, err
		}
	}
	emu, err := streamemu.New(poller.NewStreamsClient(awsCfg), streamemu.Config{
		StreamARN: arn, Shards: shards, RollAfter: 1000 * time.Hour, MaxOpenShards: shards, Limits: streamemu.AWSLimits, Seed: cfg.Seed,
		HistoryFilter: func(streamtypes.Record) bool { return false },
	})
	if err != nil {
		return row, err
	}
	if err := emu.Sync(ctx); err != nil {
		return row, err
	}
	meter := NewMeter(db)
	meter.Classify = ClassifyRollupKey(coordTable)
	clock := &commitClock{Meter: meter, perSecond: map[int64]int{}}
	logw := writerFunc(func(p []byte) (int, error) { return cfg.Log.Write(p) })
	type running struct {
		cancel context.CancelFunc
		done   chan error
	}
	var pollers []running
	start := func(owner string, drain bool) (running, error) {
		proc, err := processor.New(clock, processor.Config{Table: table, NoRollups: !rollups}, processor.NewMetrics(prometheus.NewRegistry()))
		if err != nil {
			return running{}, err
		}
		pc := poller.Config{Table: table, StreamARN: arn, Owner: owner, Drain: drain,
			IdleBackoff: 500 * time.Millisecond, MaxIdleBackoff: 500 * time.Millisecond,
			// Long leases: on the shared machine a renewal can time out,
			// and a lapsed lease is a reader restart, not what is measured.
			LeaseDuration: time.Minute,
			Logger:        slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn})).With("owner", owner)}
		p, err := poller.New(emu, meter, proc, pc, poller.NewMetrics(prometheus.NewRegistry()))
		if err != nil {
			return running{}, err
		}
		pctx, cancel := context.WithCancel(ctx)
		r := running{cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- p.Run(pctx) }()
		return r, nil
	}
	stopAll := func() error {
		var errs []error
		for _, p := range pollers {
			p.cancel()
			if err := <-p.done; err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, err)
			}
		}
		pollers = nil
		return errors.Join(errs...)
	}
	defer func() { _ = stopAll() }()
	for i := range row.Pollers {
		p, err := start(fmt.Sprintf("p%d", i+1), false)
		if err != nil {
			return row, err
		}
		pollers = append(pollers, p)
	}

	if phase == "live" {
		began := time.Now()
		work := make(chan Op)
		var writers sync.WaitGroup
		var writeErr atomic.Value
		for range 8 {
			writers.Add(1)
			go func() {
				defer writers.Done()
				for op := range work {
					if err := Put(ctx, db, table, op, time.Now()); err != nil {
						writeErr.Store(err)
					}
				}
			}()
		}
		for i, op := range ops {
			at := began.Add(time.Duration(float64(i) / float64(cfg.Rate) * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			}
			if ctx.Err() != nil {
				break
			}
			work <- op
		}
		close(work)
		writers.Wait()
		if err, _ := writeErr.Load().(error); err != nil {
			return row, fmt.Errorf("writes: %w", err)
		}
		row.WriteRate = float64(len(ops)) / time.Since(began).Seconds()
		logf("    wrote %d changes (%.0f/s)", len(ops), row.WriteRate)
	}

	// Done: no commit for Quiet, and (roll-ups on) no delta waits in a lane.
	deadline := time.Now().Add(cfg.Timeout)
	for {
		if time.Now().After(deadline) {
			return row, fmt.Errorf("consumers not done after %s", cfg.Timeout)
		}
		select {
		case <-ctx.Done():
			return row, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		_, last, n, _, _ := clock.snapshot()
		if n == 0 || time.Since(last) < cfg.Quiet {
			continue
		}
		waiting, err := laneItems(ctx, db, table)
		if err != nil {
			return row, err
		}
		if waiting == 0 || !rollups {
			break
		}
	}
	if err := stopAll(); err != nil {
		return row, err
	}
	_, _, liveCommits, _, _ := clock.snapshot()

	// A drain poller on the same meter finishes anything the pollers left
	// (on this loaded machine a lease may lapse and its shard wait for a
	// restart longer than Quiet): its commits are the consumers' work for
	// these changes too, counted, and named apart (DrainCommits). A
	// drain's own commits put deltas after the ends it reads to: drained
	// again until no delta waits (at most 5 times).
	for i := 0; ; i++ {
		d, err := start("drain", true)
		if err != nil {
			return row, err
		}
		dctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		go func() { <-dctx.Done(); d.cancel() }()
		err = <-d.done
		cancel()
		if err != nil {
			return row, fmt.Errorf("drain: %w", err)
		}
		waiting, err := laneItems(ctx, db, table)
		if err != nil {
			return row, err
		}
		if waiting == 0 || i == 4 {
			break
		}
	}
	first, last, n, failed, peak := clock.snapshot()
	row.Took, row.Commits, row.Cancelled, row.PeakCommits = last.Sub(first), n, failed, peak
	row.DrainCommits = n - liveCommits
	cost := meter.Cost()
	row.Units, row.Kinds = cost.Units, cost.Kinds
	row.Hot, row.Keys = map[string]KeyRate{}, map[string]int{}
	for _, k := range meter.KeyRates(0) { // hottest first
		if _, ok := row.Hot[k.Kind]; !ok {
			row.Hot[k.Kind] = k
		}
		row.Keys[k.Kind]++
	}
	if err := meter.Err(); err != nil {
		row.MeterErr = err.Error()
	}
	diffs, stats, err := processor.ReconcileWith(ctx, db, table, processor.Scope{}, processor.ReconcileOptions{Rollups: rollups})
	if err != nil {
		return row, err
	}
	row.Differences = len(diffs)
	for _, n := range stats.RollupWaiting {
		row.Waiting += n
	}
	return row, nil
}

// laneItems counts the roll-up delta items waiting in the bench tenant's
// lanes.
func laneItems(ctx context.Context, db *dynamodb.Client, table string) (int, error) {
	n := 0
	for k := range aggregates.RollupLanes {
		pk := aggregates.RollupLanePK(tenant, k)
		out, err := db.Query(ctx, &dynamodb.QueryInput{TableName: &table, KeyConditionExpression: aws.String("PK = :pk"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": sAV(pk)}, Select: ddbtypes.SelectCount, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return 0, fmt.Errorf("count lane %d: %w", k, err)
		}
		n += int(out.Count)
	}
	return n, nil
}
