package processor

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// This file is plan layout 6's planner (docs/exactly-once.md, "Plan layout
// 6 (design, session 19)"): pure, tested, measured (BENCHMARKS.md, "Plan
// layout 6 planned"), and wired into the batch commit path
// (commit6.go, session 21): every new batch of the poller and the
// tumbling window is planned here, with open question 9 when roll-ups
// are on.

// plan6Layout is the planning rule's version of layout 6: counted batches
// and one roll-up delta per (tenant, currency) per batch.
const plan6Layout = 6

// plan6Options chooses between the design as written and its open
// question 9.
type plan6Options struct {
	// branchesOnly stages the branch transitions into branches-only delta
	// items (open question 9): a series of their own per (tenant,
	// currency), whose periods are the batch's contributor periods ranked
	// by how many contributor parts touch them (then by period), at most
	// table.MaxRollupDeltaPeriods an item. The figure items are then never
	// staged: each is put at its eligible group, without a read or a
	// staging delete, and holds only periods whose figures are not zero
	// (table.SplitRollupDelta as it is).
	branchesOnly bool
}

// batch6 names a batch for its keys: the stream's label and the shard
// (the staging partition), and the batch's last sequence number.
type batch6 struct{ label, shard, to string }

// claim is the roll-up claim of the batch's figure items, claimT that of
// its branches-only items (open question 9). The design wrote the
// branches-only items' sort key as …~b#{currency}#t{j}; that is no key
// table.DecodeRollupDelta reads ({claim}#{currency}#{n}, n an integer),
// so they take a claim of their own: {shard}~{to}~t.
func (b batch6) claim() string  { return b.shard + "~" + b.to + "~b" }
func (b batch6) claimT() string { return b.shard + "~" + b.to + "~t" }

// stagingPK is the partition of the shard's staging items in the
// coordination table.
func (b batch6) stagingPK() string { return "ROLLUPSTAGE#" + b.label + "#" + b.shard }

// deltaItem6 is one item of a batch's roll-up delta (step 2): its figures
// as planned (branches come from the transitions read at commit), where
// it is eligible, placed and staged.
type deltaItem6 struct {
	rg aggregates.RollupGroup
	n  int
	// branchesOnly: an item of open question 9's series, figures zero.
	branchesOnly bool
	periods      map[aggregates.Period]*aggregates.RollupDelta
	// last is the plan index of the last part that touches the item.
	last int
	// contributors are the plan indexes of the parts whose transition goes
	// to the item, in plan order.
	contributors []int
	// eligible is the last group holding a part the item sums (or, for a
	// branches-only item, a contributor); placed is the group that puts
	// it.
	eligible, placed int
	// staged: some contributor is in a group before placed; kfirst and
	// klast are then the first and last group that stage it.
	staged        bool
	kfirst, klast int
}

// key is the item's key in its lane.
func (it *deltaItem6) key(b batch6) aggregates.Key {
	claim := b.claim()
	if it.branchesOnly {
		claim = b.claimT()
	}
	id := claim + "#" + it.rg.Currency + "#" + strconv.Itoa(it.n)
	return aggregates.RollupDeltaKey(it.rg.Tenant, aggregates.RollupLane(id), claim, it.rg.Currency, it.n)
}

// stagingSK is the sort key of the item's staging item.
func (it *deltaItem6) stagingSK(b batch6) string {
	n := strconv.Itoa(it.n)
	if it.branchesOnly {
		n = "t" + n
	}
	return b.to + "#" + it.rg.Tenant + "#" + it.rg.Currency + "#" + n
}

// appliedKind is what a group does to a branch's applied item (step 5).
type appliedKind int

const (
	// appliedCount: the batch's counts of the branch (its last group),
	// without an open mark to remove.
	appliedCount appliedKind = iota
	// appliedCountClose: the counts and DELETE open (first < last).
	appliedCountClose
	// appliedOpen: ADD open (the branch's first group, first < last).
	appliedOpen
)

func (k appliedKind) String() string {
	return [...]string{"count", "count+close", "open"}[k]
}

// applied6 is one applied-item action of a group.
type applied6 struct {
	kind  appliedKind
	count table.AppliedCount // the branch (and, for a count, the batch's counts)
}

