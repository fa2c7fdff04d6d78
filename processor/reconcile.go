package processor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// ReconcileAPI is the part of the DynamoDB API reconcile uses.
type ReconcileAPI interface {
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Scope selects the branches to reconcile: one branch, or every branch of
// the table when Tenant and Branch are empty.
type Scope struct{ Tenant, Branch string }

// Difference is one report whose stored figures differ from the fold of the
// valid transactions in the table, or whose items are malformed or hold
// parked deltas; or (Stray set) an item of a report partition that is no
// report, entry or parked delta.
type Difference struct {
	Report   aggregates.ReportKey
	Stored   *aggregates.Report // nil when the report has no item
	Expected *aggregates.Report
	Lines    []string // problems, then "field: got stored; want expected"
	// Problems are the malformations of the stored items (infra's
	// StoredReport.Decode); Parked counts its parked deltas.
	Problems []string
	Parked   int
	// Stray is the key of an item that belongs to no report (Report,
	// Stored and Expected are then zero); a repair deletes it.
	Stray *aggregates.Key
	// Rollup is set for a tenant roll-up's difference (Report, Stored and
	// Expected are then zero; reconcile_rollup.go); RepairRollups heals it.
	Rollup *RollupDifference
	// stored is what was read; seen the report item's updatedAt as read,
	// the repair's condition.
	stored *table.StoredReport
	seen   ddbtypes.AttributeValue
	// currency is the report's roll-up currency (aggregates.RollupCurrency
	// of its transactions, else as stored): the repair keeps it on the
	// item, as the consumers' part 0 sets it.
	currency string
}

func (d Difference) String() string {
	if d.Stray != nil {
		return "stray item " + d.Stray.String() + "\n  " + strings.Join(d.Lines, "\n  ")
	}
	if d.Rollup != nil {
		return d.Rollup.RollupCell.String() + "\n  " + strings.Join(d.Lines, "\n  ")
	}
	return d.Report.String() + "\n  " + strings.Join(d.Lines, "\n  ")
}

// ReconcileStats counts what a reconcile read.
type ReconcileStats struct {
	Transactions, Invalid, Reports int
	// Deleted counts the tombstones of deleted transactions read (absent:
	// neither transactions nor invalid; design.md, "Transaction").
	Deleted int
	// Unstamped counts the valid transactions stored without a stamp
	// (aggregates.LegacyStamp: they count in their UTC date's DAILY,
	// MONTHLY and YEARLY reports). Unsettled counts, by branch, the valid
	// transactions whose stamp (or legacy periods) is not what their
	// branch's calendar and tenant's period types give them now: the
	// reports count them where their stamp says, and ledgerctl rebucket
	// moves them. Neither is a difference.
	Unstamped int
	Unsettled map[Scope]int
	// CalendarErrors names the branches whose stored calendar or tenant
	// period types do not decode (their stamps are not checked).
	CalendarErrors []string
	// RollupWaiting counts, per tenant, the roll-up delta items waiting in
	// its lanes for their fold (ReconcileOptions.Rollups): counted in the
	// roll-ups, not yet in the partials a reader sums. With the consumers
	// drained, one still waiting was never read from the stream (trimmed):
	// RedeliverWaiting puts it back through a lane.
	RollupWaiting map[string]int
	// RollupStuck counts, per tenant, the waiting roll-up delta items judged
	// stuck, not late (ReconcileOptions.Quiescent, StuckAfter): each is
	// named in its roll-up's difference (RollupDifference.Stuck).
	RollupStuck map[string]int
	// ItemsRead counts the items its Scan and Queries read (ScannedCount:
	// what DynamoDB bills, the key Scan's filtered-out items included), and
	// ReadUnits the read capacity units DynamoDB reported consuming
	// (ReturnConsumedCapacity TOTAL; 0 from an implementation that does not
	// report it). Every read is strongly consistent: 1 unit per started
	// 4 KB of the items a page read.
	ItemsRead int
	ReadUnits float64
}

func (s *ReconcileStats) add(o ReconcileStats) {
	s.Transactions += o.Transactions
	s.Invalid += o.Invalid
	s.Deleted += o.Deleted
	s.Reports += o.Reports
	s.Unstamped += o.Unstamped
	s.ItemsRead += o.ItemsRead
	s.ReadUnits += o.ReadUnits
	for b, n := range o.Unsettled {
		if s.Unsettled == nil {
			s.Unsettled = map[Scope]int{}
		}
		s.Unsettled[b] += n
	}
	s.CalendarErrors = append(s.CalendarErrors, o.CalendarErrors...)
	for t, n := range o.RollupWaiting {
		if s.RollupWaiting == nil {
			s.RollupWaiting = map[string]int{}
		}
		s.RollupWaiting[t] += n
	}
	for t, n := range o.RollupStuck {
		if s.RollupStuck == nil {
			s.RollupStuck = map[string]int{}
		}
		s.RollupStuck[t] += n
	}
}

// ReconcileOptions tune a reconcile of the whole table.
type ReconcileOptions struct {
	// Parallel is the number of Scan segments and of branches checked at
	// once (default 4).
	Parallel int
	// Progress, if set, is called (from one goroutine at a time) as the
	// reconcile advances: after each page of the scan, each page of a
	// branch's transactions and each branch.
	Progress func(ReconcileProgress)
	// Rollups judges the tenant roll-ups too (whole-table scope only: a
	// roll-up sums every branch of its tenant): differences with Rollup
	// set (reconcile_rollup.go). A tenant's oracle (its roll-ups by
	// currency and period) is kept until its last branch is done, then
	// the tenant is judged: about Parallel tenants' at once.
	Rollups bool
	// Quiescent says the runbook's quiescent procedure holds: writes
	// disabled and the consumers drained (asserted by the caller; ledgerctl
	// checks the first). Then no record that would fold a roll-up delta
	// item is in flight, and every item waiting in a lane is stuck: named
	// in its roll-up's difference (RollupDifference.Stuck;
	// docs/exactly-once.md, S17-R1).
	Quiescent bool
	// StuckAfter is the age (reconcile's clock less the item's updatedAt)
	// past which a waiting roll-up delta item is named stuck without the
	// quiescent procedure: 0 is DefaultRollupStuckAfter, < 0 never.
	StuckAfter time.Duration
	// Now is the clock the age is read on (default time.Now).
	Now func() time.Time
}

// ReconcileProgress is how far a reconcile has come.
type ReconcileProgress struct {
	Scanned       int // items seen by the key scan
	Branches      int // branches found (final once Scanning is false)
	BranchesDone  int
	Differences   int
	Scanning      bool
	Transactions  int // read so far, page by page
	ReportsLoaded int
}

// Reconcile recomputes every report in scope from the transactions in the
// table, with the same domain arithmetic as the consumers but none of their
// machinery (no stream, no guards, no deltas), and returns the reports whose
// stored figures differ, whose items are malformed or that hold parked
// deltas, sorted by key. A malformed item never stops it: it is a
// difference like any other. It only reads, with consistent reads; while
// consumers run, a difference can be a change still in flight (read again
// after the stream lag has passed to confirm it).
func Reconcile(ctx context.Context, api ReconcileAPI, tableName string, scope Scope) ([]Difference, ReconcileStats, error) {
	return ReconcileWith(ctx, api, tableName, scope, ReconcileOptions{})
}

// ReconcileWith is Reconcile with options. The whole table is read in two
// passes with bounded memory: a parallel Scan of the keys only finds the
// branches (a set of their ids is all it keeps), then the branches are
// reconciled Parallel at a time, each from one Query of its transactions
// and one of its reports, and forgotten. Memory is bounded by the number of
// branches and Parallel branches' reports, whatever the table's size.
func ReconcileWith(ctx context.Context, api ReconcileAPI, tableName string, scope Scope, opts ReconcileOptions) ([]Difference, ReconcileStats, error) {
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	rule := newStuckRule(opts)
	var mu sync.Mutex // guards progress, stats and the callback
	var progress ReconcileProgress
	report := func(change func(*ReconcileProgress)) {
		mu.Lock()
		defer mu.Unlock()
		change(&progress)
		if opts.Progress != nil {
			opts.Progress(progress)
		}
	}
	var branches []Scope
	var scanned ReconcileStats // the key Scan's reads
	rollupPKs := newRollupPartitions()
	// The roll-up oracle of a tenant is kept until its last branch is
	// done, then the tenant is judged and its oracle dropped: branches come
	// in tenant order, so about Parallel tenants' oracles are held at once.
	oracles := map[string]*rollupOracle{}
	remaining := map[string]int{}
	if opts.Rollups && scope.Tenant != "" {
		return nil, ReconcileStats{}, errors.New("reconcile: roll-ups are judged over the whole table only (a roll-up sums every branch of its tenant)")
	}
	switch {
	case scope.Tenant != "" && scope.Branch != "":
		branches = []Scope{scope}
	case scope.Tenant != "" || scope.Branch != "":
		return nil, ReconcileStats{}, errors.New("reconcile: a scope names both tenant and branch, or neither")
	default:
		report(func(p *ReconcileProgress) { p.Scanning = true })
		var err error
		if branches, err = scanBranches(ctx, api, tableName, opts.Parallel, rollupPKs, func(n int, units float64) {
			report(func(p *ReconcileProgress) {
				p.Scanned += n
				scanned.ItemsRead += n
				scanned.ReadUnits += units
			})
		}); err != nil {
			return nil, ReconcileStats{}, fmt.Errorf("reconcile %s: %w", tableName, err)
		}
	}
	report(func(p *ReconcileProgress) { p.Scanning, p.Branches = false, len(branches) })

	stats := scanned
	var diffs []Difference
	for _, b := range branches {
		remaining[b.Tenant]++
	}
	work := make(chan Scope)
	errc := make(chan error, opts.Parallel)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range opts.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				d, st, o, err := reconcileBranch(ctx, api, tableName, b, func(n int) {
					report(func(p *ReconcileProgress) { p.Transactions += n })
				})
				if err != nil {
					errc <- err
					cancel()
					return
				}
				var judge *rollupOracle // the tenant's, once its last branch is done
				report(func(p *ReconcileProgress) {
					p.BranchesDone++
					p.Differences += len(d)
					p.ReportsLoaded += st.Reports
					stats.add(st)
					diffs = append(diffs, d...)
					if opts.Rollups {
						if oracles[b.Tenant] == nil {
							oracles[b.Tenant] = newRollupOracle()
						}
						oracles[b.Tenant].merge(o)
						if remaining[b.Tenant]--; remaining[b.Tenant] == 0 {
							judge = oracles[b.Tenant]
							delete(oracles, b.Tenant)
						}
					}
				})
				if judge == nil {
					continue
				}
				var rst ReconcileStats
				rd, err := reconcileTenantRollups(ctx, api, tableName, b.Tenant, rollupPKs.partials[b.Tenant], judge, rule, &rst)
				if err != nil {
					errc <- fmt.Errorf("roll-ups of %s: %w", b.Tenant, err)
					cancel()
					return
				}
				report(func(p *ReconcileProgress) {
					p.Differences += len(rd)
					stats.add(rst)
					diffs = append(diffs, rd...)
				})
			}
		}()
	}
