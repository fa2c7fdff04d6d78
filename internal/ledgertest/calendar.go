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
	loc, err := time.LoadLocation(c.Zone)
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
