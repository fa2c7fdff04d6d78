package writer_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/oklog/ulid/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// Business calendars through the writer (issue 22): a branch's calendar and
// a tenant's reportPeriods in the directory, the stamp every create and
// change of a transaction gets, and listing by business date.

var defaultCalendar = writer.Calendar{TimeZone: "UTC", DayStartsAt: "00:00", WeekStartsOn: "MONDAY", FiscalYearStartMonth: 1}

// saoPaulo closes its business day at 04:00 local (UTC−3 since 2019: no
// daylight saving), weeks from Monday, fiscal years from July.
const saoPaulo = `{"timeZone":"America/Sao_Paulo","dayStartsAt":"04:00","weekStartsOn":"MONDAY","fiscalYearStartMonth":7}`

// branchWithCalendar creates branch id of the env's tenant with calendar
// (a JSON object, or "" for none) and requires 201.
func (e *env) branchWithCalendar(id, calendar string) writer.Branch {
	e.t.Helper()
	body := fmt.Sprintf(`{"id":%q,"name":"Branch %s","document":%q`, id, id, uniqueDocument())
	if calendar != "" {
		body += `,"calendar":` + calendar
	}
	r := e.asAdmin(req{method: "POST", path: "/v1/tenants/" + e.tenant + "/branches", body: body + "}", headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(e.t, http.StatusCreated, r.Status, "answer %s", r)
	return decodeAs[writer.Branch](e.t, r)
}

// getItem reads one item of the env's table, strongly consistent.
func (e *env) getItem(k aggregates.Key) map[string]ddbAV {
	e.t.Helper()
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.table, Key: table.Key(k), ConsistentRead: ptr(true)})
	require.NoError(e.t, err)
	return out.Item
}

// transactionItem reads the stored item of tx.
func (e *env) transactionItem(tx writer.Transaction) map[string]ddbAV {
	e.t.Helper()
	created, err := time.Parse(time.RFC3339Nano, tx.CreatedAt)
	require.NoError(e.t, err)
	item := e.getItem(aggregates.TransactionKey(tx.Tenant, tx.Branch, aggregates.DateOf(created), tx.ID))
	require.NotNil(e.t, item, "transaction %s stored", tx.ID)
	return item
}