feed:
	for _, b := range branches {
		select {
		case work <- b:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, stats, fmt.Errorf("reconcile %s: %w", tableName, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, stats, fmt.Errorf("reconcile %s: %w", tableName, err)
	}
	if opts.Rollups {
		rd, err := reconcileRollups(ctx, api, tableName, remaining, rollupPKs, rule, &stats)
		if err != nil {
			return nil, stats, fmt.Errorf("reconcile %s: %w", tableName, err)
		}
		diffs = append(diffs, rd...)
	}
	sort.Slice(diffs, func(i, j int) bool {
		a, b := diffs[i].key(), diffs[j].key()
		return a.PK < b.PK || a.PK == b.PK && a.SK < b.SK
	})
	return diffs, stats, nil
}

// scanBranches finds every branch that has transactions or report items:
// a parallel Scan of the keys only (segments segments), keeping the set of
// branch ids. scanned is told each page's ScannedCount and consumed read
// units.
func scanBranches(ctx context.Context, api ReconcileAPI, tableName string, segments int, rollups *rollupPartitions, scanned func(items int, units float64)) ([]Scope, error) {
	var mu sync.Mutex
	found := map[Scope]bool{}
	errc := make(chan error, segments)
	var wg sync.WaitGroup
	for seg := range segments {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := &dynamodb.ScanInput{
				TableName:                 &tableName,
				ConsistentRead:            aws.Bool(true),
				ProjectionExpression:      aws.String("#pk"),
				FilterExpression:          aws.String("begins_with(#pk, :t)"),
				ExpressionAttributeNames:  map[string]string{"#pk": table.AttrPK},
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":t": table.S(aggregates.TenantPrefix)},
				ReturnConsumedCapacity:    ddbtypes.ReturnConsumedCapacityTotal,
			}
			if segments > 1 {
				// One segment is a plain Scan: DynamoDB Local serves a
				// Scan that names a segment about twice as slowly.
				in.Segment, in.TotalSegments = aws.Int32(int32(seg)), aws.Int32(int32(segments))
			}
			p := dynamodb.NewScanPaginator(api, in)
			for p.HasMorePages() {
				out, err := p.NextPage(ctx)
				if err != nil {
					errc <- fmt.Errorf("scan segment %d: %w", seg, err)
					return
				}
				mu.Lock()
				for _, item := range out.Items {
					pk, _ := table.String(item, table.AttrPK)
					if t, b, ok := aggregates.ParseTransactionPK(pk); ok {
						found[Scope{Tenant: t, Branch: b}] = true
					} else if t, b, ok := aggregates.ParseReportPK(pk); ok {
						found[Scope{Tenant: t, Branch: b}] = true
					} else {
						rollups.add(pk)
					}
				}
				mu.Unlock()
				scanned(int(out.ScannedCount), consumedUnits(out.ConsumedCapacity))
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	out := slices.SortedFunc(maps.Keys(found), func(a, b Scope) int {
		if a.Tenant != b.Tenant {
			return strings.Compare(a.Tenant, b.Tenant)
		}
		return strings.Compare(a.Branch, b.Branch)
	})
	return out, nil
}

// reconcileBranch reconciles one branch: its transactions and its report
// partition, each read with one paginated Query. read is told how many
// transactions each page held (a branch can hold millions).
func reconcileBranch(ctx context.Context, api ReconcileAPI, tableName string, scope Scope, read func(int)) ([]Difference, ReconcileStats, *rollupOracle, error) {
	var stats ReconcileStats
	expected := aggregates.NewFold()
	stored := table.ReportSet{}
	var strays []Difference
	// The reports first, then the transactions: a repair's argument needs
	// the stored figures read before the fold they are compared with
	// (docs/exactly-once.md, "Repairing while consumers run").
	err := queryAll(ctx, api, tableName, aggregates.ReportPK(scope.Tenant, scope.Branch), &stats, func(item map[string]ddbtypes.AttributeValue) error {
		if err := stored.Add(item); err != nil {
			pk, _ := table.String(item, table.AttrPK)
			sk, _ := table.String(item, table.AttrSK)
			k := aggregates.Key{PK: pk, SK: sk}
			strays = append(strays, Difference{Stray: &k, Lines: []string{"not a report, entry or parked delta: " + err.Error()}})
		}
		return nil
	}, nil)
	var bc *table.BranchCalendar
	if err == nil {
		bc, err = branchCalendar(ctx, api, tableName, scope, &stats)
	}
	if err == nil {
		err = queryAll(ctx, api, tableName, aggregates.TransactionPK(scope.Tenant, scope.Branch), &stats, func(item map[string]ddbtypes.AttributeValue) error {
			tx, err := table.ParseTransaction((item))
			if errors.Is(err, aggregates.ErrDeleted) {
				stats.Deleted++ // a tombstone: absent, as in the consumers
				return nil
			}
			stats.Transactions++
			if err != nil {
				stats.Invalid++ // contributes zero, as in the consumers
				return nil
			}
			expected.Add(tx, +1)
			if !tx.Stamped {
				stats.Unstamped++
			}
			if bc != nil {
				if want, err := bc.Stamp(tx.CreatedAt); err != nil || !want.Equal(tx.Stamp) {
					if stats.Unsettled == nil {
						stats.Unsettled = map[Scope]int{}
					}
					stats.Unsettled[scope]++
				}
			}
			return nil
		}, read)
	}
	if err != nil {
		return nil, stats, nil, err
	}
	oracle := branchRollup(scope.Tenant, expected, stored)

	keys := map[aggregates.ReportKey]bool{}
	for _, k := range expected.Keys() {
		keys[k] = true
	}
	for k, sr := range stored {
		keys[k] = true
		if sr.Item != nil {
			stats.Reports++
		}
	}
	diffs := strays
	for k := range keys {
		if d, ok := compareReport(k, expected.Report(k), stored[k]); ok {
			d.currency = expected.Currency(k)
			if sr := stored[k]; d.currency == "" && sr != nil && sr.Item != nil {
				d.currency, _ = table.String(sr.Item, table.AttrCurrency)
			}
			diffs = append(diffs, d)
		}
	}
	return diffs, stats, oracle, nil
}

// branchCalendar reads the calendar of a branch and its tenant's period
// types, strongly consistent: nil (and a line in stats) when they do not
// decode. A branch or tenant without its directory item (a table written
// by other means) has the default calendar.
func branchCalendar(ctx context.Context, api ReconcileAPI, tableName string, scope Scope, stats *ReconcileStats) (*table.BranchCalendar, error) {
	var items [2]map[string]ddbtypes.AttributeValue
	for i, k := range []aggregates.Key{aggregates.TenantKey(scope.Tenant), aggregates.BranchKey(scope.Tenant, scope.Branch)} {
		out, err := api.Query(ctx, &dynamodb.QueryInput{
			TableName:                 &tableName,
			KeyConditionExpression:    aws.String("PK = :pk AND SK = :sk"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": table.S(k.PK), ":sk": table.S(k.SK)},
			ConsistentRead:            aws.Bool(true),
			ReturnConsumedCapacity:    ddbtypes.ReturnConsumedCapacityTotal,
		})
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", k, err)
		}
		stats.ItemsRead += int(out.ScannedCount)
		stats.ReadUnits += consumedUnits(out.ConsumedCapacity)
		if len(out.Items) > 0 {
			items[i] = out.Items[0]
		}
	}
	bc, err := table.DecodeBranchCalendar(items[0], items[1])
	if err != nil {
		stats.CalendarErrors = append(stats.CalendarErrors, err.Error())
		return nil, nil
	}
	return &bc, nil
}

// compareReport compares the expected figures of report k (nil: none) with
// what is stored (nil: nothing), returning the difference if there is one.
func compareReport(k aggregates.ReportKey, want *aggregates.Report, sr *table.StoredReport) (Difference, bool) {
	if want == nil {
		want = &aggregates.Report{}
	}
	want.Prune()
	d := Difference{Report: k, Expected: want}
	got := &aggregates.Report{}
	if sr != nil {
		d.stored = sr
		d.Parked = len(sr.Parked)
		if sr.Exists() {
			got, d.Problems = sr.Decode()
			d.Stored = got
		}
		if sr.Item != nil {
			d.seen = sr.Item[table.AttrUpdatedAt]
		}
	}
	lines := got.Diff(want)
	if d.Stored == nil && len(lines) > 0 {
		lines = append([]string{"report item missing"}, lines...)
	}
	if d.Parked > 0 {
		lines = append([]string{fmt.Sprintf("%d parked deltas", d.Parked)}, lines...)
	}
	d.Lines = append(append([]string{}, d.Problems...), lines...)
	return d, len(d.Lines) > 0
}

func (d Difference) key() aggregates.Key {
	if d.Stray != nil {
		return *d.Stray
	}
	if d.Rollup != nil {
		return aggregates.Key{PK: aggregates.RollupPK(d.Rollup.Tenant, d.Rollup.Currency, 0), SK: d.Rollup.Period.String()}
	}
	return d.Report.Key()
}

// Settled keeps the differences of second that are also in first with the
// same stored and expected figures: a difference that persisted unchanged
// across two reads is not a change in flight (unless one is in flight longer
// than the time between the reads). A stray item is kept when both reads
// found it (it has no figures: no consumer writes its key).
func Settled(first, second []Difference) []Difference {
	before := map[aggregates.Key]Difference{}
	for _, d := range first {
		before[d.key()] = d
	}
	var out []Difference
	for _, d := range second {
		b, ok := before[d.key()]
		switch {
		case !ok:
			continue
		case b.Stray != nil || d.Stray != nil:
			if b.Stray == nil || d.Stray == nil {
				continue
			}
		case b.Rollup != nil || d.Rollup != nil:
			if b.Rollup == nil || d.Rollup == nil || !sameRollup(b.Rollup, d.Rollup) {
				continue
			}
		case !sameAV(b.seen, d.seen) || !sameReport(b.Stored, d.Stored) || !sameReport(b.Expected, d.Expected) || b.Parked != d.Parked:
			continue
		}
		out = append(out, d)
	}
	return out
}

func sameAV(a, b ddbtypes.AttributeValue) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return reflect.DeepEqual(a, b)
}

func sameReport(a, b *aggregates.Report) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(b)
}