// staging6 is one staging write of a group: item (an index of plan6.items)
// put whole (kfirst) or updated, with the periods its contributors there
// touch.
type staging6 struct {
	item    int
	put     bool
	periods []aggregates.Period
}

// group6 is one transaction of a layout-6 plan. Its embedded group holds
// the parts, folds and quarantine items as layout 4's; rollupItems is
// the room it reserves or uses besides them (applied reservations, delta
// slots, staging deletes and puts placed from elsewhere, counts of
// branches without parts), so that group.writes is its planned size.
type group6 struct {
	group
	applied []applied6
	staging []staging6
	// puts are the delta items placed here, deletes those of them whose
	// staging item this group deletes (indexes of plan6.items).
	puts, deletes []int
}

// plan6 is a batch's layout-6 plan, P6(c, b, m, e).
type plan6 struct {
	batch batch6
	plan  batchPlan
	opts  plan6Options
	// parts are the report parts in plan order (part index, then key);
	// partGroup[i] is the group of parts[i].
	parts     []part
	partGroup []int
	items     []deltaItem6
	groups    []group6
}

// planBatch6 plans a batch under layout 6: plan.layout is plan6Layout and
// plan.lanes is aggregates.RollupLanes (roll-ups on, "99/32/6/32") or 0
// (roll-ups off, "99/32/6/0": no delta, no staging, no fold). changes are
// the batch's records after dedupe (counted: change.counted), fold their
// fold, invalid and folds as planGroups takes them; with lanes 0 the
// caller folds no roll-up delta record into fold and passes no folds (as
// commitBatch does for a plan before roll-ups). It is pure: the same
// records, plan and options give the same plan.
func planBatch6(b batch6, changes []change, fold *aggregates.Fold, invalid, folds []*change, plan batchPlan, opts plan6Options) *plan6 {
	p := &plan6{batch: b, plan: plan, opts: opts}
	rollups := plan.lanes > 0
	// Step 1a: the parts, layer by layer (every part 0, then every part
	// 1, …), each layer in key order.
	var layers [][]part
	for _, k := range fold.Keys() {
		for i, pt := range partsOf(fold, k, plan.entries) {
			if i == len(layers) {
				layers = append(layers, nil)
			}
			layers[i] = append(layers[i], pt)
		}
	}
	var layerStart []int
	for _, l := range layers {
		layerStart = append(layerStart, len(p.parts))
		p.parts = append(p.parts, l...)
	}
	// Step 2 (pure in the fold): the batch delta's items, and the slots
	// each part reserves.
	var slots [][]int
	if rollups {
		slots = p.deltaItems()
	} else {
		slots = make([][]int, len(p.parts))
	}
	// Step 1b: the groups, cut within each layer.
	p.partGroup = make([]int, len(p.parts))
	for li, l := range layers {
		base := layerStart[li]
		start, used := 0, 0
		inGroup := map[int]bool{}
		branches := map[branchID]bool{}
		need := func(i int) int {
			pt := p.parts[base+i]
			w := pt.writes()
			if pt.rollup() && !branches[branchOf(pt)] {
				w++ // its branch's applied action
			}
			for _, s := range slots[base+i] {
				if !inGroup[s] {
					w++
				}
			}
			return w
		}
		add := func(i int) {
			pt := p.parts[base+i]
			if pt.rollup() {
				branches[branchOf(pt)] = true
			}
			for _, s := range slots[base+i] {
				inGroup[s] = true
			}
		}
		closeGroup := func(end int) {
			g := group6{group: group{parts: l[start:end:end]}}
			g.rollupItems = used
			for _, pt := range g.parts {
				g.rollupItems -= pt.writes()
			}
			for j := start; j < end; j++ {
				p.partGroup[base+j] = len(p.groups)
			}
			p.groups = append(p.groups, g)
		}
		for i := range l {
			w := need(i)
			if i > start && used+w > plan.items {
				closeGroup(i)
				start, used = i, 0
				clear(inGroup)
				clear(branches)
				w = need(i)
			}
			used += w
			add(i)
		}
		if start < len(l) {
			closeGroup(len(l))
		}
	}
	if rollups {
		p.placeItems()
		p.stage()
	}
	p.applyCounts(changes, folds, invalid)
	return p
}

