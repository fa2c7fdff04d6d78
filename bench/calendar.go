package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/rebucket"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// Issue 22's measurements: what keeping more period types costs ledger's
// poller on workload b, and what a rebucket costs (its own writes and the
// consumers' commits of the moves it causes) and how fast it runs.

// Stamping is how a workload's transaction items are stamped (issue 22):
// with the business date and periods that Calendar gives their createdAt,
// of the period types Periods, as the writer stamps every transaction it
// puts.
type Stamping struct {
	Calendar aggregates.Calendar
	Periods  []aggregates.PeriodType
}

// String describes s for the report, e.g. "America/Sao_Paulo, 7 types".
func (s Stamping) String() string {
	return fmt.Sprintf("%s, %d types", s.Calendar.TimeZone, len(s.Periods))
}

// Stamp returns ops with every transaction item, old and new, stamped under
// s: the attributes businessDate and periods, in table.Transaction's stored
// form (SetStamp), decided from the item's createdAt. The items of ops are
// left as they are (the returned ops hold copies), so that one generated
// workload serves every stamping. The error names an item whose createdAt
// has no periods under s.
func (s Stamping) Stamp(ops []Op) ([]Op, error) {
	out := make([]Op, len(ops))
	for i, op := range ops {
		out[i] = op
		var err error
		if out[i].Old, err = s.item(op.Old); err != nil {
			return nil, err
		}
		if out[i].New, err = s.item(op.New); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s Stamping) item(item map[string]ddbtypes.AttributeValue) (map[string]ddbtypes.AttributeValue, error) {
	if item == nil {
		return nil, nil
	}
	created, err := time.Parse(time.RFC3339Nano, str(item[ledgertable.AttrCreatedAt]))
	if err != nil {
		return nil, fmt.Errorf("stamp %s: %w", str(item[ledgertable.AttrSK]), err)
	}
	st, err := s.Calendar.Stamp(created, s.Periods)
	if err != nil {
		return nil, fmt.Errorf("stamp %s: %w", str(item[ledgertable.AttrSK]), err)
	}
	var t ledgertable.Transaction
	t.SetStamp(st)
	out := maps.Clone(item)
	out[aggregates.AttrBusinessDate] = sAV(t.BusinessDate)
	out[aggregates.AttrPeriods] = sAV(t.Periods)
	return out, nil
}

// BenchCalendar is the business calendar of issue 22's measurements, as
// the example has it: São Paulo, business days from 04:00, weeks
// from Monday, fiscal years from July.
func BenchCalendar() aggregates.Calendar {
	c, err := aggregates.NewCalendar("America/Sao_Paulo", "04:00", "MONDAY", 7)
	if err != nil {
		panic(err) // a constant calendar: cannot happen with the embedded zone data
	}
	return c
}

// The period types the measurement compares: today's three, five (with
// WEEKLY and QUARTERLY) and all seven.
var (
	threeTypes = aggregates.DefaultPeriodTypes
	fiveTypes  = []aggregates.PeriodType{aggregates.Daily, aggregates.Weekly, aggregates.Monthly, aggregates.Quarterly, aggregates.Yearly}
	sevenTypes = aggregates.PeriodTypes[:]
)

// periodVariant is one variant of the period-types measurement: workload
// b's items stamped under stamping, or not stamped at all (nil: counted in
// their UTC date's DAILY, MONTHLY and YEARLY reports, as before issue 22).
type periodVariant struct {
	name     string // in the table's name
	stamping *Stamping
}

func periodVariants() []periodVariant {
	cal := BenchCalendar()
	return []periodVariant{
		{"unstamped", nil},
		{"types3", &Stamping{cal, threeTypes}},
		{"types5", &Stamping{cal, fiveTypes}},
		{"types7", &Stamping{cal, sevenTypes}},
	}
}

// PeriodRow is ledger's poller on workload b, its transactions stamped
// with some period types (Row: the same figures as the backlog table's).
type PeriodRow struct {
	// Stamping is "" for the unstamped workload, else its calendar and
	// number of types; Types are the period types its reports are kept in.
	Stamping string
	Types    []aggregates.PeriodType
	Row
	// WriterUnits is what the writer's own writes of the changes cost by
	// the billing rule (a put or a delete of the transaction item each;
	// not part of Row's cost), and StampBytes the mean bytes the stamp
	// adds to a transaction item.
	WriterUnits int
	StampBytes  float64
}

// periodCell is one cell of the period-types measurement.
type periodCell struct {
	cell
	variant periodVariant
	base    []Op // the workload unstamped
}

// periodCells are the period-types measurement's cells: every variant at
// every batch size, the variants of one batch size one after the other.
func (r *runner) periodCells() ([]periodCell, error) {
	if r.cfg.PeriodChanges <= 0 {
		return nil, nil
	}
	w := WorkloadRun{WorkloadB, r.cfg.PeriodChanges}
	base := w.Spec.Generate(w.Changes, r.cfg.Seed)
	batches := r.cfg.PeriodBatches
	if len(batches) == 0 {
		batches = []int{defaultPollerBatch}
	}
	var out []periodCell
	for _, batch := range batches {
		for _, v := range periodVariants() {
			ops := base
			if v.stamping != nil {
				var err error
				if ops, err = v.stamping.Stamp(base); err != nil {
					return nil, err
				}
			}
			out = append(out, periodCell{cell: cell{w: w, a: LedgerPoller, batch: batch, ops: ops, variant: v.name}, variant: v, base: base})
		}
	}
	return out, nil
}

// defaultPollerBatch is the poller's default batch (poller --batch-records).
const defaultPollerBatch = 10000

// periods runs the period-types measurement's cells.
func (r *runner) periods(ctx context.Context, cells []periodCell) error {
	for i, c := range cells {
		what := "unstamped (UTC, 3 types)"
		if c.variant.stamping != nil {
			what = "stamped: " + c.variant.stamping.String()
		}
		r.logf("[%d/%d] period types: workload b (%d changes), %s, %s, batch %d", i+1, len(cells), len(c.ops), what, c.a, c.batch)
		row, err := r.cell(ctx, c.cell)
		if err != nil {
			return fmt.Errorf("period types, %s, batch %d: %w", what, c.batch, err)
		}
		pr := PeriodRow{Row: row, Types: threeTypes}
		if s := c.variant.stamping; s != nil {
			pr.Stamping, pr.Types = s.String(), s.Periods
		}
		inserts := 0
		for j, op := range c.ops {
			now := time.Now()
			var before, after int
			if op.Old != nil {
				before = ledgertable.ItemSize(stamped(op.Old, now))
			}
			if op.New != nil {
				after = ledgertable.ItemSize(stamped(op.New, now))
			}
			pr.WriterUnits += ledgertable.WriteUnits(before, after)
			if op.Kind == OpInsert {
				inserts++
				pr.StampBytes += float64(after - ledgertable.ItemSize(stamped(c.base[j].New, now)))
			}
		}
		if inserts > 0 {
			pr.StampBytes /= float64(inserts)
		}
		r.logf("    %.0f WCU per 1,000 changes, %d reports, %.0f changes/s, %d report differences", row.AggregationUnits(), row.Reports, row.Throughput(), row.Diffs)
		r.res.Periods = append(r.res.Periods, pr)
	}
	return nil
}

// RebucketRow is one rebucket measurement: a table's history, stamped in
// From and folded by the poller, moved into To by rebucket.Run, then the
// moves drained by the poller at batch Batch.
type RebucketRow struct {
	Transactions, Branches int
	From, To               string
	Batch                  int
	// Result is what rebucket.Run returned (its WriteUnits are DynamoDB
	// Local's ConsumedCapacity), Took how long it ran, Cost its writes as
	// the meter billed them.
	Result rebucket.Result
	Took   time.Duration
	Cost   Cost
	// Records are the stream records the poller read after the rebucket:
	// the moves, the fold's own report writes before them (the reports
	// live in the table whose stream it reads) and its 1% duplicates.
	// ConsumerCost is its commits' writes, ConsumerTook until it had
	// applied the last move.
	Records      int
	ConsumerCost Cost
	ConsumerTook time.Duration
	// Diffs and Reports: reconcile afterwards; Unsettled counts the
	// transactions not in their branch's current calendar then.
	Diffs, Reports, Unsettled int
	// Again is a second run's result: it moves nothing.
	Again rebucket.Result
}

// PerSecond is the rebucket's transactions moved per second.
func (r RebucketRow) PerSecond() float64 { return float64(r.Result.Moved) / r.Took.Seconds() }

// UnitsPerMove is the rebucket's own WCU (metered) per transaction moved.
func (r RebucketRow) UnitsPerMove() float64 { return perMove(r.Cost.Units, r.Result.Moved) }

// ConsumerUnitsPerMove is the consumers' commit WCU per transaction moved.
func (r RebucketRow) ConsumerUnitsPerMove() float64 {
	return perMove(r.ConsumerCost.Units, r.Result.Moved)
}

func perMove(units, moved int) float64 {
	if moved == 0 {
		return 0
	}
	return float64(units) / float64(moved)
}

// rebucketWorkload is the history a rebucket measurement moves: workload
// b's transactions, inserts only, of a few branches.
var rebucketWorkload = WorkloadSpec{Name: "r", Description: "4 branches, 90 days, inserts", Branches: 4, Days: 90}

func rebucketTable(batch int) string { return fmt.Sprintf("bench-rebucket-%d", batch) }

// rebuckets runs the rebucket measurement at each of its consumers' batch
// sizes.
func (r *runner) rebuckets(ctx context.Context) error {
	for i, batch := range r.rebucketBatches() {
		r.logf("[%d/%d] rebucket: %d transactions of %d branches, default calendar (3 types) → %s; then the poller, batch %d", i+1, len(r.rebucketBatches()),
			r.cfg.RebucketTransactions, rebucketWorkload.Branches, Stamping{BenchCalendar(), sevenTypes}, batch)
		row, err := r.rebucket(ctx, batch)
		if err != nil {
			return fmt.Errorf("rebucket, batch %d: %w", batch, err)
		}
		r.logf("    rebucket: %d moved in %s (%.0f transactions/s), %d WCU (%.2f per transaction); consumers: %d records in %s, %d WCU (%.2f per transaction); %d report differences",
			row.Result.Moved, row.Took.Round(time.Millisecond), row.PerSecond(), row.Cost.Units, row.UnitsPerMove(),
			row.Records, row.ConsumerTook.Round(time.Millisecond), row.ConsumerCost.Units, row.ConsumerUnitsPerMove(), row.Diffs)
		r.res.Rebucket = append(r.res.Rebucket, row)
	}
	return nil
}

func (r *runner) rebucketBatches() []int {
	if r.cfg.RebucketTransactions <= 0 {
		return nil
	}
	if len(r.cfg.RebucketBatches) == 0 {
		return []int{defaultPollerBatch}
	}
	return r.cfg.RebucketBatches
}

// rebucket measures one rebucket: the history written in the default
// calendar with 3 period types and folded by the poller; the branches'
// calendar and the tenant's period types changed as the writer's PATCH
// changes them; rebucket.Run under a meter that knows the table; the poller
// draining the moves under another; reconcile; a second run.
func (r *runner) rebucket(ctx context.Context, batch int) (RebucketRow, error) {
	n := r.cfg.RebucketTransactions
	from := Stamping{aggregates.DefaultCalendar(), threeTypes}
	to := Stamping{BenchCalendar(), sevenTypes}
	row := RebucketRow{Transactions: n, From: "default calendar (UTC), 3 types", To: to.String(), Batch: batch}
	ops, err := from.Stamp(rebucketWorkload.generateFrom(0, n, n, r.cfg.Seed))
	if err != nil {
		return row, err
	}
	var branches []string
	for _, op := range ops {
		if b := str(op.New[ledgertable.AttrBranchID]); !slices.Contains(branches, b) {
			branches = append(branches, b)
		}
	}
	row.Branches = len(branches)
	name := rebucketTable(batch)
	db, streams, stop, err := r.instance(ctx, name)
	if err != nil {
		return row, err
	}
	defer stop()
	if err := setCalendar(ctx, db, name, branches, from, time.Now()); err != nil {
		return row, err
	}
	if err := Load(ctx, db, name, ops, 1); err != nil {
		return row, err
	}
	arn, err := poller.ResolveStream(ctx, db, name)
	if err != nil {
		return row, err
	}
	t := target{db: db, streams: streams, table: name, window: r.window()}
	// The history's reports, as the consumers kept them.
	_, _, last, err := Drain(ctx, streams, arn, 1000)
	if err != nil {
		return row, err
	}
	if _, err := consume(ctx, t, arn, last, LedgerPoller, batch, nil); err != nil {
		return row, fmt.Errorf("fold the history: %w", err)
	}

	// The calendar changes a minute ago: the rebucket does not wait for
	// the writers' directory caches (there are no writers here).
	if err := setCalendar(ctx, db, name, branches, to, time.Now().Add(-time.Minute)); err != nil {
		return row, err
	}
	m := NewMeter(db)
	if err := m.Learn(ctx, name); err != nil {
		return row, err
	}
	start := time.Now()
	row.Result, err = rebucket.Run(ctx, m, name, tenant, "", rebucket.Options{Settle: -1})
	row.Took = time.Since(start)
	if err != nil {
		return row, err
	}
	row.Cost = m.Cost()
	if err := errors.Join(m.Err(), m.Check(ctx, name)); err != nil {
		return row, err
	}

	// The consumers move the money: the poller drains the MODIFY records.
	if _, _, last, err = Drain(ctx, streams, arn, 1000); err != nil {
		return row, err
	}
	t.meter = NewMeter(db)
	if err := t.meter.Learn(ctx, name); err != nil {
		return row, err
	}
	got, err := consume(ctx, t, arn, last, LedgerPoller, batch, nil)
	if err != nil {
		return row, fmt.Errorf("drain the moves: %w", err)
	}
	row.Records, row.ConsumerCost, row.ConsumerTook = got.delivered, got.cost, got.took

	diffs, stats, err := processor.Reconcile(ctx, db, name, processor.Scope{})
	if err != nil {
		return row, err
	}
	row.Diffs, row.Reports = len(diffs), stats.Reports
	for _, u := range stats.Unsettled {
		row.Unsettled += u
	}
	row.Again, err = rebucket.Run(ctx, db, name, tenant, "", rebucket.Options{Settle: -1})
	return row, err
}

// setCalendar puts the tenant's item with s's period types and each
// branch's item with s's calendar, changed at, as the writer's PATCH
// leaves them.
func setCalendar(ctx context.Context, db *dynamodb.Client, name string, branches []string, s Stamping, at time.Time) error {
	changed := sAV(at.UTC().Format(time.RFC3339Nano))
	ten := ledgertable.Key(aggregates.TenantKey(tenant))
	ten[ledgertable.AttrEntityType] = sAV(aggregates.EntityTenant)
	ten[ledgertable.AttrReportPeriods] = ledgertable.EncodeReportPeriods(s.Periods)
	ten[ledgertable.AttrReportPeriodsChangedAt] = changed
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &name, Item: ten}); err != nil {
		return fmt.Errorf("put tenant %s: %w", tenant, err)
	}
	for _, b := range branches {
		item := ledgertable.Key(aggregates.BranchKey(tenant, b))
		item[ledgertable.AttrEntityType] = sAV(aggregates.EntityBranch)
		item[ledgertable.AttrCalendarChangedAt] = changed
		maps.Copy(item, ledgertable.EncodeCalendar(s.Calendar))
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &name, Item: item}); err != nil {
			return fmt.Errorf("put branch %s: %w", b, err)
		}
	}
	return nil
}

