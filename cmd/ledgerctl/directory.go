package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/cmd/ledgerctl/internal/writerapi"
	"github.com/ledger-dev/ledger/writer"
)

// The directory commands: 'ledgerctl tenant|branch|account create|get|list'.
// They are clients of the writer's API (docs/api.md), not of the table: the
// integrity rules (unique documents and email addresses, a tenant for every
// branch, the primary email) live in the writer's conditional writes, and
// an operator's request goes through them like any other.

const directoryUsage = `usage:
  ledgerctl tenant  create --id ID --name NAME [--status active|suspended] [--report-periods DAILY,WEEKLY,…] [--exist-ok]
  ledgerctl tenant  get    --id ID
  ledgerctl tenant  update --id ID [--name NAME] [--status …] [--report-periods DAILY,WEEKLY,…] [--if-match VERSION]
  ledgerctl tenant  list
  ledgerctl branch  create --tenant T --id ID --name NAME --document DOC [--status …] [--currency CODE]
                           [--time-zone ZONE] [--day-starts-at HH:MM] [--week-starts-on DAY] [--fiscal-year-start-month M] [--exist-ok]
  ledgerctl branch  get    --tenant T --id ID
  ledgerctl branch  update --tenant T --id ID [--name NAME] [--status …] [--currency CODE] [--time-zone ZONE]
                           [--day-starts-at HH:MM] [--week-starts-on DAY] [--fiscal-year-start-month M] [--if-match VERSION]
  ledgerctl branch  list   --tenant T
  ledgerctl account create --tenant T --first-name F --last-name L --email ADDR [--email ADDR …] [--role R]
  ledgerctl account get    --tenant T --id ID
  ledgerctl account list   --tenant T

Every command takes --url (env LEDGER_WRITER_URL, default http://localhost:8080)
and --json. The bearer token is LEDGER_TOKEN, or an admin token minted from
LEDGER_JWT_SECRET (and LEDGER_JWT_ISSUER, LEDGER_JWT_AUDIENCE) for 5 minutes.
Exit status: 0 done, 1 refused (exists, taken, not found, changed since read), 2 error.
`

// defaultWriterURL is where the directory commands find the writer.
const defaultWriterURL = "http://localhost:8080"

