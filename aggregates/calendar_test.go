package aggregates_test

// The period arithmetic (calendar.go, period.go, stamp.go) is proved here
// against hand-checked cases and against an oracle of its own: business-day
// starts found by scanning instants and reading their local wall clock
// (time.Time.In), periods by plain date arithmetic. The oracle calls nothing
// in package aggregates; the only things it shares with the code under test
// are the zone data and the time package.

import (
	"archive/zip"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
)

// allTypes is every period type in canonical order, listed here rather than
// taken from aggregates.PeriodTypes so that a type dropped there shows.
var allTypes = []aggregates.PeriodType{
	aggregates.Daily, aggregates.Weekly, aggregates.Monthly, aggregates.Quarterly,
	aggregates.Yearly, aggregates.FiscalQuarter, aggregates.FiscalYear,
}

var weekdayNames = map[time.Weekday]string{
	time.Sunday: "SUNDAY", time.Monday: "MONDAY", time.Tuesday: "TUESDAY", time.Wednesday: "WEDNESDAY",
	time.Thursday: "THURSDAY", time.Friday: "FRIDAY", time.Saturday: "SATURDAY",
}

func mustCalendar(t testing.TB, zone, dayStartsAt, weekStartsOn string, fiscalYearStartMonth int) aggregates.Calendar {
	t.Helper()
	c, err := aggregates.NewCalendar(zone, dayStartsAt, weekStartsOn, fiscalYearStartMonth)
	require.NoError(t, err)
	return c
}

func mustInstant(t testing.TB, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return at
}

func mustDate(t testing.TB, s string) aggregates.Date {
	t.Helper()
	d, err := time.Parse("2006-01-02", s)
	require.NoError(t, err)
	return aggregates.Date{Year: d.Year(), Month: d.Month(), Day: d.Day()}
}

func minutesOf(t testing.TB, hhmm string) int {
	t.Helper()
	at, err := time.Parse("15:04", hhmm)
	require.NoError(t, err)
	return at.Hour()*60 + at.Minute()
}

