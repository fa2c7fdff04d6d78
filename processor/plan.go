package processor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// run is a contiguous slice of a batch committed by one transaction.
type run struct {
	changes []change
	fold    *aggregates.Fold
}

func (r *run) records() []Record { return records(r.changes) }

// quarantine returns the run's changes that need a quarantine item.
func (r *run) quarantine() []*change { return needingQuarantine(r.changes) }

// needingQuarantine returns the changes that need a quarantine item, in
// order.
func needingQuarantine(changes []change) []*change {
	var out []*change
	for i := range changes {
		if changes[i].needsQuarantine() {
			out = append(out, &changes[i])
		}
	}
	return out
}

// group is one transaction of a batch's plan: report parts, the
// quarantine items of some of the batch's invalid records and (plan layout
// 4) the deletes of some of the roll-up delta items the batch folds.
type group struct {
	parts      []part
	quarantine []*change
	folds      []*change
	// rollupItems is the room reserved for the roll-up delta items the
	// group's branch-report parts put (plan layout 4).
	rollupItems int
}

// part is one report update: a report item's delta, or the slice of it that
// fits one update expression.
type part struct {
	key   aggregates.ReportKey
	delta *aggregates.Report
	// first says the part holds the report's totals (part 0): the one
	// that carries a branch report's count condition and currency, and a
	// partial's branches.
	first bool
	// currency is a branch report's (aggregates.RollupCurrency of its
	// transactions): the roll-up its delta goes to.
	currency string
	// branches is what a partial's part 0 adds to its branches.
	branches int64
}

// rollup reports whether the part's delta goes to a roll-up (stage 1): a
// branch report's part; a partial's part is stage 2.
func (pt part) rollup() bool { return !pt.key.IsRollup() }

// partsOf returns the parts of one report of fold, cut at maxEntries
// entries (splitReport).
func partsOf(fold *aggregates.Fold, k aggregates.ReportKey, maxEntries int) []part {
	deltas := splitReport(fold.Report(k), maxEntries)
	out := make([]part, len(deltas))
	for i, d := range deltas {
		out[i] = part{key: k, delta: d, first: i == 0}
		if !k.IsRollup() {
			out[i].currency = fold.Currency(k)
		} else if i == 0 {
			out[i].branches = fold.Branches(k)
		}
	}
	return out
}

// planGroups is the plan of a batch (docs/exactly-once.md, "Batch
// commits"): each report's delta split into parts of at most plan.entries
// breakdown entries, the totals in part 0; the parts of each part index, in
// key order, cut into groups of at most plan.items writes. A part counts as
// one write for its report item and one for each of its entries (each may
// have to go to an entry item: table/report.go), so a group fits one
// TransactWriteItems whatever the report items hold. A group never holds
// two parts of one report. Then (plan layout 3) the quarantine items of
// invalid, the batch's records that need one in stream order, fill the
// groups' room and further groups of their own (placeQuarantine). It
// depends on nothing but the fold, the records and the plan, so whoever
// resumes a half-committed batch gets the same groups.
//
// Plan layout 4 (tenant roll-ups, docs/exactly-once.md "Stage 1") also
// reserves in each group the room of the roll-up delta items its
// branch-report parts put (rollupItemCount, pure in the parts), and places
// the deletes of the roll-up delta items the batch folds (folds, stage 2)
// in the groups' room, in record order, before the quarantine items.
func planGroups(fold *aggregates.Fold, invalid []*change, folds []*change, plan batchPlan) []group {
	groups := reportGroups(fold, plan)
	if plan.layout >= rollupLayout {
		groups = placeFolds(groups, folds, plan.items)
	}
	if plan.layout >= quarantineLayout {
		groups = placeQuarantine(groups, invalid, plan.items)
	}
	return groups
}

// groupWrites is how many writes a group's parts, roll-up delta items and
// deletes take.
func (g *group) writes() int {
	w := g.rollupItems + len(g.folds)
	for _, pt := range g.parts {
		w += pt.writes()
	}
	return w
}

// placeFolds places the deletes of folds (the roll-up delta records of the
// batch, in order) in the room of groups, then in groups of their own.
func placeFolds(groups []group, folds []*change, items int) []group {
	next := 0
	for i := range groups {
		room := items - groups[i].writes()
		for ; next < len(folds) && room > 0; next, room = next+1, room-1 {
			groups[i].folds = append(groups[i].folds, folds[next])
		}
	}
	for next < len(folds) {
		n := min(items, len(folds)-next)
		groups = append(groups, group{folds: folds[next : next+n : next+n]})
		next += n
	}
	return groups
}