// RepairResult says what a Repair did: reports rewritten whole, stray
// items deleted (Deleted, their keys), reports left alone because a
// consumer changed them after Reconcile read them (Skipped), and large
// reports whose first transaction landed but a later one found a
// consumer's commit in between (Partial: each name is in one place and
// either repaired or as before; reconcile again).
type RepairResult struct {
	Repaired         int
	Deleted          []aggregates.Key
	Skipped, Partial []aggregates.ReportKey
}

// Repair rewrites each report of diffs as its expected figures
// (table.EncodeRepair: every name keeps its place where the layout allows),
// deletes entry items the layout no longer needs and then the report's
// parked deltas, and deletes each stray item (an item of a report
// partition under a key no consumer writes: nothing but a repair ever
// removes it). The report item is written on condition that it
// is still the one Reconcile read (same updatedAt, or still absent); a
// report whose writes do not fit one transaction (100 writes) continues in
// further transactions, each on condition that the report item is still
// the repair's own.
func Repair(ctx context.Context, api ReconcileAPI, tableName string, diffs []Difference, now time.Time) (RepairResult, error) {
	var res RepairResult
	stamp := now.UTC().Format(time.RFC3339Nano)
	for _, d := range diffs {
		if d.Rollup != nil {
			continue // RepairRollups
		}
		if d.Stray != nil {
			if _, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
				{Delete: &ddbtypes.Delete{TableName: &tableName, Key: table.Key(*d.Stray)}},
			}}); err != nil {
				return res, fmt.Errorf("repair: delete stray item %s: %w", d.Stray, err)
			}
			res.Deleted = append(res.Deleted, *d.Stray)
			continue
		}
		landed, whole, err := repairReport(ctx, api, tableName, d, stamp)
		switch {
		case err != nil:
			return res, fmt.Errorf("repair %s: %w", d.Report, err)
		case whole:
			res.Repaired++
		case landed:
			res.Partial = append(res.Partial, d.Report)
		default:
			res.Skipped = append(res.Skipped, d.Report)
		}
	}
	return res, nil
}