func TestCalendar_BusinessDateAndDayStart_HandChecked(t *testing.T) {
	tests := []struct {
		name      string // why the answer is what it is
		zone      string
		dayStarts string
		at        string // the instant
		want      string // its business date
		wantStart string // the instant that business day started
	}{
		// São Paulo (−03 since 2019), a restaurant closing at 04:00.
		{"SaoPaulo/Friday 22:30 local (Saturday 01:30Z) is Friday", "America/Sao_Paulo", "04:00", "2026-11-28T01:30:00Z", "2026-11-27", "2026-11-27T07:00:00Z"},
		{"SaoPaulo/Saturday 03:59:59 local is still Friday", "America/Sao_Paulo", "04:00", "2026-11-28T06:59:59Z", "2026-11-27", "2026-11-27T07:00:00Z"},
		{"SaoPaulo/Saturday 04:00 local starts Saturday", "America/Sao_Paulo", "04:00", "2026-11-28T07:00:00Z", "2026-11-28", "2026-11-28T07:00:00Z"},
		{"SaoPaulo/2026 has no summer time: midnight is 03:00Z in January", "America/Sao_Paulo", "00:00", "2026-01-15T02:30:00Z", "2026-01-14", "2026-01-14T03:00:00Z"},
		// São Paulo in 2018 still kept summer time (−02 from November to February).
		{"SaoPaulo2018/January midnight is 02:00Z under 2018's summer time", "America/Sao_Paulo", "00:00", "2018-01-15T02:30:00Z", "2018-01-15", "2018-01-15T02:00:00Z"},
		{"SaoPaulo2018/cut-off 04:00 is 06:00Z under 2018's summer time", "America/Sao_Paulo", "04:00", "2018-01-15T05:59:59Z", "2018-01-14", "2018-01-14T06:00:00Z"},
		{"SaoPaulo2018/Nov 4 midnight was skipped: the day starts at 01:00 −02", "America/Sao_Paulo", "00:00", "2018-11-04T03:00:00Z", "2018-11-04", "2018-11-04T03:00:00Z"},
		{"SaoPaulo2018/23:59:59 −03 on Nov 3 is Nov 3", "America/Sao_Paulo", "00:00", "2018-11-04T02:59:59Z", "2018-11-03", "2018-11-03T03:00:00Z"},
		{"SaoPaulo2018/cut-off 00:30 in the skipped hour: end of the gap", "America/Sao_Paulo", "00:30", "2018-11-04T03:00:00Z", "2018-11-04", "2018-11-04T03:00:00Z"},
		{"SaoPaulo2018/Feb 17 had 25 hours: the second 23:30 is still Feb 17", "America/Sao_Paulo", "00:00", "2018-02-18T02:30:00Z", "2018-02-17", "2018-02-17T02:00:00Z"},
		{"SaoPaulo2018/Feb 18 starts at midnight −03", "America/Sao_Paulo", "00:00", "2018-02-18T03:00:00Z", "2018-02-18", "2018-02-18T03:00:00Z"},

		// London 2026: 01:00 GMT → 02:00 BST on Mar 29, 02:00 BST → 01:00 GMT on Oct 25.
		{"London/23-hour day, cut-off 01:30 skipped: the day starts at the end of the gap", "Europe/London", "01:30", "2026-03-29T01:00:00Z", "2026-03-29", "2026-03-29T01:00:00Z"},
		{"London/00:59:59 GMT on Mar 29 is before the cut-off: Mar 28", "Europe/London", "01:30", "2026-03-29T00:59:59Z", "2026-03-28", "2026-03-28T01:30:00Z"},
		{"London/25-hour day, cut-off 01:30 twice: its first occurrence, 01:30 BST", "Europe/London", "01:30", "2026-10-25T00:30:00Z", "2026-10-25", "2026-10-25T00:30:00Z"},
		{"London/01:29 BST on Oct 25 is Oct 24", "Europe/London", "01:30", "2026-10-25T00:29:00Z", "2026-10-24", "2026-10-24T00:30:00Z"},
		{"London/01:15 GMT, second occurrence before the cut-off time, is the new day", "Europe/London", "01:30", "2026-10-25T01:15:00Z", "2026-10-25", "2026-10-25T00:30:00Z"},
		{"London/cut-off 00:00: the 23-hour day's last second", "Europe/London", "00:00", "2026-03-29T22:59:59Z", "2026-03-29", "2026-03-29T00:00:00Z"},
		{"London/cut-off 00:00: the day after the 23-hour day", "Europe/London", "00:00", "2026-03-29T23:00:00Z", "2026-03-30", "2026-03-29T23:00:00Z"},
		{"London/cut-off 00:00: the 25-hour day's last second", "Europe/London", "00:00", "2026-10-25T23:59:59Z", "2026-10-25", "2026-10-24T23:00:00Z"},

		// New York 2026: 02:00 EST → 03:00 EDT on Mar 8, 02:00 EDT → 01:00 EST on Nov 1.
		{"NewYork/cut-off 02:30 skipped: the day starts at 03:00 EDT", "America/New_York", "02:30", "2026-03-08T07:00:00Z", "2026-03-08", "2026-03-08T07:00:00Z"},
		{"NewYork/01:59:59 EST on Mar 8 is Mar 7", "America/New_York", "02:30", "2026-03-08T06:59:59Z", "2026-03-07", "2026-03-07T07:30:00Z"},
		{"NewYork/cut-off 02:00, the gap's first minute: 03:00 EDT", "America/New_York", "02:00", "2026-03-08T07:00:00Z", "2026-03-08", "2026-03-08T07:00:00Z"},
		{"NewYork/cut-off 01:30 twice: its first occurrence, 01:30 EDT", "America/New_York", "01:30", "2026-11-01T05:30:00Z", "2026-11-01", "2026-11-01T05:30:00Z"},
		{"NewYork/01:15 EST, second occurrence before the cut-off time, is the new day", "America/New_York", "01:30", "2026-11-01T06:15:00Z", "2026-11-01", "2026-11-01T05:30:00Z"},
		{"NewYork/01:29:59 EDT on Nov 1 is Oct 31", "America/New_York", "01:30", "2026-11-01T05:29:59Z", "2026-10-31", "2026-10-31T05:30:00Z"},
		{"NewYork/cut-off 02:00 on the 25-hour day: 02:00 is first read at 02:00 EST", "America/New_York", "02:00", "2026-11-01T06:59:59Z", "2026-10-31", "2026-10-31T06:00:00Z"},
		{"NewYork/cut-off 02:00 on the 25-hour day: 02:00 EST starts Nov 1", "America/New_York", "02:00", "2026-11-01T07:00:00Z", "2026-11-01", "2026-11-01T07:00:00Z"},

		// St. John's fell back at 00:01 NDT to 23:01 NST the day before (2006-10-29): the
		// clock read Oct 29 for one minute, then Oct 28 again for an hour.
		{"StJohns/cut-off 00:00: Oct 29 starts at its one minute, 00:00 NDT", "America/St_Johns", "00:00", "2006-10-29T02:30:00Z", "2006-10-29", "2006-10-29T02:30:00Z"},
		{"StJohns/cut-off 00:00: 23:30 NST on Oct 28, after Oct 29 started, is Oct 29", "America/St_Johns", "00:00", "2006-10-29T03:00:00Z", "2006-10-29", "2006-10-29T02:30:00Z"},
		{"StJohns/cut-off 00:00: 23:59:59 NDT on Oct 28 is Oct 28", "America/St_Johns", "00:00", "2006-10-29T02:29:59Z", "2006-10-28", "2006-10-28T02:30:00Z"},
		{"StJohns/cut-off 00:01: never read before the set-back, so 00:01 NST", "America/St_Johns", "00:01", "2006-10-29T03:30:59Z", "2006-10-28", "2006-10-28T02:31:00Z"},
		{"StJohns/cut-off 00:01: 00:01 NST starts Oct 29", "America/St_Johns", "00:01", "2006-10-29T03:31:00Z", "2006-10-29", "2006-10-29T03:31:00Z"},
		{"StJohns/cut-off 00:30 skipped on Apr 2 (00:01 NST → 01:01 NDT): the end of the gap", "America/St_Johns", "00:30", "2006-04-02T03:31:00Z", "2006-04-02", "2006-04-02T03:31:00Z"},

		// The extremes of the offsets.
		{"Kiritimati/+14: 10:00Z on Dec 31 is already Jan 1", "Pacific/Kiritimati", "00:00", "2025-12-31T10:00:00Z", "2026-01-01", "2025-12-31T10:00:00Z"},
		{"Kiritimati/+14: 09:59:59Z on Dec 31 is Dec 31", "Pacific/Kiritimati", "00:00", "2025-12-31T09:59:59Z", "2025-12-31", "2025-12-30T10:00:00Z"},
		{"Kiritimati/1994-12-31 was skipped (−10 → +14): Jan 1 starts at the jump", "Pacific/Kiritimati", "00:00", "1994-12-31T10:00:00Z", "1995-01-01", "1994-12-31T10:00:00Z"},
		{"Kiritimati/23:59:59 −10 on Dec 30 1994 is Dec 30", "Pacific/Kiritimati", "00:00", "1994-12-31T09:59:59Z", "1994-12-30", "1994-12-30T10:00:00Z"},
		{"PagoPago/−11: 10:59:59Z on Jan 1 is still Dec 31", "Pacific/Pago_Pago", "00:00", "2026-01-01T10:59:59Z", "2025-12-31", "2025-12-31T11:00:00Z"},
		{"PagoPago/−11: 11:00Z on Jan 1 starts Jan 1", "Pacific/Pago_Pago", "00:00", "2026-01-01T11:00:00Z", "2026-01-01", "2026-01-01T11:00:00Z"},
		{"PagoPago/−11, cut-off 04:00: 14:59Z on Jan 1 is Dec 31", "Pacific/Pago_Pago", "04:00", "2026-01-01T14:59:00Z", "2025-12-31", "2025-12-31T15:00:00Z"},
		{"Kathmandu/+5:45, cut-off 04:00: 22:15Z the evening before", "Asia/Kathmandu", "04:00", "2026-06-14T22:15:00Z", "2026-06-15", "2026-06-14T22:15:00Z"},
		{"Kathmandu/+5:45, cut-off 04:00: 22:14:59Z is the previous day", "Asia/Kathmandu", "04:00", "2026-06-14T22:14:59Z", "2026-06-14", "2026-06-13T22:15:00Z"},
		{"Kathmandu/1986-01-01 skipped 00:00–00:15 (+5:30 → +5:45): cut-off 00:05 is the end of the gap", "Asia/Kathmandu", "00:05", "1985-12-31T18:30:00Z", "1986-01-01", "1985-12-31T18:30:00Z"},
		{"Kathmandu/1985-12-31 started at 00:05 +5:30", "Asia/Kathmandu", "00:05", "1985-12-31T18:29:59Z", "1985-12-31", "1985-12-30T18:35:00Z"},

		// Lord Howe moves its clock by 30 minutes: 02:00 → 02:30 on Oct 4 2026, 02:00 → 01:30 on Apr 5 2026.
		{"LordHowe/cut-off 02:15 in the 30-minute gap: the end of the gap, 02:30 +11", "Australia/Lord_Howe", "02:15", "2026-10-03T15:30:00Z", "2026-10-04", "2026-10-03T15:30:00Z"},
		{"LordHowe/01:59:59 +10:30 on Oct 4 is Oct 3", "Australia/Lord_Howe", "02:15", "2026-10-03T15:29:59Z", "2026-10-03", "2026-10-02T15:45:00Z"},
		{"LordHowe/cut-off 01:45 twice: its first occurrence, 01:45 +11", "Australia/Lord_Howe", "01:45", "2026-04-04T14:45:00Z", "2026-04-05", "2026-04-04T14:45:00Z"},
		{"LordHowe/01:35 +10:30, second occurrence before the cut-off time, is the new day", "Australia/Lord_Howe", "01:45", "2026-04-04T15:05:00Z", "2026-04-05", "2026-04-04T14:45:00Z"},
		{"LordHowe/01:44:59 +11 on Apr 5 is Apr 4", "Australia/Lord_Howe", "01:45", "2026-04-04T14:44:59Z", "2026-04-04", "2026-04-03T14:45:00Z"},

		// Apia skipped Friday 2011-12-30: 23:59:59 −10 on the 29th, then 00:00 +14 on the 31st.
		{"Apia/the last second before the jump is Dec 29", "Pacific/Apia", "00:00", "2011-12-30T09:59:59Z", "2011-12-29", "2011-12-29T10:00:00Z"},
		{"Apia/the jump starts Dec 31", "Pacific/Apia", "00:00", "2011-12-30T10:00:00Z", "2011-12-31", "2011-12-30T10:00:00Z"},
		{"Apia/cut-off 04:00: 02:00 on Dec 31 belongs to Dec 29, there is no Dec 30", "Pacific/Apia", "04:00", "2011-12-30T12:00:00Z", "2011-12-29", "2011-12-29T14:00:00Z"},
		{"Apia/cut-off 04:00: 04:00 +14 starts Dec 31", "Pacific/Apia", "04:00", "2011-12-30T14:00:00Z", "2011-12-31", "2011-12-30T14:00:00Z"},

		{"UTC/cut-off 04:00: 03:00Z on 2024-03-01 is the leap day", "UTC", "04:00", "2024-03-01T03:00:00Z", "2024-02-29", "2024-02-29T04:00:00Z"},
		{"UTC/cut-off 00:00: the last nanosecond of a year is that year", "UTC", "00:00", "2024-12-31T23:59:59.999999999Z", "2024-12-31", "2024-12-31T00:00:00Z"},
		{"UTC/cut-off 23:59: 23:58:59 is the day before", "UTC", "23:59", "2024-12-31T23:58:59Z", "2024-12-30", "2024-12-30T23:59:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustCalendar(t, tt.zone, tt.dayStarts, "MONDAY", 1)
			at := mustInstant(t, tt.at)
			want := mustDate(t, tt.want)
			wantStart := mustInstant(t, tt.wantStart)

			assert.Equal(t, want, c.BusinessDate(at), "BusinessDate(%s)", tt.at)
			start, ok := c.DayStart(want)
			assert.True(t, ok, "DayStart(%s) defined", tt.want)
			assert.True(t, start.Equal(wantStart), "DayStart(%s) = %s; want %s", tt.want, start.UTC(), wantStart)

			// The oracle agrees with the hand: it is checked here too.
			o := newOracle(t, tt.zone, minutesOf(t, tt.dayStarts), civilOf(at.In(mustLoad(t, tt.zone))).addDays(-3), 5)
			od, ok := o.businessDate(at)
			require.True(t, ok)
			assert.Equal(t, tt.want, od.String(), "oracle's business date")
			ostart, ok := o.start(od)
			assert.True(t, ok && ostart.Equal(wantStart), "oracle's day start %s; want %s", ostart.UTC(), wantStart)
		})
	}
}

