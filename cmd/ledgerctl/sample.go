package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/writer"
)

// The sample workload 'ledgerctl run' posts through the writer's API: one
// tenant keeping every period type, three branches in three time zones and
// currencies (São Paulo in BRL with a 04:00 business-day start and fiscal
// years from July, London in GBP, Tokyo in JPY, whose amounts are whole
// yen), three months of a small business's income and expenses in
// several categories, cost centres and payment methods — late-night sales
// in São Paulo among them, which count in the business day before — then a
// few changes and deletes. It is generated from a fixed seed, so every run
// posts the same requests with the same idempotency keys.
const (
	sampleTenant = "demo"
	sampleSeed   = 2026
	// sampleKeyPrefix versions the idempotency keys: change it when the
	// workload changes, or a replayed key would meet a different body (422).
	sampleKeyPrefix = "ledgerctl-sample-v3-"
)

var (
	// sampleEarlierFinals are the final transaction counts of earlier
	// versions of the workload (v1: 84, without calendars), so that a
	// data directory holding one is not posted over: ensureDirectory gives
	// its branches their calendars and 'ledgerctl run' moves its history
	// into them. v2 (calendars, no currencies) ends with as many
	// transactions as this version, so a data directory holding it is kept
	// too; its branches, having transactions, keep having no currency
	// (ensureDirectory says so).
	sampleEarlierFinals = []int{84}
	sampleBranches      = []string{"north", "south", "online"}
	sampleMonths        = []string{"2026-09", "2026-10", "2026-11"}
)

// sampleOp is one request of the workload.
type sampleOp struct {
	method string // POST (create), PATCH or DELETE
	branch string
	ref    int    // PATCH, DELETE: index of the created transaction it changes
	body   string // JSON
	key    string // Idempotency-Key
}

// sampleWorkload returns the requests in the order they are sent, and how
// many transactions the branches hold once all of them are applied.
func sampleWorkload() (ops []sampleOp, final int) {
	rng := rand.New(rand.NewPCG(sampleSeed, 1))
	// amount is a random amount of a branch: whole units lo..hi and random
	// cents; in yen, which has no fraction digits, a hundred times as many
	// whole yen. Both draw the same random numbers, so the other branches'
	// amounts are those of the sample before currencies.
	amount := func(branch string, lo, hi int) string {
		cents := (lo+rng.IntN(hi-lo+1))*100 + rng.IntN(100)
		if aggregates.CurrencyDigits(sampleBranchInfo[branch].currency) == 0 {
			return strconv.Itoa(cents)
		}
		return fmt.Sprintf("%d.%02d", cents/100, cents%100)
	}
	type txn struct {
		Type          string `json:"type"`
		Amount        string `json:"amount"`
		Category      string `json:"category"`
		CostCenter    string `json:"costCenter,omitempty"`
		PaymentMethod string `json:"paymentMethod,omitempty"`
		Description   string `json:"description,omitempty"`
		CreatedAt     string `json:"createdAt"`
	}
	create := func(branch string, t txn) {
		b, _ := json.Marshal(t)
		ops = append(ops, sampleOp{method: http.MethodPost, branch: branch, body: string(b), key: fmt.Sprintf("%screate-%03d", sampleKeyPrefix, len(ops))})
	}
	// at is a local wall-clock time of a branch, as an RFC 3339 instant
	// with the branch's offset.
	at := func(branch, month string, day, hour int) string {
		loc, err := aggregates.LoadZone(sampleBranchInfo[branch].zone)
		if err != nil {
			panic(err) // the sample's own zones are in the embedded data
		}
		m, _ := time.Parse("2006-01", month)
		return time.Date(m.Year(), m.Month(), day, hour, rng.IntN(60), 0, 0, loc).Format(time.RFC3339)
	}
	pay := []string{"card", "card", "cash", "transfer"}
	rent := map[string]int{"north": 2400, "south": 1850, "online": 650}
	for _, month := range sampleMonths {
		for _, branch := range sampleBranches {
			store := "store"
			if branch == "online" {
				store = "web"
			}
			for i := 0; i < 4; i++ {
				create(branch, txn{Type: "INCOME", Amount: amount(branch, 150, 2400), Category: "sales", CostCenter: store,
					PaymentMethod: pay[rng.IntN(len(pay))], CreatedAt: at(branch, month, 2+rng.IntN(18), 9+rng.IntN(9))})
			}
			if branch != "online" {
				create(branch, txn{Type: "INCOME", Amount: amount(branch, 200, 900), Category: "services", CostCenter: "workshop",
					PaymentMethod: "transfer", Description: "repairs", CreatedAt: at(branch, month, 3+rng.IntN(15), 10)})
			}
			rentAmount := strconv.Itoa(rent[branch]) + ".00"
			if aggregates.CurrencyDigits(sampleBranchInfo[branch].currency) == 0 {
				rentAmount = strconv.Itoa(rent[branch] * 100)
			}
			create(branch, txn{Type: "EXPENSE", Amount: rentAmount, Category: "rent", CostCenter: "admin",
				PaymentMethod: "transfer", Description: "monthly rent", CreatedAt: at(branch, month, 1, 8)})
			create(branch, txn{Type: "EXPENSE", Amount: amount(branch, 1800, 3200), Category: "payroll", CostCenter: "admin",
				PaymentMethod: "transfer", CreatedAt: at(branch, month, 15, 12)})
			create(branch, txn{Type: "EXPENSE", Amount: amount(branch, 80, 600), Category: "supplies", CostCenter: store,
				PaymentMethod: pay[rng.IntN(len(pay))], CreatedAt: at(branch, month, 4+rng.IntN(14), 14)})
			create(branch, txn{Type: "EXPENSE", Amount: amount(branch, 60, 240), Category: "utilities", CostCenter: "admin",
				CreatedAt: at(branch, month, 20, 9)})
			create(branch, txn{Type: "EXPENSE", Amount: amount(branch, 50, 400), Category: "marketing",
				PaymentMethod: "card", Description: "ads", CreatedAt: at(branch, month, 5+rng.IntN(10), 16)})
			if branch == "north" { // after midnight, before the 04:00 close: the day before's takings
				create(branch, txn{Type: "INCOME", Amount: amount(branch, 300, 900), Category: "sales", CostCenter: store,
					PaymentMethod: "card", Description: "late night", CreatedAt: at(branch, month, 6+rng.IntN(14), 1+rng.IntN(3))})
			}
		}
	}
	created := len(ops)
	change := func(method string, ref int, body string) {
		ops = append(ops, sampleOp{method: method, branch: ops[ref].branch, ref: ref, body: body,
			key: fmt.Sprintf("%s%s-%03d", sampleKeyPrefix, map[string]string{http.MethodPatch: "patch", http.MethodDelete: "delete"}[method], len(ops))})
	}
	change(http.MethodPatch, 3, `{"amount":"1999.99"}`)                               // a corrected amount
	change(http.MethodPatch, 12, `{"category":"equipment","description":"new till"}`) // recategorised
	change(http.MethodPatch, 25, `{"costCenter":null}`)                               // cost centre removed
	change(http.MethodPatch, 40, `{"paymentMethod":"cash"}`)                          // paid otherwise
	change(http.MethodDelete, 7, "")                                                  // entered twice
	change(http.MethodDelete, 33, "")
	change(http.MethodDelete, 61, "")
	return ops, created - 3
}