// calendarMarkdown writes issue 22's tables.
func (res *Result) calendarMarkdown(p func(format string, args ...any)) {
	if len(res.Periods) > 0 {
		c := BenchCalendar()
		p("### Period types (issue 22): workload b stamped in %s's calendar (days from %s, fiscal years from month %d), ledger's poller, 1%% of the records delivered twice\n\n",
			c.TimeZone, aggregates.FormatDayStart(c.DayStartsAt), int(c.FiscalYearStartMonth))
		p("| period types | stamp | batch | changes | write requests / 1k changes | item writes / 1k changes | WCU / 1k changes (AWS billing) | ÷ 3 types | reports afterwards | changes/s end to end | reports exact afterwards | writer's own WCU / 1k changes | stamp bytes per transaction |\n")
		p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
		for _, r := range res.Periods {
			stamp := r.Stamping
			if stamp == "" {
				stamp = "none (UTC dates, as before issue 22)"
			}
			ratio := "—"
			if base, ok := res.periodRow(3, r.Batch); ok {
				ratio = fmt.Sprintf("%.2f", r.AggregationUnits()/base.AggregationUnits())
			}
			p("| %s | %s | %d | %d | %.0f | %.0f | %.0f | %s | %d | %.0f | %s | %.0f | %.0f |\n",
				typeNames(r.Types), stamp, r.Batch, r.Changes, per1000(float64(r.Cost.Writes()), r.Changes), per1000(float64(r.Cost.ItemWrites), r.Changes),
				r.AggregationUnits(), ratio, r.Reports, r.Throughput(), exactness(r.Row), per1000(float64(r.WriterUnits), r.Changes), r.StampBytes)
		}
		p("\n")
		for _, batch := range res.periodBatches() {
			three, ok3 := res.periodRow(3, batch)
			five, ok5 := res.periodRow(5, batch)
			seven, ok7 := res.periodRow(7, batch)
			if ok3 && ok5 && ok7 {
				p("At batch %d: 5 types cost %.2f× the write units of 3, and 7 types %.2f× (%.0f, %.0f and %.0f WCU per 1,000 changes).  \n",
					batch, five.AggregationUnits()/three.AggregationUnits(), seven.AggregationUnits()/three.AggregationUnits(),
					three.AggregationUnits(), five.AggregationUnits(), seven.AggregationUnits())
			}
		}
		p("Write units are exact for the seeded workload; changes per second are this machine's under its load at the time.\n\n")
	}
	if len(res.Rebucket) > 0 {
		r0 := res.Rebucket[0]
		p("### rebucket (issue 22): %d transactions of %d branches moved from the %s into %s, then the moves drained by the poller\n\n", r0.Transactions, r0.Branches, r0.From, r0.To)
		p("| consumers' batch | transactions | moved | rebucket took | transactions/s | rebucket WCU (AWS billing) | DynamoDB Local reported | WCU per moved transaction | stream records read | poller took | moves applied/s | poller's WCU | WCU per moved transaction | total WCU per moved transaction | reports exact afterwards | second run moved |\n")
		p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n")
		for _, r := range res.Rebucket {
			exact := fmt.Sprintf("yes (%d reports)", r.Reports)
			if r.Diffs > 0 || r.Unsettled > 0 {
				exact = fmt.Sprintf("**no**: %d of %d reports differ, %d transactions not in their calendar", r.Diffs, r.Reports, r.Unsettled)
			}
			p("| %d | %d | %d | %s | %.0f | %d | %.0f | %.2f | %d | %s | %.0f | %d | %.2f | %.2f | %s | %d |\n",
				r.Batch, r.Result.Transactions, r.Result.Moved, r.Took.Round(time.Millisecond), r.PerSecond(), r.Cost.Units, r.Result.WriteUnits, r.UnitsPerMove(),
				r.Records, r.ConsumerTook.Round(time.Millisecond), float64(r.Result.Moved)/r.ConsumerTook.Seconds(), r.ConsumerCost.Units, r.ConsumerUnitsPerMove(),
				r.UnitsPerMove()+r.ConsumerUnitsPerMove(), exact, r.Again.Moved)
		}
		p("\nrebucket ran with its defaults (8 transactions at once, one conditional UpdateItem each), the poller after it, not beside it: a poller committing while a rebucket runs commits smaller batches, at a higher cost per move. The stream records the poller read include the report writes of its fold of the history (the reports live in the same table). Throughput is DynamoDB Local's on this machine (%d CPUs, shared), not AWS's; write units are exact.\n\n", res.Machine.CPUs)
	}
}

// periodRow finds the stamped period-types row of n types at batch.
func (res *Result) periodRow(n, batch int) (PeriodRow, bool) {
	for _, r := range res.Periods {
		if r.Stamping != "" && len(r.Types) == n && r.Batch == batch {
			return r, true
		}
	}
	return PeriodRow{}, false
}

func (res *Result) periodBatches() []int {
	var out []int
	for _, r := range res.Periods {
		if len(out) == 0 || out[len(out)-1] != r.Batch {
			out = append(out, r.Batch)
		}
	}
	return out
}

func typeNames(ts []aggregates.PeriodType) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return fmt.Sprintf("%d: %s", len(ts), strings.Join(s, ", "))
}