func TestBranchCalendar_CreateValidatesEachFieldAndShowsTheDefaultsWhenNone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))

	// No calendar: the defaults, shown, and nothing stored (the branch item
	// is as before business calendars).
	b := e.branchWithCalendar("plain", "")
	assert.Equal(t, defaultCalendar, b.Calendar)
	assert.Empty(t, b.CalendarChangedAt)
	item := e.getItem(aggregates.BranchKey(e.tenant, "plain"))
	for _, attr := range []string{table.AttrTimeZone, table.AttrDayStartsAt, table.AttrWeekStartsOn, table.AttrFiscalYearStartMonth, table.AttrCalendarChangedAt} {
		assert.NotContains(t, item, attr)
	}

	// A calendar: stored with table.EncodeCalendar, shown by GET and list.
	b = e.branchWithCalendar("sp", saoPaulo)
	want := writer.Calendar{TimeZone: "America/Sao_Paulo", DayStartsAt: "04:00", WeekStartsOn: "MONDAY", FiscalYearStartMonth: 7}
	assert.Equal(t, want, b.Calendar)
	cal, err := table.DecodeCalendar(e.getItem(aggregates.BranchKey(e.tenant, "sp")))
	require.NoError(t, err)
	assert.Equal(t, "America/Sao_Paulo, days from 04:00, weeks from MONDAY, fiscal years from month 7", cal.String())
	r := e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches/sp"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, want, decodeAs[writer.Branch](t, r).Calendar)
	r = e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	for _, x := range decodeAs[writer.BranchPage](t, r).Items {
		if x.ID == "sp" {
			assert.Equal(t, want, x.Calendar)
		} else {
			assert.Equal(t, defaultCalendar, x.Calendar, x.ID)
		}
	}
	// Some fields: the rest are defaults.
	b = e.branchWithCalendar("tokyo", `{"timeZone":"Asia/Tokyo","weekStartsOn":"SUNDAY","dayStartsAt":null}`)
	assert.Equal(t, writer.Calendar{TimeZone: "Asia/Tokyo", DayStartsAt: "00:00", WeekStartsOn: "SUNDAY", FiscalYearStartMonth: 1}, b.Calendar)

	for name, c := range map[string]struct {
		calendar string
		status   int
		field    string
	}{
		"unknown zone":           {`{"timeZone":"Mars/Olympus_Mons"}`, 422, "calendar.timeZone"},
		"Local":                  {`{"timeZone":"Local"}`, 422, "calendar.timeZone"},
		"empty zone":             {`{"timeZone":""}`, 422, "calendar.timeZone"},
		"day start 24:00":        {`{"dayStartsAt":"24:00"}`, 422, "calendar.dayStartsAt"},
		"day start 4:00":         {`{"dayStartsAt":"4:00"}`, 422, "calendar.dayStartsAt"},
		"weekday lower case":     {`{"weekStartsOn":"monday"}`, 422, "calendar.weekStartsOn"},
		"month 13":               {`{"fiscalYearStartMonth":13}`, 422, "calendar.fiscalYearStartMonth"},
		"month 0":                {`{"fiscalYearStartMonth":0}`, 422, "calendar.fiscalYearStartMonth"},
		"month not whole":        {`{"fiscalYearStartMonth":7.5}`, 400, "calendar.fiscalYearStartMonth"},
		"month a string":         {`{"fiscalYearStartMonth":"7"}`, 400, "calendar.fiscalYearStartMonth"},
		"zone not a string":      {`{"timeZone":3}`, 400, "calendar.timeZone"},
		"calendar not object":    {`"America/Sao_Paulo"`, 400, "calendar"},
		"unknown calendar field": {`{"timeZone":"UTC","cutoff":"04:00"}`, 400, "calendar.cutoff"},
	} {
		r := e.asAdmin(req{method: "POST", path: "/v1/tenants/" + e.tenant + "/branches", headers: []string{"Idempotency-Key", newKey()},
			body: fmt.Sprintf(`{"id":"bad","name":"Bad","document":%q,"calendar":%s}`, uniqueDocument(), c.calendar)})
		require.Equal(t, c.status, r.Status, "%s: answer %s", name, r)
		p := r.problem(t)
		assert.Equal(t, c.field, p.Field, name)
		if c.status == http.StatusUnprocessableEntity {
			assert.Equal(t, writer.ProblemInvalidCalendar, p.Type, name)
		}
	}
	r = e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches/bad"})
	assert.Equal(t, http.StatusNotFound, r.Status, "no refused create wrote the branch")
}