// sampleBranchInfo names the sample branches, gives each a document number
// (unique across tenants, as the writer requires), a business calendar and
// a currency.
var sampleBranchInfo = map[string]struct {
	name, document    string
	zone, dayStartsAt string
	fiscalYearStart   int
	currency          string
}{
	"north":  {"North store (São Paulo)", "DEMO-0001-NORTH", "America/Sao_Paulo", "04:00", 7, "BRL"},
	"south":  {"South store (London)", "DEMO-0002-SOUTH", "Europe/London", "00:00", 1, "GBP"},
	"online": {"Online shop (Tokyo)", "DEMO-0003-ONLINE", "Asia/Tokyo", "00:00", 1, "JPY"},
}

// sampleCalendar is a sample branch's calendar as the API takes it.
func sampleCalendar(branch string) writer.Calendar {
	info := sampleBranchInfo[branch]
	return writer.Calendar{TimeZone: info.zone, DayStartsAt: info.dayStartsAt, WeekStartsOn: "MONDAY", FiscalYearStartMonth: info.fiscalYearStart}
}

// sampleDirectory is what ensureDirectory found and did.
type sampleDirectory struct {
	// recalendared: a calendar or the report periods were set on a tenant
	// or branch an earlier version of the sample made without them (its
	// history is then moved by a rebucket).
	recalendared bool
	// currencies are the sample branches' currencies as they are ("" for
	// none): an earlier version's branch has transactions and no currency,
	// and keeps having none.
	currencies map[string]string
}

