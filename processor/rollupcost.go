package processor

import (
	"log/slog"
	"sort"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// What the consumers' roll-up writes cost (issue 24, hole 9 of the review:
// docs/exactly-once.md, "Hole 9").
//
// DynamoDB reports a transaction's consumed capacity per table, not per
// item, so the roll-up items' share of a commit is computed here by AWS's
// billing rule (table.WriteUnits: one unit per started KB of the larger
// item image, twice inside a transaction) from what the committer knows:
//
//   - a roll-up delta put: the item it puts (exact);
//   - the delete of a folded delta: the item its INSERT record carried
//     (exact);
//   - a partial's report-item update: the item as the committer's shape
//     knows it after the update (its inline names, with one-digit figures:
//     an estimate from below by the figures' digits, a few bytes a name);
//   - a partial's entry-item update: its key and three figures (the same
//     estimate).
//
// The units go to ledger_rollup_write_units_total{kind} (no tenant label:
// STYLE.md); the heaviest tenant of a commit whose roll-up units reach
// Config.RollupCostLogUnits is logged (tenant, units), so an operator can
// name who makes the consumers write, as the budget's items name who
// makes the writers write.

// Label values of ledger_rollup_write_units_total{kind}.
const (
	RollupCostDeltaPut    = "delta_put"     // stage 1: the roll-up delta items a branch-report commit puts
	RollupCostDeltaDelete = "delta_delete"  // stage 2: the delete of each delta item a fold commits
	RollupCostPartial     = "partial"       // stage 2: partial report-item updates
	RollupCostEntry       = "partial_entry" // stage 2: partial entry-item updates (names past the inline ones)
)

// transactional is AWS's factor for a write inside TransactWriteItems.
const transactional = 2

// rollupCost is the roll-up write units of one committed transaction.
type rollupCost struct {
	byKind   map[string]int
	byTenant map[string]int
}

func (c *rollupCost) add(kind, tenant string, bytes int) {
	u := transactional * table.WriteUnits(0, bytes)
	c.byKind[kind] += u
	c.byTenant[tenant] += u
}

// costOfRollups computes the roll-up units of a transaction that landed:
// items as sent, owner[i] the part (or other owner) of items[i], writes and
// shapes the parts' updates and the shapes they were built on, folds the
// delta records the transaction folds.
func costOfRollups(items []ddbtypes.TransactWriteItem, owner []int, parts []part, writes []reportWrites, shapes map[aggregates.Key]*shape, folds []*change, now string) rollupCost {
	c := rollupCost{byKind: map[string]int{}, byTenant: map[string]int{}}
	for i, it := range items {
		o := owner[i]
		switch {
		case it.Put != nil:
			if _, ok := deltaOf(o); ok {
				pk, _ := table.String(it.Put.Item, table.AttrPK)
				tenant, _, _ := aggregates.ParseRollupLanePK(pk)
				c.add(RollupCostDeltaPut, tenant, table.ItemSize(it.Put.Item))
			}
		case it.Delete != nil:
			if f, ok := foldOf(o); ok && f < len(folds) && folds[f].rollup != nil {
				c.add(RollupCostDeltaDelete, folds[f].rollup.Tenant, table.ItemSize(folds[f].rec.NewImage))
			}
		}
	}
	for i, pt := range parts {
		if !pt.key.IsRollup() || i >= len(writes) {
			continue
		}
		for _, u := range writes[i].updates {
			sk, _ := table.String(u.Key, table.AttrSK)
			if sk != pt.key.Key().SK {
				c.add(RollupCostEntry, pt.key.Tenant, partialEntryBytes(u.Key))
				continue
			}
			c.add(RollupCostPartial, pt.key.Tenant, partialItemBytes(pt, shapes[pt.key.Key()], writes[i].inline, now))
		}
	}
	return c
}

// partialItemBytes estimates the size of a partial's report item after an
// update: the item the shape and the update's new inline names describe,
// with one-digit figures.
func partialItemBytes(pt part, sh *shape, added [3][]string, now string) int {
	r := aggregates.Report{Totals: aggregates.Totals{Count: 1}}
	for d := range aggregates.Dimensions {
		r.Breakdowns[d] = map[string]aggregates.Totals{}
		if sh != nil {
			for n := range sh.entries[d] {
				r.Breakdowns[d][n] = aggregates.Totals{Count: 1}
			}
		}
		for _, n := range added[d] {
			r.Breakdowns[d][n] = aggregates.Totals{Count: 1}
		}
	}
	rk, err := aggregates.ParseRollupKey(pt.key.Key())
	if err != nil {
		return 0
	}
	item, _ := table.EncodePartial(rk, &aggregates.RollupDelta{Report: r, Branches: 1}, now)
	return table.ItemSize(item)
}

// partialEntryBytes estimates an entry item's size: its key, its entity
// attributes and three one-digit figures.
func partialEntryBytes(key map[string]ddbtypes.AttributeValue) int {
	const attrs = 96 // entityType, the three figures, updatedAt: names and values
	return table.ItemSize(key) + attrs
}

// count adds c to the metrics and logs the heaviest tenant when its units
// reach threshold (0: never).
func (c rollupCost) count(m *Metrics, log *slog.Logger, threshold int) {
	for k, u := range c.byKind {
		m.RollupWriteUnits.WithLabelValues(k).Add(float64(u))
	}
	if threshold <= 0 || len(c.byTenant) == 0 {
		return
	}
	tenants := make([]string, 0, len(c.byTenant))
	for t := range c.byTenant {
		tenants = append(tenants, t)
	}
	sort.Slice(tenants, func(i, j int) bool {
		a, b := c.byTenant[tenants[i]], c.byTenant[tenants[j]]
		return a > b || a == b && tenants[i] < tenants[j]
	})
	if u := c.byTenant[tenants[0]]; u >= threshold {
		log.Info("roll-up write units of one commit", "tenant", tenants[0], "units", u, "tenants", len(tenants))
	}
}
