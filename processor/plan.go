package processor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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

// group is one transaction of a batch's plan: report parts, and the
// quarantine items of some of the batch's invalid records.
type group struct {
	parts      []part
	quarantine []*change
}

// part is one report update: a report item's delta, or the slice of it that
// fits one update expression.
type part struct {
	key   aggregates.ReportKey
	delta *aggregates.Report
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
func planGroups(fold *aggregates.Fold, invalid []*change, plan batchPlan) []group {
	groups := reportGroups(fold, plan)
	if plan.layout >= quarantineLayout {
		groups = placeQuarantine(groups, invalid, plan.items)
	}
	return groups
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
		w := 0
		for _, pt := range groups[i].parts {
			w += pt.writes()
		}
		fill(&groups[i], items-w)
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
		for i, d := range splitReport(fold.Report(k), plan.entries) {
			if i == len(layers) {
				layers = append(layers, nil)
			}
			layers[i] = append(layers[i], part{key: k, delta: d})
		}
	}
	var groups []group
	for _, l := range layers {
		start, items := 0, 0
		for i, pt := range l {
			w := pt.writes()
			if i > start && items+w > plan.items {
				groups = append(groups, group{parts: l[start:i:i]})
				start, items = i, 0
			}
			items += w
		}
		if start < len(l) {
			groups = append(groups, group{parts: l[start:len(l):len(l)]})
		}
	}
	return groups
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
		r := planRun(changes, maxItems, maxEntries, known)
		runs = append(runs, r)
		changes = changes[len(r.changes):]
	}
	return runs
}

// planRun returns the first run of changes (see planRuns).
func planRun(changes []change, maxItems, maxEntries int, known knownShape) run {
	cur := run{fold: aggregates.NewFold()}
	entries := map[aggregates.ReportKey]map[entryID]bool{}
	quarantined, qbytes := 0, 0 // the run's quarantine items and their bytes
	for i := range changes {
		c := &changes[i]
		q, qb := 0, 0
		if c.needsQuarantine() {
			q, qb = 1, quarantineBytes(c)
		}
		if len(cur.changes) > 0 && (qbytes+qb > maxQuarantineBytes || !fits(entries, c, maxItems-quarantined-q, maxEntries, known)) {
			return cur
		}
		quarantined, qbytes = quarantined+q, qbytes+qb
		for _, tx := range []*aggregates.Transaction{c.old, c.new} {
			if tx == nil {
				continue
			}
			for _, k := range tx.ReportKeys() {
				if entries[k] == nil {
					entries[k] = map[entryID]bool{}
				}
				for _, d := range aggregates.Dimensions {
					if name := tx.Breakdown(d); name != "" {
						entries[k][entryID{d, name}] = true
					}
				}
			}
		}
		cur.changes = append(cur.changes, *c)
		cur.fold.AddChange(c.old, c.new)
	}
	return cur
}

type entryID struct {
	dim  aggregates.Dimension
	name string
}

// fits reports whether adding c keeps the run within its limits.
func fits(entries map[aggregates.ReportKey]map[entryID]bool, c *change, maxItems, maxEntries int, known knownShape) bool {
	added := map[aggregates.ReportKey]map[entryID]bool{}
	for _, tx := range []*aggregates.Transaction{c.old, c.new} {
		if tx == nil {
			continue
		}
		for _, k := range tx.ReportKeys() {
			if added[k] == nil {
				added[k] = map[entryID]bool{}
			}
			for _, d := range aggregates.Dimensions {
				if name := tx.Breakdown(d); name != "" && !entries[k][entryID{d, name}] {
					added[k][entryID{d, name}] = true
				}
			}
		}
	}
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
	return writes <= maxItems
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
func planDigest(to string, plan batchPlan, groups []group) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%s|%d\n", to, plan, len(groups))
	for k, g := range groups {
		for _, c := range g.quarantine {
			fmt.Fprintf(h, "%d|q|%s\n", k, recordID(c.rec))
		}
		for _, pt := range g.parts {
			key := pt.key.Key()
			d := pt.delta
			fmt.Fprintf(h, "%d|%s|%s|%s|%s|%d", k, key.PK, key.SK, d.Income.String(), d.Expense.String(), d.Count)
			for _, dim := range aggregates.Dimensions {
				for _, name := range slices.Sorted(maps.Keys(d.Breakdowns[dim])) {
					t := d.Breakdowns[dim][name]
					fmt.Fprintf(h, "|%d:%q:%s:%s:%d", dim, name, t.Income.String(), t.Expense.String(), t.Count)
				}
			}
			fmt.Fprintln(h)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}