// directoryCmd runs 'ledgerctl KIND VERB' for KIND tenant, branch or account.
func (e *environment) directoryCmd(ctx context.Context, kind string, args []string) int {
	if len(args) > 0 && args[0] == "update" && kind != "account" {
		return e.directoryUpdate(ctx, kind, args[1:])
	}
	if len(args) == 0 || (args[0] != "create" && args[0] != "get" && args[0] != "list") {
		fmt.Fprint(e.stderr, directoryUsage)
		return exitError
	}
	verb := args[0]
	fs := e.flags(kind+" "+verb, "Creates, shows or lists tenants, branches or accounts through the writer's API.\n\n"+directoryUsage)
	base := fs.String("url", orDefault(e.getenv("LEDGER_WRITER_URL"), defaultWriterURL), "the writer's base `URL` (env LEDGER_WRITER_URL)")
	asJSON := fs.Bool("json", false, "print JSON as the API answers it")
	tenant, id, name, status := new(string), new(string), new(string), new(string)
	var document, firstName, lastName, role, currency *string
	var reportPeriods *string
	var cal calendarFlags
	var emails stringList
	var existOK *bool
	if kind != "tenant" {
		tenant = fs.String("tenant", "", "the `TENANT` id")
	}
	if verb != "list" && !(kind == "account" && verb == "create") {
		id = fs.String("id", "", "the "+kind+"'s `ID`")
	}
	if verb == "create" {
		switch kind {
		case "tenant", "branch":
			name = fs.String("name", "", "the display `NAME`")
			status = fs.String("status", "", "active (default) or suspended")
			existOK = fs.Bool("exist-ok", false, "an existing "+kind+" with the same attributes is success (exit 0), for scripts run again")
			if kind == "branch" {
				document = fs.String("document", "", "the `DOCUMENT` number, unique across all tenants (separators . - / and spaces are ignored)")
				cal = addCalendarFlags(fs, " (default UTC)", " (default 00:00)", " (default MONDAY)", " (default 1)")
				currency = addCurrencyFlag(fs, " (default none)")
			} else {
				reportPeriods = addReportPeriodsFlag(fs, " (default DAILY,MONTHLY,YEARLY)")
			}
		case "account":
			firstName = fs.String("first-name", "", "first `NAME`")
			lastName = fs.String("last-name", "", "last `NAME`")
			role = fs.String("role", "", "owner, admin, member (default) or viewer")
			fs.Var(&emails, "email", "an email `ADDRESS`; repeat for more: the first is the primary and is recorded as verified")
		}
	}
	if err := fs.Parse(args[1:]); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return e.fail(fmt.Errorf("%s %s: unexpected arguments: %s", kind, verb, strings.Join(fs.Args(), " ")))
	}
	need := map[string]string{}
	if kind != "tenant" {
		need["--tenant"] = *tenant
	}
	if verb == "get" || (verb == "create" && kind != "account") {
		need["--id"] = *id
	}
	if verb == "create" {
		switch kind {
		case "tenant":
			need["--name"] = *name
		case "branch":
			need["--name"], need["--document"] = *name, *document
		case "account":
			need["--first-name"], need["--last-name"] = *firstName, *lastName
			if len(emails) == 0 {
				need["--email"] = ""
			}
		}
	}
	for f, v := range need {
		if v == "" {
			return e.fail(fmt.Errorf("%s %s: %s is required", kind, verb, f))
		}
	}
	c, err := e.directoryClient(*base)
	if err != nil {
		return e.fail(err)
	}
	out := directoryOutput{w: e.stdout, json: *asJSON}

	switch verb {
	case "list":
		return e.directoryList(ctx, c, kind, *tenant, out)
	case "get":
		got, err := c.get(ctx, kind, *tenant, *id)
		return e.directoryAnswer(kind, got, err, out)
	}
	// asked holds the attributes an existing tenant or branch must have for
	// --exist-ok.
	asked := map[string]any{"name": *name}
	var create func(ctx context.Context, key string) (writerAnswer, error)
	switch kind {
	case "tenant":
		body := writerapi.TenantCreate{Id: *id, Name: *name, Status: optional[writerapi.Status](*status)}
		if *reportPeriods != "" {
			names, err := parseReportPeriodsFlag(*reportPeriods)
			if err != nil {
				return e.fail(fmt.Errorf("tenant create: %w", err))
			}
			want := make([]any, len(names))
			for i, n := range names {
				want[i] = n
			}
			body.ReportPeriods, asked["reportPeriods"] = &names, want
		}
		create = func(ctx context.Context, key string) (writerAnswer, error) {
			return c.api.CreateTenantWithResponse(ctx, &writerapi.CreateTenantParams{IdempotencyKey: key}, body)
		}
	case "branch":
		asked["document"] = *document
		body := writerapi.BranchCreate{Id: *id, Name: *name, Document: *document, Status: optional[writerapi.Status](*status)}
		if c, want := cal.calendar(); c != nil {
			body.Calendar, asked["calendar"] = c, want
		}
		if *currency != "" {
			body.Currency, asked["currency"] = currency, *currency
		}
		create = func(ctx context.Context, key string) (writerAnswer, error) {
			return c.api.CreateBranchWithResponse(ctx, *tenant, &writerapi.CreateBranchParams{IdempotencyKey: key}, body)
		}
	case "account":
		body := writerapi.AccountCreate{FirstName: *firstName, LastName: *lastName, Role: optional[writerapi.Role](*role)}
		for i, a := range emails {
			em := writerapi.EmailCreate{Address: a}
			if i == 0 {
				em.Primary, em.Verified = ptrTo(true), ptrTo(true)
			}
			body.Emails = append(body.Emails, em)
		}
		create = func(ctx context.Context, key string) (writerAnswer, error) {
			return c.api.CreateAccountWithResponse(ctx, *tenant, &writerapi.CreateAccountParams{IdempotencyKey: key}, body)
		}
	}
	if *status != "" {
		asked["status"] = *status
	}
	got, err := c.send(ctx, true, create)
	var pe *directoryProblem
	if errors.As(err, &pe) && pe.Type == writer.ProblemAlreadyExists && existOK != nil && *existOK {
		got, err = c.get(ctx, kind, *tenant, *id)
		if err == nil {
			if same, what := sameAttributes(kind, got, asked); !same {
				fmt.Fprintf(e.stderr, "ledgerctl: %s %s exists with another %s\n", kind, *id, what)
				out.print(kind, got)
				return exitDiff
			}
		}
	}
	return e.directoryAnswer(kind, got, err, out)
}

// optional is v as an optional request member: nil when v is empty.
func optional[T ~string](v string) *T {
	if v == "" {
		return nil
	}
	t := T(v)
	return &t
}

func ptrTo[T any](v T) *T { return &v }

