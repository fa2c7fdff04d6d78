package processor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// Tenant roll-ups in reconcile (docs/design.md "Tenant roll-ups" →
// "Reconcile and repair"; docs/exactly-once.md, the roll-up review's holes
// 3–7 and the second review's R-a). The oracle of a roll-up is the fold of
// the tenant's valid transactions summed by (tenant, currency, period), and
// branches the number of its branch reports whose expected count is not
// zero. It is compared with what the table holds for the roll-up: Σ
// partials + Σ roll-up delta items in the lanes (not folded yet: delete on
// fold makes "unfolded" an item, hole 3 (a)) + Σ parked roll-up deltas
// (parked partial deltas and the roll-up shares of parked branch parts).

// RollupCell is one tenant roll-up: a tenant, a currency (ISO code or
// aggregates.NoCurrency) and a period.
type RollupCell struct {
	Tenant, Currency string
	Period           aggregates.Period
}

func (c RollupCell) String() string {
	return "roll-up " + c.Tenant + "/" + c.Currency + "/" + c.Period.String()
}

// RollupDifference is one roll-up whose stored sum differs from the
// oracle, or whose items are damaged or hold parked deltas.
type RollupDifference struct {
	RollupCell
	// Stored is Σ readable partial figures + unfolded delta items + parked
	// roll-up deltas; Expected the oracle.
	Stored, Expected *aggregates.RollupDelta
	// Unfolded counts the delta items of the cell in the lanes;
	// ParkedPartials the parked deltas of its partials; ParkedShares the
	// parked branch parts carrying a share of it (the branch repair passes
	// them on).
	Unfolded, ParkedPartials, ParkedShares int
	// Damaged are the partials of the cell whose items a consumer's update
	// is refused on or that do not decode (table.StoredReport.DecodeRollup):
	// a repair moves their readable figures into a lane.
	Damaged []aggregates.Key
	// Stuck are the delta items of the cell, among the Unfolded, judged
	// stuck rather than late (ReconcileOptions.Quiescent, StuckAfter): no
	// consumer will fold them, so a roll-up read (the partials only) lacks
	// them for good until the quiescent repair re-delivers them
	// (RedeliverWaiting; docs/exactly-once.md, S17-R1). A cell with a stuck
	// delta is a difference even when its figures agree.
	Stuck []WaitingDelta
	// Read is what a roll-up read returns of the cell: the partials'
	// readable figures only, neither the lanes nor the parked deltas
	// (writer/rollups.go).
	Read *aggregates.RollupDelta

	damaged []*table.StoredReport
	parked  []map[string]ddbtypes.AttributeValue // parked partial deltas
}

// Differs reports whether the figures or branches differ from the oracle
// (the part only the quiescent repair heals).
func (d *RollupDifference) Differs() bool {
	return len(d.Stored.Diff(&d.Expected.Report)) > 0 || d.Stored.Branches != d.Expected.Branches
}

// WaitingDelta is a roll-up delta item waiting in a lane for its fold.
type WaitingDelta struct {
	Key aggregates.Key
	// Since is the item's updatedAt, the time the commit that put it ran
	// (every consumer and repair sets it); zero when it is absent or does
	// not parse.
	Since time.Time
}

// DefaultRollupStuckAfter is how long a roll-up delta item may wait in its
// lane before reconcile names it stuck (ReconcileOptions.StuckAfter): twice
// the longest a delta waits for a running consumer by design (two tumbling
// windows of 15 minutes, the mapping's maximum), and 55 minutes after
// LedgerIteratorAgeHigh (a shard 5 minutes behind, for 5 minutes) has
// fired for a consumer that is merely behind (docs/exactly-once.md, S17-R1).
const DefaultRollupStuckAfter = time.Hour

// stuckRule decides which waiting delta items are stuck.
type stuckRule struct {
	quiescent bool
	after     time.Duration // < 0: never by age
	now       time.Time
}

func newStuckRule(opts ReconcileOptions) stuckRule {
	r := stuckRule{quiescent: opts.Quiescent, after: opts.StuckAfter, now: time.Now()}
	if r.after == 0 {
		r.after = DefaultRollupStuckAfter
	}
	if opts.Now != nil {
		r.now = opts.Now()
	}
	return r
}