func TestBranchCalendar_PatchMergesFieldsAndStampsItsChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	e.branchWithCalendar("sp", saoPaulo)
	path := "/v1/tenants/" + e.tenant + "/branches/sp"
	patch := func(version int, body string) reply {
		return e.send(req{method: "PATCH", path: path, body: body, headers: []string{"If-Match", etagOf(int64(version))}}) // the tenant's own token
	}

	// Some fields: the others keep their value.
	before := time.Now().UTC()
	r := patch(1, `{"calendar":{"dayStartsAt":"05:30"}}`)
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	b := decodeAs[writer.Branch](t, r)
	assert.Equal(t, writer.Calendar{TimeZone: "America/Sao_Paulo", DayStartsAt: "05:30", WeekStartsOn: "MONDAY", FiscalYearStartMonth: 7}, b.Calendar)
	changed, err := time.Parse(time.RFC3339Nano, b.CalendarChangedAt)
	require.NoError(t, err, "calendarChangedAt is RFC 3339")
	assert.False(t, changed.Before(before.Add(-time.Second)))
	assert.Equal(t, b.UpdatedAt, b.CalendarChangedAt)
	item := e.getItem(aggregates.BranchKey(e.tenant, "sp"))
	assert.Equal(t, "05:30", str(item, table.AttrDayStartsAt))
	assert.Equal(t, b.CalendarChangedAt, str(item, table.AttrCalendarChangedAt))

	// The whole object, with other fields in the same PATCH.
	r = patch(2, `{"name":"São Paulo","calendar":{"timeZone":"Europe/London","dayStartsAt":"00:00","weekStartsOn":"SUNDAY","fiscalYearStartMonth":4}}`)
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	b = decodeAs[writer.Branch](t, r)
	assert.Equal(t, "São Paulo", b.Name)
	assert.Equal(t, writer.Calendar{TimeZone: "Europe/London", DayStartsAt: "00:00", WeekStartsOn: "SUNDAY", FiscalYearStartMonth: 4}, b.Calendar)
	changedAt := b.CalendarChangedAt

	// The same calendar again, or a PATCH of other fields: not a change of it.
	r = patch(3, `{"calendar":{"timeZone":"Europe/London"}}`)
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, changedAt, decodeAs[writer.Branch](t, r).CalendarChangedAt)
	r = patch(4, `{"name":"SP"}`)
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, changedAt, decodeAs[writer.Branch](t, r).CalendarChangedAt)

	// Refusals change nothing.
	for name, c := range map[string]struct {
		body   string
		status int
		field  string
	}{
		"bad zone":           {`{"calendar":{"timeZone":"Europe/Londn"}}`, 422, "calendar.timeZone"},
		"bad start":          {`{"calendar":{"dayStartsAt":"12:60"}}`, 422, "calendar.dayStartsAt"},
		"bad month":          {`{"calendar":{"fiscalYearStartMonth":-1}}`, 422, "calendar.fiscalYearStartMonth"},
		"calendar removed":   {`{"calendar":null}`, 400, "calendar"},
		"field removed":      {`{"calendar":{"timeZone":null}}`, 400, "calendar.timeZone"},
		"unknown field":      {`{"calendar":{"zone":"UTC"}}`, 400, "calendar.zone"},
		"valid with invalid": {`{"name":"x","calendar":{"weekStartsOn":"FRI"}}`, 422, "calendar.weekStartsOn"},
	} {
		r := patch(5, c.body)
		require.Equal(t, c.status, r.Status, "%s: answer %s", name, r)
		assert.Equal(t, c.field, r.problem(t).Field, name)
	}
	r = e.send(req{method: "GET", path: path})
	require.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, `"5"`, r.Header.Get("ETag"), "no refused PATCH wrote")
	r = e.send(req{method: "PATCH", path: path, body: `{"calendar":{"timeZone":"UTC"}}`})
	assert.Equal(t, http.StatusPreconditionRequired, r.Status, "If-Match as for every branch field")
	r = patch(1, `{"calendar":{"timeZone":"UTC"}}`)
	assert.Equal(t, http.StatusPreconditionFailed, r.Status)
	// Another tenant's token may not.
	other := newEnv(t, e.table)
	r = other.send(req{method: "PATCH", path: path, body: `{"calendar":{"timeZone":"UTC"}}`, headers: []string{"If-Match", `"5"`}})
	assert.Equal(t, http.StatusForbidden, r.Status)
}

