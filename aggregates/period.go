package aggregates

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// PeriodType is the granularity of a report.
type PeriodType string

// The report granularities. Their string values appear in report keys, in
// the periodType attribute, in a transaction's stamp and in the API; they
// are a contract (docs/design.md, "Business calendars").
const (
	Daily         PeriodType = "DAILY"          // YYYY-MM-DD, the business date
	Weekly        PeriodType = "WEEKLY"         // YYYY-MM-DD, the business date of the week's first day
	Monthly       PeriodType = "MONTHLY"        // YYYY-MM of the business date
	Quarterly     PeriodType = "QUARTERLY"      // YYYY-Qn of the business date
	Yearly        PeriodType = "YEARLY"         // YYYY of the business date
	FiscalQuarter PeriodType = "FISCAL_QUARTER" // FYyyyy-Qn, yyyy the year the fiscal year ends
	FiscalYear    PeriodType = "FISCAL_YEAR"    // FYyyyy
)

// PeriodTypes lists every granularity, in their canonical order (finest
// first, calendar before fiscal): the order of a stamp and of a tenant's
// reportPeriods.
var PeriodTypes = [...]PeriodType{Daily, Weekly, Monthly, Quarterly, Yearly, FiscalQuarter, FiscalYear}

// DefaultPeriodTypes are the period types a tenant keeps unless it says
// otherwise: the three every report had before business calendars.
var DefaultPeriodTypes = []PeriodType{Daily, Monthly, Yearly}

// periodRank is a type's position in PeriodTypes, -1 when unknown.
func periodRank(t PeriodType) int {
	for i, p := range PeriodTypes {
		if p == t {
			return i
		}
	}
	return -1
}

// periodTypeNames is PeriodTypes for messages: "DAILY, WEEKLY, … or FISCAL_YEAR".
func periodTypeNames() string {
	names := make([]string, len(PeriodTypes))
	for i, p := range PeriodTypes {
		names[i] = string(p)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// ParsePeriodType accepts one of PeriodTypes exactly.
func ParsePeriodType(s string) (PeriodType, error) {
	if periodRank(PeriodType(s)) >= 0 {
		return PeriodType(s), nil
	}
	return "", fmt.Errorf("period type %q: want %s", truncateRunes(s, 32), periodTypeNames())
}

// ParseReportPeriods validates a tenant's reportPeriods: one or more known
// period types, none twice. It returns them in canonical order, so that two
// lists of the same types are equal.
func ParseReportPeriods(names []string) ([]PeriodType, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("empty: keep at least one period type (%s)", periodTypeNames())
	}
	seen := make(map[PeriodType]bool, len(names))
	for _, n := range names {
		t, err := ParsePeriodType(n)
		if err != nil {
			return nil, err
		}
		if seen[t] {
			return nil, fmt.Errorf("period type %s named twice", t)
		}
		seen[t] = true
	}
	out := make([]PeriodType, 0, len(seen))
	for _, t := range PeriodTypes {
		if seen[t] {
			out = append(out, t)
		}
	}
	return out, nil
}

// Period is one report period: a granularity and its value.
type Period struct {
	Type  PeriodType
	Value string
}

// periodLayout is each type's value layout, for messages, and its length.
var periodLayout = map[PeriodType]string{
	Daily: "YYYY-MM-DD", Weekly: "YYYY-MM-DD", Monthly: "YYYY-MM", Quarterly: "YYYY-Qn",
	Yearly: "YYYY", FiscalQuarter: "FYyyyy-Qn", FiscalYear: "FYyyyy",
}

// ParsePeriod validates a period value against its type: a real calendar
// date for DAILY and WEEKLY, YYYY-MM with a month 01–12 for MONTHLY, YYYY-Qn
// with n 1–4 for QUARTERLY, YYYY for YEARLY, FYyyyy-Qn and FYyyyy for the
// fiscal types. A WEEKLY value is any date: which weekday starts a week is
// the branch's calendar's, not the value's.
func ParsePeriod(t PeriodType, value string) (Period, error) {
	layout, ok := periodLayout[t]
	if !ok {
		return Period{}, fmt.Errorf("period type %q: want %s", truncateRunes(string(t), 32), periodTypeNames())
	}
	bad := func() (Period, error) {
		return Period{}, fmt.Errorf("%s period %q: want %s", t, truncateRunes(value, 32), layout)
	}
	if len(value) != len(layout) {
		return bad()
	}
	v := value
	if t == FiscalQuarter || t == FiscalYear {
		rest, ok := strings.CutPrefix(v, "FY")
		if !ok {
			return bad()
		}
		v = rest
	}
	var err error
	switch t {
	case Daily, Weekly:
		_, err = time.Parse("2006-01-02", v)
	case Monthly:
		_, err = time.Parse("2006-01", v)
	case Yearly, FiscalYear:
		_, err = time.Parse("2006", v)
	case Quarterly, FiscalQuarter:
		y, q, ok := strings.Cut(v, "-Q")
		if _, e := time.Parse("2006", y); e != nil || !ok || len(q) != 1 || q[0] < '1' || q[0] > '4' {
			return bad()
		}
	}
	if err != nil {
		return bad()
	}
	return Period{Type: t, Value: value}, nil
}

// periodValueLength is the length of a period value of type t, 0 when t is
// not a period type.
func periodValueLength(t PeriodType) int { return len(periodLayout[t]) }

// String formats p as its report sort key, e.g. MONTHLY#2024-02.
func (p Period) String() string { return string(p.Type) + "#" + p.Value }

// ParsePeriodKey parses a period's sort-key form, TYPE#value (Period.String).
func ParsePeriodKey(s string) (Period, error) {
	typ, value, ok := strings.Cut(s, "#")
	if !ok {
		return Period{}, fmt.Errorf("period %q: want TYPE#value", truncateRunes(s, 40))
	}
	t, err := ParsePeriodType(typ)
	if err != nil {
		return Period{}, err
	}
	return ParsePeriod(t, value)
}

// quarterOf is the quarter (1–4) a month falls in, counting from start.
func quarterOf(m, start time.Month) int { return (int(m)-int(start)+12)%12/3 + 1 }

// fiscalYearOf is the fiscal year of a date in a calendar whose fiscal year
// starts in month start: the calendar year in which it ends.
func fiscalYearOf(d Date, start time.Month) int {
	if start != time.January && d.Month >= start {
		return d.Year + 1
	}
	return d.Year
}

// formatYear formats a year as four digits (years 0–9999 only are dates here).
func formatYear(y int) string { return fmt.Sprintf("%04d", y) }

// quarterValue formats YYYY-Qn.
func quarterValue(y, q int) string { return formatYear(y) + "-Q" + strconv.Itoa(q) }
