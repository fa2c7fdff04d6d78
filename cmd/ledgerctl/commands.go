package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/cmd/internal/progress"
	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// environment is what every command shares: the table, the environment and
// the output streams.
type environment struct {
	table          string
	coordination   string // the coordination table: checkpoints and leases
	getenv         func(string) string
	stdout, stderr io.Writer
	client         *dynamodb.Client
}

func (e *environment) dynamo(ctx context.Context) (*dynamodb.Client, error) {
	if e.client != nil {
		return e.client, nil
	}
	var opts []func(*config.LoadOptions) error
	if ep := e.getenv("AWS_ENDPOINT_URL"); ep != "" {
		opts = append(opts, config.WithBaseEndpoint(ep))
	}
	cfg, err := infra.LoadConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	e.client = dynamodb.NewFromConfig(cfg)
	return e.client, nil
}

func (e *environment) fail(err error) int {
	fmt.Fprintf(e.stderr, "ledgerctl: %v\n", err)
	return exitError
}

func (e *environment) flags(name, help string) *flag.FlagSet {
	fs := flag.NewFlagSet("ledgerctl "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: ledgerctl %s [flags]\n\n%s\n", name, help)
		fs.PrintDefaults()
	}
	return fs
}

func (e *environment) tableCreate(ctx context.Context, args []string) int {
	fs := e.flags("table create", "Creates the table named by LEDGER_TABLE with ledger's keys, indexes, stream\n(NEW_AND_OLD_IMAGES) and TTL, and the default flags item (writes enabled).\nAn existing table is left as it is (its TTL is enabled if off).")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	c, err := e.dynamo(ctx)
	if err != nil {
		return e.fail(err)
	}
	if err := table.CheckCoordinationTable(e.table, e.coordination); err != nil {
		return e.fail(err)
	}
	created, err := table.CreateTable(ctx, c, e.table)
	if err != nil {
		return e.fail(err)
	}
	if created {
		fmt.Fprintf(e.stdout, "table %s created\n", e.table)
	} else {
		fmt.Fprintf(e.stdout, "table %s already exists\n", e.table)
	}
	created, err = table.CreateCoordinationTable(ctx, c, e.coordination, true)
	if err != nil {
		return e.fail(err)
	}
	if created {
		fmt.Fprintf(e.stdout, "coordination table %s created\n", e.coordination)
	} else {
		fmt.Fprintf(e.stdout, "coordination table %s already exists\n", e.coordination)
	}
	return exitOK
}

func (e *environment) tableDescribe(ctx context.Context, args []string) int {
	fs := e.flags("table describe", "Prints the table's keys, indexes, stream and TTL, and exits 1 when they differ\nfrom ledger's definition.")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	c, err := e.dynamo(ctx)
	if err != nil {
		return e.fail(err)
	}
	info, err := table.DescribeTable(ctx, c, e.table)
	if err != nil {
		return e.fail(err)
	}
	fmt.Fprintf(e.stdout, "%+v\n", info)
	if err := info.Validate(); err != nil {
		fmt.Fprintf(e.stdout, "differs from ledger's definition: %v\n", err)
		return exitDiff
	}
	if err := table.ValidateCoordinationTable(ctx, c, e.coordination); err != nil {
		fmt.Fprintf(e.stdout, "coordination table: %v\n", err)
		return exitDiff
	}
	fmt.Fprintf(e.stdout, "coordination table %s: ok\n", e.coordination)
	return exitOK
}

// inFlight reads the consumers' guards and the stream (processor.InFlight).
func (e *environment) inFlight(ctx context.Context, c *dynamodb.Client, maxRecords int) (processor.InFlightResult, error) {
	arn, err := poller.ResolveStream(ctx, c, e.table)
	if err != nil {
		return processor.InFlightResult{}, err
	}
	streams, err := e.streams(ctx)
	if err != nil {
		return processor.InFlightResult{}, err
	}
	p, err := processor.New(c, processor.Config{Table: e.table, CoordinationTable: e.coordination}, nil)
	if err != nil {
		return processor.InFlightResult{}, err
	}
	return p.InFlight(ctx, streams, arn, maxRecords)
}