// foldingChanges returns the changes whose roll-up delta a commit folds
// (and so deletes), in order.
func foldingChanges(changes []change) []*change {
	var out []*change
	for i := range changes {
		if changes[i].rollup != nil && !changes[i].dup {
			out = append(out, &changes[i])
		}
	}
	return out
}

// rollupItemCount is how many roll-up delta items the branch-report parts
// of parts put at most: for each tenant and currency, the items
// table.SplitRollupDelta cuts from every period any part touches (even if
// its figures cancel: a branch transition or a parked part may make it
// non-zero at commit time) with every entry name any part names. Pure in
// the parts, so whoever plans a batch reserves alike; the commit puts at
// most this many (fewer periods or entries never cut more items).
func rollupItemCount(parts []part) int {
	type names = map[entryID]bool
	by := map[aggregates.RollupGroup]map[aggregates.Period]names{}
	for _, pt := range parts {
		if !pt.rollup() {
			continue
		}
		g := aggregates.RollupGroup{Tenant: pt.key.Tenant, Currency: aggregates.RollupCurrency(pt.currency)}
		if by[g] == nil {
			by[g] = map[aggregates.Period]names{}
		}
		ps := by[g]
		if ps[pt.key.Period] == nil {
			ps[pt.key.Period] = names{}
		}
		for _, d := range aggregates.Dimensions {
			for name := range pt.delta.Breakdowns[d] {
				ps[pt.key.Period][entryID{d, name}] = true
			}
		}
	}
	n := 0
	for _, ps := range by {
		n += rollupItemsOf(ps)
	}
	return n
}

// rollupItemsOf counts the items table.SplitRollupDelta cuts from periods
// with these entry counts (the same rule on counts).
func rollupItemsOf[V ~map[entryID]bool](ps map[aggregates.Period]V) int {
	items, periods, entries := 0, 0, 0
	for _, p := range aggregates.SortedPeriods(ps) {
		if items == 0 || periods == table.MaxRollupDeltaPeriods || entries == table.MaxRollupDeltaEntries {
			items, periods, entries = items+1, 0, 0
		}
		periods++
		piece := 0 // the period's entries in the current item
		for range ps[p] {
			if entries == table.MaxRollupDeltaEntries || piece == table.MaxRollupDeltaPeriodEntries {
				items, periods, entries, piece = items+1, 1, 0, 0
			}
			entries++
			piece++
		}
	}
	return items
}

// placeQuarantine places the quarantine items of invalid, in order and
// each record id once, in the room of groups (at most items writes and
// maxQuarantineBytes of quarantine items each), then in groups of their own.
func placeQuarantine(groups []group, invalid []*change, items int) []group {
	seen := map[string]bool{}
	next := 0
	fill := func(g *group, room int) {
		size := 0
		for ; next < len(invalid); next++ {
			c := invalid[next]
			if seen[recordID(c.rec)] {
				continue // one item per record id: already placed
			}
			b := quarantineBytes(c)
			if room <= 0 || len(g.quarantine) > 0 && size+b > maxQuarantineBytes {
				return
			}
			seen[recordID(c.rec)] = true
			g.quarantine = append(g.quarantine, c)
			room, size = room-1, size+b
		}
	}
	for i := range groups {
		fill(&groups[i], items-groups[i].writes())
	}
	for next < len(invalid) {
		var g group
		if fill(&g, items); len(g.quarantine) > 0 {
			groups = append(groups, g)
		}
	}
	return groups
}

// reportGroups cuts the parts of fold's reports into groups (planGroups).
func reportGroups(fold *aggregates.Fold, plan batchPlan) []group {
	var layers [][]part
	for _, k := range fold.Keys() {
		for i, pt := range partsOf(fold, k, plan.entries) {
			if i == len(layers) {
				layers = append(layers, nil)
			}
			layers[i] = append(layers[i], pt)
		}
	}
	rollups := plan.layout >= rollupLayout
	var groups []group
	for _, l := range layers {
		start, items := 0, 0
		for i, pt := range l {
			w := pt.writes()
			if rollups {
				// The room of the roll-up delta items this part adds to
				// the group's.
				w += rollupItemCount(l[start:i+1]) - rollupItemCount(l[start:i])
			}
			if i > start && items+w > plan.items {
				groups = append(groups, newGroup(l[start:i:i], rollups))
				start, items = i, 0
				w = pt.writes()
				if rollups {
					w += rollupItemCount(l[i : i+1])
				}
			}
			items += w
		}
		if start < len(l) {
			groups = append(groups, newGroup(l[start:len(l):len(l)], rollups))
		}
	}
	return groups
}

