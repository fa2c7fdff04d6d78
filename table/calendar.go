package table

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file is the business calendar's stored layout, shared by the writer
// (which keeps it on the branch and tenant items and stamps transactions
// with it) and ledgerctl (reconcile checks stamps against it, rebucket
// moves history into it). The branch item (aggregates.BranchKey) holds
//
//	timeZone               S, IANA name       absent: UTC
//	dayStartsAt            S, HH:MM           absent: 00:00
//	weekStartsOn           S, MONDAY…SUNDAY   absent: MONDAY
//	fiscalYearStartMonth   N, 1–12            absent: 1
//	calendarChangedAt      S, RFC 3339: the last change of the four (absent: never changed)
//
// and the tenant item (aggregates.TenantKey)
//
//	reportPeriods          L of S, canonical order   absent: DAILY, MONTHLY, YEARLY
//	reportPeriodsChangedAt S, RFC 3339
//
// A branch without the four attributes has the default calendar, a tenant
// without reportPeriods the default period types: tables from before
// business calendars read exactly as they were kept.

// Attribute names of the calendar on the branch item and of the period
// types on the tenant item.
const (
	AttrTimeZone               = "timeZone"
	AttrDayStartsAt            = "dayStartsAt"
	AttrWeekStartsOn           = "weekStartsOn"
	AttrFiscalYearStartMonth   = "fiscalYearStartMonth"
	AttrCalendarChangedAt      = "calendarChangedAt"
	AttrReportPeriods          = "reportPeriods"
	AttrReportPeriodsChangedAt = "reportPeriodsChangedAt"
)

// EncodeCalendar returns the attributes that store c on a branch item.
func EncodeCalendar(c aggregates.Calendar) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		AttrTimeZone:             S(c.TimeZone),
		AttrDayStartsAt:          S(aggregates.FormatDayStart(c.DayStartsAt)),
		AttrWeekStartsOn:         S(aggregates.FormatWeekday(c.WeekStartsOn)),
		AttrFiscalYearStartMonth: Int(int64(c.FiscalYearStartMonth)),
	}
}

// DecodeCalendar reads a branch item's calendar: the default calendar for
// each attribute that is absent, an error naming the attribute when one is
// there but not valid (damaged by hand: nothing is stamped with it).
func DecodeCalendar(item map[string]types.AttributeValue) (aggregates.Calendar, error) {
	def := aggregates.DefaultCalendar()
	zone, day, week := def.TimeZone, aggregates.FormatDayStart(def.DayStartsAt), aggregates.FormatWeekday(def.WeekStartsOn)
	month := int64(def.FiscalYearStartMonth)
	for name, dst := range map[string]*string{AttrTimeZone: &zone, AttrDayStartsAt: &day, AttrWeekStartsOn: &week} {
		if _, present := item[name]; !present {
			continue
		}
		v, ok := String(item, name)
		if !ok {
			return aggregates.Calendar{}, fmt.Errorf("branch %s: attribute %s is not a string", KeyOf(item), name)
		}
		*dst = v
	}
	if _, present := item[AttrFiscalYearStartMonth]; present {
		n, ok := Int64(item, AttrFiscalYearStartMonth)
		if !ok {
			return aggregates.Calendar{}, fmt.Errorf("branch %s: attribute %s is not a whole number", KeyOf(item), AttrFiscalYearStartMonth)
		}
		month = n
	}
	if month < 1 || month > 12 {
		month = 0 // NewCalendar names it
	}
	c, err := aggregates.NewCalendar(zone, day, week, int(month))
	if err != nil {
		return aggregates.Calendar{}, fmt.Errorf("branch %s: stored calendar: %w", KeyOf(item), err)
	}
	return c, nil
}

// EncodeReportPeriods returns the stored form of a tenant's period types.
func EncodeReportPeriods(ts []aggregates.PeriodType) *types.AttributeValueMemberL {
	l := &types.AttributeValueMemberL{Value: make([]types.AttributeValue, len(ts))}
	for i, t := range ts {
		l.Value[i] = S(string(t))
	}
	return l
}

// DecodeReportPeriods reads a tenant item's period types: the defaults when
// absent, an error when present but not a valid list.
func DecodeReportPeriods(item map[string]types.AttributeValue) ([]aggregates.PeriodType, error) {
	v, present := item[AttrReportPeriods]
	if !present {
		return aggregates.DefaultPeriodTypes, nil
	}
	l, ok := v.(*types.AttributeValueMemberL)
	if !ok {
		return nil, fmt.Errorf("tenant %s: attribute %s is not a list", KeyOf(item), AttrReportPeriods)
	}
	names := make([]string, len(l.Value))
	for i, e := range l.Value {
		s, ok := e.(*types.AttributeValueMemberS)
		if !ok {
			return nil, fmt.Errorf("tenant %s: attribute %s holds a value that is not a string", KeyOf(item), AttrReportPeriods)
		}
		names[i] = s.Value
	}
	ts, err := aggregates.ParseReportPeriods(names)
	if err != nil {
		return nil, fmt.Errorf("tenant %s: stored %s: %w", KeyOf(item), AttrReportPeriods, err)
	}
	return ts, nil
}

// BranchCalendar is what stamps a branch's transactions: its calendar, its
// tenant's period types, and when either last changed (the zero time when
// never).
type BranchCalendar struct {
	Calendar  aggregates.Calendar
	Periods   []aggregates.PeriodType
	ChangedAt time.Time
}

// Stamp is the stamp of a transaction created at t under bc.
func (bc BranchCalendar) Stamp(t time.Time) (aggregates.Stamp, error) {
	return bc.Calendar.Stamp(t, bc.Periods)
}

// ItemGetter is the one call LoadBranchCalendar makes.
type ItemGetter interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// ErrNoBranch is LoadBranchCalendar's error when the tenant or the branch
// does not exist.
var ErrNoBranch = errors.New("no such tenant or branch")

// LoadBranchCalendar reads, strongly consistent, the calendar of a branch
// and its tenant's period types.
func LoadBranchCalendar(ctx context.Context, api ItemGetter, tableName, tenant, branch string) (BranchCalendar, error) {
	get := func(k aggregates.Key) (map[string]types.AttributeValue, error) {
		out, err := api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(tableName), Key: Key(k), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", k, err)
		}
		if out.Item == nil {
			return nil, fmt.Errorf("%s: %w", k, ErrNoBranch)
		}
		return out.Item, nil
	}
	t, err := get(aggregates.TenantKey(tenant))
	if err != nil {
		return BranchCalendar{}, err
	}
	b, err := get(aggregates.BranchKey(tenant, branch))
	if err != nil {
		return BranchCalendar{}, err
	}
	return DecodeBranchCalendar(t, b)
}

// DecodeBranchCalendar is LoadBranchCalendar on items already read: the
// tenant's and the branch's.
func DecodeBranchCalendar(tenant, branch map[string]types.AttributeValue) (BranchCalendar, error) {
	var bc BranchCalendar
	var err error
	if bc.Calendar, err = DecodeCalendar(branch); err != nil {
		return BranchCalendar{}, err
	}
	if bc.Periods, err = DecodeReportPeriods(tenant); err != nil {
		return BranchCalendar{}, err
	}
	for _, at := range []string{changedAt(branch, AttrCalendarChangedAt), changedAt(tenant, AttrReportPeriodsChangedAt)} {
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil && t.After(bc.ChangedAt) {
			bc.ChangedAt = t
		}
	}
	return bc, nil
}

func changedAt(item map[string]types.AttributeValue, name string) string {
	s, _ := String(item, name)
	return s
}