// withoutInFlight drops the differences of branches with a transaction
// record no consumer guard has committed yet (processor.InFlight), naming
// them on stdout; it returns what is left and how many it dropped.
// The roll-up differences are kept (RepairRollups holds their periods in
// flight, with fl).
func (e *environment) withoutInFlight(ctx context.Context, c *dynamodb.Client, diffs []processor.Difference, maxRecords int) (keep []processor.Difference, dropped int, fl processor.InFlightResult, err error) {
	if len(diffs) == 0 {
		return nil, 0, fl, nil
	}
	if fl, err = e.inFlight(ctx, c, maxRecords); err != nil {
		return nil, 0, fl, err
	}
	for _, d := range diffs {
		s := processor.Scope{Tenant: d.Report.Tenant, Branch: d.Report.Branch}
		if d.Stray != nil || d.Rollup != nil || fl.Settled(s) {
			keep = append(keep, d)
			continue
		}
		switch {
		case fl.Truncated:
			fmt.Fprintf(e.stdout, "left alone (more than %d stream records to check; raise --max-records): %s\n", maxRecords, d.Report)
		case len(fl.Unpositioned) > 0:
			fmt.Fprintf(e.stdout, "left alone (shards %v have no committed position yet: a consumer opened them at LATEST; repair after its first commit): %s\n", fl.Unpositioned, d.Report)
		default:
			fmt.Fprintf(e.stdout, "left alone (%d records of its branch in flight): %s\n", fl.Branches[s], d.Report)
		}
	}
	return keep, len(diffs) - len(keep), fl, nil
}

// reconcileProgress feeds m from processor.ReconcileWith's progress: the
// key scan's items while it runs (no total yet), then branches done of the
// branches found.
func reconcileProgress(m progress.Meter) func(processor.ReconcileProgress) {
	return func(p processor.ReconcileProgress) {
		if p.Scanning {
			m.Set(int64(p.Scanned), 0, fmt.Sprintf("scanning keys: %d items", p.Scanned))
			return
		}
		m.Set(int64(p.BranchesDone), int64(p.Branches), fmt.Sprintf("%d/%d branches, %d transactions, %d differences",
			p.BranchesDone, p.Branches, p.Transactions, p.Differences))
	}
}

// unsettled lists the branches with transactions not in their current
// calendar, in order.
func unsettled(stats processor.ReconcileStats) []processor.Scope {
	return slices.SortedFunc(maps.Keys(stats.Unsettled), func(a, b processor.Scope) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Branch, b.Branch))
	})
}

// printCalendarNotes prints what reconcile found of the stamps: branches
// whose history is not in their current calendar (not differences: the
// reports count every transaction where its stamp says), and calendars
// that do not decode.
func printCalendarNotes(w io.Writer, stats processor.ReconcileStats) {
	for _, b := range unsettled(stats) {
		fmt.Fprintf(w, "not in its current calendar: %d transactions of %s/%s (ledgerctl rebucket --tenant %s --branch %s moves them)\n",
			stats.Unsettled[b], b.Tenant, b.Branch, b.Tenant, b.Branch)
	}
	for _, msg := range stats.CalendarErrors {
		fmt.Fprintf(w, "calendar not checked: %s\n", msg)
	}
}