func newGroup(parts []part, rollups bool) group {
	g := group{parts: parts}
	if rollups {
		g.rollupItems = rollupItemCount(parts)
	}
	return g
}

// writes is the most items a part can write: its report item and an entry
// item per entry.
func (pt part) writes() int { return 1 + pt.delta.Entries() }

// splitReport cuts r into deltas of at most maxEntries breakdown entries
// each, in (dimension, name) order, the totals and count in the first.
func splitReport(r *aggregates.Report, maxEntries int) []*aggregates.Report {
	type entry struct {
		d    aggregates.Dimension
		name string
	}
	var entries []entry
	for _, d := range aggregates.Dimensions {
		for _, name := range slices.Sorted(maps.Keys(r.Breakdowns[d])) {
			entries = append(entries, entry{d, name})
		}
	}
	if len(entries) <= maxEntries {
		return []*aggregates.Report{r}
	}
	var out []*aggregates.Report
	for i := 0; i < len(entries); i += maxEntries {
		part := &aggregates.Report{}
		if i == 0 {
			part.Totals = r.Totals
		}
		for _, e := range entries[i:min(i+maxEntries, len(entries))] {
			if part.Breakdowns[e.d] == nil {
				part.Breakdowns[e.d] = map[string]aggregates.Totals{}
			}
			part.Breakdowns[e.d][e.name] = r.Breakdowns[e.d][e.name]
		}
		out = append(out, part)
	}
	return out
}

// rollupFold sums the roll-up deltas of the branch-report parts of parts
// that are not parked, with the branch transition of each (transition: nil
// for none, as the plan digest has it).
func rollupFold(parts []part, transition func(i int) int64) *aggregates.RollupFold {
	rf := aggregates.NewRollupFold()
	for i, pt := range parts {
		if !pt.rollup() {
			continue
		}
		var b int64
		if transition != nil {
			b = transition(i)
			if b == parkedPart {
				continue
			}
		}
		rf.Add(pt.key.Tenant, pt.currency, pt.key.Period, pt.delta, b)
	}
	return rf
}

// parkedPart is what a transition function returns for a parked part: its
// roll-up share is parked with it, not put in a delta item.
const parkedPart = int64(-1 << 62)

// knownShape returns what the planner knows of a report item's shape; nil
// when nothing is known.
type knownShape func(aggregates.ReportKey) *table.ReportShape

// planRuns cuts changes, in order, into runs that each fit one
// TransactWriteItems: at most maxItems writes, at most maxEntries
// breakdown entries per report item (which bounds the update expression's
// length), and at most maxQuarantineBytes of quarantine items. A write is a
// quarantine item (one per record that needs one), a report item, or an
// entry item for an entry its map has no room for: with the item's shape known (known, the shapes a commit
// reads anyway), exactly the entries past the map's room count; without
// it every new entry counts as a possible entry item, as in planGroups.
// A record is never split; records of one run are folded, so a run costs
// one update per distinct report item it touches. Runs, unlike a batch's
// groups, need not be planned again identically: a run whose shapes went
// stale before its commit is planned again (commitRuns).
func planRuns(changes []change, maxItems, maxEntries int, known knownShape) []run {
	var runs []run
	for len(changes) > 0 {
		r := planRun(changes, maxItems, maxEntries, known, false)
		runs = append(runs, r)
		changes = changes[len(r.changes):]
	}
	return runs
}

