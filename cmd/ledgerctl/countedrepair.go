package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// countedRepairs runs the counted repair (processor.CountedRepair) of every
// branch with a report difference in diffs whose applied item holds
// fencedAt, and names each branch it leaves alone. It returns the
// differences left to the repair of protocol 3: the stray items and the
// roll-up differences, and, with uncounted, the differences of the
// branches not rebased since the fence (without it those are left alone,
// named). handled holds the branches it repaired or left alone, passedOn
// the tenants into whose lanes a repair passed on parked roll-up shares.
func (e *environment) countedRepairs(ctx context.Context, c processor.RebaseAPI, diffs []processor.Difference, uncounted bool) (rest []processor.Difference, handled map[processor.Scope]bool, passedOn map[string]bool, err error) {
	byBranch := map[processor.Scope][]processor.Difference{}
	handled, passedOn = map[processor.Scope]bool{}, map[string]bool{}
	for _, d := range diffs {
		if d.Stray != nil || d.Rollup != nil {
			rest = append(rest, d)
			continue
		}
		s := processor.Scope{Tenant: d.Report.Tenant, Branch: d.Report.Branch}
		byBranch[s] = append(byBranch[s], d)
	}
	var repaired, refused, old int
	var streamARN string
	if len(byBranch) > 0 {
		if _, arn, err := e.streamOf(ctx, ""); err == nil {
			streamARN = arn // without it, the refusal of an open mark names both causes
		}
	}
	unproven := map[string]bool{}
	for _, s := range slices.SortedFunc(maps.Keys(byBranch), func(a, b processor.Scope) int {
		return strings.Compare(a.Tenant+"\x00"+a.Branch, b.Tenant+"\x00"+b.Branch)
	}) {
		a, err := table.GetApplied(ctx, c, e.coordination, s.Tenant, s.Branch)
		if err != nil {
			e.nameUnproven(unproven, "")
			return nil, nil, nil, err
		}
		if a.FencedAt != "" || !uncounted {
			handled[s] = true
		}
		if a.FencedAt == "" {
			if uncounted {
				old++
				rest = append(rest, byBranch[s]...)
				continue
			}
			refused++
			fmt.Fprintf(e.stdout, "left alone (%s/%s is not rebased since the fence: no counted repair can prove it; rebase it: ledgerctl reconcile --repair --rebase --tenant %s --branch %s, docs/runbook.md, \"Rebasing a branch\"; or --uncounted for the repair of protocol 3, not exact while consumers run): %d reports\n",
				s.Tenant, s.Branch, s.Tenant, s.Branch, len(byBranch[s]))
			continue
		}
		res, err := processor.CountedRepair(ctx, c, e.table, processor.CountedRepairOptions{
			Tenant: s.Tenant, Branch: s.Branch, CoordinationTable: e.coordination, StreamARN: streamARN})
		if res.RollupsUnproven {
			unproven[s.Tenant] = true
		}
		if res.RollupSharesMoved > 0 {
			passedOn[s.Tenant] = true
		}
		switch {
		case errors.Is(err, processor.ErrNotProven):
			refused++
			fmt.Fprintf(e.stdout, "left alone (%v)\n", err)
			continue
		case err != nil:
			// A transaction may have landed (S26-R3): name the roll-ups,
			// this tenant's and those of every branch repaired before
			// (S27-R1).
			failing := ""
			if res.RollupsUnproven {
				failing = s.Tenant
			}
			e.nameUnproven(unproven, failing)
			return nil, nil, nil, err
		}
		repaired++
		fmt.Fprintf(e.stdout, "repaired %s/%s (counted: applied = written = %d; %d reports in %d transactions, %d rounds; repair %s)\n",
			s.Tenant, s.Branch, res.A, res.Reports, res.Transactions, res.Rounds, res.ID)
	}
	e.nameUnproven(unproven, "")
	if len(byBranch) > 0 {
		fmt.Fprintf(e.stdout, "counted repair: %d branches repaired, %d left alone, %d for the repair of protocol 3 (--uncounted)\n", repaired, refused, old)
	}
	return rest, handled, passedOn, nil
}

// nameUnproven names the roll-ups of every tenant in unproven (a counted
// repair changed its report figures), and of failing (a repair whose
// outcome is unknown: they may have changed; "" for none), before
// ledgerctl goes on or fails (S26-R3, S27-R1).
func (e *environment) nameUnproven(unproven map[string]bool, failing string) {
	for _, t := range slices.Sorted(maps.Keys(unproven)) {
		if t == failing {
			continue
		}
		fmt.Fprintf(e.stdout, "report figures of tenant %s changed: its roll-ups are unproven after the counted repair (reconcile, then the quiescent roll-up repair: docs/runbook.md, \"Repairing tenant roll-ups\")\n", t)
	}
	if failing != "" {
		fmt.Fprintf(e.stdout, "report figures of tenant %s may have changed: its roll-ups are unproven after the counted repair (reconcile, then the quiescent roll-up repair: docs/runbook.md, \"Repairing tenant roll-ups\")\n", failing)
	}
}

// branchDiff reports whether d is a branch report's difference of a branch
// in handled.
func branchDiff(d processor.Difference, handled map[processor.Scope]bool) bool {
	return d.Stray == nil && d.Rollup == nil && handled[processor.Scope{Tenant: d.Report.Tenant, Branch: d.Report.Branch}]
}
