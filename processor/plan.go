package processor

import "github.com/ledger-dev/ledger/aggregates"

// run is a contiguous slice of a batch committed by one transaction.
type run struct {
	changes []change
	fold    *aggregates.Fold
}

func (r *run) records() []Record {
	out := make([]Record, len(r.changes))
	for i := range r.changes {
		out[i] = *r.changes[i].rec
	}
	return out
}

// planRuns cuts changes, in order, into runs that each fit one
// TransactWriteItems: at most maxItems report items, and at most maxEntries
// breakdown entries per report item (which bounds the update expression's
// length). A record is never split; records of one run are folded, so a run
// costs one update per distinct report item it touches.
func planRuns(changes []change, maxItems, maxEntries int) []run {
	var runs []run
	cur := run{fold: aggregates.NewFold()}
	entries := map[aggregates.ReportKey]map[entryID]bool{}
	for i := range changes {
		c := &changes[i]
		if len(cur.changes) > 0 && !fits(entries, c, maxItems, maxEntries) {
			runs = append(runs, cur)
			cur = run{fold: aggregates.NewFold()}
			entries = map[aggregates.ReportKey]map[entryID]bool{}
		}
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
	if len(cur.changes) > 0 {
		runs = append(runs, cur)
	}
	return runs
}

type entryID struct {
	dim  aggregates.Dimension
	name string
}

// fits reports whether adding c keeps the run within its limits.
func fits(entries map[aggregates.ReportKey]map[entryID]bool, c *change, maxItems, maxEntries int) bool {
	newKeys := 0
	added := map[aggregates.ReportKey]map[entryID]bool{}
	for _, tx := range []*aggregates.Transaction{c.old, c.new} {
		if tx == nil {
			continue
		}
		for _, k := range tx.ReportKeys() {
			if entries[k] == nil && added[k] == nil {
				newKeys++
			}
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
	if len(entries)+newKeys > maxItems {
		return false
	}
	for k, a := range added {
		if len(entries[k])+len(a) > maxEntries {
			return false
		}
	}
	return true
}