func TestTenantReportPeriods_CreatePatchValidatedInCanonicalOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	create := func(body string) reply {
		return e.asAdmin(req{method: "POST", path: "/v1/tenants", body: body, headers: []string{"Idempotency-Key", newKey()}})
	}
	id := uniqueTenant()
	r := create(fmt.Sprintf(`{"id":%q,"name":"T","reportPeriods":["FISCAL_YEAR","DAILY","WEEKLY"]}`, id))
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	tn := decodeAs[writer.Tenant](t, r)
	assert.Equal(t, []string{"DAILY", "WEEKLY", "FISCAL_YEAR"}, tn.ReportPeriods, "canonical order")
	ts, err := table.DecodeReportPeriods(e.getItem(aggregates.TenantKey(id)))
	require.NoError(t, err)
	assert.Equal(t, []aggregates.PeriodType{aggregates.Daily, aggregates.Weekly, aggregates.FiscalYear}, ts)

	// None: the defaults, shown, not stored.
	plain := uniqueTenant()
	r = create(fmt.Sprintf(`{"id":%q,"name":"T"}`, plain))
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	assert.Equal(t, []string{"DAILY", "MONTHLY", "YEARLY"}, decodeAs[writer.Tenant](t, r).ReportPeriods)
	assert.NotContains(t, e.getItem(aggregates.TenantKey(plain)), table.AttrReportPeriods)

	for name, c := range map[string]struct {
		periods string
		status  int
	}{
		"unknown":      {`["DAILY","HOURLY"]`, 422},
		"twice":        {`["DAILY","DAILY"]`, 422},
		"empty":        {`[]`, 422},
		"lower case":   {`["daily"]`, 422},
		"not an array": {`"DAILY"`, 400},
		"numbers":      {`[1]`, 400},
	} {
		r := create(fmt.Sprintf(`{"id":%q,"name":"T","reportPeriods":%s}`, uniqueTenant(), c.periods))
		require.Equal(t, c.status, r.Status, "%s: answer %s", name, r)
		assert.Equal(t, "reportPeriods", r.problem(t).Field, name)
	}

	// PATCH: admin only, as every tenant field; a change stamps its time.
	path := "/v1/tenants/" + id
	body := `{"reportPeriods":["YEARLY","QUARTERLY","MONTHLY","DAILY","FISCAL_QUARTER"]}`
	r = e.send(req{method: "PATCH", path: path, body: body, headers: []string{"If-Match", `"1"`, "Authorization", "Bearer " + e.tokenFor(id)}})
	require.Equal(t, http.StatusForbidden, r.Status, "answer %s", r)
	r = e.asAdmin(req{method: "PATCH", path: path, body: body, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	tn = decodeAs[writer.Tenant](t, r)
	assert.Equal(t, []string{"DAILY", "MONTHLY", "QUARTERLY", "YEARLY", "FISCAL_QUARTER"}, tn.ReportPeriods)
	assert.Equal(t, tn.UpdatedAt, tn.ReportPeriodsChangedAt)
	item := e.getItem(aggregates.TenantKey(id))
	assert.Equal(t, tn.ReportPeriodsChangedAt, str(item, table.AttrReportPeriodsChangedAt))
	r = e.asAdmin(req{method: "PATCH", path: path, body: `{"name":"U","reportPeriods":["DAILY","MONTHLY","QUARTERLY","YEARLY","FISCAL_QUARTER"]}`, headers: []string{"If-Match", `"2"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, tn.ReportPeriodsChangedAt, decodeAs[writer.Tenant](t, r).ReportPeriodsChangedAt, "the same types: no change of them")
	r = e.asAdmin(req{method: "PATCH", path: path, body: `{"reportPeriods":["WEEKLY","WEEKLY"]}`, headers: []string{"If-Match", `"3"`}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemInvalidCalendar, r.problem(t).Type)
	r = e.asAdmin(req{method: "PATCH", path: path, body: `{"reportPeriods":null}`, headers: []string{"If-Match", `"3"`}})
	require.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
}

// stampOf is the stamp stored with tx, read back from its item.
func (e *env) stampOf(tx writer.Transaction) (businessDate, periods string) {
	e.t.Helper()
	item := e.transactionItem(tx)
	return str(item, aggregates.AttrBusinessDate), str(item, aggregates.AttrPeriods)
}

func TestStamp_CreateAndPatchUseTheCalendarAndPeriodsInForce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	// The default calendar and period types: the UTC date's DAILY, MONTHLY
	// and YEARLY periods, exactly the legacy rule.
	for _, at := range []string{"2026-11-28T01:30:00Z", "2024-02-29T23:59:59.999-03:00", "2025-12-31T23:00:00-05:00"} {
		tx := e.create(`{"type":"INCOME","amount":"1","category":"c","createdAt":"` + at + `"}`)
		created, _ := time.Parse(time.RFC3339Nano, at)
		utc := aggregates.DateOf(created)
		bd, periods := e.stampOf(tx)
		assert.Equal(t, utc.String(), bd, at)
		assert.Equal(t, aggregates.LegacyStamp(utc).EncodePeriods(), periods, at)
		assert.Equal(t, utc.String(), tx.BusinessDate, at)
	}

	// São Paulo, days from 04:00, fiscal years from July; the tenant keeps
	// every period type.
	e.branchWithCalendar("sp", saoPaulo)
	r := e.asAdmin(req{method: "PATCH", path: "/v1/tenants/" + e.tenant, headers: []string{"If-Match", `"1"`},
		body: `{"reportPeriods":["DAILY","WEEKLY","MONTHLY","QUARTERLY","YEARLY","FISCAL_QUARTER","FISCAL_YEAR"]}`})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	e.branch = "sp"
	friday := "DAILY#2026-11-27 WEEKLY#2026-11-23 MONTHLY#2026-11 QUARTERLY#2026-Q4 YEARLY#2026 FISCAL_QUARTER#FY2027-Q2 FISCAL_YEAR#FY2027"
	for at, want := range map[string][2]string{
		"2026-11-28T01:30:00Z":      {"2026-11-27", friday},                                                                                                                         // Friday 22:30 local
		"2026-11-28T06:59:59.999Z":  {"2026-11-27", friday},                                                                                                                         // Saturday 03:59:59.999 local: before the cut-off
		"2026-11-28T07:00:00Z":      {"2026-11-28", "DAILY#2026-11-28 WEEKLY#2026-11-23 MONTHLY#2026-11 QUARTERLY#2026-Q4 YEARLY#2026 FISCAL_QUARTER#FY2027-Q2 FISCAL_YEAR#FY2027"}, // 04:00 local
		"2026-07-01T06:00:00-01:00": {"2026-07-01", "DAILY#2026-07-01 WEEKLY#2026-06-29 MONTHLY#2026-07 QUARTERLY#2026-Q3 YEARLY#2026 FISCAL_QUARTER#FY2027-Q1 FISCAL_YEAR#FY2027"}, // 04:00 local, first day of FY2027
		"2026-07-01T06:59:00Z":      {"2026-06-30", "DAILY#2026-06-30 WEEKLY#2026-06-29 MONTHLY#2026-06 QUARTERLY#2026-Q2 YEARLY#2026 FISCAL_QUARTER#FY2026-Q4 FISCAL_YEAR#FY2026"},
		"2027-01-01T06:00:00Z":      {"2026-12-31", "DAILY#2026-12-31 WEEKLY#2026-12-28 MONTHLY#2026-12 QUARTERLY#2026-Q4 YEARLY#2026 FISCAL_QUARTER#FY2027-Q2 FISCAL_YEAR#FY2027"}, // 03:00 local on New Year's Day
	} {
		tx := e.create(`{"type":"EXPENSE","amount":"2.5","category":"c","createdAt":"` + at + `"}`)
		bd, periods := e.stampOf(tx)
		assert.Equal(t, want[0], bd, at)
		assert.Equal(t, want[1], periods, at)
		assert.Equal(t, want[0], tx.BusinessDate, "%s: the answer shows the business date", at)
		r := e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID})
		require.Equal(t, http.StatusOK, r.Status)
		assert.Equal(t, want[0], r.transaction(t).BusinessDate, at)
	}

	// A change is stamped with the calendar and types in force when it is
	// written: here, after the branch moved to UTC and the tenant back to
	// the defaults, through this writer (its cache forgets both at once).
	tx := e.create(`{"type":"EXPENSE","amount":"2.5","category":"c","createdAt":"2026-11-28T01:30:00Z"}`)
	r = e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/sp", body: `{"calendar":{"timeZone":"UTC","dayStartsAt":"00:00"}}`,
		headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = e.asAdmin(req{method: "PATCH", path: "/v1/tenants/" + e.tenant, headers: []string{"If-Match", `"2"`}, body: `{"reportPeriods":["DAILY","MONTHLY","YEARLY"]}`})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	bd, periods := e.stampOf(tx)
	assert.Equal(t, "2026-11-27", bd, "a calendar change does not touch what is stored")
	assert.Equal(t, friday, periods)
	r = e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, body: `{"amount":"3"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "2026-11-28", r.transaction(t).BusinessDate)
	bd, periods = e.stampOf(tx)
	assert.Equal(t, "2026-11-28", bd)
	assert.Equal(t, "DAILY#2026-11-28 MONTHLY#2026-11 YEARLY#2026", periods)

	// A replayed create answers as it first did.
	key := newKey()
	first := e.send(req{method: "POST", path: e.base() + "/transactions", body: `{"type":"INCOME","amount":"1","category":"c","createdAt":"2026-11-28T01:30:00Z"}`, headers: []string{"Idempotency-Key", key}})
	require.Equal(t, http.StatusCreated, first.Status, "answer %s", first)
	again := e.send(req{method: "POST", path: e.base() + "/transactions", body: `{"type":"INCOME","amount":"1","category":"c","createdAt":"2026-11-28T01:30:00Z"}`, headers: []string{"Idempotency-Key", key}})
	assert.JSONEq(t, string(first.Body), string(again.Body))
}

func TestStamp_CreatedAtOutsideTheCalendarsYearsIs422(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	e.branchWithCalendar("fy7", `{"fiscalYearStartMonth":7}`)
	e.branchWithCalendar("kiritimati", `{"timeZone":"Pacific/Kiritimati"}`)
	for branch, at := range map[string]string{"fy7": "9999-08-01T00:00:00Z", "kiritimati": "9999-12-31T12:00:00Z"} {
		r := e.send(req{method: "POST", path: "/v1/tenants/" + e.tenant + "/branches/" + branch + "/transactions", headers: []string{"Idempotency-Key", newKey()},
			body: `{"type":"INCOME","amount":"1","category":"c","createdAt":"` + at + `"}`})
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s %s: answer %s", branch, at, r)
		p := r.problem(t)
		assert.Equal(t, writer.ProblemInvalidCalendar, p.Type)
		assert.Equal(t, "createdAt", p.Field)
		assert.Zero(t, e.countTransactions(e.tenant, branch))
	}
	// The default calendar places every createdAt the API accepts.
	e.create(`{"type":"INCOME","amount":"1","category":"c","createdAt":"9999-12-31T23:59:59Z"}`)
}

func TestStamp_DamagedStoredCalendarIs500UntilAPatchMendsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	e.branchWithCalendar("broken", saoPaulo)
	k := aggregates.BranchKey(e.tenant, "broken")
	_, err := e.ddb.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: &e.table, Key: table.Key(k),
		UpdateExpression: ptr("SET #z = :z"), ExpressionAttributeNames: map[string]string{"#z": table.AttrTimeZone},
		ExpressionAttributeValues: map[string]ddbAV{":z": s("America/Sao_Paolo")}})
	require.NoError(t, err)

	e.branch = "broken"
	post := func() reply {
		return e.send(req{method: "POST", path: e.base() + "/transactions", headers: []string{"Idempotency-Key", newKey()},
			body: `{"type":"INCOME","amount":"1","category":"c","createdAt":"2026-11-28T01:30:00Z"}`})
	}
	r := post()
	require.Equal(t, http.StatusInternalServerError, r.Status, "never a silently wrong stamp: answer %s", r)
	assert.Zero(t, e.countTransactions(e.tenant, "broken"))

	// GET shows what is stored; a PATCH that leaves the damaged field is
	// refused naming it; one that sets it mends the calendar.
	r = e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches/broken"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "America/Sao_Paolo", decodeAs[writer.Branch](t, r).Calendar.TimeZone)
	r = e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/broken", body: `{"calendar":{"dayStartsAt":"05:00"}}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "answer %s", r)
	assert.Equal(t, "calendar.timeZone", r.problem(t).Field)
	r = e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/broken", body: `{"calendar":{"timeZone":"America/Sao_Paulo"}}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = post()
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	assert.Equal(t, "2026-11-27", r.transaction(t).BusinessDate)
}

// putLegacy writes a transaction item without a stamp, as a path other
// than the writer (or a writer from before business calendars) would.
func (e *env) putLegacy(at string) writer.Transaction {
	e.t.Helper()
	created, err := time.Parse(time.RFC3339Nano, at)
	require.NoError(e.t, err)
	id := ulid.MustNew(ulid.Timestamp(created), rand.Reader).String()
	tx := table.Transaction{ID: id, Tenant: e.tenant, Branch: e.branch, Type: "INCOME", Amount: "1", Category: "legacy",
		CreatedAt: created.UTC().Format(time.RFC3339Nano), UpdatedAt: created.UTC().Format(time.RFC3339Nano), Version: 1}
	item, err := table.EncodeTransaction(aggregates.TransactionKey(e.tenant, e.branch, aggregates.DateOf(created), id), tx)
	require.NoError(e.t, err)
	_, err = e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: item})
	require.NoError(e.t, err)
	return writer.Transaction(tx)
}

