package ledgertest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// The tests' oracle of business periods: what a transaction's stamp must
// be, computed from the contract of docs/design.md ("Business calendars")
// by brute force, sharing no code with aggregates/calendar.go. It scans
// instants a minute apart (then a second apart) for the first one whose
// local wall clock reads the date at or after the day's start, so it is
// slow (milliseconds a call) and obviously right rather than fast.

// OracleCalendar is a calendar as the oracle takes it.
type OracleCalendar struct {
	Zone        string
	DayStart    int // minutes after midnight
	WeekStart   time.Weekday
	FiscalStart time.Month
}

// OracleDayStart returns the first instant at which the wall clock of loc
// reads date (y, m, d) at a time of day at or after dayStart minutes, and
// false when it never does (within two days of the date).
func OracleDayStart(loc *time.Location, y int, m time.Month, d, dayStart int) (time.Time, bool) {
	reads := func(x time.Time) bool {
		l := x.In(loc)
		ly, lm, ld := l.Date()
		if ly != y || lm != m || ld != d {
			return false
		}
		return l.Hour()*3600+l.Minute()*60+l.Second() >= dayStart*60
	}
	naive := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	for x := naive.Add(-50 * time.Hour); x.Before(naive.Add(50 * time.Hour)); x = x.Add(time.Minute) {
		if !reads(x) {
			continue
		}
		for s := x.Add(-59 * time.Second); ; s = s.Add(time.Second) {
			if reads(s) {
				return s, true
			}
		}
	}
	return time.Time{}, false
}

// OracleStamp returns the business date and the stored periods (the
// stamp's EncodePeriods form) of an instant under c, of the types given.
func OracleStamp(at time.Time, c OracleCalendar, types []aggregates.PeriodType) (businessDate, periods string, err error) {
	loc, err := aggregates.LoadZone(c.Zone) // the zone data the product uses; the arithmetic is what the oracle checks
	if err != nil {
		return "", "", err
	}
	wy, wm, wd := at.In(loc).Date()
	var bd time.Time
	found := false
	for off := 1; off >= -3 && !found; off-- {
		day := time.Date(wy, wm, wd+off, 0, 0, 0, 0, time.UTC)
		if s, ok := OracleDayStart(loc, day.Year(), day.Month(), day.Day(), c.DayStart); ok && !s.After(at) {
			bd, found = day, true
		}
	}
	if !found {
		return "", "", fmt.Errorf("oracle: no business day starts within 3 days before %s in %s", at, c.Zone)
	}
	if c.FiscalStart == 0 {
		c.FiscalStart = time.January
	}
	y, m := bd.Year(), bd.Month()
	fy, fq := y, 0
	if c.FiscalStart > time.January && m >= c.FiscalStart {
		fy = y + 1
	}
	for i, mm := 0, c.FiscalStart; ; i++ { // the fiscal quarter: months counted from the start month
		if mm == m {
			fq = i/3 + 1
			break
		}
		mm = mm%12 + 1
	}
	week := bd
	for week.Weekday() != c.WeekStart {
		week = week.AddDate(0, 0, -1)
	}
	value := map[aggregates.PeriodType]string{
		aggregates.Daily:         bd.Format("2006-01-02"),
		aggregates.Weekly:        week.Format("2006-01-02"),
		aggregates.Monthly:       bd.Format("2006-01"),
		aggregates.Quarterly:     fmt.Sprintf("%04d-Q%d", y, (int(m)-1)/3+1),
		aggregates.Yearly:        fmt.Sprintf("%04d", y),
		aggregates.FiscalQuarter: fmt.Sprintf("FY%04d-Q%d", fy, fq),
		aggregates.FiscalYear:    fmt.Sprintf("FY%04d", fy),
	}
	keys := make([]string, len(types))
	for i, t := range types {
		keys[i] = string(t) + "#" + value[t]
	}
	return bd.Format("2006-01-02"), strings.Join(keys, " "), nil
}

