package aggregates

import (
	"cmp"
	"maps"
	"slices"
)

// Tenant roll-ups: the arithmetic (docs/design.md "Tenant roll-ups";
// docs/exactly-once.md "Tenant roll-ups"). A commit that changes branch
// reports folds their deltas, by tenant, currency and period, into roll-up
// deltas (RollupFold); each is put as a roll-up delta item in a lane
// (rollupkeys.go) and later folded into a partial (RollupKey), which is a
// report plus the figure Branches.

// RollupDelta is a roll-up's signed delta for one period (or a partial's
// figures): a report's figures plus the change in the number of branches
// whose report for the period has a non-zero count.
type RollupDelta struct {
	Report
	Branches int64
}

// IsZero reports whether d changes nothing.
func (d *RollupDelta) IsZero() bool { return d.Branches == 0 && d.Report.IsZero() }

// Merge adds every figure of o to d.
func (d *RollupDelta) Merge(o *RollupDelta) {
	d.Report.Merge(&o.Report)
	d.Branches += o.Branches
}

// RollupCurrency is the currency a transaction of currency c counts in:
// c, or NoCurrency for a transaction of a branch without one.
func RollupCurrency(c string) string {
	if c == "" {
		return NoCurrency
	}
	return c
}

// BranchTransition is what a branch report whose count goes from c to c+d
// adds to its roll-up's Branches: [c+d ≠ 0] − [c ≠ 0]. Summed over every
// change of the report, in any order, it telescopes to [last ≠ 0] −
// [first ≠ 0].
func BranchTransition(c, d int64) int64 {
	b := func(n int64) int64 {
		if n != 0 {
			return 1
		}
		return 0
	}
	return b(c+d) - b(c)
}

// RollupGroup is what one roll-up delta item is for: a tenant and a
// currency (ISO code or NoCurrency).
type RollupGroup struct{ Tenant, Currency string }

// RollupFold sums roll-up deltas by tenant, currency and period. The zero
// value is not usable; call NewRollupFold.
type RollupFold struct {
	m map[RollupGroup]map[Period]*RollupDelta
}

// NewRollupFold returns an empty roll-up fold.
func NewRollupFold() *RollupFold {
	return &RollupFold{m: map[RollupGroup]map[Period]*RollupDelta{}}
}

// Add adds a branch report's delta (or a roll-up delta's figures for one
// period) and a change of the branch count to the roll-up of tenant,
// currency ("" counts as NoCurrency) and period p. delta may be nil.
func (f *RollupFold) Add(tenant, currency string, p Period, delta *Report, branches int64) {
	g := RollupGroup{Tenant: tenant, Currency: RollupCurrency(currency)}
	ps := f.m[g]
	if ps == nil {
		ps = map[Period]*RollupDelta{}
		f.m[g] = ps
	}
	d := ps[p]
	if d == nil {
		d = &RollupDelta{}
		ps[p] = d
	}
	if delta != nil {
		d.Report.Merge(delta)
	}
	d.Branches += branches
}

// Groups returns the tenants and currencies with a non-zero delta, sorted,
// after pruning zero entries and periods.
func (f *RollupFold) Groups() []RollupGroup {
	var out []RollupGroup
	for g, ps := range f.m {
		for p, d := range ps {
			d.Prune()
			if d.IsZero() {
				delete(ps, p)
			}
		}
		if len(ps) > 0 {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b RollupGroup) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Currency, b.Currency))
	})
	return out
}

// Periods returns the deltas by period of one tenant and currency (nil when
// the fold has none). The map is the fold's own.
func (f *RollupFold) Periods(g RollupGroup) map[Period]*RollupDelta { return f.m[g] }

// SortedPeriods returns the periods of ps in key order (Period.String).
func SortedPeriods[V any](ps map[Period]V) []Period {
	return slices.SortedFunc(maps.Keys(ps), func(a, b Period) int { return cmp.Compare(a.String(), b.String()) })
}

// Report returns the report key of the partial r: the key the consumers
// fold, update and park it under (ReportKey.IsRollup).
func (r RollupKey) Report() ReportKey {
	return ReportKey{Tenant: r.Tenant, Currency: r.Currency, Lane: r.Lane, Period: r.Period}
}