// reconcileView is what reconcile --json prints: one JSON object.
type reconcileView struct {
	Table        string           `json:"table"`
	Transactions int              `json:"transactions"`
	Invalid      int              `json:"invalid"`
	Reports      int              `json:"reports"`
	Differences  []differenceView `json:"differences"`
	// Unstamped and Unsettled: processor.ReconcileStats (not differences).
	Unstamped      int             `json:"unstamped"`
	Unsettled      []unsettledView `json:"unsettled"`
	CalendarErrors []string        `json:"calendarErrors,omitempty"`
	// ItemsRead and ReadUnits: what the reconcile read (every Scan and
	// Query page's ScannedCount and consumed read units).
	ItemsRead int     `json:"itemsRead"`
	ReadUnits float64 `json:"readUnits"`
	// RollupWaiting: per tenant, the roll-up delta items waiting in its
	// lanes for their fold (processor.ReconcileStats); RollupStuck: those
	// of them named stuck (--quiescent, --stuck-after), each in its
	// roll-up's difference.
	RollupWaiting map[string]int `json:"rollupWaiting,omitempty"`
	RollupStuck   map[string]int `json:"rollupStuck,omitempty"`
}

// stuckView is a roll-up delta item stuck in its lane: its key and when
// it was put (its updatedAt; absent when it has none readable).
type stuckView struct {
	PK    string `json:"pk"`
	SK    string `json:"sk"`
	Since string `json:"since,omitempty"`
}

// unsettledView is a branch with transactions not in its current calendar.
type unsettledView struct {
	Tenant       string `json:"tenant"`
	Branch       string `json:"branch"`
	Transactions int    `json:"transactions"`
}

// differenceView is one difference: the item's key, the report it is
// (none for a stray item) and what differs.
type differenceView struct {
	PK     string `json:"pk"`
	SK     string `json:"sk"`
	Tenant string `json:"tenant,omitempty"`
	Branch string `json:"branch,omitempty"`
	Period string `json:"period,omitempty"`
	Stray  bool   `json:"stray,omitempty"`
	// Rollup, Currency: a tenant roll-up's difference (Tenant, Currency,
	// Period; no Branch; PK and SK are lane 0's partial key, the roll-up
	// being the sum of all 32).
	Rollup   bool     `json:"rollup,omitempty"`
	Currency string   `json:"currency,omitempty"`
	Parked   int      `json:"parked,omitempty"`
	Problems []string `json:"problems,omitempty"`
	// Stuck: a roll-up's delta items stuck in their lanes, not late
	// (processor.RollupDifference.Stuck).
	Stuck []stuckView `json:"stuck,omitempty"`
	Lines []string    `json:"lines"`
}

func newReconcileView(table string, stats processor.ReconcileStats, diffs []processor.Difference) reconcileView {
	v := reconcileView{Table: table, Transactions: stats.Transactions, Invalid: stats.Invalid, Reports: stats.Reports,
		Differences: make([]differenceView, 0, len(diffs)), Unstamped: stats.Unstamped, Unsettled: []unsettledView{},
		CalendarErrors: stats.CalendarErrors, ItemsRead: stats.ItemsRead, ReadUnits: stats.ReadUnits, RollupWaiting: stats.RollupWaiting, RollupStuck: stats.RollupStuck}
	for _, b := range unsettled(stats) {
		v.Unsettled = append(v.Unsettled, unsettledView{Tenant: b.Tenant, Branch: b.Branch, Transactions: stats.Unsettled[b]})
	}
	for _, d := range diffs {
		dv := differenceView{Parked: d.Parked, Problems: d.Problems, Lines: d.Lines}
		switch {
		case d.Stray != nil:
			dv.PK, dv.SK, dv.Stray = d.Stray.PK, d.Stray.SK, true
		case d.Rollup != nil:
			dv.Rollup, dv.Tenant, dv.Currency, dv.Period = true, d.Rollup.Tenant, d.Rollup.Currency, d.Rollup.Period.String()
			for _, w := range d.Rollup.Stuck {
				sv := stuckView{PK: w.Key.PK, SK: w.Key.SK}
				if !w.Since.IsZero() {
					sv.Since = w.Since.UTC().Format(time.RFC3339Nano)
				}
				dv.Stuck = append(dv.Stuck, sv)
			}
			if d.Rollup.Period.Type != "" {
				k := aggregates.RollupKey{Tenant: d.Rollup.Tenant, Currency: d.Rollup.Currency, Period: d.Rollup.Period}.Key()
				dv.PK, dv.SK = k.PK, k.SK
			}
		default:
			k := d.Report.Key()
			dv.PK, dv.SK = k.PK, k.SK
			dv.Tenant, dv.Branch, dv.Period = d.Report.Tenant, d.Report.Branch, d.Report.Period.String()
		}
		v.Differences = append(v.Differences, dv)
	}
	return v
}