// repairReport writes one report's repair; landed is whether its first
// transaction did, whole whether all did.
func repairReport(ctx context.Context, api ReconcileAPI, tableName string, d Difference, stamp string) (landed, whole bool, err error) {
	g := targetWrites(tableName, d, stamp, false)
	first := slices.Clip(g.first[:1])
	ops := append(slices.Clone(g.first[1:]), g.rest...)
	guard := first[0] // what every transaction after the first requires
	if hasItem := d.stored != nil && d.stored.Item != nil; hasItem || !d.Expected.IsZero() {
		guard = table.RepairGuard(tableName, d.Report, stamp)
	}
	chunk := first
	for {
		n := min(len(ops), 100-len(chunk))
		chunk = append(chunk, ops[:n]...)
		ops = ops[n:]
		_, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: chunk})
		var tce *ddbtypes.TransactionCanceledException
		if errors.As(err, &tce) {
			return landed, false, nil
		}
		if err != nil {
			return landed, false, err
		}
		landed = true
		if len(ops) == 0 {
			break
		}
		chunk = []ddbtypes.TransactWriteItem{guard}
	}
	// Parked deltas are never part of the figures: once the report is
	// rebuilt from the transactions, the ones read are deleted (one parked
	// since stays, and shows in the next reconcile). A parked delta that
	// carries a roll-up share is deleted in one transaction with the put of
	// that share as a roll-up repair delta (R-a, repair_rollup.go): the
	// roll-up never held it, the rebuilt report now does.
	if d.stored != nil {
		var plain []map[string]ddbtypes.AttributeValue
		for _, e := range d.stored.Parked {
			if _, ok := table.RollupShare(e); !ok {
				plain = append(plain, e)
				continue
			}
			if err := passOnRollupShare(ctx, api, tableName, d.Report, e, stamp); err != nil {
				return landed, false, fmt.Errorf("delete parked delta %s and pass on its roll-up share: %w", keyOfItem(e), err)
			}
		}
		for i := 0; i < len(plain); i += 100 {
			var dels []ddbtypes.TransactWriteItem
			for _, e := range plain[i:min(i+100, len(plain))] {
				dels = append(dels, ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{TableName: &tableName, Key: table.Key(keyOfItem(e))}})
			}
			if _, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: dels}); err != nil {
				return landed, false, fmt.Errorf("delete parked deltas: %w", err)
			}
		}
	}
	return landed, true, nil
}

