package aggregates

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A branch's business calendar: in which time zone its days are counted,
// when its business day starts, which weekday starts its weeks and which
// month its fiscal year. docs/design.md, "Business calendars", is the
// contract; this file is its one implementation.
//
// The rule (so that everyone computes the same day): business day D starts
// at the first instant at which the branch's local clock reads date D and a
// time at or after DayStartsAt — on a daylight-saving day whose cut-off
// falls in the skipped hour, that is the end of the gap; in a repeated hour,
// its first occurrence — and an instant belongs to the last business day
// that started at or before it. A date the local clock never reads (a zone
// that skipped a day) has no business day.

// Calendar is a branch's business calendar. The zero value is not usable:
// use DefaultCalendar or NewCalendar.
type Calendar struct {
	TimeZone             string       // IANA name, e.g. America/Sao_Paulo
	DayStartsAt          int          // minutes after local midnight, 0–1439
	WeekStartsOn         time.Weekday // the first day of a week
	FiscalYearStartMonth time.Month   // the first month of a fiscal year

	loc *time.Location
}

// DefaultCalendar is the calendar of a branch that has none: UTC, days from
// midnight, weeks from Monday, fiscal years from January. Its DAILY, MONTHLY
// and YEARLY periods are those of the UTC date, as every report was before
// business calendars.
func DefaultCalendar() Calendar {
	return Calendar{TimeZone: "UTC", WeekStartsOn: time.Monday, FiscalYearStartMonth: time.January, loc: time.UTC}
}

// CalendarError says which field of a calendar is wrong and why.
type CalendarError struct {
	Field  string // timeZone, dayStartsAt, weekStartsOn or fiscalYearStartMonth
	Detail string
}

func (e *CalendarError) Error() string { return e.Field + ": " + e.Detail }

// ParseTimeZone loads an IANA time zone by its name. "Local" and "" are
// refused: a calendar names its zone; so is a name not of the IANA form
// (isZoneName), which only a system's zoneinfo directory could load.
func ParseTimeZone(name string) (*time.Location, error) {
	if !isZoneName(name) {
		return nil, &CalendarError{"timeZone", fmt.Sprintf("%q is not an IANA time zone name (e.g. America/Sao_Paulo, Europe/London, UTC)", truncateRunes(name, 64))}
	}
	loc, err := LoadZone(name) // the embedded data (zoneinfo.go), never the system's
	if err != nil {
		return nil, &CalendarError{"timeZone", fmt.Sprintf("%q is not an IANA time zone name (e.g. America/Sao_Paulo, Europe/London, UTC)", truncateRunes(name, 64))}
	}
	return loc, nil
}

// isZoneName reports whether name has the form of an IANA zone name: up to
// 64 bytes of '/'-separated parts, each an ASCII capital letter followed by
// letters, digits, '_', '+' or '-' — the form of every name in the embedded
// zone data (zoneinfo.go), which is the only data zones are loaded from: a
// system's zoneinfo directory holds more than zones ("localtime", the
// host's own zone, what "Local" is refused for; "posixrules", "right/…",
// "posix/…"), and none of them is a calendar's zone.
func isZoneName(name string) bool {
	if name == "" || len(name) > 64 || name == "Local" {
		return false
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part[0] < 'A' || part[0] > 'Z' {
			return false
		}
		for _, r := range part {
			if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '+' || r == '-') {
				return false
			}
		}
	}
	return true
}

// ParseDayStart parses a business day's start, "HH:MM" from 00:00 to 23:59,
// into minutes after midnight.
func ParseDayStart(s string) (int, error) {
	// Two digits each: strconv.Atoi alone would take "+4:00" and "-0:30".
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || !isDigits(h, 2) || !isDigits(m, 2) || err1 != nil || err2 != nil || hh > 23 || mm > 59 {
		return 0, &CalendarError{"dayStartsAt", fmt.Sprintf("%q: want HH:MM, 00:00 to 23:59 (local time at which a business day starts)", truncateRunes(s, 16))}
	}
	return hh*60 + mm, nil
}

