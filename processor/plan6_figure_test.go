package processor

import (
	"strconv"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// This file measures plans for BENCHMARKS.md's "Plan layout 6 planned"
// (BenchmarkPlanLayouts_CatchUp, plan6_figure_bench_test.go): what each
// layout's plan of a batch writes, billed by DynamoDB's rules from the
// sizes of the items the plan determines.

// PlanCost is what one layout's plan of one batch writes for its
// roll-ups and counts. Units are billed write units: a transactional
// write is twice the item's size in KB rounded up (table.ItemSize).
type PlanCost struct {
	Layout  string
	Records int
	// Groups are the batch's transactions (one claim each); DeltaGroups
	// those of them that hold only delta puts (layout 6).
	Groups, DeltaGroups int
	// DeltaItems are the roll-up delta items put; DeltaUnits their puts
	// and the deletes of their folds (both transactional).
	DeltaItems, DeltaUnits int
	// BranchesOnlyItems are the delta items of open question 9's series.
	BranchesOnlyItems int
	// StagingWrites are the staging puts and updates (layout 6) and
	// StagingUnits their units; StagingDeletes and StagingDeleteUnits the
	// staging deletes; StagingReads the consistent reads of the delta
	// groups (1 read unit each: items under 4 KB).
	StagingWrites, StagingUnits         int
	StagingDeletes, StagingDeleteUnits  int
	StagingReads                        int
	AppliedCounts, OpenMarks, StepAUnit int
	// ClaimUnits are the checkpoint claims' units: 2 a group (the
	// checkpoint item is under 1 KB; not sized here).
	ClaimUnits int
	// MaxActions is the largest group's actions besides its claim.
	MaxActions int
}

// planLayoutsForFigure plans one batch of records under layout 3 (roll-ups
// off), layout 4 (today's planner), layout 6 with roll-ups off, layout 6
// as designed and layout 6 with open question 9, and returns what each
// writes, in that order.
func planLayoutsForFigure(recs []Record) []PlanCost {
	changes := make([]change, len(recs))
	for i := range recs {
		changes[i] = classify(&recs[i])
	}
	dedupe(changes)
	quarantineForeignCurrency(changes)
	fold := aggregates.NewFold()
	for i := range changes {
		changes[i].addTo(fold)
	}
	invalid, folds := needingQuarantine(changes), foldingChanges(changes)
	to := recs[len(recs)-1].SequenceNumber
	const shard = "shardId-00000001700000000000-0000abcd"
	b := batch6{label: "2026-11-27T00:00:00.000", shard: shard, to: to}
	now := "2026-11-27T06:00:00.123456789Z"
	var out []PlanCost

	// Layout 3 and 4: today's planner.
	for _, layout := range []int{quarantineLayout, rollupLayout} {
		plan := batchPlan{items: 99, entries: 32, layout: layout}
		if layout >= rollupLayout {
			plan.lanes = aggregates.RollupLanes
		}
		var f []*change
		if layout >= rollupLayout {
			f = folds
		}
		groups := planGroups(fold, invalid, f, plan)
		c := PlanCost{Layout: plan.String(), Records: len(recs), Groups: len(groups), ClaimUnits: 2 * len(groups)}
		for k, g := range groups {
			c.MaxActions = max(c.MaxActions, g.writes()+len(g.quarantine))
			if layout < rollupLayout {
				continue
			}
			claim := shard + "~" + to + "~g" + strconv.Itoa(k)
			lane := aggregates.RollupLane(claim)
			rf := rollupFold(g.parts, contributorsAsBranches(g.parts))
			for _, rg := range rf.Groups() {
				for _, item := range table.RollupDeltaItems(rg.Tenant, lane, claim, rg.Currency, rf.Periods(rg), now) {
					c.DeltaItems++
					c.DeltaUnits += 2 * 2 * kb(table.ItemSize(item))
				}
			}
		}
		out = append(out, c)
	}

	// Layout 6.
	for _, v := range []struct {
		lanes int
		opts  plan6Options
		name  string
	}{
		{0, plan6Options{}, ""},
		{aggregates.RollupLanes, plan6Options{}, ""},
		{aggregates.RollupLanes, plan6Options{branchesOnly: true}, " (q9)"},
	} {
		plan := batchPlan{items: 99, entries: 32, layout: plan6Layout, lanes: v.lanes}
		var f []*change
		if v.lanes > 0 {
			f = folds
		}
		p := planBatch6(b, changes, fold, invalid, f, plan, v.opts)
		c := p.cost(now, v.name)
		c.Records = len(recs)
		out = append(out, c)
	}
	return out
}

// contributorsAsBranches gives each branch-report part 0 that moves the
// count a transition of 1 (its size: the commit's transitions are 0 or
// ±1 each), so that a delta item is sized with a branches figure of the
// magnitude the commit writes.
func contributorsAsBranches(parts []part) func(i int) int64 {
	return func(i int) int64 {
		if contributes(parts[i]) {
			return 1
		}
		return 0
	}
}

// kb is a size in billed KB: rounded up, at least 1.
func kb(size int) int { return max(1, (size+1023)/1024) }

// cost is what a layout-6 plan writes (PlanCost). Delta items are sized
// with branches = the number of their contributors in the period (the
// commit writes the sum of their transitions, at most that in
// magnitude), staging items with each staged number at the number of
// contributors staged so far.
func (p *plan6) cost(now, suffix string) PlanCost {
	c := PlanCost{Layout: p.plan.String() + suffix, Groups: len(p.groups), ClaimUnits: 2 * len(p.groups)}
	for k := range p.groups {
		g := &p.groups[k]
		c.MaxActions = max(c.MaxActions, p.actions(k))
		if len(g.parts) == 0 && len(g.puts) > 0 {
			c.DeltaGroups++
		}
		for _, a := range g.applied {
			if a.kind == appliedOpen {
				c.OpenMarks++
			} else {
				c.AppliedCounts++
			}
			c.StepAUnit += 2 * kb(appliedItemSize(p.batch, a))
		}
	}
	contributorsIn := func(it *deltaItem6, per aggregates.Period) int64 {
		var n int64
		for _, i := range it.contributors {
			if p.parts[i].key.Period == per {
				n++
			}
		}
		return n
	}
	for s := range p.items {
		it := &p.items[s]
		periods := map[aggregates.Period]*aggregates.RollupDelta{}
		for per, d := range it.periods {
			dd := *d
			dd.Branches = contributorsIn(it, per)
			periods[per] = &dd
		}
		item := table.EncodeRollupDelta(it.key(p.batch), it.rg.Currency, periods, now)
		c.DeltaItems++
		c.DeltaUnits += 2 * 2 * kb(table.ItemSize(item))
		if it.branchesOnly {
			c.BranchesOnlyItems++
		}
		if !it.staged {
			continue
		}
		// The staging item as each of its writes leaves it.
		staged := map[aggregates.Period]int64{}
		var size int
		for k := it.kfirst; k <= it.klast; k++ {
			for _, st := range p.groups[k].staging {
				if st.item != s {
					continue
				}
				for _, i := range it.contributors {
					if p.partGroup[i] == k {
						staged[p.parts[i].key.Period]++
					}
				}
				after := stagingItemSize(p.batch, it, staged, k)
				c.StagingWrites++
				c.StagingUnits += 2 * kb(max(size, after)) // an update bills the larger of before and after
				size = after
			}
		}
		c.StagingDeletes++
		c.StagingDeleteUnits += 2 * kb(size)
		c.StagingReads++
	}
	return c
}

// stagingItemSize is the size of a staging item holding staged (its B#
// numbers), written by group k.
func stagingItemSize(b batch6, it *deltaItem6, staged map[aggregates.Period]int64, k int) int {
	item := map[string]ddbtypes.AttributeValue{
		table.AttrPK:        table.S(b.stagingPK()),
		table.AttrSK:        table.S(it.stagingSK(b)),
		"lastGroup":         table.Int(int64(k)),
		table.AttrExpiresAt: table.Int(1_795_000_000),
	}
	for per, n := range staged {
		item["B#"+per.String()] = table.Int(-n)
	}
	return table.ItemSize(item)
}

// appliedItemSize is the size of a branch's applied item after the
// action: its four counts, entityType and, while open, the batch's id.
func appliedItemSize(b batch6, a applied6) int {
	k := aggregates.AppliedKey(a.count.Tenant, a.count.Branch)
	item := map[string]ddbtypes.AttributeValue{
		table.AttrPK: table.S(k.PK), table.AttrSK: table.S(k.SK), table.AttrEntityType: table.S(aggregates.EntityApplied),
		table.AttrAppliedCount: table.Int(1_000_000), table.AttrProbed: table.Int(1_000), table.AttrForeign: table.Int(1_000), table.AttrCompacted: table.Int(1_000),
		"open": &ddbtypes.AttributeValueMemberSS{Value: []string{b.label + "~" + b.shard + "~" + b.to}},
	}
	return table.ItemSize(item)
}