func keyOfItem(item map[string]ddbtypes.AttributeValue) aggregates.Key {
	pk, _ := table.String(item, table.AttrPK)
	sk, _ := table.String(item, table.AttrSK)
	return aggregates.Key{PK: pk, SK: sk}
}

// queryAll visits every item of partition pk, page by page, counts the
// items and read units in stats and tells page (if not nil) how many items
// each page held.
func queryAll(ctx context.Context, api ReconcileAPI, tableName, pk string, stats *ReconcileStats, visit func(map[string]ddbtypes.AttributeValue) error, page func(int)) error {
	in := &dynamodb.QueryInput{
		TableName:                 &tableName,
		KeyConditionExpression:    aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": table.S(pk)},
		ConsistentRead:            aws.Bool(true),
		ReturnConsumedCapacity:    ddbtypes.ReturnConsumedCapacityTotal,
	}
	p := dynamodb.NewQueryPaginator(api, in)
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("query %s: %w", pk, err)
		}
		stats.ItemsRead += int(out.ScannedCount)
		stats.ReadUnits += consumedUnits(out.ConsumedCapacity)
		for _, item := range out.Items {
			if err := visit(item); err != nil {
				return err
			}
		}
		if page != nil {
			page(len(out.Items))
		}
	}
	return nil
}