// stuck says whether a delta item written at since is stuck: always under
// the quiescent procedure (nothing is in flight, so nothing waiting will be
// folded); else, unless the age rule is off, an item older than the rule's
// age, and one without a readable time (no consumer writes one: its age is
// taken as past any).
func (r stuckRule) stuck(since time.Time) bool {
	return r.quiescent || r.after >= 0 && (since.IsZero() || r.now.Sub(since) > r.after)
}

// rollupOracle accumulates, per tenant, the oracle and the parked branch
// shares that reconcileBranch finds.
type rollupOracle struct {
	expected map[RollupCell]*aggregates.RollupDelta
	shares   map[RollupCell]*aggregates.RollupDelta
	sharesN  map[RollupCell]int
}

func newRollupOracle() *rollupOracle {
	return &rollupOracle{expected: map[RollupCell]*aggregates.RollupDelta{}, shares: map[RollupCell]*aggregates.RollupDelta{}, sharesN: map[RollupCell]int{}}
}

func cellOf(m map[RollupCell]*aggregates.RollupDelta, c RollupCell) *aggregates.RollupDelta {
	d := m[c]
	if d == nil {
		d = &aggregates.RollupDelta{}
		m[c] = d
	}
	return d
}

func (o *rollupOracle) merge(b *rollupOracle) {
	for c, d := range b.expected {
		cellOf(o.expected, c).Merge(d)
	}
	for c, d := range b.shares {
		cellOf(o.shares, c).Merge(d)
	}
	for c, n := range b.sharesN {
		o.sharesN[c] += n
	}
}

// branchRollup is one branch's part of the oracle: its expected reports by
// currency, each with a non-zero count counting one branch, and the
// roll-up shares of its parked deltas (table.RollupShare).
func branchRollup(tenant string, expected *aggregates.Fold, stored table.ReportSet) *rollupOracle {
	o := newRollupOracle()
	for _, k := range expected.Keys() {
		r := expected.Report(k)
		c := RollupCell{Tenant: tenant, Currency: expected.Currency(k), Period: k.Period}
		d := cellOf(o.expected, c)
		d.Report.Merge(r)
		if r.Count != 0 {
			d.Branches++
		}
	}
	for k, sr := range stored {
		for _, item := range sr.Parked {
			cur, ok := table.RollupShare(item)
			if !ok {
				continue
			}
			r, _, err := table.DecodeParked(item)
			if err != nil {
				continue // named by the branch report's difference
			}
			c := RollupCell{Tenant: tenant, Currency: cur, Period: k.Period}
			cellOf(o.shares, c).Report.Merge(r)
			o.sharesN[c]++
		}
	}
	return o
}

// rollupPartitions is what the key scan found of the roll-up partitions:
// per tenant, its partial partitions; and the partitions of a roll-up's
// form that can never be valid (strays: hole 6).
type rollupPartitions struct {
	partials map[string]map[string]bool // tenant → partial PKs
	strays   map[string]bool            // PKs
}

func newRollupPartitions() *rollupPartitions {
	return &rollupPartitions{partials: map[string]map[string]bool{}, strays: map[string]bool{}}
}

// add files pk if it is a roll-up partition (a partial's, or of the form
// of a lane or partial but invalid) and reports whether it was.
func (rp *rollupPartitions) add(pk string) bool {
	if t, _, _, ok := aggregates.ParseRollupPK(pk); ok {
		if rp.partials[t] == nil {
			rp.partials[t] = map[string]bool{}
		}
		rp.partials[t][pk] = true
		return true
	}
	if t, _, ok := aggregates.ParseRollupLanePK(pk); ok {
		if rp.partials[t] == nil {
			rp.partials[t] = map[string]bool{} // read per tenant, lane by lane
		}
		return true
	}
	if aggregates.IsRollupPK(pk) || aggregates.IsRollupLanePKForm(pk) {
		rp.strays[pk] = true
		return true
	}
	return false
}

// rollupMaxReads bounds how often the lanes are read around the partials
// before a tenant is left unjudged (deltas folded during every reading).
const rollupMaxReads = 3