// ensureDirectory creates the sample tenant (keeping every period type)
// and its branches (each with its calendar and currency) through the API
// with an admin token (claiming a branch's document number takes one),
// unless they exist: the writer refuses transactions for a tenant or branch
// that does not. A tenant or branch an earlier version of the sample made
// without them gets its calendar and report periods with a PATCH, and its
// currency while it has no transactions (after, the writer refuses it:
// docs/api.md, "Currencies").
func ensureDirectory(ctx context.Context, admin *apiClient) (dir sampleDirectory, err error) {
	dir.currencies = map[string]string{}
	exists := func(err error) bool {
		var ae *apiError
		return errors.As(err, &ae) && ae.status == http.StatusConflict && strings.Contains(ae.body, "already-exists")
	}
	periods := make([]string, len(aggregates.PeriodTypes))
	for i, p := range aggregates.PeriodTypes {
		periods[i] = string(p)
	}
	body, _ := json.Marshal(map[string]any{"id": sampleTenant, "name": "Demo Trading Co.", "reportPeriods": periods})
	err = admin.do(ctx, http.MethodPost, "/v1/tenants", map[string]string{"Idempotency-Key": sampleKeyPrefix + "tenant"}, string(body), nil)
	if err != nil && !exists(err) {
		return dir, fmt.Errorf("create sample tenant %s: %w", sampleTenant, err)
	}
	var tenant writer.Tenant
	tenantURL := "/v1/tenants/" + url.PathEscape(sampleTenant)
	if err := admin.do(ctx, http.MethodGet, tenantURL, nil, "", &tenant); err != nil {
		return dir, fmt.Errorf("read sample tenant %s: %w", sampleTenant, err)
	}
	if !slices.Equal(tenant.ReportPeriods, periods) {
		patch, _ := json.Marshal(map[string]any{"reportPeriods": periods})
		if err := admin.do(ctx, http.MethodPatch, tenantURL, map[string]string{"If-Match": etag(tenant.Version)}, string(patch), nil); err != nil {
			return dir, fmt.Errorf("set the sample tenant's report periods: %w", err)
		}
		dir.recalendared = true
	}
	for _, b := range sampleBranches {
		info := sampleBranchInfo[b]
		body, _ := json.Marshal(map[string]any{"id": b, "name": info.name, "document": info.document, "calendar": sampleCalendar(b), "currency": info.currency})
		err := admin.do(ctx, http.MethodPost, "/v1/tenants/"+url.PathEscape(sampleTenant)+"/branches",
			map[string]string{"Idempotency-Key": sampleKeyPrefix + "branch-" + b}, string(body), nil)
		if err != nil && !exists(err) {
			return dir, fmt.Errorf("create sample branch %s: %w", b, err)
		}
		var branch writer.Branch
		if err := admin.do(ctx, http.MethodGet, branchURL(sampleTenant, b), nil, "", &branch); err != nil {
			return dir, fmt.Errorf("read sample branch %s: %w", b, err)
		}
		patch := map[string]any{}
		if branch.Calendar != sampleCalendar(b) {
			patch["calendar"] = sampleCalendar(b)
			dir.recalendared = true
		}
		if branch.Currency == "" && !branch.HasTransactions {
			patch["currency"] = info.currency
		}
		if len(patch) > 0 {
			body, _ := json.Marshal(patch)
			if err := admin.do(ctx, http.MethodPatch, branchURL(sampleTenant, b), map[string]string{"If-Match": etag(branch.Version)}, string(body), &branch); err != nil {
				return dir, fmt.Errorf("set the calendar or currency of sample branch %s: %w", b, err)
			}
		}
		dir.currencies[b] = branch.Currency
	}
	return dir, nil
}

func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// apiClient talks to the writer as a client would.
type apiClient struct {
	base  string
	token string
	http  *http.Client
}

// apiError is a non-2xx answer.
type apiError struct {
	status int
	body   string
}

func (e *apiError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.body) }

// do sends one request and decodes a JSON answer into out (when non-nil).
// Answers that mean "try again" (409 request in progress, 429, 503) are
// retried a few times with a short backoff.
func (c *apiClient) do(ctx context.Context, method, path string, header map[string]string, body string, out any) error {
	var last error
	for attempt := 0; attempt < 8; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(100*(1<<min(attempt, 5))) * time.Millisecond):
			}
		}
		var rd io.Reader
		if body != "" {
			rd = bytes.NewBufferString(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			if method == http.MethodPatch {
				req.Header.Set("Content-Type", "application/merge-patch+json")
			}
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		switch {
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			if out != nil {
				if err := json.Unmarshal(b, out); err != nil {
					return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
				}
			}
			return nil
		case resp.StatusCode == http.StatusConflict && !bytes.Contains(b, []byte("request-in-progress")) && !bytes.Contains(b, []byte("concurrent-modification")):
			return &apiError{resp.StatusCode, string(b)} // a real conflict (already exists, …)
		case resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
			last = &apiError{resp.StatusCode, string(b)}
			continue
		default:
			return &apiError{resp.StatusCode, string(b)}
		}
	}
	return fmt.Errorf("%s %s: %w", method, path, last)
}

func branchURL(tenant, branch string) string {
	return "/v1/tenants/" + url.PathEscape(tenant) + "/branches/" + url.PathEscape(branch)
}