// calendarFlags are the flags of a branch's calendar (create, update).
type calendarFlags struct {
	timeZone, dayStartsAt, weekStartsOn *string
	fiscalStart                         *int
}

// addCalendarFlags defines the calendar flags on fs; the notes end their
// help texts (the defaults, on create).
func addCalendarFlags(fs *flag.FlagSet, zoneNote, dayNote, weekNote, monthNote string) calendarFlags {
	return calendarFlags{
		timeZone:     fs.String("time-zone", "", "the business calendar's IANA time `ZONE`, e.g. America/Sao_Paulo"+zoneNote),
		dayStartsAt:  fs.String("day-starts-at", "", "the local time `HH:MM` a business day starts"+dayNote),
		weekStartsOn: fs.String("week-starts-on", "", "the `DAY` weeks start, MONDAY … SUNDAY"+weekNote),
		fiscalStart:  fs.Int("fiscal-year-start-month", 0, "the `MONTH` fiscal years start, 1–12"+monthNote),
	}
}

// calendar is branchCalendar of the flags given.
func (f calendarFlags) calendar() (*writerapi.CalendarCreate, map[string]any) {
	return branchCalendar(*f.timeZone, *f.dayStartsAt, *f.weekStartsOn, *f.fiscalStart)
}

// addCurrencyFlag defines --currency on fs; note ends its usage.
func addCurrencyFlag(fs *flag.FlagSet, note string) *string {
	return fs.String("currency", "", "the branch's ISO 4217 currency `CODE`, upper case (e.g. BRL); settable only while it has no transactions"+note)
}

// addReportPeriodsFlag defines --report-periods on fs.
func addReportPeriodsFlag(fs *flag.FlagSet, note string) *string {
	return fs.String("report-periods", "", "the period `TYPES` its reports are kept in, comma-separated: DAILY, WEEKLY, MONTHLY, QUARTERLY, YEARLY, FISCAL_QUARTER, FISCAL_YEAR"+note)
}

// parseReportPeriodsFlag reads --report-periods (any case, spaces ignored)
// as the API takes them: canonical order.
func parseReportPeriodsFlag(v string) ([]string, error) {
	ts, err := aggregates.ParseReportPeriods(strings.Split(strings.ToUpper(strings.ReplaceAll(v, " ", "")), ","))
	if err != nil {
		return nil, fmt.Errorf("--report-periods: %w", err)
	}
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = string(t)
	}
	return names, nil
}

// branchCalendar is the calendar of a branch create from its flags (the
// writer validates it and answers 422 naming the member), and the members
// given as the answer has them, for --exist-ok; nil when no flag is given.
func branchCalendar(timeZone, dayStartsAt, weekStartsOn string, fiscalStart int) (*writerapi.CalendarCreate, map[string]any) {
	cal, want := &writerapi.CalendarCreate{}, map[string]any{}
	if timeZone != "" {
		cal.TimeZone, want["timeZone"] = &timeZone, timeZone
	}
	if dayStartsAt != "" {
		cal.DayStartsAt, want["dayStartsAt"] = &dayStartsAt, dayStartsAt
	}
	if weekStartsOn != "" {
		week := strings.ToUpper(weekStartsOn)
		cal.WeekStartsOn, want["weekStartsOn"] = &week, week
	}
	if fiscalStart != 0 {
		cal.FiscalYearStartMonth, want["fiscalYearStartMonth"] = &fiscalStart, float64(fiscalStart)
	}
	if len(want) == 0 {
		return nil, nil
	}
	return cal, want
}

// sameAttributes reports whether the existing item got has the attributes
// the create asked for (name, status, currency, report periods and calendar members
// when given, document), naming the first that differs.
func sameAttributes(kind string, got []byte, asked map[string]any) (bool, string) {
	var have map[string]any
	if json.Unmarshal(got, &have) != nil {
		return false, "form"
	}
	for _, f := range []string{"name", "status", "document", "currency", "reportPeriods", "calendar"} {
		want, ok := asked[f]
		if !ok {
			continue
		}
		switch f {
		case "reportPeriods":
			if !reflect.DeepEqual(have[f], want) {
				return false, "reportPeriods"
			}
			continue
		case "calendar":
			cal, _ := have[f].(map[string]any)
			for member, v := range want.(map[string]any) {
				if cal[member] != v {
					return false, "calendar " + member
				}
			}
			continue
		}
		if f == "document" {
			if have[f] != aggregates.NormalizeDocument(want.(string)) {
				return false, f
			}
			continue
		}
		if have[f] != want {
			return false, f
		}
	}
	return true, ""
}

