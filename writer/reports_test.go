package writer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// putReport stores a report item as the stream consumers (and reconcile's
// repair) write it.
func (e *env) putReport(p aggregates.Period, r *aggregates.Report, updatedAt string) {
	e.t.Helper()
	item, entries := table.EncodeReport(aggregates.ReportKey{Tenant: e.tenant, Branch: e.branch, Period: p}, r, updatedAt)
	items := append(entries, item)
	for len(items) > 0 {
		n := min(len(items), 25)
		var reqs []ddbtypes.WriteRequest
		for _, it := range items[:n] {
			reqs = append(reqs, ddbtypes.WriteRequest{PutRequest: &ddbtypes.PutRequest{Item: it}})
		}
		pending := map[string][]ddbtypes.WriteRequest{e.table: reqs}
		for len(pending) > 0 {
			out, err := e.ddb.BatchWriteItem(context.Background(), &dynamodb.BatchWriteItemInput{RequestItems: pending})
			require.NoError(e.t, err)
			pending = out.UnprocessedItems
		}
		items = items[n:]
	}
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func TestReports_GetOneAndRange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	jan := &aggregates.Report{}
	jan.Add(aggregates.Totals{Income: dec("10.10"), Count: 1}, [3]string{"food", "ops", "card"})
	jan.Add(aggregates.Totals{Expense: dec("0.1"), Count: 1}, [3]string{"rent", "", "cash"})
	jan.Add(aggregates.Totals{}, [3]string{"gone", "", ""}) // an entry that fell back to zero
	feb := &aggregates.Report{}
	feb.Add(aggregates.Totals{Income: dec("5"), Count: 1}, [3]string{"x#y café", "", ""})
	e.putReport(aggregates.Period{Type: aggregates.Monthly, Value: "2026-01"}, jan, "2026-02-01T10:00:00.123Z")
	e.putReport(aggregates.Period{Type: aggregates.Monthly, Value: "2026-02"}, feb, "2026-03-01T00:00:00Z")
	e.putReport(aggregates.Period{Type: aggregates.Monthly, Value: "2026-07"}, feb, "2026-08-01T00:00:00Z")
	e.putReport(aggregates.Period{Type: aggregates.Yearly, Value: "2026"}, jan, "2026-03-01T00:00:00Z")

	r := e.send(req{method: "GET", path: e.base() + "/reports/MONTHLY/2026-01"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.JSONEq(t, `{
		"tenant":"`+e.tenant+`","branch":"north","periodType":"MONTHLY","periodValue":"2026-01",
		"updatedAt":"2026-02-01T10:00:00.123Z",
		"totalIncome":"10.1","totalExpense":"0.1","transactionCount":2,
		"byCategory":{"food":{"totalIncome":"10.1","totalExpense":"0","transactionCount":1},
		              "rent":{"totalIncome":"0","totalExpense":"0.1","transactionCount":1}},
		"byCostCenter":{"ops":{"totalIncome":"10.1","totalExpense":"0","transactionCount":1}},
		"byPaymentMethod":{"card":{"totalIncome":"10.1","totalExpense":"0","transactionCount":1},
		                   "cash":{"totalIncome":"0","totalExpense":"0.1","transactionCount":1}}
	}`, string(r.Body))
	assert.Equal(t, "Sun, 01 Feb 2026 10:00:00 GMT", r.Header.Get("Last-Modified"))

	r = e.send(req{method: "GET", path: e.base() + "/reports?period=MONTHLY&from=2026-01&to=2026-06"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	var rng writer.ReportRange
	require.NoError(t, json.Unmarshal(r.Body, &rng))
	require.Len(t, rng.Items, 2, "only the reports in the range, and only of that period type")
	assert.Equal(t, "2026-01", rng.Items[0].PeriodValue)
	assert.Equal(t, "2026-02", rng.Items[1].PeriodValue)
	assert.Equal(t, "5", rng.Items[1].ByCategory["x#y café"].TotalIncome)

	r = e.send(req{method: "GET", path: e.base() + "/reports?period=DAILY&from=2026-01-01&to=2026-01-31"})
	require.Equal(t, http.StatusOK, r.Status)
	assert.JSONEq(t, `{"items":[]}`, string(r.Body))

	r = e.send(req{method: "GET", path: e.base() + "/reports/DAILY/2026-01-01"})
	require.Equal(t, http.StatusNotFound, r.Status)
	assert.Equal(t, writer.ProblemNotFound, r.problem(t).Type)

	for path, field := range map[string]string{
		"/reports/HOURLY/2026-01":                              "period",
		"/reports/WEEKLY/2026-01":                              "value",
		"/reports/QUARTERLY/2026-Q5":                           "value",
		"/reports?period=WEEKLY&from=2016-01-04&to=2026-04-06": "to",
		"/reports/MONTHLY/2026-13":                             "value",
		"/reports/DAILY/2026-02-30":                            "value",
		"/reports/YEARLY/26":                                   "value",
		"/reports?period=MONTHLY&from=2026-06&to=2026-01":      "to",
		"/reports?period=MONTHLY&from=2026-01":                 "to",
		"/reports?from=2026-01&to=2026-02":                     "period",
		"/reports?period=MONTHLY&from=2026-01-01&to=2026-02":   "from",
		"/reports?period=DAILY&from=2024-01-01&to=2025-01-02":  "to",
		"/reports?period=MONTHLY&from=2026-01&to=2026-02&x=1":  "x",
	} {
		r := e.send(req{method: "GET", path: e.base() + path})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: answer %s", path, r)
		assert.Equal(t, field, r.problem(t).Field, path)
	}
}

// TestReports_PagedAndBoundedWhateverTheirEntries: a report of thousands
// of names (2,500 categories: 32 inline, the rest entry items) between two
// small ones. One report comes in pages of at most limit entry items, its
// totals on every page, every name exactly once over the pages; a range
// carries at most MaxReportEntries entry items per page, gives the big
// report an entries cursor for the rest and goes on past it; cursors are
// bound to their listing.
func TestReports_PagedAndBoundedWhateverTheirEntries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	small := &aggregates.Report{}
	small.Add(aggregates.Totals{Income: dec("1"), Count: 1}, [3]string{"food", "", ""})
	big := &aggregates.Report{}
	const names = 2500
	for i := range names {
		big.Add(aggregates.Totals{Expense: dec("0.5"), Count: 1}, [3]string{fmt.Sprintf("category %04d", i), "", "card"})
	}
	day := func(d string) aggregates.Period { return aggregates.Period{Type: aggregates.Daily, Value: d} }
	e.putReport(day("2026-05-01"), small, "2026-05-02T00:00:00Z")
	e.putReport(day("2026-05-02"), big, "2026-05-03T00:00:00Z")
	e.putReport(day("2026-05-03"), small, "2026-05-04T00:00:00Z")

	seen := map[string]int{}
	path := e.base() + "/reports/DAILY/2026-05-02?limit=1000"
	pages := 0
	for {
		r := e.send(req{method: "GET", path: path})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
		var rep writer.Report
		require.NoError(t, json.Unmarshal(r.Body, &rep))
		pages++
		assert.Equal(t, int64(names), rep.TransactionCount, "totals on every page")
		assert.LessOrEqual(t, len(rep.ByCategory), 1000+table.MaxInlineEntries)
		for name := range rep.ByCategory {
			seen[name]++
		}
		if rep.NextCursor == "" {
			break
		}
		path = e.base() + "/reports/DAILY/2026-05-02?limit=1000&cursor=" + url.QueryEscape(rep.NextCursor)
	}
	assert.Equal(t, 3, pages)
	assert.Len(t, seen, names)
	for name, n := range seen {
		require.Equal(t, 1, n, "%s on one page only", name)
	}

	r := e.send(req{method: "GET", path: e.base() + "/reports?period=DAILY&from=2026-05-01&to=2026-05-31"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	var rng writer.ReportRange
	require.NoError(t, json.Unmarshal(r.Body, &rng))
	require.Len(t, rng.Items, 2, "the page ends after the report whose entries did not fit")
	assert.Empty(t, rng.Items[0].EntriesCursor)
	assert.Equal(t, "2026-05-02", rng.Items[1].PeriodValue)
	require.NotEmpty(t, rng.Items[1].EntriesCursor)
	assert.Len(t, rng.Items[1].ByCategory, writer.MaxReportEntries+table.MaxInlineEntries)
	require.NotEmpty(t, rng.NextCursor)
	got := len(rng.Items[1].ByCategory)
	for c := rng.Items[1].EntriesCursor; c != ""; {
		rest := e.send(req{method: "GET", path: e.base() + "/reports/DAILY/2026-05-02?cursor=" + url.QueryEscape(c)})
		require.Equal(t, http.StatusOK, rest.Status, "answer %s", rest)
		var tail writer.Report
		require.NoError(t, json.Unmarshal(rest.Body, &tail))
		assert.LessOrEqual(t, len(tail.ByCategory), writer.DefaultReportEntries)
		got += len(tail.ByCategory)
		c = tail.NextCursor
	}
	assert.Equal(t, names, got, "the entries cursor fetches exactly the rest")

	r = e.send(req{method: "GET", path: e.base() + "/reports?period=DAILY&from=2026-05-01&to=2026-05-31&cursor=" + url.QueryEscape(rng.NextCursor)})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	var next writer.ReportRange
	require.NoError(t, json.Unmarshal(r.Body, &next))
	require.Len(t, next.Items, 1)
	assert.Equal(t, "2026-05-03", next.Items[0].PeriodValue)
	assert.Empty(t, next.NextCursor)

	r = e.send(req{method: "GET", path: e.base() + "/reports?period=DAILY&from=2026-05-01&to=2026-05-31&limit=1"})
	require.Equal(t, http.StatusOK, r.Status)
	require.NoError(t, json.Unmarshal(r.Body, &rng))
	require.Len(t, rng.Items, 1, "limit counts reports")
	require.NotEmpty(t, rng.NextCursor)

	for _, bad := range []string{
		"/reports/DAILY/2026-05-02?cursor=" + url.QueryEscape(rng.NextCursor),                           // a range's cursor
		"/reports?period=DAILY&from=2026-05-01&to=2026-05-30&cursor=" + url.QueryEscape(rng.NextCursor), // another range
		"/reports/DAILY/2026-05-02?cursor=x" + url.QueryEscape(rng.NextCursor),
	} {
		r := e.send(req{method: "GET", path: e.base() + bad})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: answer %s", bad, r)
		assert.Equal(t, writer.ProblemInvalidCursor, r.problem(t).Type)
	}
	r = e.send(req{method: "GET", path: e.base() + "/reports/DAILY/2026-05-02?limit=0"})
	require.Equal(t, http.StatusBadRequest, r.Status)
	assert.Equal(t, "limit", r.problem(t).Field)
}

func TestHealth_HealthzReadyzAndDrain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	r := e.send(req{method: "GET", path: "/healthz", noAuth: true})
	require.Equal(t, http.StatusOK, r.Status)
	r = e.send(req{method: "GET", path: "/readyz", noAuth: true})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.JSONEq(t, `{"status":"ready","writesEnabled":true}`, string(r.Body))
	e.srv.Drain()
	r = e.send(req{method: "GET", path: "/readyz", noAuth: true})
	require.Equal(t, http.StatusServiceUnavailable, r.Status)
	r = e.send(req{method: "GET", path: "/healthz", noAuth: true})
	require.Equal(t, http.StatusOK, r.Status, "alive while draining")
}

func TestReadyz_TableUnreachableIs503(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), func(c *writer.Config) { c.Table = "no-such-table" })
	r := e.send(req{method: "GET", path: "/readyz", noAuth: true})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "answer %s", r)
}

func TestMetrics_ServedWithRouteLabelsAndNoIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), func(c *writer.Config) { c.FlagsTTL = time.Hour })
	tx := e.create(createBody)
	e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID})
	e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID, headers: []string{"If-Match", "x"}})
	e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, body: `{"amount":"3"}`, headers: []string{"If-Match", "9"}})
	resp, err := http.Get(e.http.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	text := string(raw)
	for _, want := range []string{
		`ledger_http_requests_total{code="201",method="POST",route="/v1/tenants/{tenant}/branches/{branch}/transactions"} 1`,
		`ledger_http_requests_total{code="200",method="GET",route="/v1/tenants/{tenant}/branches/{branch}/transactions/{id}"} 2`,
		`ledger_http_requests_total{code="412",method="PATCH",route="/v1/tenants/{tenant}/branches/{branch}/transactions/{id}"} 1`,
		`ledger_http_request_duration_seconds_bucket{method="POST",route="/v1/tenants/{tenant}/branches/{branch}/transactions",le="+Inf"} 1`,
		`ledger_writer_version_conflicts_total 1`,
		`ledger_writer_writes_total{operation="create"} 1`,
		`ledger_writer_flags_reads_total{outcome="ok"} 1`,
	} {
		assert.Contains(t, text, want)
	}
	assert.NotContains(t, text, e.tenant, "no tenant in any label")
	assert.NotContains(t, text, tx.ID, "no id in any label")
}

func TestReports_FreshnessIsTheLastCommitTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	at := time.Date(2026, 5, 1, 12, 30, 0, 0, time.UTC)
	rep := &aggregates.Report{}
	rep.Add(aggregates.Totals{Income: dec("1"), Count: 1}, [3]string{"a", "", ""})
	e.putReport(aggregates.Period{Type: aggregates.Daily, Value: "2026-05-01"}, rep, at.Format(time.RFC3339Nano))
	r := e.send(req{method: "GET", path: e.base() + "/reports/DAILY/2026-05-01"})
	require.Equal(t, http.StatusOK, r.Status)
	var got writer.Report
	require.NoError(t, json.Unmarshal(r.Body, &got))
	assert.Equal(t, "2026-05-01T12:30:00Z", got.UpdatedAt)
	lm, err := http.ParseTime(r.Header.Get("Last-Modified"))
	require.NoError(t, err)
	assert.True(t, lm.Equal(at))
}

func TestReports_CorruptItemIs500WithoutDetails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	k := aggregates.ReportKey{Tenant: e.tenant, Branch: e.branch, Period: aggregates.Period{Type: aggregates.Yearly, Value: "2026"}}.Key()
	_, err := e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]ddbAV{
		"PK": s(k.PK), "SK": s(k.SK), "totalIncome": s("not a number")}})
	require.NoError(t, err)
	r := e.send(req{method: "GET", path: e.base() + "/reports/YEARLY/2026"})
	require.Equal(t, http.StatusInternalServerError, r.Status, "answer %s", r)
	p := r.problem(t)
	assert.Equal(t, writer.ProblemInternal, p.Type)
	assert.NotContains(t, p.Detail, "totalIncome", "internals stay in the log")
}