func TestCalendar_DayStart_DateTheClockNeverReadsHasNoStart(t *testing.T) {
	tests := []struct {
		name      string
		zone      string
		dayStarts string
		date      string
	}{
		{"Apia skipped 2011-12-30", "Pacific/Apia", "00:00", "2011-12-30"},
		{"Apia skipped 2011-12-30, cut-off 04:00", "Pacific/Apia", "04:00", "2011-12-30"},
		{"Kiritimati skipped 1994-12-31", "Pacific/Kiritimati", "00:00", "1994-12-31"},
		{"Kiritimati skipped 1994-12-31, cut-off 23:59", "Pacific/Kiritimati", "23:59", "1994-12-31"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustCalendar(t, tt.zone, tt.dayStarts, "MONDAY", 1)
			d := mustDate(t, tt.date)
			start, ok := c.DayStart(d)
			assert.False(t, ok, "DayStart(%s) = %s; want none", tt.date, start)

			o := newOracle(t, tt.zone, minutesOf(t, tt.dayStarts), civilOf(mustInstant(t, tt.date+"T00:00:00Z")), 1)
			_, ok = o.start(o.days[0].date)
			assert.False(t, ok, "the oracle finds a start")
		})
	}
}

func TestCalendar_Stamp_HandChecked(t *testing.T) {
	tests := []struct {
		name      string
		zone      string
		dayStarts string
		week      string
		fiscal    int
		at        string
		want      [7]string // DAILY, WEEKLY, MONTHLY, QUARTERLY, YEARLY, FISCAL_QUARTER, FISCAL_YEAR
	}{
		{"SaoPaulo Friday night: Friday, the week of Monday 23rd, FY from July", "America/Sao_Paulo", "04:00", "MONDAY", 7, "2026-11-28T01:30:00Z",
			[7]string{"2026-11-27", "2026-11-23", "2026-11", "2026-Q4", "2026", "FY2027-Q2", "FY2027"}},
		{"SaoPaulo 03:59 on July 1 is June 30: the fiscal year ending that day", "America/Sao_Paulo", "04:00", "MONDAY", 7, "2026-07-01T06:59:00Z",
			[7]string{"2026-06-30", "2026-06-29", "2026-06", "2026-Q2", "2026", "FY2026-Q4", "FY2026"}},
		{"SaoPaulo 04:00 on July 1 opens FY2027", "America/Sao_Paulo", "04:00", "MONDAY", 7, "2026-07-01T07:00:00Z",
			[7]string{"2026-07-01", "2026-06-29", "2026-07", "2026-Q3", "2026", "FY2027-Q1", "FY2027"}},
		{"SaoPaulo 03:30 on New Year's Day is Dec 31: year 2026", "America/Sao_Paulo", "04:00", "SUNDAY", 7, "2027-01-01T06:30:00Z",
			[7]string{"2026-12-31", "2026-12-27", "2026-12", "2026-Q4", "2026", "FY2027-Q2", "FY2027"}},
		{"Kiritimati's New Year is Dec 31 in UTC", "Pacific/Kiritimati", "00:00", "MONDAY", 1, "2025-12-31T10:00:00Z",
			[7]string{"2026-01-01", "2025-12-29", "2026-01", "2026-Q1", "2026", "FY2026-Q1", "FY2026"}},
		{"PagoPago's Dec 31 is Jan 1 in UTC", "Pacific/Pago_Pago", "00:00", "MONDAY", 1, "2026-01-01T10:00:00Z",
			[7]string{"2025-12-31", "2025-12-29", "2025-12", "2025-Q4", "2025", "FY2025-Q4", "FY2025"}},
		// Year-end weeks: Jan 1 2027 is a Friday.
		{"year-end week from Monday: Jan 1 2027 is in the week of Dec 28 2026", "UTC", "00:00", "MONDAY", 1, "2027-01-01T12:00:00Z",
			[7]string{"2027-01-01", "2026-12-28", "2027-01", "2027-Q1", "2027", "FY2027-Q1", "FY2027"}},
		{"year-end week from Saturday: Jan 1 2027 is in the week of Dec 26 2026", "UTC", "00:00", "SATURDAY", 1, "2027-01-01T12:00:00Z",
			[7]string{"2027-01-01", "2026-12-26", "2027-01", "2027-Q1", "2027", "FY2027-Q1", "FY2027"}},
		{"year-end week from Friday: Jan 1 2027 starts its week", "UTC", "00:00", "FRIDAY", 1, "2027-01-01T12:00:00Z",
			[7]string{"2027-01-01", "2027-01-01", "2027-01", "2027-Q1", "2027", "FY2027-Q1", "FY2027"}},
		{"year-end week from Monday: Wednesday Jan 1 2020 is in the week of Dec 30 2019", "UTC", "00:00", "MONDAY", 1, "2020-01-01T00:00:00Z",
			[7]string{"2020-01-01", "2019-12-30", "2020-01", "2020-Q1", "2020", "FY2020-Q1", "FY2020"}},
		{"year-end week, with a cut-off: 03:00 on Jan 1 2020 is Tuesday Dec 31 2019", "UTC", "04:00", "WEDNESDAY", 1, "2020-01-01T03:00:00Z",
			[7]string{"2019-12-31", "2019-12-25", "2019-12", "2019-Q4", "2019", "FY2019-Q4", "FY2019"}},
		// Leap day 2024-02-29, a Thursday.
		{"leap day, week from Thursday: the week starts on it; FY from March ends on it", "UTC", "00:00", "THURSDAY", 3, "2024-02-29T12:00:00Z",
			[7]string{"2024-02-29", "2024-02-29", "2024-02", "2024-Q1", "2024", "FY2024-Q4", "FY2024"}},
		{"leap day, week from Friday: the week of Feb 23; FY from February opens FY2025", "UTC", "00:00", "FRIDAY", 2, "2024-02-29T12:00:00Z",
			[7]string{"2024-02-29", "2024-02-23", "2024-02", "2024-Q1", "2024", "FY2025-Q1", "FY2025"}},
		{"the day after the leap day, week from Thursday: the week of the leap day", "UTC", "00:00", "THURSDAY", 3, "2024-03-01T12:00:00Z",
			[7]string{"2024-03-01", "2024-02-29", "2024-03", "2024-Q1", "2024", "FY2025-Q1", "FY2025"}},
		{"London 00:30 BST on Mar 1 2024 is GMT: still Feb 29", "Europe/London", "01:00", "SUNDAY", 12, "2024-03-01T00:30:00Z",
			[7]string{"2024-02-29", "2024-02-25", "2024-02", "2024-Q1", "2024", "FY2024-Q1", "FY2024"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustCalendar(t, tt.zone, tt.dayStarts, tt.week, tt.fiscal)
			at := mustInstant(t, tt.at)
			s, err := c.Stamp(at, allTypes)
			require.NoError(t, err)
			assert.Equal(t, mustDate(t, tt.want[0]), s.BusinessDate)
			require.Len(t, s.Periods, len(allTypes))
			for i, pt := range allTypes {
				assert.Equal(t, aggregates.Period{Type: pt, Value: tt.want[i]}, s.Periods[i])
			}

			// And the oracle's date arithmetic agrees with the hand.
			week, _ := parseWeekdayName(tt.week)
			got := oraclePeriods(civilOf(mustInstant(t, tt.want[0]+"T00:00:00Z")), week, time.Month(tt.fiscal))
			for i := range allTypes {
				assert.Equal(t, tt.want[i], got[i].Value, "oracle %s", allTypes[i])
			}
		})
	}
}

