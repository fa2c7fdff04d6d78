package aggregates

import (
	"fmt"
	"sort"
	"strings"

	"github.com/shopspring/decimal"
)

// Dimension is one of a report's breakdowns.
type Dimension int

// The breakdown dimensions of a report.
const (
	ByCategory Dimension = iota
	ByCostCenter
	ByPaymentMethod
)

// Dimensions lists every breakdown dimension.
var Dimensions = [3]Dimension{ByCategory, ByCostCenter, ByPaymentMethod}

// Attribute returns the report attribute holding the dimension's map.
func (d Dimension) Attribute() string {
	return [...]string{"byCategory", "byCostCenter", "byPaymentMethod"}[d]
}

func (d Dimension) String() string { return d.Attribute() }

// Totals are the figures of a report or of one breakdown entry. As a delta
// they may be negative.
type Totals struct {
	Income  decimal.Decimal
	Expense decimal.Decimal
	Count   int64
}

// IsZero reports whether every figure is zero.
func (t Totals) IsZero() bool { return t.Income.IsZero() && t.Expense.IsZero() && t.Count == 0 }

// Equal compares figures as numbers (1.10 equals 1.1).
func (t Totals) Equal(o Totals) bool {
	return t.Income.Equal(o.Income) && t.Expense.Equal(o.Expense) && t.Count == o.Count
}

// Add returns t + o.
func (t Totals) Add(o Totals) Totals {
	return Totals{Income: t.Income.Add(o.Income), Expense: t.Expense.Add(o.Expense), Count: t.Count + o.Count}
}

// Neg returns −t.
func (t Totals) Neg() Totals {
	return Totals{Income: t.Income.Neg(), Expense: t.Expense.Neg(), Count: -t.Count}
}

func (t Totals) String() string {
	return fmt.Sprintf("income=%s expense=%s count=%d", t.Income, t.Expense, t.Count)
}

// Report is a report's figures, or a signed delta to them: totals and the
// three breakdowns. The zero Report is ready to use.
type Report struct {
	Totals
	Breakdowns [3]map[string]Totals // indexed by Dimension
}

// Contribution returns what t adds to each of its three reports: income or
// expense by its amount, count by one, and the same as an entry of every
// breakdown it names.
func Contribution(t Transaction) Totals {
	c := Totals{Count: 1}
	if t.Type == Income {
		c.Income = t.Amount
	} else {
		c.Expense = t.Amount
	}
	return c
}

// Add adds delta to the report's totals and to the entry of each non-empty
// name (names[d] for dimension d).
func (r *Report) Add(delta Totals, names [3]string) {
	r.Totals = r.Totals.Add(delta)
	for _, d := range Dimensions {
		if names[d] == "" {
			continue
		}
		if r.Breakdowns[d] == nil {
			r.Breakdowns[d] = map[string]Totals{}
		}
		r.Breakdowns[d][names[d]] = r.Breakdowns[d][names[d]].Add(delta)
	}
}

// Merge adds every figure of o to r.
func (r *Report) Merge(o *Report) {
	r.Totals = r.Totals.Add(o.Totals)
	for _, d := range Dimensions {
		for name, t := range o.Breakdowns[d] {
			if r.Breakdowns[d] == nil {
				r.Breakdowns[d] = map[string]Totals{}
			}
			r.Breakdowns[d][name] = r.Breakdowns[d][name].Add(t)
		}
	}
}

// Prune drops breakdown entries whose figures are all zero: as a delta they
// change nothing, and in a stored report they mean the same as no entry.
func (r *Report) Prune() {
	for _, d := range Dimensions {
		for name, t := range r.Breakdowns[d] {
			if t.IsZero() {
				delete(r.Breakdowns[d], name)
			}
		}
		if len(r.Breakdowns[d]) == 0 {
			r.Breakdowns[d] = nil
		}
	}
}

// Entries counts the breakdown entries of r, over all dimensions.
func (r *Report) Entries() int {
	n := 0
	for _, d := range Dimensions {
		n += len(r.Breakdowns[d])
	}
	return n
}

// IsZero reports whether r changes nothing as a delta (or is empty as a
// report): zero totals and only zero entries.
func (r *Report) IsZero() bool {
	if !r.Totals.IsZero() {
		return false
	}
	for _, d := range Dimensions {
		for _, t := range r.Breakdowns[d] {
			if !t.IsZero() {
				return false
			}
		}
	}
	return true
}

// Equal compares two reports as numbers, treating an all-zero entry as no
// entry, so a stored report whose entry fell back to zero equals a freshly
// computed one without it.
func (r *Report) Equal(o *Report) bool { return len(r.Diff(o)) == 0 }

// Diff lists, in a stable order, every figure where r and o differ, as
// "field: got X; want Y" lines with r as got and o as want.
func (r *Report) Diff(o *Report) []string {
	var out []string
	if !r.Totals.Equal(o.Totals) {
		out = append(out, fmt.Sprintf("totals: got %s; want %s", r.Totals, o.Totals))
	}
	for _, d := range Dimensions {
		names := map[string]bool{}
		for n := range r.Breakdowns[d] {
			names[n] = true
		}
		for n := range o.Breakdowns[d] {
			names[n] = true
		}
		sorted := make([]string, 0, len(names))
		for n := range names {
			sorted = append(sorted, n)
		}
		sort.Strings(sorted)
		for _, n := range sorted {
			got, want := r.Breakdowns[d][n], o.Breakdowns[d][n]
			if !got.Equal(want) {
				out = append(out, fmt.Sprintf("%s[%q]: got %s; want %s", d, n, got, want))
			}
		}
	}
	return out
}

func (r *Report) String() string {
	var b strings.Builder
	b.WriteString(r.Totals.String())
	for _, d := range Dimensions {
		if len(r.Breakdowns[d]) == 0 {
			continue
		}
		names := make([]string, 0, len(r.Breakdowns[d]))
		for n := range r.Breakdowns[d] {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(&b, " %s{", d)
		for i, n := range names {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q: %s", n, r.Breakdowns[d][n])
		}
		b.WriteString("}")
	}
	return b.String()
}