const reconcileHelp = `Recomputes every report of one branch (--tenant and --branch) or of the whole
table from the transactions stored in it and prints each report whose stored
figures differ, whose items are malformed (wrong types, unknown attributes,
oversized, entries without a report) or that holds parked deltas, and each
stray item of a report partition (a key ledger never writes: not a report,
an entry or a parked delta). Exit status: 0 no difference, 1
differences found (repaired or not), 2 error (trouble reaching the table).
The whole table is read with a parallel Scan of the keys, then branch by
branch (--parallel at a time), in bounded memory; progress goes to stderr
(a line in place on a terminal, else a line every LEDGER_PROGRESS_EVERY,
5s). The last line counts the items read (every item of the table once for
the key Scan, each branch's again) and the read units DynamoDB reported.
--json prints one JSON object instead: the counts, itemsRead, readUnits and
the differences (a read-only reconcile: not with --repair).

Safe while consumers run: without --repair it only reads (consistent reads).
A report touched by a change still in the stream shows as a difference until
the consumer catches up; run it again after the stream lag to confirm.

With --repair, each branch with a difference whose applied item holds
fencedAt (rebased since the fence: --rebase below) gets the counted repair
(docs/exactly-once.md, "R as built (session 26)"): exact while consumers
run and writers write, with no timing assumption, or left alone by name
("left alone (…)": changes written and not yet committed, run again; a
foreign write, a hard delete, no fencedAt, a rebase running, a batch
half-committed: rebase or finish it). It reads no stream. It writes branch
reports only: when their figures change it names the tenant's roll-ups as
unproven. A branch without fencedAt is left alone, naming the rebase,
unless --uncounted, which gives it (and only it) the repair of protocol 3
described next, with the promise it always had: none while writes go on.
Stray items and roll-up differences are handled as described next.

The repair of protocol 3 (--uncounted, strays, roll-ups) reads twice, --settle apart, keeps the differences that are
the same in both reads, and then reads the consumers' guards and the stream
(at most --max-records records): a branch with a transaction record no guard
has committed yet (a tumbling window not yet final, a half-committed batch
of a dead poller, a stuck shard, a Lambda batch not yet delivered) is left
alone, because repairing it now would count that record again when it
commits. Each other report is rewritten with a conditional write that fails
if a consumer updated it meanwhile (skipped and counted). A stray item found
in both reads is deleted and named ("deleted stray item"); nothing in ledger
reads or writes it, so its absence changes no report. While writes
continue this can count a change twice, even when every stream record is
readable well within --settle (issue 25: a commit whose records cancel on a
report between the reads, or a record readable only after the in-flight
check; docs/exactly-once.md, "Repairing while consumers run"). For an
exact repair, and for a busy branch, which always has records in flight:
disable writes (ledgerctl flags set writesEnabled=false), let the
consumers drain, repair, enable writes. --repair is refused when the flags
item names a higher protocol than this version's (4): reading works under
any (docs/runbook.md, "Protocols").

Tenant roll-ups (--rollups, on by default; whole table only): each roll-up
(tenant, currency, period) is compared with the tenant's transactions: its
32 partials + the roll-up deltas waiting in its lanes + parked roll-up
deltas. It names a difference, a damaged partial, parked roll-up deltas, a
branch count that is not the number of branch reports with a non-zero
count, and strays (keys that can never be valid). --repair moves damaged
partials and parked roll-up deltas into a lane (exact while consumers run),
deletes strays, and passes each parked branch delta's roll-up share on as
it deletes it; a difference of figures or branches is put as a repair
delta only with --quiescent, which is refused while writes are enabled
(ledgerctl flags set writesEnabled=false, wait for ledgerctl lag at zero,
then repair; docs/runbook.md, "Repairing tenant roll-ups"). A period that a
record in flight names is left alone; the tenant's other periods are
repaired.

A roll-up delta waiting in a lane is counted as stored, but a roll-up read
(the partials only) lacks it until its lane's consumer folds it. One that no
consumer will fold (read by a consumer with roll-ups off, or its record
trimmed unread) is stuck, not late, and is named as a difference of its
roll-up with its key ("stuck delta …"), exit 1: one older than --stuck-after
(its updatedAt, default 1h: twice the longest a running consumer makes a
delta wait), and with --quiescent every one (writes disabled, which is
checked, and the consumers drained, which you assert: ledgerctl lag at zero;
without --repair reconcile reads no stream). --repair --quiescent re-delivers them through a
lane (a period a record in flight names is held), for consumers with
roll-ups on to fold (docs/runbook.md, "Turning tenant roll-ups on or off").` + rebaseHelp