func TestCalendar_Period_FiscalYearsAcrossCalendarYears(t *testing.T) {
	tests := []struct {
		start   int
		date    string
		quarter string // FISCAL_QUARTER
		year    string // FISCAL_YEAR
	}{
		{1, "2026-01-01", "FY2026-Q1", "FY2026"}, // start month 1: the fiscal year is the calendar year
		{1, "2026-03-31", "FY2026-Q1", "FY2026"},
		{1, "2026-04-01", "FY2026-Q2", "FY2026"},
		{1, "2026-12-31", "FY2026-Q4", "FY2026"},
		{4, "2026-03-31", "FY2026-Q4", "FY2026"}, // April 2025 – March 2026 is FY2026
		{4, "2026-04-01", "FY2027-Q1", "FY2027"},
		{4, "2026-12-31", "FY2027-Q3", "FY2027"},
		{4, "2027-01-01", "FY2027-Q4", "FY2027"},
		{7, "2026-06-30", "FY2026-Q4", "FY2026"}, // July 2026 – June 2027 is FY2027
		{7, "2026-07-01", "FY2027-Q1", "FY2027"},
		{7, "2026-10-01", "FY2027-Q2", "FY2027"},
		{7, "2027-01-01", "FY2027-Q3", "FY2027"},
		{7, "2027-06-30", "FY2027-Q4", "FY2027"},
		{10, "2026-09-30", "FY2026-Q4", "FY2026"}, // October 2026 – September 2027 is FY2027
		{10, "2026-10-01", "FY2027-Q1", "FY2027"},
		{10, "2026-12-31", "FY2027-Q1", "FY2027"},
		{10, "2027-01-01", "FY2027-Q2", "FY2027"},
		{12, "2026-11-30", "FY2026-Q4", "FY2026"}, // December 2026 – November 2027 is FY2027
		{12, "2026-12-01", "FY2027-Q1", "FY2027"},
		{12, "2027-02-28", "FY2027-Q1", "FY2027"},
		{12, "2027-03-01", "FY2027-Q2", "FY2027"},
		{12, "2027-11-30", "FY2027-Q4", "FY2027"},
		{2, "2024-01-31", "FY2024-Q4", "FY2024"},
		{2, "2024-02-29", "FY2025-Q1", "FY2025"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("start %d/%s", tt.start, tt.date), func(t *testing.T) {
			c := mustCalendar(t, "UTC", "00:00", "MONDAY", tt.start)
			d := mustDate(t, tt.date)
			assert.Equal(t, aggregates.Period{Type: aggregates.FiscalQuarter, Value: tt.quarter}, c.Period(aggregates.FiscalQuarter, d))
			assert.Equal(t, aggregates.Period{Type: aggregates.FiscalYear, Value: tt.year}, c.Period(aggregates.FiscalYear, d))

			got := oraclePeriods(civilOf(mustInstant(t, tt.date+"T00:00:00Z")), time.Monday, time.Month(tt.start))
			assert.Equal(t, tt.quarter, got[5].Value, "oracle")
			assert.Equal(t, tt.year, got[6].Value, "oracle")
		})
	}
}

func TestCalendar_WeekStart_EveryWeekday(t *testing.T) {
	// Friday 2026-11-27, in weeks starting on each day.
	want := map[string]string{
		"MONDAY": "2026-11-23", "TUESDAY": "2026-11-24", "WEDNESDAY": "2026-11-25", "THURSDAY": "2026-11-26",
		"FRIDAY": "2026-11-27", "SATURDAY": "2026-11-21", "SUNDAY": "2026-11-22",
	}
	for week, start := range want {
		t.Run(week, func(t *testing.T) {
			c := mustCalendar(t, "UTC", "00:00", week, 1)
			assert.Equal(t, aggregates.Period{Type: aggregates.Weekly, Value: start}, c.Period(aggregates.Weekly, mustDate(t, "2026-11-27")))
			// The seven days of that week all map to its first day.
			for i := 0; i < 7; i++ {
				d := mustDate(t, start).AddDays(i)
				assert.Equal(t, start, c.Period(aggregates.Weekly, d).Value, "%s", d)
			}
		})
	}
}

func TestCalendar_Stamp_OutOfRangeYearsAreRefused(t *testing.T) {
	tests := []struct {
		name   string
		zone   string
		fiscal int
		at     time.Time
		ok     bool
	}{
		{"year 0000 is a date", "UTC", 1, time.Date(0, 1, 31, 12, 0, 0, 0, time.UTC), true},
		{"0000-01-01, a Saturday, is in a week from Monday of year −1", "UTC", 1, time.Date(0, 1, 1, 12, 0, 0, 0, time.UTC), false},
		{"year −1 is not", "UTC", 1, time.Date(-1, 12, 31, 12, 0, 0, 0, time.UTC), false},
		{"9999-12-31 is a date", "UTC", 1, time.Date(9999, 12, 31, 12, 0, 0, 0, time.UTC), true},
		{"10000-01-01 is not", "UTC", 1, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{"9999-12-31 in Kiritimati is 10000-01-01", "Pacific/Kiritimati", 1, time.Date(9999, 12, 31, 10, 0, 0, 0, time.UTC), false},
		{"9999-06-30 with FY from July is FY9999", "UTC", 7, time.Date(9999, 6, 30, 12, 0, 0, 0, time.UTC), true},
		{"9999-07-01 with FY from July would be FY10000", "UTC", 7, time.Date(9999, 7, 1, 12, 0, 0, 0, time.UTC), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustCalendar(t, tt.zone, "00:00", "MONDAY", tt.fiscal)
			s, err := c.Stamp(tt.at, allTypes)
			if !tt.ok {
				assert.ErrorIs(t, err, aggregates.ErrPeriodOutOfRange)
				return
			}
			require.NoError(t, err)
			_, err = aggregates.ParseStamp(s.BusinessDate.String(), s.EncodePeriods())
			assert.NoError(t, err, "its stamp parses")
		})
	}
}

func TestCalendar_Stamp_DefaultsToDailyMonthlyYearly(t *testing.T) {
	s, err := aggregates.DefaultCalendar().Stamp(mustInstant(t, "2026-11-28T01:30:00Z"), nil)
	require.NoError(t, err)
	assert.Equal(t, "DAILY#2026-11-28 MONTHLY#2026-11 YEARLY#2026", s.EncodePeriods())
}

// ----- The property tests against the oracle.

// calendarSeeds returns the seeds of the randomized calendar tests:
// $LEDGER_SEEDS (comma separated) or a fixed one, so a failure replays.
func calendarSeeds(t *testing.T) []uint64 {
	seeds, err := ledgertest.Seeds(os.Getenv, 1)
	require.NoError(t, err)
	return seeds
}