// CheckStamps reads every transaction of a branch and compares its stamp
// with OracleStamp under c and types: together with a reconcile that finds
// no difference (reports equal the fold of the stamps), the reports equal
// the fold of the transactions in periods computed independently. It
// returns one line per transaction that differs and how many it checked.
func CheckStamps(ctx context.Context, api dynamodb.QueryAPIClient, tableName, tenant, branch string, c OracleCalendar, types []aggregates.PeriodType) (checked int, bad []string, err error) {
	p := dynamodb.NewQueryPaginator(api, &dynamodb.QueryInput{
		TableName: aws.String(tableName), KeyConditionExpression: aws.String("PK = :pk"), ConsistentRead: aws.Bool(true),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": table.S(aggregates.TransactionPK(tenant, branch))},
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return checked, bad, err
		}
		for _, item := range out.Items {
			tx, err := table.ParseTransaction(item)
			if err != nil {
				continue // contributes nothing wherever it is stamped
			}
			checked++
			bd, periods, err := OracleStamp(tx.CreatedAt, c, types)
			if err != nil {
				return checked, bad, err
			}
			if got := tx.Stamp.EncodePeriods(); !tx.Stamped || got != periods || tx.Stamp.BusinessDate.String() != bd {
				bad = append(bad, fmt.Sprintf("%s created %s: stamp %s %q, want %s %q", tx.ID, tx.CreatedAt.Format(time.RFC3339), tx.Stamp.BusinessDate, got, bd, periods))
			}
		}
	}
	return checked, bad, nil
}

// BranchCalendars are the calendars a randomized test gives its branches
// (tenant/branch → calendar, with the period types its tenant keeps); a
// branch without one is written without a stamp.
type BranchCalendars map[string]struct {
	Calendar OracleCalendar
	Types    []aggregates.PeriodType
}

// TestCalendars are the calendars of Workload's branches in the tests that
// cover business calendars: São Paulo with a 04:00 day start, weeks from
// Sunday, fiscal years from July and every period type; London (23- and
// 25-hour days) with the default types; Tokyo for every branch of globex,
// with quarters; acme/east without a stamp (the legacy rule).
func TestCalendars() BranchCalendars {
	all := aggregates.PeriodTypes[:]
	quarters := []aggregates.PeriodType{aggregates.Daily, aggregates.Monthly, aggregates.Quarterly, aggregates.Yearly}
	type entry = struct {
		Calendar OracleCalendar
		Types    []aggregates.PeriodType
	}
	return BranchCalendars{
		"acme/north":   entry{OracleCalendar{"America/Sao_Paulo", 4 * 60, time.Sunday, time.July}, all},
		"acme/south":   entry{OracleCalendar{"Europe/London", 90, time.Monday, time.April}, aggregates.DefaultPeriodTypes},
		"globex/north": entry{OracleCalendar{"Asia/Tokyo", 0, time.Monday, time.January}, quarters},
		"globex/south": entry{OracleCalendar{"Asia/Tokyo", 5 * 60, time.Saturday, time.October}, quarters},
		"globex/east":  entry{OracleCalendar{"Asia/Tokyo", 23*60 + 59, time.Wednesday, time.December}, quarters},
	}
}

// Stamper returns a Workload.Stamp that stamps with these calendars, in
// the product's code (aggregates.Calendar): what the writer would store;
// a branch without a calendar gets no stamp.
func (bc BranchCalendars) Stamper() func(tenant, branch string, created time.Time) (aggregates.Stamp, error) {
	return func(tenant, branch string, created time.Time) (aggregates.Stamp, error) {
		e, ok := bc[tenant+"/"+branch]
		if !ok {
			return aggregates.Stamp{}, nil // no stamp
		}
		c := e.Calendar
		cal, err := aggregates.NewCalendar(c.Zone, aggregates.FormatDayStart(c.DayStart), aggregates.FormatWeekday(c.WeekStart), int(c.FiscalStart))
		if err != nil {
			return aggregates.Stamp{}, err
		}
		return cal.Stamp(created, e.Types)
	}
}

// Check runs CheckStamps on every branch with a calendar and returns the
// transactions checked and one line per stamp that differs.
func (bc BranchCalendars) Check(ctx context.Context, api dynamodb.QueryAPIClient, tableName string) (int, []string, error) {
	total := 0
	var bad []string
	for key, e := range bc {
		tenant, branch, _ := strings.Cut(key, "/")
		n, b, err := CheckStamps(ctx, api, tableName, tenant, branch, e.Calendar, e.Types)
		if err != nil {
			return total, bad, err
		}
		total += n
		bad = append(bad, b...)
	}
	return total, bad, nil
}