// branchOf is the branch a branch-report part belongs to.
func branchOf(pt part) branchID { return branchID{pt.key.Tenant, pt.key.Branch} }

// deltaItems computes step 2: the batch delta's items per (tenant,
// currency), and for each part (plan index) the items it reserves a slot
// for — the item its transition goes to if it is a contributor, and the
// items it is the last part to touch (S19-P6-5).
func (p *plan6) deltaItems() [][]int {
	rf := aggregates.NewRollupFold()
	touched := map[aggregates.RollupGroup]map[aggregates.Period]bool{}
	contribPeriods := map[aggregates.RollupGroup]map[aggregates.Period]int{}
	for _, pt := range p.parts {
		if !pt.rollup() {
			continue
		}
		rg := aggregates.RollupGroup{Tenant: pt.key.Tenant, Currency: aggregates.RollupCurrency(pt.currency)}
		rf.Add(rg.Tenant, rg.Currency, pt.key.Period, pt.delta, 0)
		if touched[rg] == nil {
			touched[rg] = map[aggregates.Period]bool{}
			contribPeriods[rg] = map[aggregates.Period]int{}
		}
		touched[rg][pt.key.Period] = true
		if contributes(pt) {
			contribPeriods[rg][pt.key.Period]++
		}
	}
	type nameAt struct {
		rg  aggregates.RollupGroup
		p   aggregates.Period
		dim aggregates.Dimension
		nm  string
	}
	type periodAt struct {
		rg aggregates.RollupGroup
		p  aggregates.Period
	}
	totalsItem := map[periodAt]int{} // the item holding a period's totals
	bItem := map[periodAt]int{}      // open question 9: the branches-only item of a period
	nameItem := map[nameAt]int{}
	rgs := slices.SortedFunc(maps.Keys(touched), func(a, b aggregates.RollupGroup) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Currency, b.Currency))
	})
	for _, rg := range rgs {
		var pieces []map[aggregates.Period]*aggregates.RollupDelta
		if p.opts.branchesOnly {
			pieces = table.SplitRollupDelta(rf.Periods(rg))
		} else {
			pieces = splitKeepingTouched(rf.Periods(rg), touched[rg])
		}
		for n, piece := range pieces {
			idx := len(p.items)
			p.items = append(p.items, deltaItem6{rg: rg, n: n, periods: piece, last: -1})
			for per, d := range piece {
				if _, seen := totalsItem[periodAt{rg, per}]; !seen {
					totalsItem[periodAt{rg, per}] = idx // its first piece
				}
				for _, dim := range aggregates.Dimensions {
					for nm := range d.Breakdowns[dim] {
						nameItem[nameAt{rg, per, dim, nm}] = idx
					}
				}
			}
		}
		if p.opts.branchesOnly {
			ranked := slices.Collect(maps.Keys(contribPeriods[rg]))
			slices.SortFunc(ranked, func(a, b aggregates.Period) int {
				return cmp.Or(cmp.Compare(contribPeriods[rg][b], contribPeriods[rg][a]), cmp.Compare(a.String(), b.String()))
			})
			for j := 0; j < len(ranked); j += table.MaxRollupDeltaPeriods {
				idx := len(p.items)
				it := deltaItem6{rg: rg, n: j / table.MaxRollupDeltaPeriods, branchesOnly: true, periods: map[aggregates.Period]*aggregates.RollupDelta{}, last: -1}
				for _, per := range ranked[j:min(j+table.MaxRollupDeltaPeriods, len(ranked))] {
					it.periods[per] = &aggregates.RollupDelta{}
					bItem[periodAt{rg, per}] = idx
				}
				p.items = append(p.items, it)
			}
		}
	}
	// Which items each part touches, and which it contributes to.
	contrib := make([]int, len(p.parts))
	for i, pt := range p.parts {
		contrib[i] = -1
		if !pt.rollup() {
			continue
		}
		rg := aggregates.RollupGroup{Tenant: pt.key.Tenant, Currency: aggregates.RollupCurrency(pt.currency)}
		at := periodAt{rg, pt.key.Period}
		touch := func(s int) { p.items[s].last = i }
		if pt.first {
			if s, ok := totalsItem[at]; ok {
				touch(s)
			}
		}
		for _, dim := range aggregates.Dimensions {
			for nm := range pt.delta.Breakdowns[dim] {
				if s, ok := nameItem[nameAt{rg, pt.key.Period, dim, nm}]; ok {
					touch(s)
				}
			}
		}
		if contributes(pt) {
			s := totalsItem[at]
			if p.opts.branchesOnly {
				s = bItem[at]
			}
			contrib[i] = s
			p.items[s].contributors = append(p.items[s].contributors, i)
			touch(s)
		}
	}
	slots := make([][]int, len(p.parts))
	for i := range p.parts {
		if contrib[i] >= 0 {
			slots[i] = append(slots[i], contrib[i])
		}
	}
	for s := range p.items {
		if i := p.items[s].last; i >= 0 && !slices.Contains(slots[i], s) {
			slots[i] = append(slots[i], s)
		}
	}
	return slots
}