var zoneNames struct {
	once  sync.Once
	names []string
	err   error
}

// embeddedZones lists every zone of the Go distribution's zone data
// ($GOROOT/lib/time/zoneinfo.zip, the data time/tzdata embeds).
func embeddedZones(t testing.TB) []string {
	zoneNames.once.Do(func() {
		//lint:ignore SA1019 the test runs where it was built; `go env GOROOT` is the fallback
		path := filepath.Join(runtime.GOROOT(), "lib", "time", "zoneinfo.zip")
		if _, err := os.Stat(path); err != nil {
			out, err := exec.Command("go", "env", "GOROOT").Output()
			if err != nil {
				zoneNames.err = fmt.Errorf("find GOROOT: %w", err)
				return
			}
			path = filepath.Join(strings.TrimSpace(string(out)), "lib", "time", "zoneinfo.zip")
		}
		r, err := zip.OpenReader(path)
		if err != nil {
			zoneNames.err = err
			return
		}
		defer r.Close()
		for _, f := range r.File {
			if !strings.HasSuffix(f.Name, "/") {
				zoneNames.names = append(zoneNames.names, f.Name)
			}
		}
		sort.Strings(zoneNames.names)
	})
	require.NoError(t, zoneNames.err)
	require.Greater(t, len(zoneNames.names), 300, "zones in zoneinfo.zip")
	return zoneNames.names
}

func mustLoad(t testing.TB, zone string) *time.Location {
	t.Helper()
	loc, err := aggregates.LoadZone(zone)
	require.NoError(t, err)
	return loc
}

// namedZones are the zones of the hand-checked cases: sampled densely.
var namedZones = []string{
	"America/Sao_Paulo", "Europe/London", "America/New_York", "Pacific/Kiritimati", "Pacific/Pago_Pago",
	"Asia/Kathmandu", "Australia/Lord_Howe", "Pacific/Apia", "America/St_Johns", "UTC",
}

var (
	sampleFrom = time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC)
	sampleTo   = time.Date(2038, 1, 1, 0, 0, 0, 0, time.UTC)
)

// offsetChanges lists the instants in [from, to) at which loc's UTC offset
// changes (for sampling only: the oracle does not use them).
func offsetChanges(loc *time.Location, from, to time.Time) []time.Time {
	var out []time.Time
	for x := from; x.Before(to); {
		_, before := x.In(loc).Zone()
		_, end := x.In(loc).ZoneBounds()
		if end.IsZero() || !end.After(x) || !end.Before(to) {
			break
		}
		if _, after := end.In(loc).Zone(); after != before {
			out = append(out, end)
		}
		x = end
	}
	return out
}

// calendarSample is one random case: a calendar and an instant.
type calendarSample struct {
	zone   string
	loc    *time.Location // the oracle's own copy
	cutoff int            // minutes
	week   time.Weekday
	fiscal time.Month
	at     time.Time

	changes []time.Time // the zone's offset changes in 1971–2037
}

func (s calendarSample) String() string {
	return fmt.Sprintf("zone %s, dayStartsAt %02d:%02d, weekStartsOn %s, fiscalYearStartMonth %d, at %s (local %s)",
		s.zone, s.cutoff/60, s.cutoff%60, weekdayNames[s.week], s.fiscal, s.at.UTC().Format(time.RFC3339Nano), s.at.In(s.loc).Format("2006-01-02 15:04:05 -07:00:00"))
}

// randomSample draws a case in zone: half of the instants uniform over
// 1971–2037, half within 30 h of one of the zone's offset changes; a
// quarter of the cut-offs 00:00, a third near the local time of an offset
// change (in a skipped or repeated hour), the rest uniform.
func randomSample(rng *rand.Rand, zone string, loc *time.Location, changes []time.Time) calendarSample {
	s := calendarSample{zone: zone, loc: loc, week: time.Weekday(rng.IntN(7)), fiscal: time.Month(1 + rng.IntN(12)), changes: changes}
	span := sampleTo.Sub(sampleFrom)
	s.at = sampleFrom.Add(time.Duration(rng.Int64N(int64(span/time.Second))) * time.Second)
	var near time.Time
	if len(changes) > 0 {
		near = changes[rng.IntN(len(changes))]
		if rng.IntN(2) == 0 {
			s.at = near.Add(time.Duration(rng.Int64N(int64(60*time.Hour/time.Second))-int64(30*time.Hour/time.Second)) * time.Second)
		}
	}
	if rng.IntN(4) == 0 {
		s.at = s.at.Add(time.Duration(rng.IntN(1e9))) // not on a whole second
	}
	switch r := rng.IntN(12); {
	case r < 3:
		s.cutoff = 0
	case r < 7 && !near.IsZero():
		// The local time just before or at the change, give or take 90 minutes.
		wall := near.In(loc)
		if rng.IntN(2) == 0 {
			wall = near.Add(-time.Nanosecond).In(loc)
		}
		m := wall.Hour()*60 + wall.Minute() + rng.IntN(181) - 90
		s.cutoff = (m%1440 + 1440) % 1440
	default:
		s.cutoff = rng.IntN(1440)
	}
	return s
}

func (s calendarSample) calendar(t testing.TB) aggregates.Calendar {
	return mustCalendar(t, s.zone, fmt.Sprintf("%02d:%02d", s.cutoff/60, s.cutoff%60), weekdayNames[s.week], int(s.fiscal))
}

// checkAgainstOracle compares the calendar of s with the oracle at s.at:
// the business date, the stamp of every period type, the starts of the
// business days around it; and the business dates, which the oracle knows
// at no further cost between the first and the last start it found, at
// those starts and a nanosecond before them, around the zone's offset
// changes there, and at a few random instants there.
func checkAgainstOracle(t *testing.T, rng *rand.Rand, s calendarSample) bool {
	t.Helper()
	c := s.calendar(t)
	wall := civilOf(s.at.In(s.loc))
	o := newOracle(t, s.zone, s.cutoff, wall.addDays(-3), 5)
	ok := true
	fail := func(format string, args ...any) {
		t.Errorf("%s: %s", s, fmt.Sprintf(format, args...))
		ok = false
	}

	want, found := o.businessDate(s.at)
	if !found {
		fail("the oracle finds no business day (wall date %s)", wall)
		return false
	}
	if got := c.BusinessDate(s.at); got != want.date() {
		fail("BusinessDate = %s; want %s", got, want)
	}
	stamp, err := c.Stamp(s.at, allTypes)
	if err != nil {
		fail("Stamp: %v", err)
	} else {
		wantPeriods := oraclePeriods(want, s.week, s.fiscal)
		if stamp.BusinessDate != want.date() {
			fail("Stamp.BusinessDate = %s; want %s", stamp.BusinessDate, want)
		}
		if fmt.Sprint(stamp.Periods) != fmt.Sprint(wantPeriods) {
			fail("Stamp.Periods = %v; want %v", stamp.Periods, wantPeriods)
		}
	}
	var more []time.Time
	var lo, hi time.Time
	for _, day := range o.days {
		start, defined := c.DayStart(day.date.date())
		if defined != day.ok || (defined && !start.Equal(day.start)) {
			fail("DayStart(%s) = %s, %t; want %s, %t", day.date, start.UTC(), defined, day.start.UTC(), day.ok)
			continue
		}
		if day.ok {
			more = append(more, day.start, day.start.Add(-time.Nanosecond))
			if lo.IsZero() {
				lo = day.start
			}
			hi = day.start
		}
	}
	if lo.IsZero() {
		return ok
	}
	for _, ch := range s.changes {
		if !ch.Before(lo) && !ch.After(hi) {
			for _, d := range []time.Duration{-time.Nanosecond, 0, time.Second, 30 * time.Minute, 59 * time.Minute, 90 * time.Minute} {
				more = append(more, ch.Add(d))
			}
		}
	}
	for i := 0; i < 8; i++ {
		more = append(more, lo.Add(time.Duration(rng.Int64N(int64(hi.Sub(lo))+1))))
	}
	for _, at := range more {
		if at.Before(lo) || at.After(hi) {
			continue
		}
		w, _ := o.businessDate(at)
		if got := c.BusinessDate(at); got != w.date() {
			fail("BusinessDate(%s) = %s; want %s", at.UTC().Format(time.RFC3339Nano), got, w)
		}
	}
	return ok
}

