package writer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// Business calendars in the API (issue 22): a branch's calendar, a
// tenant's reportPeriods, and how the writer stamps transactions with
// them. The stored layout is table/calendar.go's; the rule that turns an
// instant into a business date and periods is aggregates/calendar.go's.
//
// Validation: a member of the wrong JSON type (a calendar that is not an
// object, a timeZone that is not a string, a month that is not a whole
// number, reportPeriods that is not an array of strings) is 400
// invalid-field, as for every other field; a value of the right type that
// is not acceptable (an unknown zone, 25:00, month 13, an unknown or
// repeated period type) is 422 invalid-calendar. Both name the field:
// "calendar.timeZone", "reportPeriods".

// Calendar is a branch's business calendar as the API shows it.
type Calendar struct {
	TimeZone             string `json:"timeZone"`
	DayStartsAt          string `json:"dayStartsAt"`
	WeekStartsOn         string `json:"weekStartsOn"`
	FiscalYearStartMonth int    `json:"fiscalYearStartMonth"`
}

// calendarView is c as the API shows it.
func calendarView(c aggregates.Calendar) Calendar {
	return Calendar{TimeZone: c.TimeZone, DayStartsAt: aggregates.FormatDayStart(c.DayStartsAt),
		WeekStartsOn: aggregates.FormatWeekday(c.WeekStartsOn), FiscalYearStartMonth: int(c.FiscalYearStartMonth)}
}

// calendar validates c (aggregates.NewCalendar): the error is a
// *aggregates.CalendarError naming the field.
func (c Calendar) calendar() (aggregates.Calendar, error) {
	return aggregates.NewCalendar(c.TimeZone, c.DayStartsAt, c.WeekStartsOn, c.FiscalYearStartMonth)
}

// storedCalendar reads a branch item's calendar as stored, each attribute
// absent read as its default. A damaged attribute (one DecodeCalendar
// refuses) is shown as it is, so that GET shows what PATCH must mend; a
// fiscalYearStartMonth that is not a number shows as 0.
func storedCalendar(item map[string]ddbtypes.AttributeValue) Calendar {
	c := calendarView(aggregates.DefaultCalendar())
	for name, dst := range map[string]*string{table.AttrTimeZone: &c.TimeZone, table.AttrDayStartsAt: &c.DayStartsAt, table.AttrWeekStartsOn: &c.WeekStartsOn} {
		if _, present := item[name]; present {
			*dst, _ = stringAttr(item, name)
		}
	}
	if _, present := item[table.AttrFiscalYearStartMonth]; present {
		n, _ := intAttr(item, table.AttrFiscalYearStartMonth)
		c.FiscalYearStartMonth = int(max(min(n, 1<<20), -1<<20))
	}
	return c
}

// calendarProblem is the 422 of a calendar value that is not acceptable,
// naming its field under prefix ("calendar.").
func calendarProblem(field, detail string) *Problem {
	p := problem(http.StatusUnprocessableEntity, ProblemInvalidCalendar, detail)
	p.Field = field
	return p
}

// calendarFields are the members of a calendar object.
var calendarFields = map[string]bool{"timeZone": true, "dayStartsAt": true, "weekStartsOn": true, "fiscalYearStartMonth": true}

// parseCalendar reads the calendar member of a branch create or PATCH body
// onto base (the defaults for a create, the stored calendar for a PATCH):
// members present replace base's, members absent keep it (merge-patch
// semantics). As everywhere in the API, null means absent in a create (the
// default) and is refused in a PATCH (a calendar's fields cannot be
// removed; send the default value). It returns the calendar validated, or
// the problem naming the field.
func parseCalendar(raw json.RawMessage, base Calendar, patch bool) (aggregates.Calendar, *Problem) {
	def := calendarView(aggregates.DefaultCalendar())
	c := base
	if isNull(raw) && patch {
		return aggregates.Calendar{}, fieldProblem("calendar", "cannot be removed (null)")
	}
	if isNull(raw) {
		c = def
	} else {
		if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
			return aggregates.Calendar{}, fieldProblem("calendar", "must be an object: {\"timeZone\", \"dayStartsAt\", \"weekStartsOn\", \"fiscalYearStartMonth\"}, each optional")
		}
		m, p := decodeObject(raw, calendarFields)
		if p != nil {
			if p.Field != "" {
				p.Field = "calendar." + p.Field
			} else {
				p.Field = "calendar"
			}
			return aggregates.Calendar{}, p
		}
		for _, f := range []struct {
			name     string
			dst, def *string
		}{{"timeZone", &c.TimeZone, &def.TimeZone}, {"dayStartsAt", &c.DayStartsAt, &def.DayStartsAt}, {"weekStartsOn", &c.WeekStartsOn, &def.WeekStartsOn}, {"fiscalYearStartMonth", nil, nil}} {
			raw, ok := m[f.name]
			switch {
			case !ok:
			case isNull(raw) && patch:
				return aggregates.Calendar{}, fieldProblem("calendar."+f.name, "cannot be removed (null); send the default value to go back to it")
			case f.dst == nil:
			case isNull(raw):
				*f.dst = *f.def
			default:
				v, p := parseString("calendar."+f.name, raw)
				if p != nil {
					return aggregates.Calendar{}, p
				}
				*f.dst = v
			}
		}
		if raw, ok := m["fiscalYearStartMonth"]; ok {
			if isNull(raw) {
				c.FiscalYearStartMonth = def.FiscalYearStartMonth
			} else {
				n, err := strconv.Atoi(string(raw))
				if err != nil {
					return aggregates.Calendar{}, fieldProblem("calendar.fiscalYearStartMonth", "must be a whole number, 1 (January) to 12 (December)")
				}
				c.FiscalYearStartMonth = n
			}
		}
	}
	cal, err := c.calendar()
	var ce *aggregates.CalendarError
	if errors.As(err, &ce) {
		return aggregates.Calendar{}, calendarProblem("calendar."+ce.Field, ce.Detail)
	}
	if err != nil {
		return aggregates.Calendar{}, calendarProblem("calendar", err.Error())
	}
	return cal, nil
}