// contributes reports whether a part's branch transition is read at
// commit: a branch report's part 0 that moves the count.
func contributes(pt part) bool { return pt.rollup() && pt.first && pt.delta.Count != 0 }

// splitKeepingTouched is table.SplitRollupDelta's rule with one change
// (step 2): a period touched by a part keeps its place even when its
// figures sum to zero, so that every transition has an item to go to.
// Zero entries are left out, as there.
func splitKeepingTouched(periods map[aggregates.Period]*aggregates.RollupDelta, touched map[aggregates.Period]bool) []map[aggregates.Period]*aggregates.RollupDelta {
	var out []map[aggregates.Period]*aggregates.RollupDelta
	var cur map[aggregates.Period]*aggregates.RollupDelta
	entries := 0
	open := func() {
		cur = map[aggregates.Period]*aggregates.RollupDelta{}
		out = append(out, cur)
		entries = 0
	}
	for _, per := range aggregates.SortedPeriods(touched) {
		d := periods[per] // every touched period is in the fold (RollupFold.Add)
		d.Prune()
		if cur == nil || len(cur) == table.MaxRollupDeltaPeriods || entries == table.MaxRollupDeltaEntries {
			open()
		}
		piece := &aggregates.RollupDelta{Report: aggregates.Report{Totals: d.Totals}}
		cur[per] = piece
		for _, dim := range aggregates.Dimensions {
			for _, name := range slices.Sorted(maps.Keys(d.Breakdowns[dim])) {
				if entries == table.MaxRollupDeltaEntries || piece.Entries() == table.MaxRollupDeltaPeriodEntries {
					open()
					piece = &aggregates.RollupDelta{}
					cur[per] = piece
				}
				if piece.Breakdowns[dim] == nil {
					piece.Breakdowns[dim] = map[string]aggregates.Totals{}
				}
				piece.Breakdowns[dim][name] = d.Breakdowns[dim][name]
				entries++
			}
		}
	}
	return out
}

// contributorGroups are the groups holding the item's contributors, in
// order, each once.
func (p *plan6) contributorGroups(it *deltaItem6) []int {
	var out []int
	for _, i := range it.contributors {
		if k := p.partGroup[i]; len(out) == 0 || out[len(out)-1] != k {
			out = append(out, k)
		}
	}
	return out
}

