package aggregates

import "sort"

// Fold accumulates signed report deltas per report. A batch of stream records
// folds into one Fold, so its cost is one update per distinct report touched,
// not one per record. The zero value is not usable; call NewFold.
//
// A fold also holds, for the tenant roll-ups, the currency of each branch
// report's transactions (RollupCurrency) and the change of each roll-up
// partial's branches (AddPartial).
type Fold struct {
	reports  map[ReportKey]*Report
	branches map[ReportKey]int64
	currency map[ReportKey]string
}

// NewFold returns an empty fold.
func NewFold() *Fold {
	return &Fold{reports: map[ReportKey]*Report{}, branches: map[ReportKey]int64{}, currency: map[ReportKey]string{}}
}

// AddPartial adds a roll-up delta's figures for one period to partial k
// (a ReportKey with IsRollup).
func (f *Fold) AddPartial(k ReportKey, d *RollupDelta) {
	r := f.reports[k]
	if r == nil {
		r = &Report{}
		f.reports[k] = r
	}
	r.Merge(&d.Report)
	f.branches[k] += d.Branches
}

// Branches returns the change of partial k's branches.
func (f *Fold) Branches(k ReportKey) int64 { return f.branches[k] }

// Currency returns the currency (RollupCurrency) of the transactions folded
// into branch report k: the last one added (the consumers quarantine a
// record whose currency is not its report's, so there is one).
func (f *Fold) Currency(k ReportKey) string { return f.currency[k] }

// Add adds the contribution of t, times sign (+1 or −1), to its three
// reports.
func (f *Fold) Add(t Transaction, sign int) {
	c := Contribution(t)
	if sign < 0 {
		c = c.Neg()
	}
	names := [3]string{}
	for _, d := range Dimensions {
		names[d] = t.Breakdown(d)
	}
	for _, k := range t.ReportKeys() {
		f.currency[k] = RollupCurrency(t.Currency)
		r := f.reports[k]
		if r == nil {
			r = &Report{}
			f.reports[k] = r
		}
		r.Add(c, names)
	}
}

// AddChange adds the delta of one change, contribution(new) −
// contribution(old). Either may be nil: an absent or invalid image
// contributes zero.
func (f *Fold) AddChange(old, new *Transaction) {
	if old != nil {
		f.Add(*old, -1)
	}
	if new != nil {
		f.Add(*new, +1)
	}
}

// Merge adds every delta of o to f.
func (f *Fold) Merge(o *Fold) {
	for k, r := range o.reports {
		mine := f.reports[k]
		if mine == nil {
			mine = &Report{}
			f.reports[k] = mine
		}
		mine.Merge(r)
	}
	for k, b := range o.branches {
		f.branches[k] += b
	}
	for k, c := range o.currency {
		f.currency[k] = c
	}
}

// Keys returns the reports with a non-zero delta, sorted by key, after
// pruning zero entries. Changes that cancel out inside a fold (an insert and
// a remove of the same transaction) cost nothing.
func (f *Fold) Keys() []ReportKey {
	keys := make([]ReportKey, 0, len(f.reports))
	for k, r := range f.reports {
		r.Prune()
		if r.IsZero() && f.branches[k] == 0 {
			continue
		}
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i].Key(), keys[j].Key()
		if a.PK != b.PK {
			return a.PK < b.PK
		}
		return a.SK < b.SK
	})
	return keys
}

// Report returns the delta of one report (nil when the fold has none).
func (f *Fold) Report(k ReportKey) *Report { return f.reports[k] }

// Len returns how many reports the fold touches, zero deltas included.
func (f *Fold) Len() int { return len(f.reports) }
