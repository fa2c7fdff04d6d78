package aggregates

import (
	"fmt"
	"time"
)

// PeriodType is the granularity of a report.
type PeriodType string

// The report granularities. Their string values appear in report keys and in
// the periodType attribute.
const (
	Daily   PeriodType = "DAILY"
	Monthly PeriodType = "MONTHLY"
	Yearly  PeriodType = "YEARLY"
)

// PeriodTypes lists every granularity, finest first.
var PeriodTypes = [3]PeriodType{Daily, Monthly, Yearly}

// ParsePeriodType accepts DAILY, MONTHLY or YEARLY exactly.
func ParsePeriodType(s string) (PeriodType, error) {
	switch p := PeriodType(s); p {
	case Daily, Monthly, Yearly:
		return p, nil
	}
	return "", fmt.Errorf("period type %q: want DAILY, MONTHLY or YEARLY", s)
}

// Period is one report period: a granularity and its value (YYYY-MM-DD,
// YYYY-MM or YYYY).
type Period struct {
	Type  PeriodType
	Value string
}

// ParsePeriod validates a period value against its type: a real calendar date
// for DAILY, YYYY-MM with a month 01–12 for MONTHLY, YYYY for YEARLY.
func ParsePeriod(t PeriodType, value string) (Period, error) {
	layout := map[PeriodType]string{Daily: "2006-01-02", Monthly: "2006-01", Yearly: "2006"}[t]
	if layout == "" {
		return Period{}, fmt.Errorf("period type %q: want DAILY, MONTHLY or YEARLY", t)
	}
	if len(value) != len(layout) {
		return Period{}, fmt.Errorf("%s period %q: want %s", t, value, layoutHint[t])
	}
	if _, err := time.Parse(layout, value); err != nil {
		return Period{}, fmt.Errorf("%s period %q: want %s", t, value, layoutHint[t])
	}
	return Period{Type: t, Value: value}, nil
}

var layoutHint = map[PeriodType]string{Daily: "YYYY-MM-DD", Monthly: "YYYY-MM", Yearly: "YYYY"}

// String formats p as its report sort key, e.g. MONTHLY#2024-02.
func (p Period) String() string { return string(p.Type) + "#" + p.Value }