// placeItems is step 3: each delta item in its eligible group (its slot
// there is reserved), with its staging delete if an earlier group
// contributed and the group has room for it; else in the first later
// group with room for the put and the delete; else in delta groups of
// their own at the end, in key order, at most plan.items writes each.
func (p *plan6) placeItems() {
	for s := range p.items {
		p.items[s].eligible = p.partGroup[p.items[s].last]
	}
	order := make([]int, len(p.items))
	for s := range order {
		order[s] = s
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p.items[a].eligible, p.items[b].eligible) })
	reportGroups := len(p.groups)
	var spill []int
	for _, s := range order {
		it := &p.items[s]
		cg := p.contributorGroups(it)
		stagedAt := func(k int) bool { return len(cg) > 0 && cg[0] < k }
		e := it.eligible
		g := &p.groups[e]
		if !stagedAt(e) {
			it.placed = e
			g.puts = append(g.puts, s)
			continue
		}
		if p.plan.items-g.writes() >= 1 {
			it.placed = e
			g.puts, g.deletes = append(g.puts, s), append(g.deletes, s)
			g.rollupItems++
			continue
		}
		placed := false
		for k := e + 1; k < reportGroups; k++ {
			if p.plan.items-p.groups[k].writes() >= 2 {
				it.placed = k
				p.groups[k].puts, p.groups[k].deletes = append(p.groups[k].puts, s), append(p.groups[k].deletes, s)
				p.groups[k].rollupItems += 2
				placed = true
				break
			}
		}
		if !placed {
			spill = append(spill, s)
		}
	}
	slices.Sort(spill) // key order: items are numbered in (tenant, currency, n) order
	for _, s := range spill {
		w := 1
		if len(p.contributorGroups(&p.items[s])) > 0 {
			w = 2
		}
		last := len(p.groups) - 1
		if last < reportGroups || p.plan.items-p.groups[last].writes() < w {
			p.groups = append(p.groups, group6{})
			last++
		}
		g := &p.groups[last]
		p.items[s].placed = last
		g.puts = append(g.puts, s)
		if w == 2 {
			g.deletes = append(g.deletes, s)
		}
		g.rollupItems += w
	}
	for k := range p.groups {
		slices.Sort(p.groups[k].puts)
		slices.Sort(p.groups[k].deletes)
	}
}

// stage is step 4: a contributor's group writes the staging item of a
// delta item placed in a later group; the first such group puts it whole
// (kfirst), the others update it.
func (p *plan6) stage() {
	for s := range p.items {
		it := &p.items[s]
		byGroup := map[int][]aggregates.Period{}
		var ks []int
		for _, i := range it.contributors {
			k := p.partGroup[i]
			if k >= it.placed {
				continue
			}
			if _, ok := byGroup[k]; !ok {
				ks = append(ks, k)
			}
			if per := p.parts[i].key.Period; !slices.Contains(byGroup[k], per) {
				byGroup[k] = append(byGroup[k], per)
			}
		}
		if len(ks) == 0 {
			continue
		}
		slices.Sort(ks)
		it.staged, it.kfirst, it.klast = true, ks[0], ks[len(ks)-1]
		for _, k := range ks {
			pers := byGroup[k]
			slices.SortFunc(pers, func(a, b aggregates.Period) int { return cmp.Compare(a.String(), b.String()) })
			p.groups[k].staging = append(p.groups[k].staging, staging6{item: s, put: k == it.kfirst, periods: pers})
		}
	}
}

// applyCounts is steps 5 and 6: the applied actions of branches with
// report parts; the folds; the counts of branches without report parts;
// the quarantine items — each in the groups' room, then in groups of
// their own.
func (p *plan6) applyCounts(changes []change, folds, invalid []*change) {
	first, last := map[branchID]int{}, map[branchID]int{}
	for i, pt := range p.parts {
		if !pt.rollup() {
			continue
		}
		b, k := branchOf(pt), p.partGroup[i]
		if _, ok := first[b]; !ok {
			first[b] = k
		}
		first[b], last[b] = min(first[b], k), max(last[b], k)
	}
	var alone []table.AppliedCount
	for _, c := range appliedCounts(changes) {
		b := branchID{c.Tenant, c.Branch}
		f, ok := first[b]
		if !ok {
			alone = append(alone, c)
			continue
		}
		l := last[b]
		kind := appliedCount
		if f < l {
			kind = appliedCountClose
			p.groups[f].applied = append(p.groups[f].applied, applied6{kind: appliedOpen, count: table.AppliedCount{Tenant: c.Tenant, Branch: c.Branch}})
		}
		p.groups[l].applied = append(p.groups[l].applied, applied6{kind: kind, count: c})
	}
	// Folds, as layout 4 places them.
	gs := make([]group, len(p.groups))
	for k := range p.groups {
		gs[k] = p.groups[k].group
	}
	if p.plan.lanes > 0 {
		gs = placeFolds(gs, folds, p.plan.items)
	}
	p.syncGroups(gs)
	// Counts of branches without report parts.
	next := 0
	for k := range p.groups {
		for room := p.plan.items - p.groups[k].writes(); next < len(alone) && room > 0; next, room = next+1, room-1 {
			p.groups[k].applied = append(p.groups[k].applied, applied6{kind: appliedCount, count: alone[next]})
			p.groups[k].rollupItems++
		}
	}
	for next < len(alone) {
		var g group6
		for ; next < len(alone) && len(g.applied) < p.plan.items; next++ {
			g.applied = append(g.applied, applied6{kind: appliedCount, count: alone[next]})
			g.rollupItems++
		}
		p.groups = append(p.groups, g)
	}
	// Quarantine items, as layout 3 places them.
	gs = gs[:0]
	for k := range p.groups {
		gs = append(gs, p.groups[k].group)
	}
	p.syncGroups(placeQuarantine(gs, invalid, p.plan.items))
}

