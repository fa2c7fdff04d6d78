package aggregates

import (
	"fmt"
	"strings"
	"time"
)

// Stamp is a transaction's periods, decided once when it is written: its
// business date and the report periods it counts in, under the calendar of
// its branch and the period types of its tenant then in force. The writer
// stores it with the transaction (attributes businessDate and periods); the
// consumers and reconcile read it and never compute a period themselves, so
// a transaction's periods do not depend on when, where or how often its
// record is seen. A transaction stored without one (written before business
// calendars, or by another path than the writer) counts in the DAILY,
// MONTHLY and YEARLY periods of its UTC date: LegacyStamp, exactly how every
// report was kept before; reconcile names such transactions when their
// branch's calendar says otherwise, and rebucket stamps them.
type Stamp struct {
	BusinessDate Date
	Periods      []Period // canonical order, one per type kept
}

// LegacyStamp is the stamp of a transaction stored without one: the DAILY,
// MONTHLY and YEARLY periods of its UTC date.
func LegacyStamp(utc Date) Stamp {
	return DefaultCalendar().stampOf(utc, DefaultPeriodTypes)
}

// stampOf is the stamp of business date d, of the types kept.
func (c Calendar) stampOf(d Date, kept []PeriodType) Stamp {
	s := Stamp{BusinessDate: d, Periods: make([]Period, len(kept))}
	for i, pt := range kept {
		s.Periods[i] = c.Period(pt, d)
	}
	return s
}

// EncodePeriods is the stored form of the stamp's periods: their sort keys
// (Period.String) separated by single spaces, e.g.
// "DAILY#2026-11-27 MONTHLY#2026-11 YEARLY#2026".
func (s Stamp) EncodePeriods() string {
	keys := make([]string, len(s.Periods))
	for i, p := range s.Periods {
		keys[i] = p.String()
	}
	return strings.Join(keys, " ")
}

// Equal reports whether two stamps name the same business date and periods.
func (s Stamp) Equal(o Stamp) bool {
	if s.BusinessDate != o.BusinessDate || len(s.Periods) != len(o.Periods) {
		return false
	}
	for i := range s.Periods {
		if s.Periods[i] != o.Periods[i] {
			return false
		}
	}
	return true
}

// Types returns the period types of the stamp, in order.
func (s Stamp) Types() []PeriodType {
	out := make([]PeriodType, len(s.Periods))
	for i, p := range s.Periods {
		out[i] = p.Type
	}
	return out
}

// ParseStamp reads a stored stamp: the business date (YYYY-MM-DD) and the
// periods (EncodePeriods). Besides each value's form it checks what holds
// under every calendar — one to seven periods, each type once, in canonical
// order; DAILY the business date; MONTHLY, QUARTERLY and YEARLY those of the
// business date; WEEKLY one of the 7 days up to it; FISCAL_QUARTER and
// FISCAL_YEAR those of the business date under some fiscal year start month,
// of one fiscal year — so a stamp
// damaged by hand is refused rather than counted in a period its business
// date cannot be in.
func ParseStamp(businessDate, periods string) (Stamp, error) {
	d, err := ParseDate(businessDate)
	if err != nil {
		return Stamp{}, fmt.Errorf("businessDate: %w", err)
	}
	s := Stamp{BusinessDate: d}
	fields := strings.Split(periods, " ")
	if periods == "" || len(fields) > len(PeriodTypes) {
		return Stamp{}, fmt.Errorf("periods %q: want 1 to %d periods (TYPE#value) separated by spaces", truncateRunes(periods, 64), len(PeriodTypes))
	}
	last := -1
	fy := ""
	for _, f := range fields {
		p, err := ParsePeriodKey(f)
		if err != nil {
			return Stamp{}, fmt.Errorf("periods: %w", err)
		}
		if r := periodRank(p.Type); r <= last {
			return Stamp{}, fmt.Errorf("periods: %s out of order or twice", p.Type)
		} else {
			last = r
		}
		if err := checkPeriodOf(p, d, &fy); err != nil {
			return Stamp{}, fmt.Errorf("periods: %s for business date %s: %w", p, d, err)
		}
		s.Periods = append(s.Periods, p)
	}
	return s, nil
}

// checkPeriodOf checks the calendar-independent relation of p to business
// date d; fy carries the fiscal year seen so far.
func checkPeriodOf(p Period, d Date, fy *string) error {
	utc := DefaultCalendar()
	switch p.Type {
	case Daily, Monthly, Quarterly, Yearly:
		if want := utc.Period(p.Type, d); p != want {
			return fmt.Errorf("want %s", want.Value)
		}
	case Weekly:
		w, _ := ParseDate(p.Value)
		if d.Before(w) || w.Before(d.AddDays(-6)) {
			return fmt.Errorf("not one of the 7 days up to it")
		}
	case FiscalQuarter, FiscalYear:
		year := p.Value[2:6]
		if !fiscalPossible(p, d) {
			return fmt.Errorf("no fiscal year start month puts it in %s", p.Value)
		}
		if *fy != "" && *fy != year {
			return fmt.Errorf("fiscal year %s differs from FY%s", year, *fy)
		}
		*fy = year
	}
	return nil
}

// fiscalPossible reports whether some fiscal year start month puts business
// date d in the fiscal period p: FY of d's year or (start month February or
// later, d in or after it) the next, and a quarter that start month gives.
func fiscalPossible(p Period, d Date) bool {
	for m := time.January; m <= time.December; m++ {
		if (Calendar{FiscalYearStartMonth: m}).Period(p.Type, d) == p {
			return true
		}
	}
	return false
}