// parseReportPeriods reads the reportPeriods member of a tenant create or
// PATCH body: an array of period types, validated and put in canonical
// order (aggregates.ParseReportPeriods); null is the default types.
func parseReportPeriods(raw json.RawMessage) ([]aggregates.PeriodType, *Problem) {
	if isNull(raw) {
		return aggregates.DefaultPeriodTypes, nil
	}
	var names []string
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '[' || json.Unmarshal(raw, &names) != nil {
		return nil, fieldProblem("reportPeriods", "must be an array of period types, e.g. [\"DAILY\", \"MONTHLY\", \"YEARLY\"]")
	}
	ts, err := aggregates.ParseReportPeriods(names)
	if err != nil {
		return nil, calendarProblem("reportPeriods", err.Error())
	}
	return ts, nil
}

// periodNames is ts as the API shows them.
func periodNames(ts []aggregates.PeriodType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}

// storedReportPeriods reads a tenant item's reportPeriods as stored: the
// defaults when absent; the strings of a list that does not validate as
// they are (so that GET shows what PATCH must mend).
func storedReportPeriods(item map[string]ddbtypes.AttributeValue) []string {
	ts, err := table.DecodeReportPeriods(item)
	if err == nil {
		return periodNames(ts)
	}
	out := []string{}
	if l, ok := item[table.AttrReportPeriods].(*ddbtypes.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			if s, ok := v.(*ddbtypes.AttributeValueMemberS); ok {
				out = append(out, s.Value)
			}
		}
	}
	return out
}

// errCalendarDamaged marks the error of a branch whose stored calendar, or
// whose tenant's stored reportPeriods, does not decode: its transactions
// are not written (500, logged) rather than stamped with periods nobody
// chose, until a PATCH of the branch's calendar (or the tenant's
// reportPeriods) mends it.
var errCalendarDamaged = errors.New("stored calendar damaged: transactions of this branch are refused until a PATCH of the branch's calendar or the tenant's reportPeriods mends it")

// stamp stamps t, created at t.CreatedAt, with bc: its business date and
// periods. A createdAt whose periods fall outside years 0000–9999 under bc
// is the 422 naming createdAt.
func (t *Transaction) stamp(bc table.BranchCalendar) (*Problem, error) {
	t.BusinessDate, t.Periods = "", ""
	created, err := time.Parse(time.RFC3339Nano, t.CreatedAt)
	if err != nil {
		return nil, nil // not a transaction the writer wrote: transactionItem names the field
	}
	s, err := bc.Stamp(created)
	if errors.Is(err, aggregates.ErrPeriodOutOfRange) {
		return calendarProblem("createdAt", fmt.Sprintf("%s in the branch's calendar (%s): %v", t.CreatedAt, bc.Calendar, err)), nil
	}
	if err != nil {
		return nil, fmt.Errorf("stamp transaction %s: %w", t.ID, err)
	}
	tt := table.Transaction(*t)
	tt.SetStamp(s)
	*t = Transaction(tt)
	return nil, nil
}

// legacyBusinessDate is the business date the API shows for a transaction
// stored without a stamp: its sort key's (UTC) date, where it counts.
func legacyBusinessDate(item map[string]ddbtypes.AttributeValue) string {
	sk, _ := stringAttr(item, attrSK)
	date, _, _ := strings.Cut(sk, "#")
	if _, err := aggregates.ParseDate(date); err != nil {
		return ""
	}
	return date
}