// directoryAnswer prints an answer: the item (exit 0), a refusal (exit 1) or
// an error (exit 2).
func (e *environment) directoryAnswer(kind string, got []byte, err error, out directoryOutput) int {
	var pe *directoryProblem
	switch {
	case errors.As(err, &pe) && (pe.Status == http.StatusConflict || pe.Status == http.StatusNotFound || pe.Status == http.StatusPreconditionFailed):
		fmt.Fprintf(e.stderr, "ledgerctl: %v\n", pe)
		return exitDiff
	case err != nil:
		return e.fail(err)
	}
	out.print(kind, got)
	return exitOK
}

// directoryList follows the listing's cursors and prints every item.
func (e *environment) directoryList(ctx context.Context, c *directoryClient, kind, tenant string, out directoryOutput) int {
	var all []json.RawMessage
	var cursor *string
	for {
		got, err := c.list(ctx, kind, tenant, cursor)
		if err != nil {
			return e.directoryAnswer(kind, nil, err, out)
		}
		var page struct { // the items as the writer sent them, to print them so
			Items      []json.RawMessage `json:"items"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := json.Unmarshal(got, &page); err != nil {
			return e.fail(fmt.Errorf("list %ss: decode answer: %w", kind, err))
		}
		all = append(all, page.Items...)
		if page.NextCursor == "" {
			break
		}
		cursor = &page.NextCursor
	}
	if out.json {
		if all == nil {
			all = []json.RawMessage{}
		}
		b, _ := json.MarshalIndent(all, "", "  ")
		fmt.Fprintf(out.w, "%s\n", b)
		return exitOK
	}
	tw := out.table(kind)
	for _, raw := range all {
		out.row(tw, kind, raw)
	}
	_ = tw.Flush()
	return exitOK
}

// directoryOutput prints tenants, branches and accounts as JSON or as an
// aligned table.
type directoryOutput struct {
	w    io.Writer
	json bool
}

var directoryColumns = map[string]string{
	"tenant":  "ID\tNAME\tSTATUS\tREPORT PERIODS\tVERSION\tCREATED",
	"branch":  "TENANT\tID\tNAME\tDOCUMENT\tSTATUS\tTRANSACTIONS\tCURRENCY\tCALENDAR\tVERSION",
	"account": "TENANT\tID\tNAME\tROLE\tSTATUS\tPRIMARY EMAIL\tEMAILS\tVERSION",
}

func (o directoryOutput) table(kind string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(o.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, directoryColumns[kind])
	return tw
}

func (o directoryOutput) row(tw io.Writer, kind string, raw []byte) {
	switch kind {
	case "tenant":
		var t writer.Tenant
		_ = json.Unmarshal(raw, &t)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", t.ID, t.Name, t.Status, strings.Join(t.ReportPeriods, ","), t.Version, t.CreatedAt)
	case "branch":
		var b writer.Branch
		_ = json.Unmarshal(raw, &b)
		has := "none"
		if b.HasTransactions {
			has = "yes"
		}
		c := b.Calendar
		cal := fmt.Sprintf("%s, days from %s, weeks from %s, fiscal years from month %d", c.TimeZone, c.DayStartsAt, c.WeekStartsOn, c.FiscalYearStartMonth)
		cur := b.Currency
		if cur == "" {
			cur = "none"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", b.Tenant, b.ID, b.Name, b.Document, b.Status, has, cur, cal, b.Version)
	case "account":
		var a writer.Account
		_ = json.Unmarshal(raw, &a)
		var addrs []string
		for _, em := range a.Emails {
			s := em.Address
			if !em.Verified {
				s += " (unverified)"
			}
			addrs = append(addrs, s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%s\t%s\t%s\t%d\n", a.Tenant, a.ID, a.FirstName, a.LastName, a.Role, a.Status, a.Email,
			strings.Join(addrs, ", "), a.Version)
	}
}

func (o directoryOutput) print(kind string, raw []byte) {
	if o.json {
		var buf bytes.Buffer
		if json.Indent(&buf, raw, "", "  ") != nil {
			buf.Reset()
			buf.Write(raw)
		}
		fmt.Fprintf(o.w, "%s\n", bytes.TrimSpace(buf.Bytes()))
		return
	}
	tw := o.table(kind)
	o.row(tw, kind, raw)
	_ = tw.Flush()
}

// stringList is a repeatable string flag.
type stringList []string

var _ flag.Value = (*stringList)(nil)

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// directoryClient sends the directory commands' requests to the writer
// through the client generated from its OpenAPI document (writerapi).
type directoryClient struct {
	api *writerapi.ClientWithResponses
}

// writerAnswer is an answer of the generated client.
type writerAnswer interface {
	StatusCode() int
	Bytes() []byte
}

// directoryProblem is a problem+json answer of the writer.
type directoryProblem struct {
	Status int    `json:"status"`
	Type   string `json:"type"`
	Detail string `json:"detail"`
	Field  string `json:"field"`
}

func (p *directoryProblem) Error() string {
	typ := p.Type[strings.LastIndexByte(p.Type, '#')+1:]
	s := fmt.Sprintf("%d %s: %s", p.Status, typ, p.Detail)
	if p.Field != "" {
		s += " (" + p.Field + ")"
	}
	return s
}

func (e *environment) directoryClient(base string) (*directoryClient, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url %q: want http(s)://host[:port]", base)
	}
	token := e.getenv("LEDGER_TOKEN")
	if token == "" {
		secret := e.getenv("LEDGER_JWT_SECRET")
		if secret == "" {
			return nil, errors.New("set LEDGER_TOKEN, or LEDGER_JWT_SECRET (the writer's HS256 secret) to mint an admin token")
		}
		token, err = writer.NewToken([]byte(secret), writer.TokenOptions{Admin: true, Subject: "ledgerctl", TTL: 5 * time.Minute,
			Issuer: orDefault(e.getenv("LEDGER_JWT_ISSUER"), writer.DefaultIssuer), Audience: orDefault(e.getenv("LEDGER_JWT_AUDIENCE"), writer.DefaultAudience)})
		if err != nil {
			return nil, err
		}
	}
	api, err := writerapi.NewClientWithResponses(strings.TrimRight(base, "/"),
		writerapi.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}),
		writerapi.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("--url %q: %w", base, err)
	}
	return &directoryClient{api: api}, nil
}

// get reads one tenant, branch or account.
func (c *directoryClient) get(ctx context.Context, kind, tenant, id string) ([]byte, error) {
	return c.send(ctx, false, func(ctx context.Context, _ string) (writerAnswer, error) {
		switch kind {
		case "tenant":
			return c.api.GetTenantWithResponse(ctx, id)
		case "branch":
			return c.api.GetBranchWithResponse(ctx, tenant, id)
		}
		return c.api.GetAccountWithResponse(ctx, tenant, id)
	})
}

// list reads one page of tenants, or of a tenant's branches or accounts,
// from cursor (nil: the first).
func (c *directoryClient) list(ctx context.Context, kind, tenant string, cursor *string) ([]byte, error) {
	limit := writer.MaxListLimit
	return c.send(ctx, false, func(ctx context.Context, _ string) (writerAnswer, error) {
		switch kind {
		case "tenant":
			return c.api.ListTenantsWithResponse(ctx, &writerapi.ListTenantsParams{Limit: &limit, Cursor: cursor})
		case "branch":
			return c.api.ListBranchesWithResponse(ctx, tenant, &writerapi.ListBranchesParams{Limit: &limit, Cursor: cursor})
		}
		return c.api.ListAccountsWithResponse(ctx, tenant, &writerapi.ListAccountsParams{Limit: &limit, Cursor: cursor})
	})
}

// send runs call and returns the 2xx answer's body, or the problem. A
// create gets a fresh Idempotency-Key, kept across its retries: network
// errors and answers that say "retry" (503, 409 request-in-progress) are
// retried up to 5 times, so a create is never applied twice.
func (c *directoryClient) send(ctx context.Context, create bool, call func(ctx context.Context, key string) (writerAnswer, error)) ([]byte, error) {
	key := ""
	if create {
		var b [16]byte
		_, _ = rand.Read(b[:])
		key = hex.EncodeToString(b[:])
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(200<<attempt) * time.Millisecond):
			}
		}
		resp, err := call(ctx, key)
		if err != nil {
			last = err
			continue
		}
		status, raw := resp.StatusCode(), resp.Bytes()
		if status >= 200 && status < 300 {
			return raw, nil
		}
		p := &directoryProblem{}
		if json.Unmarshal(raw, p) != nil || p.Status == 0 {
			p = &directoryProblem{Status: status, Type: "#http-" + strconv.Itoa(status), Detail: strings.TrimSpace(string(raw))}
		}
		last = p
		if status == http.StatusServiceUnavailable || p.Type == writer.ProblemRequestInProgress {
			continue
		}
		return nil, p
	}
	return nil, last
}