func TestCalendar_AgreesWithTheOracle_EveryZone(t *testing.T) {
	zones := embeddedZones(t)
	perZone, perNamed := 2, 30
	if testing.Short() {
		perZone, perNamed = 1, 10
	}
	for _, seed := range calendarSeeds(t) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 22))
			failures := 0
			run := func(zone string, n int) {
				loc := mustLoad(t, zone)
				changes := offsetChanges(loc, sampleFrom, sampleTo)
				for i := 0; i < n && failures < 20; i++ {
					if !checkAgainstOracle(t, rng, randomSample(rng, zone, loc, changes)) {
						failures++
					}
				}
			}
			for _, zone := range zones {
				run(zone, perZone)
			}
			for _, zone := range namedZones {
				run(zone, perNamed)
			}
		})
	}
}

func TestCalendar_DayStartIncreasesAndStartsItsOwnBusinessDate(t *testing.T) {
	// The code under test against itself, around offset changes of every
	// zone: a business day's start lies after the previous day's, the
	// instant it starts belongs to it and the nanosecond before does not.
	zones := embeddedZones(t)
	perZone := 8
	if testing.Short() {
		perZone = 2
	}
	for _, seed := range calendarSeeds(t) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 23))
			failures := 0
			for _, zone := range zones {
				loc := mustLoad(t, zone)
				changes := offsetChanges(loc, sampleFrom, sampleTo)
				for i := 0; i < perZone && failures < 20; i++ {
					s := randomSample(rng, zone, loc, changes)
					c := s.calendar(t)
					first := civilOf(s.at.In(loc)).addDays(-3)
					var prev time.Time
					var prevDate civil
					for k := 0; k < 7; k++ {
						d := first.addDays(k)
						start, ok := c.DayStart(d.date())
						if !ok {
							continue
						}
						if !prev.IsZero() && !start.After(prev) {
							t.Errorf("%s: DayStart(%s) = %s is not after DayStart(%s) = %s", s, d, start.UTC(), prevDate, prev.UTC())
							failures++
						}
						if got := c.BusinessDate(start); got != d.date() {
							t.Errorf("%s: BusinessDate(DayStart(%s) = %s) = %s", s, d, start.UTC(), got)
							failures++
						}
						if got := c.BusinessDate(start.Add(-time.Nanosecond)); !got.Before(d.date()) {
							t.Errorf("%s: BusinessDate(DayStart(%s) − 1ns) = %s; want an earlier date", s, d, got)
							failures++
						}
						prev, prevDate = start, d
					}
				}
			}
		})
	}
}

// ----- The oracle: calls nothing in package aggregates.

// civil is the oracle's calendar date.
type civil struct {
	y int
	m time.Month
	d int
}

func civilOf(t time.Time) civil {
	y, m, d := t.Date()
	return civil{y, m, d}
}

func (c civil) addDays(n int) civil {
	return civilOf(time.Date(c.y, c.m, c.d+n, 12, 0, 0, 0, time.UTC))
}

func (c civil) weekday() time.Weekday {
	return time.Date(c.y, c.m, c.d, 12, 0, 0, 0, time.UTC).Weekday()
}

func (c civil) String() string { return fmt.Sprintf("%04d-%02d-%02d", c.y, int(c.m), c.d) }

// date converts to the type under test, for comparisons only.
func (c civil) date() aggregates.Date { return aggregates.Date{Year: c.y, Month: c.m, Day: c.d} }

type oracleDay struct {
	date  civil
	start time.Time
	ok    bool // false: the local clock never reads date at or after the cut-off
}

// oracle holds the starts of consecutive business days, found by scanning.
type oracle struct {
	days []oracleDay
}

// newOracle finds, for each of the n dates from first, the first instant
// at which loc's wall clock reads that date at a time of day of cutoff
// minutes or later: minute steps from 50 h before the first date's naive
// start (its wall time read as UTC) to 50 h after the last one's, then
// second steps over the minute before each first hit. Zone offsets and
// transitions are whole seconds, and the instants at or after a whole-minute
// cut-off on a date last at least a minute unless a transition cuts them
// short, so the minute steps miss no day that the clock reads for a minute.
func newOracle(t testing.TB, zone string, cutoff int, first civil, n int) oracle {
	loc := mustLoad(t, zone)
	o := oracle{days: make([]oracleDay, n)}
	for i := range o.days {
		o.days[i].date = first.addDays(i)
	}
	reads := func(x time.Time) int { // which date x reads at or after the cut-off; −1: none
		l := x.In(loc)
		h, m, _ := l.Clock()
		if h*60+m < cutoff {
			return -1
		}
		w := civilOf(l)
		for i := range o.days {
			if o.days[i].date == w {
				return i
			}
		}
		return -1
	}
	naive := func(c civil) time.Time { return time.Date(c.y, c.m, c.d, 0, cutoff, 0, 0, time.UTC) }
	from := naive(o.days[0].date).Add(-50 * time.Hour)
	to := naive(o.days[n-1].date).Add(50 * time.Hour)
	for x := from; !x.After(to); x = x.Add(time.Minute) {
		i := reads(x)
		if i < 0 || o.days[i].ok {
			continue
		}
		first := x
		for y := x.Add(-59 * time.Second); y.Before(x); y = y.Add(time.Second) {
			if reads(y) == i {
				first = y
				break
			}
		}
		o.days[i].start, o.days[i].ok = first, true
	}
	return o
}

// businessDate is the latest of the oracle's dates whose day started at or
// before at; false when none did.
func (o oracle) businessDate(at time.Time) (civil, bool) {
	for i := len(o.days) - 1; i >= 0; i-- {
		if o.days[i].ok && !o.days[i].start.After(at) {
			return o.days[i].date, true
		}
	}
	return civil{}, false
}

func (o oracle) start(d civil) (time.Time, bool) {
	for _, day := range o.days {
		if day.date == d {
			return day.start, day.ok
		}
	}
	return time.Time{}, false
}

// oraclePeriods is the periods of business date d, by plain date
// arithmetic: the week's first day by stepping back a day at a time; the
// fiscal year as the twelve months from the latest first of the start month
// on or before d, named by the year of its last month.
func oraclePeriods(d civil, week time.Weekday, fiscalStart time.Month) []aggregates.Period {
	ws := d
	for ws.weekday() != week {
		ws = ws.addDays(-1)
	}
	fyFirst := d.y
	if d.m < fiscalStart {
		fyFirst--
	}
	monthsIn := (d.y*12 + int(d.m) - 1) - (fyFirst*12 + int(fiscalStart) - 1) // 0–11
	fyLast := time.Date(fyFirst, fiscalStart+11, 1, 0, 0, 0, 0, time.UTC).Year()
	return []aggregates.Period{
		{Type: aggregates.Daily, Value: d.String()},
		{Type: aggregates.Weekly, Value: ws.String()},
		{Type: aggregates.Monthly, Value: fmt.Sprintf("%04d-%02d", d.y, int(d.m))},
		{Type: aggregates.Quarterly, Value: fmt.Sprintf("%04d-Q%d", d.y, (int(d.m)+2)/3)},
		{Type: aggregates.Yearly, Value: fmt.Sprintf("%04d", d.y)},
		{Type: aggregates.FiscalQuarter, Value: fmt.Sprintf("FY%04d-Q%d", fyLast, monthsIn/3+1)},
		{Type: aggregates.FiscalYear, Value: fmt.Sprintf("FY%04d", fyLast)},
	}
}