// reconcileTenantRollups judges the roll-ups of one tenant against o:
// lanes, partials, lanes again, used only if the lane items did not change
// (a fold between the readings moves a delta from a lane to a partial).
// Strays of its lanes (items that do not decode) are differences with
// Stray set.
func reconcileTenantRollups(ctx context.Context, api ReconcileAPI, tableName, tenant string, partialPKs map[string]bool, o *rollupOracle, rule stuckRule, stats *ReconcileStats) ([]Difference, error) {
	for range rollupMaxReads {
		stored := map[RollupCell]*aggregates.RollupDelta{}
		unfolded := map[RollupCell]int{}
		stuck := map[RollupCell][]WaitingDelta{}
		var strays []Difference
		waiting, stuckN := 0, 0
		before, err := readLanes(ctx, api, tableName, tenant, stats, func(d *table.RollupDeltaItem, since time.Time) {
			waiting++
			isStuck := rule.stuck(since)
			if isStuck {
				stuckN++
			}
			for p, pd := range d.Periods {
				c := RollupCell{Tenant: tenant, Currency: d.Currency, Period: p}
				cellOf(stored, c).Merge(pd)
				unfolded[c]++
				if isStuck {
					stuck[c] = append(stuck[c], WaitingDelta{Key: d.Key, Since: since})
				}
			}
		}, func(k aggregates.Key, err error) {
			strays = append(strays, Difference{Stray: &k, Lines: []string{"roll-up delta that does not decode (never folded): " + err.Error()}})
		})
		if err != nil {
			return nil, err
		}
		set := table.ReportSet{}
		for _, pk := range slices.Sorted(maps.Keys(partialPKs)) {
			if err := queryAll(ctx, api, tableName, pk, stats, func(item map[string]ddbtypes.AttributeValue) error {
				if err := set.Add(item); err != nil {
					k := table.KeyOf(item)
					strays = append(strays, Difference{Stray: &k, Lines: []string{"not a partial, entry or parked delta: " + err.Error()}})
				}
				return nil
			}, nil); err != nil {
				return nil, err
			}
		}
		after, err := readLanes(ctx, api, tableName, tenant, stats, func(*table.RollupDeltaItem, time.Time) {}, func(aggregates.Key, error) {})
		if err != nil {
			return nil, err
		}
		if !slices.Equal(before, after) {
			continue
		}
		if waiting > 0 {
			if stats.RollupWaiting == nil {
				stats.RollupWaiting = map[string]int{}
			}
			stats.RollupWaiting[tenant] = waiting
		}
		if stuckN > 0 {
			if stats.RollupStuck == nil {
				stats.RollupStuck = map[string]int{}
			}
			stats.RollupStuck[tenant] = stuckN
		}
		return judgeRollups(tenant, o, stored, unfolded, stuck, rule, set, strays), nil
	}
	return []Difference{{Rollup: &RollupDifference{RollupCell: RollupCell{Tenant: tenant}, Stored: &aggregates.RollupDelta{}, Expected: &aggregates.RollupDelta{}},
		Lines: []string{fmt.Sprintf("not judged: roll-up deltas were folded during each of %d readings; reconcile again", rollupMaxReads)}}}, nil
}