func TestListByBusinessDate_AroundTheCutOffExactlyTheDaysTransactionsOverPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	e.branchWithCalendar("sp", saoPaulo)
	e.branch = "sp"
	// São Paulo is UTC−3 and its day starts at 04:00 local: the business
	// date of an instant is its UTC date after moving it back 7 hours.
	businessDate := func(at time.Time) string { return aggregates.DateOf(at.Add(-7 * time.Hour)).String() }
	created := map[string]string{} // id → business date
	start := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	for day := range 6 {
		for _, offset := range []time.Duration{6*time.Hour + 59*time.Minute, 7 * time.Hour, 12 * time.Hour, 23*time.Hour + 30*time.Minute, 30*time.Hour + 59*time.Minute} {
			at := start.Add(time.Duration(day)*24*time.Hour + offset)
			tx := e.create(`{"type":"INCOME","amount":"1","category":"c","createdAt":"` + at.Format(time.RFC3339Nano) + `"}`)
			require.Equal(t, businessDate(at), tx.BusinessDate, at)
			created[tx.ID] = tx.BusinessDate
		}
	}
	// Unstamped items count at their UTC date, and list there.
	for _, at := range []string{"2026-11-26T02:00:00Z", "2026-11-27T23:00:00Z", "2026-11-28T05:00:00Z", "2026-11-29T12:00:00Z"} {
		tx := e.putLegacy(at)
		created[tx.ID] = at[:10]
	}
	list := func(query string, limit int) ([]writer.Transaction, int) {
		var all []writer.Transaction
		pages, cursor := 0, ""
		for {
			p := e.base() + "/transactions?" + query + fmt.Sprintf("&limit=%d", limit)
			if cursor != "" {
				p += "&cursor=" + url.QueryEscape(cursor)
			}
			r := e.send(req{method: "GET", path: p})
			require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
			page := decodeAs[writer.ListPage](t, r)
			all = append(all, page.Items...)
			pages++
			if page.NextCursor == "" {
				return all, pages
			}
			cursor = page.NextCursor
		}
	}
	ids := func(txs []writer.Transaction) []string {
		out := make([]string, 0, len(txs))
		for _, tx := range txs {
			out = append(out, tx.ID)
		}
		return out
	}
	want := func(keep func(id, bd string) bool) []string {
		var out []string
		for id, bd := range created {
			if keep(id, bd) {
				out = append(out, id)
			}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(out))) // newest first: ids sort by createdAt
		return out
	}
	all, _ := list("", 50)
	require.Len(t, all, len(created))
	for _, tx := range all {
		assert.Equal(t, created[tx.ID], tx.BusinessDate, "%s %s", tx.ID, tx.CreatedAt)
	}

	for _, c := range []struct{ query, from, to string }{
		{"businessDateFrom=2026-11-27&businessDateTo=2026-11-27", "2026-11-27", "2026-11-27"},
		{"businessDateFrom=2026-11-26&businessDateTo=2026-11-28", "2026-11-26", "2026-11-28"},
		{"businessDateFrom=2026-11-28", "2026-11-28", "9999-12-31"},
		{"businessDateTo=2026-11-25", "0000-01-01", "2026-11-25"},
	} {
		for _, limit := range []int{1, 2, 7, 200} {
			got, pages := list(c.query, limit)
			expected := want(func(_, bd string) bool { return bd >= c.from && bd <= c.to })
			require.NotEmpty(t, expected, c.query)
			assert.Equal(t, expected, ids(got), "%s, limit %d", c.query, limit)
			if limit == 1 {
				assert.GreaterOrEqual(t, pages, len(expected), c.query)
			}
		}
	}
	// With from and to (UTC dates of createdAt): both apply.
	got, _ := list("businessDateFrom=2026-11-27&businessDateTo=2026-11-27&from=2026-11-28&to=2026-11-28", 3)
	expected := want(func(id, bd string) bool {
		u, _ := ulid.ParseStrict(id)
		return bd == "2026-11-27" && aggregates.DateOf(ulid.Time(u.Time())).String() == "2026-11-28"
	})
	require.NotEmpty(t, expected)
	assert.Equal(t, expected, ids(got))
	got, _ = list("businessDateFrom=2026-11-27&businessDateTo=2026-11-27&to=2026-11-20", 3)
	assert.Empty(t, got, "no UTC date holds both")
	// Other filters still apply.
	got, _ = list("businessDateFrom=2026-11-26&businessDateTo=2026-11-29&category=legacy", 2)
	assert.Len(t, got, 4)
	for _, tx := range got {
		assert.Equal(t, "legacy", tx.Category)
	}

	// The cursor is bound to the business-date filters.
	r := e.send(req{method: "GET", path: e.base() + "/transactions?businessDateFrom=2026-11-27&limit=1"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	cursor := decodeAs[writer.ListPage](t, r).NextCursor
	require.NotEmpty(t, cursor)
	for _, q := range []string{"businessDateFrom=2026-11-26", "businessDateTo=2026-11-27", ""} {
		r := e.send(req{method: "GET", path: e.base() + "/transactions?" + q + "&cursor=" + url.QueryEscape(cursor)})
		require.Equal(t, http.StatusBadRequest, r.Status, "%q: answer %s", q, r)
		assert.Equal(t, writer.ProblemInvalidCursor, r.problem(t).Type)
	}
	for q, field := range map[string]string{
		"businessDateFrom=2026-11-28&businessDateTo=2026-11-27":   "businessDateTo",
		"businessDateFrom=2026-02-30":                             "businessDateFrom",
		"businessDateTo=27/11/2026":                               "businessDateTo",
		"businessDateFrom=2026-11-27&businessDateFrom=2026-11-28": "businessDateFrom",
	} {
		r := e.send(req{method: "GET", path: e.base() + "/transactions?" + q})
		require.Equal(t, http.StatusBadRequest, r.Status, "%q: answer %s", q, r)
		assert.Equal(t, field, r.problem(t).Field, q)
	}
	assert.True(t, slices.IsSortedFunc(all, func(a, b writer.Transaction) int { return strings.Compare(b.ID, a.ID) }), "newest first")
}

func TestReportRange_EveryPeriodTypeBoundedByItsOwnStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	for _, c := range []struct {
		period, from, atMost, past string
	}{
		{"DAILY", "2024-01-01", "2024-12-31", "2025-01-01"},       // 366 days
		{"WEEKLY", "2016-01-04", "2026-02-23", "2026-03-02"},      // 530 weeks of 7 days from from
		{"MONTHLY", "2016-01", "2025-12", "2026-01"},              // 120 months
		{"QUARTERLY", "2016-Q1", "2025-Q4", "2026-Q1"},            // 40 quarters
		{"YEARLY", "1927", "2026", "2027"},                        // 100 years
		{"FISCAL_QUARTER", "FY2017-Q3", "FY2027-Q2", "FY2027-Q3"}, // 40 fiscal quarters
		{"FISCAL_YEAR", "FY1927", "FY2026", "FY2027"},             // 100 fiscal years
	} {
		r := e.send(req{method: "GET", path: e.base() + "/reports?period=" + c.period + "&from=" + c.from + "&to=" + c.atMost})
		require.Equal(t, http.StatusOK, r.Status, "%s: answer %s", c.period, r)
		assert.JSONEq(t, `{"items":[]}`, string(r.Body))
		r = e.send(req{method: "GET", path: e.base() + "/reports?period=" + c.period + "&from=" + c.from + "&to=" + c.past})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: answer %s", c.period, r)
		assert.Equal(t, "to", r.problem(t).Field, c.period)
		r = e.send(req{method: "GET", path: e.base() + "/reports/" + c.period + "/" + c.from})
		require.Equal(t, http.StatusNotFound, r.Status, "%s: answer %s", c.period, r)
	}
}