// isDigits reports whether s is n ASCII digits.
func isDigits(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatDayStart formats minutes after midnight as HH:MM.
func FormatDayStart(minutes int) string { return fmt.Sprintf("%02d:%02d", minutes/60, minutes%60) }

// ParseWeekday parses MONDAY … SUNDAY.
func ParseWeekday(s string) (time.Weekday, error) {
	for d := time.Sunday; d <= time.Saturday; d++ {
		if s == FormatWeekday(d) {
			return d, nil
		}
	}
	return 0, &CalendarError{"weekStartsOn", fmt.Sprintf("%q: want MONDAY, TUESDAY, WEDNESDAY, THURSDAY, FRIDAY, SATURDAY or SUNDAY", truncateRunes(s, 16))}
}

// FormatWeekday formats a weekday as the API writes it: MONDAY … SUNDAY.
func FormatWeekday(d time.Weekday) string { return strings.ToUpper(d.String()) }

// NewCalendar validates a calendar's fields (as the API has them) and
// returns it. The error is a *CalendarError naming the field.
func NewCalendar(timeZone, dayStartsAt, weekStartsOn string, fiscalYearStartMonth int) (Calendar, error) {
	loc, err := ParseTimeZone(timeZone)
	if err != nil {
		return Calendar{}, err
	}
	start, err := ParseDayStart(dayStartsAt)
	if err != nil {
		return Calendar{}, err
	}
	week, err := ParseWeekday(weekStartsOn)
	if err != nil {
		return Calendar{}, err
	}
	if fiscalYearStartMonth < 1 || fiscalYearStartMonth > 12 {
		return Calendar{}, &CalendarError{"fiscalYearStartMonth", fmt.Sprintf("%d: want a month, 1 (January) to 12 (December)", fiscalYearStartMonth)}
	}
	return Calendar{TimeZone: timeZone, DayStartsAt: start, WeekStartsOn: week, FiscalYearStartMonth: time.Month(fiscalYearStartMonth), loc: loc}, nil
}

// Location returns the calendar's time zone.
func (c Calendar) Location() *time.Location {
	if c.loc == nil {
		return time.UTC
	}
	return c.loc
}

// Equal reports whether two calendars put every instant in the same periods.
func (c Calendar) Equal(o Calendar) bool {
	return c.TimeZone == o.TimeZone && c.DayStartsAt == o.DayStartsAt && c.WeekStartsOn == o.WeekStartsOn && c.FiscalYearStartMonth == o.FiscalYearStartMonth
}

// String formats the calendar for messages.
func (c Calendar) String() string {
	return fmt.Sprintf("%s, days from %s, weeks from %s, fiscal years from month %d",
		c.TimeZone, FormatDayStart(c.DayStartsAt), FormatWeekday(c.WeekStartsOn), int(c.FiscalYearStartMonth))
}

// DayStart returns the instant business day d starts, and false when the
// local clock never reads d at or after the day's start (a skipped date).
func (c Calendar) DayStart(d Date) (time.Time, bool) {
	loc := c.Location()
	// Wall-clock times as if they were UTC instants: the day's start and
	// the next date's midnight. An instant x in a zone period of offset
	// off reads wall time x+off, so it reads date d at or after the start
	// exactly when x ∈ [start−off, end−off). The first such instant, over
	// the periods of constant offset in order (nextOffsetChange), is the
	// answer; no offset is as large as maxOffset, so [start−maxOffset,
	// end+maxOffset) holds every candidate.
	start := time.Date(d.Year, d.Month, d.Day, 0, c.DayStartsAt, 0, 0, time.UTC)
	end := time.Date(d.Year, d.Month, d.Day+1, 0, 0, 0, 0, time.UTC)
	limit := end.Add(maxOffset)
	for x := start.Add(-maxOffset); x.Before(limit); {
		_, off := x.In(loc).Zone()
		zoneEnd := nextOffsetChange(loc, x, limit)
		offset := time.Duration(off) * time.Second
		lo, hi := start.Add(-offset), end.Add(-offset)
		if lo.Before(x) {
			lo = x
		}
		if hi.After(zoneEnd) {
			hi = zoneEnd
		}
		if lo.Before(hi) {
			return lo, true
		}
		x = zoneEnd
	}
	return time.Time{}, false
}

// maxOffset bounds the UTC offset of every zone at every instant of the
// embedded data (local mean times of the 19th century reach ±15:57).
const maxOffset = 16 * time.Hour

// nextOffsetChange returns the first instant after x at which loc's UTC
// offset differs from x's, or limit when there is none before it. It finds
// the change by sampling the offset hourly (no zone changes its offset
// twice within an hour) and bisecting to the nanosecond. It does not use
// time.Time.ZoneBounds: for instants past a zone's last listed transition
// (its rule string: the embedded data's slim files), Go's ZoneBounds can
// answer a period that ended before the instant asked about (Asia/Famagusta
// on 2024-12-31 ends its EET period at 2024-12-31T00:00Z, a day early,
// and answers so until 2025-01-01).
func nextOffsetChange(loc *time.Location, x, limit time.Time) time.Time {
	_, off := x.In(loc).Zone()
	prev := x
	for {
		t := prev.Add(time.Hour)
		if t.After(limit) {
			t = limit
		}
		if _, o := t.In(loc).Zone(); o != off {
			lo, hi := prev, t // offset(lo) = off ≠ offset(hi)
			for hi.Sub(lo) > time.Nanosecond {
				mid := lo.Add(hi.Sub(lo) / 2)
				if _, o := mid.In(loc).Zone(); o == off {
					lo = mid
				} else {
					hi = mid
				}
			}
			return hi
		}
		if !t.Before(limit) {
			return limit
		}
		prev = t
	}
}

// BusinessDate returns the business date an instant belongs to: the last
// business day that started at or before it.
func (c Calendar) BusinessDate(t time.Time) Date {
	y, m, dd := t.In(c.Location()).Date()
	wall := Date{Year: y, Month: m, Day: dd}
	// The answer is the wall date, the day before it, or (after a clock
	// set back past midnight) the day after; a skipped date moves it one
	// more day back.
	for d := wall.AddDays(1); !d.Before(wall.AddDays(-3)); d = d.AddDays(-1) {
		if s, ok := c.DayStart(d); ok && !s.After(t) {
			return d
		}
	}
	return wall.AddDays(-1) // unreachable for real zones
}

// WeekStart returns the first day of the week d is in.
func (c Calendar) WeekStart(d Date) Date {
	return d.AddDays(-((int(d.Weekday()) - int(c.WeekStartsOn) + 7) % 7))
}

// Period returns the period of type pt that business date d is in.
func (c Calendar) Period(pt PeriodType, d Date) Period {
	p := Period{Type: pt}
	switch pt {
	case Daily:
		p.Value = d.String()
	case Weekly:
		p.Value = c.WeekStart(d).String()
	case Monthly:
		p.Value = d.String()[:7]
	case Quarterly:
		p.Value = quarterValue(d.Year, quarterOf(d.Month, time.January))
	case Yearly:
		p.Value = formatYear(d.Year)
	case FiscalQuarter:
		p.Value = "FY" + quarterValue(fiscalYearOf(d, c.fiscalStart()), quarterOf(d.Month, c.fiscalStart()))
	case FiscalYear:
		p.Value = "FY" + formatYear(fiscalYearOf(d, c.fiscalStart()))
	}
	return p
}

func (c Calendar) fiscalStart() time.Month {
	if c.FiscalYearStartMonth < time.January || c.FiscalYearStartMonth > time.December {
		return time.January
	}
	return c.FiscalYearStartMonth
}

// ErrPeriodOutOfRange is Stamp's error for an instant whose periods fall
// outside years 0000–9999 (a period value has four year digits).
var ErrPeriodOutOfRange = errors.New("its business periods fall outside the years 0000 to 9999")

// Stamp decides the periods of a transaction created at t under c, of the
// types kept (canonical order; nil: DefaultPeriodTypes). It is what the
// writer stores with the transaction, so that its periods are decided once.
func (c Calendar) Stamp(t time.Time, kept []PeriodType) (Stamp, error) {
	if kept == nil {
		kept = DefaultPeriodTypes
	}
	d := c.BusinessDate(t)
	if d.Year < 0 || d.Year > 9999 || (d.Year == 9999 && c.fiscalStart() != time.January && d.Month >= c.fiscalStart()) || c.WeekStart(d).Year < 0 {
		return Stamp{}, ErrPeriodOutOfRange
	}
	s := c.stampOf(d, kept)
	return s, nil
}