// countTransactions counts a branch's transactions through the API.
func (c *apiClient) countTransactions(ctx context.Context, tenant, branch string) (int, error) {
	n, cursor := 0, ""
	for {
		q := url.Values{"limit": {"200"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page writer.ListPage
		if err := c.do(ctx, http.MethodGet, branchURL(tenant, branch)+"/transactions?"+q.Encode(), nil, "", &page); err != nil {
			return 0, err
		}
		n += len(page.Items)
		if page.NextCursor == "" {
			return n, nil
		}
		cursor = page.NextCursor
	}
}

// postSample sends the workload unless it is already there. It counts the
// sample branches' transactions first: none, it posts everything; exactly
// the workload's final count, it posts nothing (an earlier run did); any
// other number (an earlier run stopped part way), it posts everything again
// with the same idempotency keys, which the writer answers from its
// idempotency records (kept 24 h) without writing twice — unless the count
// is an earlier version's final count (sampleEarlierFinals): that sample is
// kept, not posted over. progress is called after each request.
func (c *apiClient) postSample(ctx context.Context, progress func(done, total int)) (posted bool, err error) {
	ops, final := sampleWorkload()
	have := 0
	for _, b := range sampleBranches {
		n, err := c.countTransactions(ctx, sampleTenant, b)
		if err != nil {
			return false, fmt.Errorf("count sample transactions: %w", err)
		}
		have += n
	}
	if have == final || slices.Contains(sampleEarlierFinals, have) {
		return false, nil
	}
	ids := make([]string, len(ops))
	for i, op := range ops {
		h := map[string]string{"Idempotency-Key": op.key}
		switch op.method {
		case http.MethodPost:
			var t writer.Transaction
			if err := c.do(ctx, op.method, branchURL(sampleTenant, op.branch)+"/transactions", h, op.body, &t); err != nil {
				return true, fmt.Errorf("sample request %d: %w", i, err)
			}
			ids[i] = t.ID
		case http.MethodPatch, http.MethodDelete:
			if op.method == http.MethodPatch {
				h["If-Match"] = `"1"`
			}
			err := c.do(ctx, op.method, branchURL(sampleTenant, op.branch)+"/transactions/"+ids[op.ref], h, op.body, nil)
			var ae *apiError
			// Already changed (412) or deleted (404) by an earlier run whose
			// idempotency record has expired: nothing to do.
			if errors.As(err, &ae) && (ae.status == http.StatusPreconditionFailed || ae.status == http.StatusNotFound) {
				err = nil
			}
			if err != nil {
				return true, fmt.Errorf("sample request %d: %w", i, err)
			}
		}
		progress(i+1, len(ops))
	}
	return true, nil
}

// reports reads the sample branches' reports of one period type, from and
// to inclusive, through the API.
func (c *apiClient) reports(ctx context.Context, pt aggregates.PeriodType, from, to string) ([]storedReport, error) {
	var out []storedReport
	for _, b := range sampleBranches {
		q := url.Values{"period": {string(pt)}, "from": {from}, "to": {to}}
		var rr writer.ReportRange
		if err := c.do(ctx, http.MethodGet, branchURL(sampleTenant, b)+"/reports?"+q.Encode(), nil, "", &rr); err != nil {
			return nil, fmt.Errorf("reports of %s: %w", b, err)
		}
		for _, r := range rr.Items {
			s, err := fromView(r)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// fromView converts a report as the API shows it back to the domain's.
func fromView(v writer.Report) (storedReport, error) {
	pt, err := aggregates.ParsePeriodType(v.PeriodType)
	if err != nil {
		return storedReport{}, err
	}
	s := storedReport{Key: aggregates.ReportKey{Tenant: v.Tenant, Branch: v.Branch, Period: aggregates.Period{Type: pt, Value: v.PeriodValue}},
		Report: &aggregates.Report{}, UpdatedAt: v.UpdatedAt}
	totals := func(t writer.Totals) (aggregates.Totals, error) {
		in, err := decimal.NewFromString(t.TotalIncome)
		if err != nil {
			return aggregates.Totals{}, fmt.Errorf("report %s: income %q: %w", s.Key, t.TotalIncome, err)
		}
		ex, err := decimal.NewFromString(t.TotalExpense)
		if err != nil {
			return aggregates.Totals{}, fmt.Errorf("report %s: expense %q: %w", s.Key, t.TotalExpense, err)
		}
		return aggregates.Totals{Income: in, Expense: ex, Count: t.TransactionCount}, nil
	}
	if s.Report.Totals, err = totals(v.Totals); err != nil {
		return s, err
	}
	for d, m := range [3]map[string]writer.Totals{v.ByCategory, v.ByCostCenter, v.ByPaymentMethod} {
		for name, t := range m {
			tt, err := totals(t)
			if err != nil {
				return s, err
			}
			if s.Report.Breakdowns[d] == nil {
				s.Report.Breakdowns[d] = map[string]aggregates.Totals{}
			}
			s.Report.Breakdowns[d][name] = tt
		}
	}
	return s, nil
}