func (e *environment) reconcile(ctx context.Context, args []string) int {
	fs := e.flags("reconcile", reconcileHelp)
	tenant := fs.String("tenant", "", "tenant id (with --branch; default: every branch)")
	branch := fs.String("branch", "", "branch id (with --tenant)")
	repair := fs.Bool("repair", false, "rewrite the reports that differ (see above)")
	rollups := fs.Bool("rollups", true, "judge the tenant roll-ups too (whole table only)")
	quiescent := fs.Bool("quiescent", false, "the runbook's quiescent procedure holds (writes disabled, checked; consumers drained, asserted): name every roll-up delta waiting in a lane as stuck; with --repair, re-deliver them and put roll-up differences as repair deltas")
	stuckAfter := fs.Duration("stuck-after", processor.DefaultRollupStuckAfter, "name a roll-up delta waiting in a lane longer than this `DURATION` as stuck (0: never by age)")
	settle := fs.Duration("settle", 10*time.Second, "with --repair: time between the two reads")
	parallel := fs.Int("parallel", 4, "Scan segments and branches checked at once (1–64)")
	maxRecords := fs.Int("max-records", 1_000_000, "with --repair: read at most `N` stream records for the in-flight check (more: repair nothing)")
	uncounted := fs.Bool("uncounted", false, "with --repair: repair the branches not rebased since the fence (no fencedAt) with the repair of protocol 3 (two reads --settle apart): not exact while consumers run and writers write; exact only under the quiescent procedure (see above)")
	asJSON := fs.Bool("json", false, "print the counts and the differences as one JSON object (not with --repair)")
	rebase := fs.Bool("rebase", false, "with --repair, --tenant and --branch: rebase the branch (see Rebase below)")
	abandon := fs.String("abandon", "", "with --rebase: clear the rebase `ID` of the branch (its process died) and release its --hold")
	wait := fs.Duration("wait", 15*time.Minute, "with --rebase: wait at most this `DURATION` for the consumers to commit the probes")
	rounds := fs.Int("rounds", 5, "with --rebase: start again at most `N` times when the branch is written meanwhile")
	streamARN := fs.String("stream-arn", "", "with --rebase: the stream `ARN` whose checkpoints open marks name (default: the table's latest stream)")
	dropMalformed := fs.Bool("drop-malformed-open", false, "with --rebase: remove the branch's open marks that name no batch (not {label}~{shard}~{to}: written by no consumer) under the pin, as stale ones")
	hold := fs.Bool("hold", false, "with --rebase: hold the branch's transaction writes while it rebases (the writers answer 503; liveness only)")
	holdWait := fs.Duration("hold-wait", 10*time.Second, "with --hold: wait this `DURATION` for the writers to see the hold (their directory TTL, 5s by default) before B1")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if *dropMalformed && !*rebase {
		return e.fail(errors.New("reconcile: --drop-malformed-open goes with --repair --rebase"))
	}
	if *rebase || *abandon != "" {
		if !*rebase || !*repair {
			return e.fail(errors.New("reconcile: --rebase and --abandon go with --repair --rebase"))
		}
		if fs.NArg() > 0 {
			return e.fail(fmt.Errorf("reconcile: unexpected argument %q", fs.Arg(0)))
		}
		var hw time.Duration
		if *hold {
			hw = max(*holdWait, time.Nanosecond)
		}
		return e.rebaseBranch(ctx, *tenant, *branch, *abandon, *streamARN, *wait, *rounds, hw, *dropMalformed)
	}
	if *asJSON && *repair {
		return e.fail(errors.New("reconcile: --json describes what a read-only reconcile found; run --repair without it"))
	}
	if fs.NArg() > 0 {
		return e.fail(fmt.Errorf("reconcile: unexpected argument %q", fs.Arg(0)))
	}
	if (*tenant == "") != (*branch == "") {
		return e.fail(errors.New("reconcile: give both --tenant and --branch, or neither"))
	}
	c, err := e.dynamo(ctx)
	if err != nil {
		return e.fail(err)
	}
	if *parallel < 1 || *parallel > 64 {
		return e.fail(errors.New("reconcile: --parallel must be from 1 to 64"))
	}
	if *stuckAfter < 0 {
		return e.fail(errors.New("reconcile: --stuck-after must not be negative (0: never by age)"))
	}
	stuckSet := false
	fs.Visit(func(f *flag.Flag) { stuckSet = stuckSet || f.Name == "stuck-after" })
	if (*quiescent || stuckSet) && !(*rollups && scope0(*tenant, *branch)) {
		return e.fail(errors.New("reconcile: --quiescent and --stuck-after judge roll-up deltas: whole table only, with --rollups"))
	}
	if *repair {
		// A repair of this version writes its own layouts and counts
		// nothing: under a later protocol (the counted repair's fence,
		// docs/exactly-once.md, "Cost to build, and the order", X) it is
		// not this version's to write. Reading works under any protocol.
		if err := e.refuseAboveProtocol(ctx, c, "reconcile --repair", "; reconcile without --repair reads either"); err != nil {
			return e.fail(err)
		}
	}
	if *quiescent {
		// The procedure's first step is checked, not assumed; the second
		// (the consumers drained) is the in-flight check below, per period.
		f, err := table.GetFlags(ctx, c, e.table)
		if err != nil {
			return e.fail(fmt.Errorf("reconcile: read the flags: %w", err))
		}
		if f.WritesEnabled() {
			return e.fail(errors.New("reconcile: --quiescent, but writes are enabled: disable them (ledgerctl flags set writesEnabled=false), let the consumers drain (ledgerctl lag at zero), then reconcile or repair (docs/runbook.md, \"Repairing tenant roll-ups\")"))
		}
	}
	scope := processor.Scope{Tenant: *tenant, Branch: *branch}
	m := e.meter("reconcile")
	opts := processor.ReconcileOptions{Parallel: *parallel, Progress: reconcileProgress(m), Rollups: *rollups && scope.Tenant == "",
		Quiescent: *quiescent, StuckAfter: *stuckAfter}
	if *stuckAfter == 0 {
		opts.StuckAfter = -1 // never by age
	}
	diffs, stats, err := processor.ReconcileWith(ctx, c, e.table, scope, opts)
	m.Stop()
	if err != nil {
		return e.fail(err)
	}
	if *asJSON {
		b, err := json.MarshalIndent(newReconcileView(e.table, stats, diffs), "", "  ")
		if err != nil {
			return e.fail(err)
		}
		fmt.Fprintln(e.stdout, string(b))
		if len(diffs) > 0 {
			return exitDiff
		}
		return exitOK
	}
	for _, d := range diffs {
		fmt.Fprintln(e.stdout, d)
	}
	printCalendarNotes(e.stdout, stats)
	printWaiting(e.stdout, stats, *quiescent, *stuckAfter)
	fmt.Fprintf(e.stdout, "%d transactions (%d invalid), %d reports, %d differences; read %d items, %s read units\n",
		stats.Transactions, stats.Invalid, stats.Reports, len(diffs), stats.ItemsRead, strconv.FormatFloat(stats.ReadUnits, 'f', -1, 64))
	redeliver := *repair && *quiescent && waitingDeltas(stats) > 0
	if len(diffs) == 0 && !redeliver {
		return exitOK
	}
	if !*repair {
		return exitDiff
	}
	// The counted repair, branch by branch, for every branch rebased since
	// the fence; the others are left alone by name, or kept for the repair
	// of protocol 3 with --uncounted (docs/exactly-once.md, "R as built
	// (session 26)").
	found := len(diffs) > 0
	diffs, handled, passedOn, err := e.countedRepairs(ctx, c, diffs, *uncounted)
	if err != nil {
		return e.fail(err)
	}
	if len(diffs) == 0 && !redeliver {
		return exitDiff
	}
	fmt.Fprintf(e.stdout, "reading again in %s before repairing…\n", *settle)
	select {
	case <-ctx.Done():
		return e.fail(ctx.Err())
	case <-time.After(*settle):
	}
	m = e.meter("reconcile (again)")
	opts.Progress = reconcileProgress(m)
	again, againStats, err := processor.ReconcileWith(ctx, c, e.table, scope, opts)
	m.Stop()
	if err != nil {
		return e.fail(err)
	}
	settled := processor.Settled(diffs, again)
	// The branches the counted repair handled are not in diffs: their
	// differences in the second read are not "changed during the check".
	againKept := 0
	for _, d := range again {
		if !branchDiff(d, handled) {
			againKept++
		}
	}
	settled, inFlight, fl, err := e.withoutInFlight(ctx, c, settled, *maxRecords)
	if err != nil {
		return e.fail(err)
	}
	res, err := processor.Repair(ctx, c, e.table, settled, time.Now())
	if err != nil {
		return e.fail(err)
	}
	if *quiescent {
		// The waiting deltas are re-delivered before any repair delta is
		// put: RedeliverWaiting re-puts every item in the tenant's lanes,
		// and would take a repair delta just put (whose record is not in
		// fl) for a waiting one, folded twice. A re-delivered delta stays
		// in a lane, so the differences (which count it) still hold.
		held := func(rc processor.RollupCell) bool { return !fl.PeriodSettled(rc) }
		if len(settled) == 0 && waitingDeltas(againStats) > 0 {
			// Nothing differs, so withoutInFlight read no stream: read it
			// for the waiting deltas.
			if fl, err = e.inFlight(ctx, c, *maxRecords); err != nil {
				return e.fail(err)
			}
		}
		for _, t := range slices.Sorted(maps.Keys(againStats.RollupWaiting)) {
			if passedOn[t] {
				// A share the counted repair just put in a lane is no
				// waiting delta, and its record may not be readable
				// yet: re-put, it would be folded twice (session 27).
				fmt.Fprintf(e.stdout, "not re-delivered (the counted repair passed on parked roll-up shares of %s in this run: run reconcile --repair --quiescent again once ledgerctl lag is at zero)\n", t)
				continue
			}
			n, err := processor.RedeliverWaiting(ctx, c, e.table, t, time.Now(), held)
			if err != nil {
				return e.fail(err)
			}
			if n > 0 {
				fmt.Fprintf(e.stdout, "re-delivered %d roll-up delta items of %s that waited in their lanes unfolded (records trimmed, or read by consumers with roll-ups off)\n", n, t)
			}
		}
	}
	rres, err := processor.RepairRollups(ctx, c, e.table, settled, time.Now(), processor.RollupRepairOptions{
		Quiescent: *quiescent,
		Held:      func(rc processor.RollupCell) bool { return !fl.PeriodSettled(rc) },
	})
	if err != nil {
		return e.fail(err)
	}
	for _, rc := range rres.Held {
		fmt.Fprintf(e.stdout, "left alone (records in flight name this period): %s\n", rc)
	}
	for _, rc := range rres.Refused {
		fmt.Fprintf(e.stdout, "not repaired (%v; run with --quiescent once writes are disabled and the consumers drained): %s\n", processor.ErrNotQuiescent, rc)
	}
	for _, rc := range rres.TooLarge {
		fmt.Fprintf(e.stdout, "left alone (a damaged partial's items do not fit one transaction; docs/runbook.md, \"Repairing tenant roll-ups\"): %s\n", rc)
	}
	for _, rc := range rres.Skipped {
		fmt.Fprintf(e.stdout, "left alone (a roll-up item changed since it was read; run reconcile again): %s\n", rc)
	}
	for _, rc := range rres.Stuck {
		fmt.Fprintf(e.stdout, "not re-delivered (stuck roll-up deltas are put back through a lane only under the quiescent procedure: a late one would be folded twice; docs/runbook.md, \"Turning tenant roll-ups on or off\"): %s\n", rc)
	}
	if *rollups && scope.Tenant == "" {
		fmt.Fprintf(e.stdout, "roll-ups: moved %d damaged partials and %d parked deltas into a lane; put %d repair deltas; %d held, %d not repaired without --quiescent, %d changed since read\n",
			rres.Moved, rres.MovedParked, rres.Deltas, len(rres.Held), len(rres.Refused), len(rres.Skipped))
	}
	for _, k := range res.Deleted {
		fmt.Fprintf(e.stdout, "deleted stray item %s\n", k)
	}
	for _, k := range res.Partial {
		fmt.Fprintf(e.stdout, "partly repaired (a consumer committed between its transactions; run reconcile again): %s\n", k)
	}
	fmt.Fprintf(e.stdout, "repaired %d reports; deleted %d stray items; %d changed during the check and %d had records in flight and were left alone; %d skipped by a concurrent update; %d partly repaired\n",
		res.Repaired, len(res.Deleted), againKept-len(settled)-inFlight, inFlight, len(res.Skipped), len(res.Partial))
	if !found {
		return exitOK // only waiting deltas were re-delivered
	}
	return exitDiff
}