// consumedUnits is the capacity units of a read's ConsumedCapacity (0 when
// none was returned).
func consumedUnits(c *ddbtypes.ConsumedCapacity) float64 {
	if c == nil || c.CapacityUnits == nil {
		return 0
	}
	return *c.CapacityUnits
}

// ParkedDelta is a report delta a commit parked (see commitTx).
type ParkedDelta struct {
	Key    aggregates.Key
	Report aggregates.ReportKey
	Delta  *aggregates.Report
	table.ParkedInfo
}

// ListParked lists the table's parked deltas, oldest first, through the
// sparse GSI1 partition aggregates.ParkedIndexPK. A parked item that cannot
// be read is an error naming it.
func ListParked(ctx context.Context, api ReconcileAPI, tableName string) ([]ParkedDelta, error) {
	in := &dynamodb.QueryInput{
		TableName:                 &tableName,
		IndexName:                 aws.String(table.IndexGSI1),
		KeyConditionExpression:    aws.String("#pk = :p"),
		ExpressionAttributeNames:  map[string]string{"#pk": table.AttrGSI1PK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": table.S(aggregates.ParkedIndexPK)},
	}
	var out []ParkedDelta
	p := dynamodb.NewQueryPaginator(api, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list parked deltas: %w", err)
		}
		for _, item := range page.Items {
			pk, _ := table.String(item, table.AttrPK)
			sk, _ := table.String(item, table.AttrSK)
			k := aggregates.Key{PK: pk, SK: sk}
			ref, err := aggregates.ParseReportItemKey(k)
			if err != nil || ref.Kind != aggregates.ReportParked {
				return nil, fmt.Errorf("list parked deltas: item %s is no parked delta", k)
			}
			delta, info, err := table.DecodeParked(item)
			if err != nil {
				return nil, fmt.Errorf("list parked deltas: %w", err)
			}
			out = append(out, ParkedDelta{Key: k, Report: ref.Report, Delta: delta, ParkedInfo: info})
		}
	}
	return out, nil
}
