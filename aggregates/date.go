package aggregates

import (
	"fmt"
	"time"
)

// Date is a calendar date in UTC, the unit of DAILY reports.
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// ParseDate parses a strict YYYY-MM-DD calendar date. It rejects dates that do
// not exist (2023-02-29, 2024-13-01) and any other layout.
func ParseDate(s string) (Date, error) {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return Date{}, fmt.Errorf("date %q: want YYYY-MM-DD", s)
	}
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		return Date{}, fmt.Errorf("date %q: %w", s, err)
	}
	return DateOf(t), nil
}

// DateOf returns the UTC calendar date of t.
func DateOf(t time.Time) Date {
	y, m, d := t.UTC().Date()
	return Date{Year: y, Month: m, Day: d}
}

// String formats d as YYYY-MM-DD.
func (d Date) String() string { return fmt.Sprintf("%04d-%02d-%02d", d.Year, int(d.Month), d.Day) }

// Periods returns the three report periods d belongs to, DAILY first.
func (d Date) Periods() [3]Period {
	return [3]Period{
		{Type: Daily, Value: d.String()},
		{Type: Monthly, Value: fmt.Sprintf("%04d-%02d", d.Year, int(d.Month))},
		{Type: Yearly, Value: fmt.Sprintf("%04d", d.Year)},
	}
}