// planRun returns the first run of changes (see planRuns). Besides the
// report items it counts, as writes, the roll-up delta items the run's
// branch-report updates put (rollupItemsOf, per tenant and currency) and
// the delete of each roll-up delta the run folds; with counts (a guard
// whose runs count what they claim: countsApplied), the update of the
// applied item of each branch whose transaction partition the run's
// records belong to (one per branch, table.CountApplied).
func planRun(changes []change, maxItems, maxEntries int, known knownShape, counts bool) run {
	cur := run{fold: aggregates.NewFold()}
	entries := map[aggregates.ReportKey]map[entryID]bool{}
	currency := map[aggregates.ReportKey]string{}
	quarantined, qbytes := 0, 0 // the run's quarantine items and their bytes
	folds := 0                  // the roll-up deltas the run folds (one delete each)
	branches := map[branchID]bool{}
	for i := range changes {
		c := &changes[i]
		q, qb := 0, 0
		if c.needsQuarantine() {
			q, qb = 1, quarantineBytes(c)
		}
		f := 0
		if c.rollup != nil && !c.dup {
			f = 1
		}
		b := 0
		if counts && c.counted() && !branches[c.branch] {
			b = 1
		}
		if len(cur.changes) > 0 && (qbytes+qb > maxQuarantineBytes || !fits(entries, currency, c, maxItems-quarantined-q-folds-f-len(branches)-b, maxEntries, known)) {
			return cur
		}
		quarantined, qbytes, folds = quarantined+q, qbytes+qb, folds+f
		if b == 1 {
			branches[c.branch] = true
		}
		c.eachEntry(func(k aggregates.ReportKey, cur string, e *entryID) {
			if entries[k] == nil {
				entries[k] = map[entryID]bool{}
				currency[k] = cur
			}
			if e != nil {
				entries[k][*e] = true
			}
		})
		cur.changes = append(cur.changes, *c)
		c.addTo(cur.fold)
	}
	return cur
}

type entryID struct {
	dim  aggregates.Dimension
	name string
}

// eachEntry calls fn once for each report (or partial) the change touches
// with e nil, its currency (a branch report's) and once for each of its
// entries there.
func (c *change) eachEntry(fn func(k aggregates.ReportKey, currency string, e *entryID)) {
	if c.dup {
		return
	}
	for _, tx := range []*aggregates.Transaction{c.old, c.new} {
		if tx == nil {
			continue
		}
		for _, k := range tx.ReportKeys() {
			fn(k, aggregates.RollupCurrency(tx.Currency), nil)
			for _, d := range aggregates.Dimensions {
				if name := tx.Breakdown(d); name != "" {
					fn(k, "", &entryID{d, name})
				}
			}
		}
	}
	if c.rollup != nil {
		for k, delta := range c.rollup.Partials() {
			fn(k, "", nil)
			for _, d := range aggregates.Dimensions {
				for name := range delta.Breakdowns[d] {
					fn(k, "", &entryID{d, name})
				}
			}
		}
	}
}

// fits reports whether adding c keeps the run within its limits.
func fits(entries map[aggregates.ReportKey]map[entryID]bool, currency map[aggregates.ReportKey]string, c *change, maxItems, maxEntries int, known knownShape) bool {
	added := map[aggregates.ReportKey]map[entryID]bool{}
	addedCurrency := map[aggregates.ReportKey]string{}
	c.eachEntry(func(k aggregates.ReportKey, cur string, e *entryID) {
		if added[k] == nil {
			added[k] = map[entryID]bool{}
			addedCurrency[k] = cur
		}
		if e != nil && !entries[k][*e] {
			added[k][*e] = true
		}
	})
	writes := 0
	for k, e := range entries {
		writes += itemWrites(k, e, added[k], known)
	}
	for k, a := range added {
		if entries[k] == nil {
			writes += itemWrites(k, nil, a, known)
		}
		if len(entries[k])+len(a) > maxEntries {
			return false
		}
	}
	writes += runRollupItems(entries, currency, added, addedCurrency)
	return writes <= maxItems
}

// runRollupItems is how many roll-up delta items a run whose branch
// reports have the entries of both sets puts at most (rollupItemsOf, per
// tenant and currency).
func runRollupItems(a map[aggregates.ReportKey]map[entryID]bool, ac map[aggregates.ReportKey]string, b map[aggregates.ReportKey]map[entryID]bool, bc map[aggregates.ReportKey]string) int {
	by := map[aggregates.RollupGroup]map[aggregates.Period]map[entryID]bool{}
	add := func(set map[aggregates.ReportKey]map[entryID]bool, cur map[aggregates.ReportKey]string) {
		for k, es := range set {
			if k.IsRollup() {
				continue
			}
			c := cur[k]
			if c == "" {
				c = ac[k] // a report the run touched before: its currency
			}
			g := aggregates.RollupGroup{Tenant: k.Tenant, Currency: c}
			if by[g] == nil {
				by[g] = map[aggregates.Period]map[entryID]bool{}
			}
			if by[g][k.Period] == nil {
				by[g][k.Period] = map[entryID]bool{}
			}
			for e := range es {
				by[g][k.Period][e] = true
			}
		}
	}
	add(a, ac)
	add(b, bc)
	n := 0
	for _, ps := range by {
		n += rollupItemsOf(ps)
	}
	return n
}