// readLanes reads the tenant's K lane partitions (consistent Queries),
// calls item for each delta item, with its updatedAt (zero when absent or
// not a time), and bad for each that does not decode, and returns the keys
// read, in order.
func readLanes(ctx context.Context, api ReconcileAPI, tableName, tenant string, stats *ReconcileStats, item func(*table.RollupDeltaItem, time.Time), bad func(aggregates.Key, error)) ([]aggregates.Key, error) {
	var keys []aggregates.Key
	for k := range aggregates.RollupLanes {
		if err := queryAll(ctx, api, tableName, aggregates.RollupLanePK(tenant, k), stats, func(it map[string]ddbtypes.AttributeValue) error {
			keys = append(keys, table.KeyOf(it))
			d, err := table.DecodeRollupDelta(it)
			if err != nil {
				bad(table.KeyOf(it), err)
				return nil
			}
			var since time.Time
			if v, ok := table.String(it, table.AttrUpdatedAt); ok {
				since, _ = time.Parse(time.RFC3339Nano, v) // zero when it is no time
			}
			item(d, since)
			return nil
		}, nil); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// judgeRollups compares what is stored of a tenant's roll-ups with the
// oracle, cell by cell.
func judgeRollups(tenant string, o *rollupOracle, stored map[RollupCell]*aggregates.RollupDelta, unfolded map[RollupCell]int, stuck map[RollupCell][]WaitingDelta, rule stuckRule, set table.ReportSet, strays []Difference) []Difference {
	diffs := map[RollupCell]*RollupDifference{}
	diff := func(c RollupCell) *RollupDifference {
		d := diffs[c]
		if d == nil {
			d = &RollupDifference{RollupCell: c, Stored: &aggregates.RollupDelta{}, Expected: &aggregates.RollupDelta{}, Read: &aggregates.RollupDelta{}}
			diffs[c] = d
		}
		return d
	}
	var problems = map[RollupCell][]string{}
	for _, k := range set.Keys() {
		sr := set[k]
		rk, _ := k.Rollup()
		c := RollupCell{Tenant: tenant, Currency: rk.Currency, Period: rk.Period}
		d := diff(c)
		figures, probs := sr.DecodeRollup()
		d.Stored.Merge(figures)
		d.Read.Merge(figures)
		if len(probs) > 0 {
			d.Damaged = append(d.Damaged, k.Key())
			d.damaged = append(d.damaged, sr)
			for _, p := range probs {
				problems[c] = append(problems[c], fmt.Sprintf("partial %s: %s", k.Key(), p))
			}
		}
		for _, item := range sr.Parked {
			r, _, err := table.DecodeParked(item)
			if err != nil {
				problems[c] = append(problems[c], err.Error())
				continue
			}
			b, err := table.ParkedBranches(item)
			if err != nil {
				problems[c] = append(problems[c], err.Error())
				continue
			}
			d.Stored.Report.Merge(r)
			d.Stored.Branches += b
			d.ParkedPartials++
			d.parked = append(d.parked, item)
		}
	}
	for c, s := range stored {
		if c.Tenant == tenant {
			diff(c).Stored.Merge(s)
			diffs[c].Unfolded = unfolded[c]
			diffs[c].Stuck = stuck[c]
		}
	}
	for c, s := range o.shares {
		if c.Tenant == tenant {
			diff(c).Stored.Merge(s)
			diffs[c].ParkedShares = o.sharesN[c]
		}
	}
	for c, e := range o.expected {
		if c.Tenant == tenant {
			diff(c).Expected.Merge(e)
		}
	}
	out := strays
	for _, c := range slices.SortedFunc(maps.Keys(diffs), compareCells) {
		d := diffs[c]
		d.Stored.Prune()
		d.Expected.Prune()
		lines := append([]string{}, problems[c]...)
		if d.ParkedPartials > 0 {
			lines = append(lines, fmt.Sprintf("%d parked roll-up deltas of its partials", d.ParkedPartials))
		}
		if d.ParkedShares > 0 {
			lines = append(lines, fmt.Sprintf("%d parked branch-report deltas carry a roll-up share (the branch repair passes them on)", d.ParkedShares))
		}
		lines = append(lines, d.Stored.Diff(&d.Expected.Report)...)
		if d.Stored.Branches != d.Expected.Branches {
			lines = append(lines, fmt.Sprintf("branches: got %d; want %d (branch reports with a non-zero count)", d.Stored.Branches, d.Expected.Branches))
		}
		lines = append(lines, stuckLines(d, rule)...)
		if len(lines) == 0 {
			continue
		}
		if d.Unfolded > len(d.Stuck) {
			lines = append(lines, fmt.Sprintf("(%d roll-up delta items not folded yet, counted)", d.Unfolded-len(d.Stuck)))
		}
		out = append(out, Difference{Rollup: d, Lines: lines, Problems: problems[c]})
	}
	return out
}

// stuckLines names the stuck delta items of d, and what a roll-up read
// returns of the cell while they wait.
func stuckLines(d *RollupDifference, rule stuckRule) []string {
	if len(d.Stuck) == 0 {
		return nil
	}
	why := "the quiescent procedure holds: nothing in flight will fold them"
	if !rule.quiescent {
		why = fmt.Sprintf("older than %s, unless their lane's consumer is that far behind", rule.after)
	}
	lines := []string{fmt.Sprintf("%d roll-up delta items stuck in their lanes, not late (%s): in no partial, so a roll-up read lacks them; reconcile --repair --quiescent re-delivers them", len(d.Stuck), why)}
	for _, w := range d.Stuck {
		when := "no readable updatedAt"
		if !w.Since.IsZero() {
			when = fmt.Sprintf("put %s, %s ago", w.Since.UTC().Format(time.RFC3339), rule.now.Sub(w.Since).Round(time.Second))
		}
		lines = append(lines, fmt.Sprintf("stuck delta %s (%s)", w.Key, when))
	}
	d.Read.Prune()
	if !d.Read.Equal(&d.Expected.Report) || d.Read.Branches != d.Expected.Branches {
		lines = append(lines, fmt.Sprintf("a roll-up read (partials only) returns %s, branches %d; want %s, branches %d", d.Read.Totals, d.Read.Branches, d.Expected.Totals, d.Expected.Branches))
	}
	return lines
}

func compareCells(a, b RollupCell) int {
	if a.Tenant != b.Tenant {
		return strings.Compare(a.Tenant, b.Tenant)
	}
	if a.Currency != b.Currency {
		return strings.Compare(a.Currency, b.Currency)
	}
	return strings.Compare(a.Period.String(), b.Period.String())
}

// rollupStrays returns the items of the stray roll-up partitions as
// differences (Stray set).
func rollupStrays(ctx context.Context, api ReconcileAPI, tableName string, pks map[string]bool, stats *ReconcileStats) ([]Difference, error) {
	var out []Difference
	for _, pk := range slices.Sorted(maps.Keys(pks)) {
		if err := queryAll(ctx, api, tableName, pk, stats, func(item map[string]ddbtypes.AttributeValue) error {
			k := table.KeyOf(item)
			out = append(out, Difference{Stray: &k, Lines: []string{"roll-up partition that can never be valid (a lane outside 0…" + fmt.Sprint(aggregates.RollupLanes-1) + " or a currency that is no money)"}})
			return nil
		}, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// reconcileRollups judges the roll-ups of the tenants with roll-up
// partitions but no branch (judged, then, against an oracle of zero),
// then lists the items of stray roll-up partitions. The tenants with
// branches were judged as their last branch was done (remaining counts
// their branches).
func reconcileRollups(ctx context.Context, api ReconcileAPI, tableName string, remaining map[string]int, rp *rollupPartitions, rule stuckRule, stats *ReconcileStats) ([]Difference, error) {
	var out []Difference
	for _, t := range slices.Sorted(maps.Keys(rp.partials)) {
		if _, judged := remaining[t]; judged {
			continue
		}
		d, err := reconcileTenantRollups(ctx, api, tableName, t, rp.partials[t], newRollupOracle(), rule, stats)
		if err != nil {
			return nil, fmt.Errorf("roll-ups of %s: %w", t, err)
		}
		out = append(out, d...)
	}
	strays, err := rollupStrays(ctx, api, tableName, rp.strays, stats)
	if err != nil {
		return nil, fmt.Errorf("stray roll-up items: %w", err)
	}
	return append(out, strays...), nil
}

// sameRollup says whether two readings of a roll-up found the same stored
// and expected figures and the same damaged and parked items.
func sameRollup(a, b *RollupDifference) bool {
	return a.RollupCell == b.RollupCell && a.Stored.Equal(&b.Stored.Report) && a.Stored.Branches == b.Stored.Branches &&
		a.Expected.Equal(&b.Expected.Report) && a.Expected.Branches == b.Expected.Branches &&
		slices.Equal(a.Damaged, b.Damaged) && a.ParkedPartials == b.ParkedPartials && a.ParkedShares == b.ParkedShares &&
		slices.EqualFunc(a.Stuck, b.Stuck, func(x, y WaitingDelta) bool { return x.Key == y.Key })
}