func parseWeekdayName(s string) (time.Weekday, bool) {
	for d, n := range weekdayNames {
		if n == s {
			return d, true
		}
	}
	return 0, false
}

// ----- Validation: calendars, period values, report periods, stamps.

func TestNewCalendar_RefusesWithTheFieldNamed(t *testing.T) {
	ok := []string{"UTC", "00:00", "MONDAY", "1"}
	tests := []struct {
		field string // the field named in the error
		value string
	}{
		{"timeZone", "Local"},
		{"timeZone", ""},
		{"timeZone", "Mars/Olympus"},
		{"timeZone", "../etc/passwd"},
		{"timeZone", "/etc/localtime"},
		{"timeZone", "Europe/../UTC"},
		{"timeZone", "localtime"},  // the host's zone under another name (a system zone file)
		{"timeZone", "posixrules"}, // system zone files the embedded data lacks
		{"timeZone", "right/UTC"},
		{"timeZone", "posix/Europe/London"},
		{"timeZone", "zone.tab"},
		{"timeZone", "Europe/London "},
		{"timeZone", "europe/london"},
		{"timeZone", "America/Sao Paulo"},
		{"timeZone", "Europe//London"},
		{"timeZone", "Europe/London/"},
		{"timeZone", "UTC\x00"},
		{"timeZone", strings.Repeat("A", 65)},
		{"dayStartsAt", "24:00"},
		{"dayStartsAt", "4:00"},
		{"dayStartsAt", "04:60"},
		{"dayStartsAt", "04:0"},
		{"dayStartsAt", "0400"},
		{"dayStartsAt", "04:00:00"},
		{"dayStartsAt", ""},
		{"dayStartsAt", "+4:00"},
		{"dayStartsAt", "-0:30"},
		{"dayStartsAt", "04:+5"},
		{"dayStartsAt", " 4:00"},
		{"dayStartsAt", "٠٤:٠٠"},
		{"weekStartsOn", "MONDAYS"},
		{"weekStartsOn", "monday"},
		{"weekStartsOn", "Monday"},
		{"weekStartsOn", "MON"},
		{"weekStartsOn", ""},
		{"weekStartsOn", "1"},
		{"fiscalYearStartMonth", "0"},
		{"fiscalYearStartMonth", "13"},
		{"fiscalYearStartMonth", "-1"},
	}
	fields := []string{"timeZone", "dayStartsAt", "weekStartsOn", "fiscalYearStartMonth"}
	for _, tt := range tests {
		t.Run(tt.field+"="+strconv.Quote(tt.value), func(t *testing.T) {
			args := append([]string(nil), ok...)
			for i, f := range fields {
				if f == tt.field {
					args[i] = tt.value
				}
			}
			month, err := strconv.Atoi(args[3])
			require.NoError(t, err)
			c, err := aggregates.NewCalendar(args[0], args[1], args[2], month)
			var ce *aggregates.CalendarError
			require.True(t, errors.As(err, &ce), "NewCalendar(%q) = %v, %v; want a *CalendarError", tt.value, c, err)
			assert.Equal(t, tt.field, ce.Field)
			assert.True(t, strings.HasPrefix(err.Error(), tt.field+": "), "error %q names its field", err)
			assert.Equal(t, aggregates.Calendar{}, c)
		})
	}
}

func TestNewCalendar_AcceptsEveryEmbeddedZoneAndKeepsItsFields(t *testing.T) {
	for _, zone := range embeddedZones(t) {
		c, err := aggregates.NewCalendar(zone, "23:59", "SUNDAY", 12)
		if !assert.NoError(t, err, zone) {
			continue
		}
		assert.Equal(t, zone, c.TimeZone)
		assert.Equal(t, zone, c.Location().String())
		assert.Equal(t, 23*60+59, c.DayStartsAt)
		assert.Equal(t, time.Sunday, c.WeekStartsOn)
		assert.Equal(t, time.December, c.FiscalYearStartMonth)
	}
	for d, name := range weekdayNames {
		c := mustCalendar(t, "UTC", "00:00", name, 1)
		assert.Equal(t, d, c.WeekStartsOn)
	}
	assert.True(t, mustCalendar(t, "UTC", "00:00", "MONDAY", 1).Equal(aggregates.DefaultCalendar()), "the defaults are DefaultCalendar")
}

func TestParsePeriod_EveryType(t *testing.T) {
	tests := []struct {
		typ   aggregates.PeriodType
		value string
		ok    bool
	}{
		{aggregates.Daily, "2024-02-29", true},
		{aggregates.Daily, "2023-02-29", false},
		{aggregates.Daily, "2024-2-29", false},
		{aggregates.Daily, "2024-02-29 ", false},
		{aggregates.Daily, "2024/02/29", false},
		{aggregates.Daily, "", false},
		{aggregates.Weekly, "2026-11-27", true}, // any date: the week's first day is the calendar's
		{aggregates.Weekly, "2026-11-31", false},
		{aggregates.Weekly, "2026-W48", false},
		{aggregates.Monthly, "2024-12", true},
		{aggregates.Monthly, "2024-00", false},
		{aggregates.Monthly, "2024-13", false},
		{aggregates.Monthly, "2024-1", false},
		{aggregates.Monthly, "2024-02-29", false},
		{aggregates.Quarterly, "2024-Q1", true},
		{aggregates.Quarterly, "2024-Q4", true},
		{aggregates.Quarterly, "2024-Q0", false},
		{aggregates.Quarterly, "2024-Q5", false},
		{aggregates.Quarterly, "2024-q1", false},
		{aggregates.Quarterly, "2024Q1", false},
		{aggregates.Quarterly, "+024-Q1", false},
		{aggregates.Yearly, "2024", true},
		{aggregates.Yearly, "0000", true},
		{aggregates.Yearly, "24", false},
		{aggregates.Yearly, "+024", false},
		{aggregates.Yearly, "-001", false},
		{aggregates.Yearly, "FY2024", false},
		{aggregates.FiscalQuarter, "FY2027-Q2", true},
		{aggregates.FiscalQuarter, "2027-Q2", false},
		{aggregates.FiscalQuarter, "fy2027-Q2", false},
		{aggregates.FiscalQuarter, "FY2027-Q5", false},
		{aggregates.FiscalQuarter, "FY2027", false},
		{aggregates.FiscalYear, "FY2027", true},
		{aggregates.FiscalYear, "2027", false},
		{aggregates.FiscalYear, "FY27", false},
		{aggregates.FiscalYear, "FY-001", false},
		{"HOURLY", "2024-02-29T10", false},
		{"daily", "2024-02-29", false},
	}
	for _, tt := range tests {
		t.Run(string(tt.typ)+"/"+tt.value, func(t *testing.T) {
			p, err := aggregates.ParsePeriod(tt.typ, tt.value)
			if !tt.ok {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, aggregates.Period{Type: tt.typ, Value: tt.value}, p)
			// The sort-key form round-trips.
			k, err := aggregates.ParsePeriodKey(p.String())
			require.NoError(t, err)
			assert.Equal(t, p, k)
		})
	}
}

func TestParsePeriodKey(t *testing.T) {
	tests := []struct {
		key string
		ok  bool
	}{
		{"DAILY#2024-02-29", true},
		{"WEEKLY#2024-02-26", true},
		{"MONTHLY#2024-02", true},
		{"QUARTERLY#2024-Q1", true},
		{"YEARLY#2024", true},
		{"FISCAL_QUARTER#FY2024-Q4", true},
		{"FISCAL_YEAR#FY2024", true},
		{"DAILY2024-02-29", false},
		{"daily#2024-02-29", false},
		{"DAILY#2024-02-29#", false},
		{"DAILY##2024-02-29", false},
		{"#2024", false},
		{"YEARLY#", false},
		{"", false},
		{"MONTHLY#2024-02-29", false},
		{"FISCAL_YEAR#2024", false},
		{"QUARTERLY#2024-Q5", false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			p, err := aggregates.ParsePeriodKey(tt.key)
			if !tt.ok {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.key, p.String())
		})
	}
}