// itemWrites is how many items an update of report k with the entries of
// both sets writes at most: the report item, and an entry item for each
// entry that may not go inline.
func itemWrites(k aggregates.ReportKey, a, b map[entryID]bool, known knownShape) int {
	var sh *table.ReportShape
	if known != nil {
		sh = known(k)
	}
	if sh == nil {
		return 1 + len(a) + len(b)
	}
	var names [3][]string
	for _, set := range []map[entryID]bool{a, b} {
		for e := range set {
			names[e.dim] = append(names[e.dim], e.name)
		}
	}
	n := 1
	for _, d := range aggregates.Dimensions {
		n += sh.EntryItemWrites(d, names[d])
	}
	return n
}

// planDigest identifies a batch plan: its end, parameters and every part of
// every group (key and figures, in plan order). Stored with a pending batch,
// it makes a resumer whose code plans differently fail instead of
// committing groups of another plan.
//
// A group's quarantine items count by their record ids (a plan of layout 2
// has none, and the digest of its groups is what that version computed).
// From layout 4 it also covers the deletes of folded roll-up deltas (by
// record id) and the roll-up delta items each group puts as planned (all
// its parts), by key without the digest (lane, tenant, currency, n) and
// figures, except branches, which depends on the counts the commit reads
// (as a part's update form depends on the shapes read).
func planDigest(to string, plan batchPlan, groups []group, rollupClaim func(k int) string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%s|%d\n", to, plan, len(groups))
	for k, g := range groups {
		for _, c := range g.quarantine {
			fmt.Fprintf(h, "%d|q|%s\n", k, recordID(c.rec))
		}
		if plan.layout >= rollupLayout {
			for _, c := range g.folds {
				fmt.Fprintf(h, "%d|f|%s\n", k, recordID(c.rec))
			}
			fmt.Fprintf(h, "%d|r|%d\n", k, g.rollupItems)
			claim := rollupClaim(k)
			lane := aggregates.RollupLane(claim)
			rf := rollupFold(g.parts, nil)
			for _, rg := range rf.Groups() {
				for n, piece := range table.SplitRollupDelta(rf.Periods(rg)) {
					key := aggregates.RollupDeltaKey(rg.Tenant, lane, claim, rg.Currency, n)
					fmt.Fprintf(h, "%d|r|%s|%s", k, key.PK, key.SK)
					for _, p := range aggregates.SortedPeriods(piece) {
						d := piece[p]
						fmt.Fprintf(h, "|%s:%s:%s:%d:%d", p, d.Income.String(), d.Expense.String(), d.Count, d.Entries())
					}
					fmt.Fprintln(h)
				}
			}
		}
		for _, pt := range g.parts {
			key := pt.key.Key()
			d := pt.delta
			fmt.Fprintf(h, "%d|%s|%s|%s|%s|%d", k, key.PK, key.SK, d.Income.String(), d.Expense.String(), d.Count)
			digestBreakdowns(h, &d.Breakdowns)
			fmt.Fprintln(h)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// digestBreakdowns writes a delta's breakdown entries into a plan digest,
// in dimension then name order (every layout's digest the same way: a
// resumer's code must plan the same bytes).
func digestBreakdowns(h io.Writer, b *[3]map[string]aggregates.Totals) {
	for _, dim := range aggregates.Dimensions {
		for _, name := range slices.Sorted(maps.Keys(b[dim])) {
			t := b[dim][name]
			fmt.Fprintf(h, "|%d:%q:%s:%s:%d", dim, name, t.Income.String(), t.Expense.String(), t.Count)
		}
	}
}

// appliedCounts is what changes claim of each branch's transaction
// partition (change.counted), one count per branch in the order the
// branches first appear: the applied-item updates of their commit.
func appliedCounts(changes []change) []table.AppliedCount {
	var out []table.AppliedCount
	at := map[branchID]int{}
	for i := range changes {
		c := &changes[i]
		if !c.counted() {
			continue
		}
		j, ok := at[c.branch]
		if !ok {
			j = len(out)
			at[c.branch] = j
			out = append(out, table.AppliedCount{Tenant: c.branch.tenant, Branch: c.branch.branch})
		}
		switch c.kind {
		case countApplied:
			out[j].Applied++
		case countProbed:
			out[j].AddProbe(c.probeID)
		case countCompacted:
			out[j].Compacted++
		default:
			out[j].Foreign++
		}
	}
	return out
}