// scope0 says whether a reconcile's --tenant and --branch name the whole
// table.
func scope0(tenant, branch string) bool { return tenant == "" && branch == "" }

// printWaiting prints the line on the roll-up delta items found waiting in
// lanes: those named stuck (differences above) and the others, late.
func printWaiting(w io.Writer, stats processor.ReconcileStats, quiescent bool, stuckAfter time.Duration) {
	n := waitingDeltas(stats)
	if n == 0 {
		return
	}
	stuck := 0
	for _, s := range stats.RollupStuck {
		stuck += s
	}
	switch {
	case stuck == n:
		fmt.Fprintf(w, "%d roll-up delta items wait in lanes, every one stuck (named above): a roll-up read lacks them until reconcile --repair --quiescent re-delivers them to consumers with roll-ups on\n", n)
	case stuck > 0:
		fmt.Fprintf(w, "%d roll-up delta items wait in lanes for their fold: %d stuck (named above), %d younger than --stuck-after %s (counted: late, in flight to their lane's consumer)\n", n, stuck, n-stuck, stuckAfter)
	case stuckAfter == 0:
		fmt.Fprintf(w, "%d roll-up delta items wait in lanes for their fold (counted; not judged by age: --stuck-after 0; reconcile --quiescent, with writes disabled and ledgerctl lag at zero, names any that is stuck)\n", n)
	default:
		fmt.Fprintf(w, "%d roll-up delta items wait in lanes for their fold (counted; younger than --stuck-after %s: late, in flight to their lane's consumer; reconcile --quiescent, with writes disabled and ledgerctl lag at zero, names any that is stuck)\n", n, stuckAfter)
	}
}

// waitingDeltas is the number of roll-up delta items reconcile found
// waiting in lanes.
func waitingDeltas(stats processor.ReconcileStats) int {
	n := 0
	for _, w := range stats.RollupWaiting {
		n += w
	}
	return n
}