// syncGroups takes back the groups placeFolds or placeQuarantine returned:
// the same groups with more in them, and groups of their own after.
func (p *plan6) syncGroups(gs []group) {
	for k := range gs {
		if k < len(p.groups) {
			p.groups[k].group = gs[k]
		} else {
			p.groups = append(p.groups, group6{group: gs[k]})
		}
	}
}

// actions is how many writes group k carries besides its claim: parts
// (each at its most, 1 + entries), applied actions, staging writes,
// delta puts, staging deletes, folds and quarantine items.
func (p *plan6) actions(k int) int {
	g := &p.groups[k]
	n := len(g.applied) + len(g.staging) + len(g.puts) + len(g.deletes) + len(g.folds) + len(g.quarantine)
	for _, pt := range g.parts {
		n += pt.writes()
	}
	return n
}

// digest is layout 6's planDigest: the end, the plan string and the
// number of groups, and per group every part (key and figures), the
// record ids of its folds and quarantine items, its applied actions
// (branch, kind, the four counts), its staging writes (key, put or
// update, the periods staged), its delta puts (key and figures, without
// branches) and its staging deletes (key and klast). Nothing read at
// commit (transitions, parking, staged values) is in it.
func (p *plan6) digest() string {
	h := sha256.New()
	b := p.batch
	fmt.Fprintf(h, "%s|%s|%d\n", b.to, p.plan, len(p.groups))
	for k, g := range p.groups {
		for _, pt := range g.parts {
			key := pt.key.Key()
			d := pt.delta
			fmt.Fprintf(h, "%d|p|%s|%s|%s|%s|%d", k, key.PK, key.SK, d.Income.String(), d.Expense.String(), d.Count)
			digestBreakdowns(h, &d.Breakdowns)
			fmt.Fprintln(h)
		}
		for _, c := range g.folds {
			fmt.Fprintf(h, "%d|f|%s\n", k, recordID(c.rec))
		}
		for _, c := range g.quarantine {
			fmt.Fprintf(h, "%d|q|%s\n", k, recordID(c.rec))
		}
		for _, a := range g.applied {
			c := a.count
			// The per-rebase split of Probed (ProbedBy, session 26) is not
			// digested: it is a split of a digested count, read from the
			// records, so a resumer of another version (before or after
			// the split) plans the same groups and finishes the batch
			// (docs/exactly-once.md, "B as built (session 26)").
			fmt.Fprintf(h, "%d|a|%q|%q|%s|%d|%d|%d|%d\n", k, c.Tenant, c.Branch, a.kind, c.Applied, c.Probed, c.Foreign, c.Compacted)
		}
		for _, st := range g.staging {
			fmt.Fprintf(h, "%d|s|%s|%s|%t", k, b.stagingPK(), p.items[st.item].stagingSK(b), st.put)
			for _, per := range st.periods {
				fmt.Fprintf(h, "|%s", per)
			}
			fmt.Fprintln(h)
		}
		for _, s := range g.puts {
			it := &p.items[s]
			key := it.key(b)
			fmt.Fprintf(h, "%d|r|%s|%s", k, key.PK, key.SK)
			for _, per := range aggregates.SortedPeriods(it.periods) {
				d := it.periods[per]
				fmt.Fprintf(h, "|%s:%s:%s:%d", per, d.Income.String(), d.Expense.String(), d.Count)
				digestBreakdowns(h, &d.Breakdowns)
			}
			fmt.Fprintln(h)
		}
		for _, s := range g.deletes {
			fmt.Fprintf(h, "%d|d|%s|%s|%d\n", k, b.stagingPK(), p.items[s].stagingSK(b), p.items[s].klast)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}