func TestParseReportPeriods(t *testing.T) {
	tests := []struct {
		names []string
		want  []aggregates.PeriodType // nil: refused
	}{
		{[]string{"DAILY", "MONTHLY", "YEARLY"}, []aggregates.PeriodType{aggregates.Daily, aggregates.Monthly, aggregates.Yearly}},
		{[]string{"YEARLY", "DAILY"}, []aggregates.PeriodType{aggregates.Daily, aggregates.Yearly}}, // canonical order
		{[]string{"FISCAL_YEAR", "FISCAL_QUARTER", "YEARLY", "QUARTERLY", "MONTHLY", "WEEKLY", "DAILY"}, allTypes},
		{[]string{"WEEKLY"}, []aggregates.PeriodType{aggregates.Weekly}},
		{nil, nil},
		{[]string{}, nil},
		{[]string{"DAILY", "DAILY"}, nil},
		{[]string{"DAILY", "MONTHLY", "DAILY"}, nil},
		{[]string{"daily"}, nil},
		{[]string{""}, nil},
		{[]string{"HOURLY"}, nil},
		{[]string{"DAILY", "FISCAL"}, nil},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.names, ","), func(t *testing.T) {
			got, err := aggregates.ParseReportPeriods(tt.names)
			if tt.want == nil {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseStamp(t *testing.T) {
	const all = "DAILY#2026-11-27 WEEKLY#2026-11-23 MONTHLY#2026-11 QUARTERLY#2026-Q4 YEARLY#2026 FISCAL_QUARTER#FY2027-Q2 FISCAL_YEAR#FY2027"
	tests := []struct {
		name    string
		date    string
		periods string
		ok      bool
	}{
		{"the defaults", "2026-11-27", "DAILY#2026-11-27 MONTHLY#2026-11 YEARLY#2026", true},
		{"every type", "2026-11-27", all, true},
		{"one type", "2026-11-27", "FISCAL_YEAR#FY2026", true},
		{"WEEKLY the business date itself", "2026-11-27", "WEEKLY#2026-11-27", true},
		{"WEEKLY 6 days before", "2026-11-27", "WEEKLY#2026-11-21", true},
		{"WEEKLY of last year's week", "2027-01-01", "WEEKLY#2026-12-28 YEARLY#2027", true},
		{"fiscal year of the business date's year", "2026-11-27", "FISCAL_QUARTER#FY2026-Q4 FISCAL_YEAR#FY2026", true},

		{"a business date that does not exist", "2026-02-30", "DAILY#2026-02-30", false},
		{"a business date in another layout", "2026-11-27T00:00:00Z", "YEARLY#2026", false},
		{"no periods", "2026-11-27", "", false},
		{"DAILY not the business date", "2026-11-27", "DAILY#2026-11-28", false},
		{"MONTHLY not the business date's", "2026-11-27", "DAILY#2026-11-27 MONTHLY#2026-12", false},
		{"MONTHLY alone not the business date's", "2026-11-27", "MONTHLY#2026-10", false},
		{"QUARTERLY not the business date's", "2026-11-27", "QUARTERLY#2026-Q3", false},
		{"YEARLY not the business date's", "2026-11-27", "YEARLY#2027", false},
		{"WEEKLY 7 days before", "2026-11-27", "WEEKLY#2026-11-20", false},
		{"WEEKLY after the business date", "2026-11-27", "WEEKLY#2026-11-28", false},
		{"fiscal year two years on", "2026-11-27", "FISCAL_YEAR#FY2028", false},
		{"fiscal year before", "2026-11-27", "FISCAL_YEAR#FY2025", false},
		{"fiscal quarter and year disagree", "2026-11-27", "FISCAL_QUARTER#FY2026-Q4 FISCAL_YEAR#FY2027", false},
		{"January in the next fiscal year (no start month does that)", "2026-01-15", "FISCAL_YEAR#FY2027", false},
		{"July in Q4 of the next fiscal year (start months 2–7 give Q1 or Q2)", "2026-07-01", "FISCAL_QUARTER#FY2027-Q4", false},
		{"July in Q2 of the next fiscal year (start month 4, 5 or 6)", "2026-07-01", "FISCAL_QUARTER#FY2027-Q2", true},
		{"January in Q2 of its year (start month 10)", "2026-01-15", "FISCAL_QUARTER#FY2026-Q2", true},
		{"January in Q1 of its year (start months 1, 11, 12)", "2026-01-15", "FISCAL_QUARTER#FY2026-Q1", true},
		{"November in Q4 of the next fiscal year (start month 2)", "2026-11-27", "FISCAL_QUARTER#FY2027-Q4", true},
		{"November in Q4 of its fiscal year (start months 12, 1)", "2026-11-27", "FISCAL_QUARTER#FY2026-Q4", true},
		{"November in Q3 of its fiscal year (no start month)", "2026-11-27", "FISCAL_QUARTER#FY2026-Q3", false},
		{"types out of order", "2026-11-27", "MONTHLY#2026-11 DAILY#2026-11-27", false},
		{"fiscal types out of order", "2026-11-27", "FISCAL_YEAR#FY2027 FISCAL_QUARTER#FY2027-Q2", false},
		{"a type twice", "2026-11-27", "DAILY#2026-11-27 DAILY#2026-11-27", false},
		{"two spaces", "2026-11-27", "DAILY#2026-11-27  MONTHLY#2026-11", false},
		{"a trailing space", "2026-11-27", "DAILY#2026-11-27 ", false},
		{"a comma", "2026-11-27", "DAILY#2026-11-27,MONTHLY#2026-11", false},
		{"eight periods", "2026-11-27", all + " YEARLY#2026", false},
		{"an unknown type", "2026-11-27", "HOURLY#2026-11-27T10", false},
		{"a bad value", "2026-11-27", "QUARTERLY#2026-Q5", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := aggregates.ParseStamp(tt.date, tt.periods)
			if !tt.ok {
				assert.Error(t, err, "ParseStamp = %+v", s)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.date, s.BusinessDate.String())
			assert.Equal(t, tt.periods, s.EncodePeriods())
		})
	}
}

func TestStamp_RoundTripsThroughParseStamp(t *testing.T) {
	zones := embeddedZones(t)
	n := 3000
	if testing.Short() {
		n = 300
	}
	for _, seed := range calendarSeeds(t) {
		rng := rand.New(rand.NewPCG(seed, 24))
		for i := 0; i < n; i++ {
			zone := zones[rng.IntN(len(zones))]
			loc := mustLoad(t, zone)
			s := randomSample(rng, zone, loc, nil)
			c := s.calendar(t)
			var kept []aggregates.PeriodType
			for _, pt := range allTypes {
				if rng.IntN(2) == 0 {
					kept = append(kept, pt)
				}
			}
			if len(kept) == 0 {
				kept = []aggregates.PeriodType{allTypes[rng.IntN(len(allTypes))]}
			}
			st, err := c.Stamp(s.at, kept)
			require.NoError(t, err, "%s", s)
			assert.Equal(t, kept, st.Types())
			back, err := aggregates.ParseStamp(st.BusinessDate.String(), st.EncodePeriods())
			if !assert.NoError(t, err, "%s: ParseStamp(%s, %q)", s, st.BusinessDate, st.EncodePeriods()) {
				continue
			}
			assert.True(t, back.Equal(st), "%s: ParseStamp(EncodePeriods) = %+v; want %+v", s, back, st)
		}
	}
}
