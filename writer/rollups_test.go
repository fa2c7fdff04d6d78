package writer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// Tenant roll-ups are written by the stream consumers (issue 24; not on
// this branch yet): the tests put partial items as the design lays them out
// (docs/design.md "The lane layout": a report item plus branches, its entry
// items beyond the inline maps, table.EncodeReport's placement) straight
// into DynamoDB Local, and read them through the writer.

// putPartial stores lane k's partial of the env's tenant in currency cur
// for period p with figures r and branch count branches: the item with the
// first table.MaxInlineEntries names of each dimension inline and an entry
// item for each further name, as a repair writes a report.
func (e *env) putPartial(cur string, lane int, p aggregates.Period, r *aggregates.Report, branches int64, updatedAt string) {
	e.t.Helper()
	e.putPartialOf(e.tenant, cur, lane, p, r, branches, updatedAt)
}

func (e *env) putPartialOf(tenant, cur string, lane int, p aggregates.Period, r *aggregates.Report, branches int64, updatedAt string) {
	e.t.Helper()
	rk := aggregates.RollupKey{Tenant: tenant, Currency: cur, Lane: lane, Period: p}
	shape := aggregates.ReportKey{Tenant: tenant, Branch: "shape", Period: p}
	item, entries := table.EncodeReport(shape, r, updatedAt)
	item[table.AttrPK], item[table.AttrSK] = s(rk.Key().PK), s(rk.Key().SK)
	item[table.AttrBranches] = &ddbtypes.AttributeValueMemberN{Value: fmt.Sprint(branches)}
	for _, en := range entries {
		ref, err := aggregates.ParseReportItemKey(table.KeyOf(en))
		require.NoError(e.t, err)
		k := rk.EntryKey(ref.Dim, ref.Name)
		en[table.AttrPK], en[table.AttrSK] = s(k.PK), s(k.SK)
	}
	e.putItems(append(entries, item))
}

// putItems writes items with BatchWriteItem.
func (e *env) putItems(items []map[string]ddbtypes.AttributeValue) {
	e.t.Helper()
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

// rollupOracle sums reports as a reader must: every figure of every lane.
func rollupOracle(reps ...*aggregates.Report) *aggregates.Report {
	sum := &aggregates.Report{}
	for _, r := range reps {
		sum.Merge(r)
	}
	sum.Prune()
	return sum
}

// breakdownsOf collects the breakdowns of the pages of one roll-up,
// requiring every name on one page only.
func breakdownsOf(t *testing.T, pages []writer.Rollup) [3]map[string]writer.Totals {
	t.Helper()
	var out [3]map[string]writer.Totals
	for d := range out {
		out[d] = map[string]writer.Totals{}
	}
	for _, pg := range pages {
		for d, m := range [3]map[string]writer.Totals{pg.ByCategory, pg.ByCostCenter, pg.ByPaymentMethod} {
			for name, v := range m {
				_, dup := out[d][name]
				require.False(t, dup, "%s on two pages", name)
				out[d][name] = v
			}
		}
	}
	return out
}

func expectedBreakdowns(r *aggregates.Report) [3]map[string]writer.Totals {
	var out [3]map[string]writer.Totals
	for _, d := range aggregates.Dimensions {
		out[d] = map[string]writer.Totals{}
		for name, t := range r.Breakdowns[d] {
			out[d][name] = writer.Totals{TotalIncome: aggregates.FormatAmount(t.Income), TotalExpense: aggregates.FormatAmount(t.Expense), TransactionCount: t.Count}
		}
	}
	return out
}

// rollupPages reads every page of one roll-up at path (which has its
// query), following nextCursor.
func (e *env) rollupPages(path string) []writer.Rollup {
	e.t.Helper()
	var pages []writer.Rollup
	next := path
	for range 1000 {
		r := e.send(req{method: "GET", path: next})
		require.Equal(e.t, http.StatusOK, r.Status, "answer %s", r)
		var pg writer.Rollup
		require.NoError(e.t, json.Unmarshal(r.Body, &pg))
		pages = append(pages, pg)
		if pg.NextCursor == "" {
			return pages
		}
		next = path + "&cursor=" + url.QueryEscape(pg.NextCursor)
	}
	e.t.Fatal("the pages never end")
	return nil
}

func (e *env) rollupBase() string { return "/v1/tenants/" + e.tenant + "/reports" }

func month(v string) aggregates.Period { return aggregates.Period{Type: aggregates.Monthly, Value: v} }

// TestRollups_SumOfTheLanesWithTheirEntryItems: three lanes' partials of
// one month, two of them past their inline maps (names in entry items, a
// name inline in one lane and an entry item in another), are summed: the
// totals, net, branch count and every breakdown entry, as one page and as
// many; a parked delta, another currency's partials and another tenant's
// are not added; the range sums per period.
func TestRollups_SumOfTheLanesWithTheirEntryItems(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t)) // north and south, no currency: the roll-ups of "-"
	lane0, lane5, lane31 := &aggregates.Report{}, &aggregates.Report{}, &aggregates.Report{}
	for i := range 40 { // c00…c31 inline, c32…c39 entry items
		lane0.Add(aggregates.Totals{Income: dec("1.25"), Count: 1}, [3]string{fmt.Sprintf("c%02d", i), "ops", "card"})
	}
	for i := 20; i < 55; i++ { // c20…c51 inline (c32…c39 are entry items in lane 0), c52…c54 entry items
		lane5.Add(aggregates.Totals{Expense: dec("0.1"), Count: 1}, [3]string{fmt.Sprintf("c%02d", i), fmt.Sprintf("cc%02d", i), "cash"})
	}
	lane31.Add(aggregates.Totals{Income: dec("1000000000000.000001"), Count: 1}, [3]string{"c00", "", ""})
	jan := month("2026-01")
	e.putPartial(aggregates.NoCurrency, 0, jan, lane0, 1, "2026-02-01T00:00:00Z")
	e.putPartial(aggregates.NoCurrency, 5, jan, lane5, 2, "2026-02-03T04:05:06.789Z")
	e.putPartial(aggregates.NoCurrency, 31, jan, lane31, 0, "2026-02-02T00:00:00Z")
	// Not part of the sum: a parked delta of lane 0, the BRL roll-up, another tenant's.
	parked := &aggregates.Report{}
	parked.Add(aggregates.Totals{Income: dec("999"), Count: 9}, [3]string{"parked", "", ""})
	pk := aggregates.RollupKey{Tenant: e.tenant, Currency: aggregates.NoCurrency, Lane: 0, Period: jan}.ParkedKey("c1")
	pitem := table.ParkedItem(aggregates.ReportKey{Tenant: e.tenant, Branch: "shape", Period: jan}, "c1", parked, table.ParkedInfo{Reason: "test", ParkedAt: "2026-02-01T00:00:00Z"})
	pitem[table.AttrPK], pitem[table.AttrSK] = s(pk.PK), s(pk.SK)
	e.putItems([]map[string]ddbtypes.AttributeValue{pitem})
	e.putPartial("BRL", 0, jan, parked, 1, "2026-02-01T00:00:00Z")
	e.putPartialOf(uniqueTenant(), aggregates.NoCurrency, 0, jan, parked, 1, "2026-02-01T00:00:00Z")
	feb := &aggregates.Report{}
	feb.Add(aggregates.Totals{Expense: dec("7"), Count: 2}, [3]string{"rent", "", ""})
	e.putPartial(aggregates.NoCurrency, 3, month("2026-02"), feb, 1, "2026-03-01T00:00:00Z")
	e.putPartial(aggregates.NoCurrency, 4, month("2026-02"), feb, 1, "2026-03-01T00:00:00Z")

	want := rollupOracle(lane0, lane5, lane31)
	r := e.send(req{method: "GET", path: e.rollupBase() + "/MONTHLY/2026-01"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, "Tue, 03 Feb 2026 04:05:06 GMT", r.Header.Get("Last-Modified"), "the latest commit to any partial")
	var one writer.Rollup
	require.NoError(t, json.Unmarshal(r.Body, &one))
	assert.Equal(t, writer.RollupTotals{
		Tenant: e.tenant, Currency: "-", PeriodType: "MONTHLY", Period: "2026-01",
		Totals:   writer.Totals{TotalIncome: "1000000000050.000001", TotalExpense: "3.5", TransactionCount: 76},
		Net:      "1000000000046.500001",
		Branches: 3, UpdatedAt: "2026-02-03T04:05:06.789Z",
	}, one.RollupTotals)
	assert.Empty(t, one.NextCursor, "93 names fit the default page")
	assert.Equal(t, expectedBreakdowns(want), breakdownsOf(t, []writer.Rollup{one}))
	assert.Equal(t, writer.Totals{TotalIncome: "1000000000001.250001", TotalExpense: "0", TransactionCount: 2}, one.ByCategory["c00"], "inline in lanes 0 and 31")
	assert.Equal(t, writer.Totals{TotalIncome: "1.25", TotalExpense: "0.1", TransactionCount: 2}, one.ByCategory["c35"], "an entry item of lane 0 plus an inline entry of lane 5")
	assert.Equal(t, writer.Totals{TotalIncome: "0", TotalExpense: "0.1", TransactionCount: 1}, one.ByCategory["c53"], "an entry item of lane 5")

	for _, limit := range []int{1, 7, 32, 74} {
		pages := e.rollupPages(fmt.Sprintf("%s/MONTHLY/2026-01?limit=%d", e.rollupBase(), limit))
		names := want.Entries()
		assert.Len(t, pages, (names+limit-1)/limit, "limit %d", limit)
		for _, pg := range pages {
			assert.Equal(t, one.RollupTotals, pg.RollupTotals, "the totals on every page")
			assert.LessOrEqual(t, len(pg.ByCategory)+len(pg.ByCostCenter)+len(pg.ByPaymentMethod), limit)
		}
		assert.Equal(t, expectedBreakdowns(want), breakdownsOf(t, pages), "limit %d: every name once over the pages", limit)
	}

	r = e.send(req{method: "GET", path: e.rollupBase() + "?period=MONTHLY&from=2025-12&to=2026-12"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.JSONEq(t, `{"items":[
		{"tenant":"`+e.tenant+`","currency":"-","periodType":"MONTHLY","period":"2026-01","totalIncome":"1000000000050.000001","totalExpense":"3.5","net":"1000000000046.500001","transactionCount":76,"branches":3,"updatedAt":"2026-02-03T04:05:06.789Z"},
		{"tenant":"`+e.tenant+`","currency":"-","periodType":"MONTHLY","period":"2026-02","totalIncome":"0","totalExpense":"14","net":"-14","transactionCount":4,"branches":2,"updatedAt":"2026-03-01T00:00:00Z"}
	]}`, string(r.Body))

	r = e.send(req{method: "GET", path: e.rollupBase() + "?period=MONTHLY&from=2026-01&to=2026-12&currency=BRL"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	var brl writer.RollupRange
	require.NoError(t, json.Unmarshal(r.Body, &brl))
	require.Len(t, brl.Items, 1, "a currency no branch has still reads what is stored under it")
	assert.Equal(t, "999", brl.Items[0].TotalIncome)

	r = e.send(req{method: "GET", path: e.rollupBase() + "/MONTHLY/2026-03"})
	require.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemNotFound, r.problem(t).Type)
	r = e.send(req{method: "GET", path: e.rollupBase() + "?period=DAILY&from=2026-01-01&to=2026-01-31"})
	require.Equal(t, http.StatusOK, r.Status)
	assert.JSONEq(t, `{"items":[]}`, string(r.Body))
}

// TestRollups_PagesAreBounded: a range of 130 days spread over the lanes
// comes in pages of at most 100 periods (limit=500 is capped), each
// period summed over every lane once, and a smaller limit pages as asked;
// cursors are bound to their tenant, currency, period and range.
func TestRollups_PagesAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	one := &aggregates.Report{}
	one.Add(aggregates.Totals{Income: dec("1"), Count: 1}, [3]string{"food", "", ""})
	const days = 130
	lanesOf := func(i int) map[int]bool {
		l := map[int]bool{i % aggregates.RollupLanes: true, (i * 7) % aggregates.RollupLanes: true}
		if i%2 == 0 {
			l[31] = true
		}
		return l
	}
	for i := range days {
		p := aggregates.Period{Type: aggregates.Daily, Value: start.AddDate(0, 0, i).Format("2006-01-02")}
		for lane := range lanesOf(i) {
			e.putPartial(aggregates.NoCurrency, lane, p, one, 1, "2026-06-01T00:00:00Z")
		}
	}
	want := func(i int) writer.RollupTotals {
		n := int64(len(lanesOf(i)))
		v := fmt.Sprint(n)
		return writer.RollupTotals{Tenant: e.tenant, Currency: "-", PeriodType: "DAILY", Period: start.AddDate(0, 0, i).Format("2006-01-02"),
			Totals: writer.Totals{TotalIncome: v, TotalExpense: "0", TransactionCount: n}, Net: v, Branches: n, UpdatedAt: "2026-06-01T00:00:00Z"}
	}
	rangePath := e.rollupBase() + "?period=DAILY&from=2026-01-01&to=2026-12-31"
	for _, tc := range []struct {
		limit string
		pages []int
	}{
		{"", []int{100, 30}},
		{"&limit=500", []int{100, 30}},
		{"&limit=100", []int{100, 30}},
		{"&limit=13", []int{13, 13, 13, 13, 13, 13, 13, 13, 13, 13}},
		{"&limit=1", nil},
	} {
		var got []writer.RollupTotals
		var sizes []int
		next := rangePath + tc.limit
		for range 200 {
			r := e.send(req{method: "GET", path: next})
			require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
			var pg writer.RollupRange
			require.NoError(t, json.Unmarshal(r.Body, &pg))
			sizes = append(sizes, len(pg.Items))
			got = append(got, pg.Items...)
			if pg.NextCursor == "" {
				break
			}
			next = rangePath + tc.limit + "&cursor=" + url.QueryEscape(pg.NextCursor)
		}
		if tc.pages != nil {
			assert.Equal(t, tc.pages, sizes, "limit %q", tc.limit)
		} else {
			assert.Len(t, sizes, days, "limit 1: one period a page")
		}
		require.Len(t, got, days, "limit %q", tc.limit)
		for i := range got {
			assert.Equal(t, want(i), got[i], "limit %q: day %d", tc.limit, i)
		}
	}

	r := e.send(req{method: "GET", path: rangePath + "&limit=2"})
	var pg writer.RollupRange
	require.NoError(t, json.Unmarshal(r.Body, &pg))
	require.NotEmpty(t, pg.NextCursor)
	other := newEnv(t, sharedTable(t))
	for _, bad := range []string{
		e.rollupBase() + "?period=DAILY&from=2026-01-01&to=2026-12-30&cursor=" + url.QueryEscape(pg.NextCursor),              // another range
		e.rollupBase() + "?period=DAILY&from=2026-01-01&to=2026-12-31&currency=BRL&cursor=" + url.QueryEscape(pg.NextCursor), // another currency
		e.rollupBase() + "/DAILY/2026-01-02?cursor=" + url.QueryEscape(pg.NextCursor),                                        // a single roll-up
		"/v1/tenants/" + e.tenant + "/branches/north/reports?period=DAILY&from=2026-01-01&to=2026-12-31&cursor=" + url.QueryEscape(pg.NextCursor),
	} {
		r := e.send(req{method: "GET", path: bad})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: answer %s", bad, r)
		assert.Equal(t, writer.ProblemInvalidCursor, r.problem(t).Type, bad)
	}
	// Another tenant's own token, with e's cursor on its own path: refused
	// before any read (the cursor is bound to e's tenant).
	r = other.send(req{method: "GET", path: other.rollupBase() + "?period=DAILY&from=2026-01-01&to=2026-12-31&cursor=" + url.QueryEscape(pg.NextCursor)})
	require.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemInvalidCursor, r.problem(t).Type)

	for path, field := range map[string]string{
		"?period=DAILY&from=2026-01-01":                                 "to",
		"?period=DAILY&from=2024-01-01&to=2025-01-02":                   "to",
		"?period=MONTHLY&from=2026-06&to=2026-01":                       "to",
		"?period=HOURLY&from=2026-06&to=2026-07":                        "period",
		"?period=MONTHLY&from=2026-01&to=2026-02&branch=north":          "branch",
		"?period=MONTHLY&from=2026-01&to=2026-02&limit=0":               "limit",
		"?period=MONTHLY&from=2026-01&to=2026-02&currency=-&currency=-": "currency",
		"/MONTHLY/2026-13":          "value",
		"/MONTHLY/2026-01?limit=-1": "limit",
	} {
		r := e.send(req{method: "GET", path: e.rollupBase() + path})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: answer %s", path, r)
		assert.Equal(t, field, r.problem(t).Field, path)
	}
}

// TestRollups_CurrencyRequiredWhenTheBranchesHaveSeveral: a tenant whose
// branches are in BRL, EUR and none must name the currency (422
// currency-required naming all three); each names its own roll-up; a
// currency no branch has is an empty list (and a 404 single roll-up); an
// invalid code is 422 invalid-field. A tenant of one currency may leave it
// out.
func TestRollups_CurrencyRequiredWhenTheBranchesHaveSeveral(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t)) // north and south: no currency
	for id, cur := range map[string]string{"rio": "BRL", "porto": "EUR", "lisbon": "EUR"} {
		e.seed.post("/v1/tenants/"+e.tenant+"/branches", fmt.Sprintf(`{"id":%q,"name":"Branch %s","document":%q,"currency":%q}`, id, id, uniqueDocument(), cur))
	}
	fig := func(amount string) *aggregates.Report {
		r := &aggregates.Report{}
		r.Add(aggregates.Totals{Income: dec(amount), Count: 1}, [3]string{"sales", "", ""})
		return r
	}
	jan := month("2026-01")
	e.putPartial("BRL", 2, jan, fig("100"), 1, "2026-02-01T00:00:00Z")
	e.putPartial("EUR", 2, jan, fig("20"), 1, "2026-02-01T00:00:00Z")
	e.putPartial("EUR", 9, jan, fig("3"), 1, "2026-02-01T00:00:00Z")
	e.putPartial(aggregates.NoCurrency, 2, jan, fig("4"), 1, "2026-02-01T00:00:00Z")

	for _, path := range []string{"?period=MONTHLY&from=2026-01&to=2026-12", "/MONTHLY/2026-01"} {
		r := e.send(req{method: "GET", path: e.rollupBase() + path})
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: answer %s", path, r)
		p := r.problem(t)
		assert.Equal(t, writer.ProblemCurrencyRequired, p.Type)
		assert.Equal(t, "currency", p.Field)
		assert.Contains(t, p.Detail, "3 currencies (-, BRL, EUR)")
	}
	for cur, income := range map[string]string{"BRL": "100", "EUR": "23", "-": "4"} {
		r := e.send(req{method: "GET", path: e.rollupBase() + "/MONTHLY/2026-01?currency=" + url.QueryEscape(cur)})
		require.Equal(t, http.StatusOK, r.Status, "%s: answer %s", cur, r)
		var one writer.Rollup
		require.NoError(t, json.Unmarshal(r.Body, &one))
		assert.Equal(t, cur, one.Currency)
		assert.Equal(t, income, one.TotalIncome, cur)
		assert.Equal(t, income, one.ByCategory["sales"].TotalIncome, cur)
		r = e.send(req{method: "GET", path: e.rollupBase() + "?period=MONTHLY&from=2026-01&to=2026-12&currency=" + url.QueryEscape(cur)})
		require.Equal(t, http.StatusOK, r.Status, "%s: answer %s", cur, r)
		var rng writer.RollupRange
		require.NoError(t, json.Unmarshal(r.Body, &rng))
		require.Len(t, rng.Items, 1, cur)
		assert.Equal(t, income, rng.Items[0].Net, cur)
	}
	r := e.send(req{method: "GET", path: e.rollupBase() + "?period=MONTHLY&from=2026-01&to=2026-12&currency=JPY"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.JSONEq(t, `{"items":[]}`, string(r.Body), "a currency none of the branches has: nothing, not an error")
	r = e.send(req{method: "GET", path: e.rollupBase() + "/MONTHLY/2026-01?currency=JPY"})
	require.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
	for _, bad := range []string{"brl", "XXX", "EURO", "", "none", "ZZZ"} {
		for _, path := range []string{"?period=MONTHLY&from=2026-01&to=2026-12&currency=", "/MONTHLY/2026-01?currency="} {
			r := e.send(req{method: "GET", path: e.rollupBase() + path + url.QueryEscape(bad)})
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%q: answer %s", bad, r)
			p := r.problem(t)
			assert.Equal(t, writer.ProblemInvalidField, p.Type, bad)
			assert.Equal(t, "currency", p.Field, bad)
		}
	}

	// One currency among the branches: currency may be left out.
	single := newEnv(t, sharedTable(t))
	single.putPartial(aggregates.NoCurrency, 0, jan, fig("5"), 2, "2026-02-01T00:00:00Z")
	r = single.send(req{method: "GET", path: single.rollupBase() + "/MONTHLY/2026-01"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	var one writer.Rollup
	require.NoError(t, json.Unmarshal(r.Body, &one))
	assert.Equal(t, "-", one.Currency)
	assert.Equal(t, int64(2), one.Branches)
}

// TestRollups_OnlyTheTenantsOwnTokenReadsThem: a token of another tenant
// is 403 before anything is read, whatever it asks (another tenant's
// roll-ups hold every branch's figures); no token is 401; an admin token
// reads them.
func TestRollups_OnlyTheTenantsOwnTokenReadsThem(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	fig := &aggregates.Report{}
	fig.Add(aggregates.Totals{Income: dec("42"), Count: 1}, [3]string{"secret", "", ""})
	e.putPartial(aggregates.NoCurrency, 7, month("2026-01"), fig, 1, "2026-02-01T00:00:00Z")
	paths := []string{"/MONTHLY/2026-01", "/MONTHLY/2026-01?currency=-", "?period=MONTHLY&from=2026-01&to=2026-12", "?period=MONTHLY&from=2026-01&to=2026-12&currency=-"}

	attacker := newEnv(t, sharedTable(t))
	for _, path := range paths {
		before := attacker.dynamoCalls()
		r := attacker.send(req{method: "GET", path: e.rollupBase() + path})
		require.Equal(t, http.StatusForbidden, r.Status, "%s: answer %s", path, r)
		assert.Equal(t, writer.ProblemForbidden, r.problem(t).Type)
		assert.NotContains(t, string(r.Body), "secret")
		assert.Equal(t, before, attacker.dynamoCalls(), "%s: nothing read", path)

		r = e.send(req{method: "GET", path: e.rollupBase() + path, noAuth: true})
		require.Equal(t, http.StatusUnauthorized, r.Status, "%s: answer %s", path, r)
	}
	admin, err := writer.NewToken([]byte(testSecret), writer.TokenOptions{Admin: true})
	require.NoError(t, err)
	for _, path := range paths {
		r := e.send(req{method: "GET", path: e.rollupBase() + path, headers: []string{"Authorization", "Bearer " + admin}})
		require.Equal(t, http.StatusOK, r.Status, "%s: answer %s", path, r)
		assert.Contains(t, string(r.Body), `"totalIncome":"42"`, path)
	}
	// The attacker's own tenant, asked for e's currency: its own (empty) roll-ups only.
	r := attacker.send(req{method: "GET", path: attacker.rollupBase() + "/MONTHLY/2026-01?currency=-"})
	require.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
}

// unprocessing answers every BatchGetItem's first call with half its keys
// unprocessed, as DynamoDB does under throttling or past 16 MB, in front of
// the real table.
type unprocessing struct {
	writer.DynamoDB
	calls atomic.Int64
}

func (u *unprocessing) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	if u.calls.Add(1) > 1 {
		return u.DynamoDB.BatchGetItem(ctx, in, opts...)
	}
	cp := map[string]ddbtypes.KeysAndAttributes{}
	left := map[string]ddbtypes.KeysAndAttributes{}
	for name, ka := range in.RequestItems {
		half := len(ka.Keys) / 2
		cp[name] = ddbtypes.KeysAndAttributes{Keys: ka.Keys[:half]}
		left[name] = ddbtypes.KeysAndAttributes{Keys: ka.Keys[half:]}
	}
	out, err := u.DynamoDB.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: cp}, opts...)
	if err != nil {
		return nil, err
	}
	out.UnprocessedKeys = left
	return out, nil
}

// TestRollups_UnprocessedKeysAreRead: partials BatchGetItem leaves
// unprocessed are asked for again, so the sum has every lane.
func TestRollups_UnprocessedKeysAreRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	fig := &aggregates.Report{}
	fig.Add(aggregates.Totals{Income: dec("1"), Count: 1}, [3]string{"x", "", ""})
	for _, lane := range []int{0, 15, 16, 31} { // two in each half of the keys
		e.putPartial(aggregates.NoCurrency, lane, month("2026-01"), fig, 1, "2026-02-01T00:00:00Z")
	}
	auth, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(testSecret)})
	require.NoError(t, err)
	api := &unprocessing{DynamoDB: ddbtest.Client(t)}
	srv, err := writer.New(api, writer.Config{Table: e.table, Auth: auth, CursorKey: cursorKey, FlagsTimeout: 30 * time.Second, RequestTimeout: time.Minute}, nil)
	require.NoError(t, err)
	hs := httptest.NewServer(validated(t, srv))
	t.Cleanup(hs.Close)
	hr, err := http.NewRequest("GET", hs.URL+e.rollupBase()+"/MONTHLY/2026-01?currency=-", nil)
	require.NoError(t, err)
	hr.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := hs.Client().Do(hr)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var one writer.Rollup
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&one))
	assert.Equal(t, "4", one.TotalIncome, "every lane, the unprocessed ones too")
	assert.Equal(t, int64(2), api.calls.Load())
}

// TestRollups_RangeOverPartialsWithManyEntryItems: a lane whose partials
// have hundreds of entry items each takes one Query per period (each skips
// the rest of a period's entry items), at most a bounded number a page; the
// page ends at the last period that lane read, so no period on it misses
// that lane's share, and the next page goes on from there.
func TestRollups_RangeOverPartialsWithManyEntryItems(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	big, small := &aggregates.Report{}, &aggregates.Report{}
	for i := range 400 { // 32 inline, 368 entry items
		big.Add(aggregates.Totals{Income: dec("1"), Count: 1}, [3]string{fmt.Sprintf("category %03d", i), "", ""})
	}
	small.Add(aggregates.Totals{Expense: dec("0.5"), Count: 1}, [3]string{"category 000", "", ""})
	const days = 12
	day := func(i int) aggregates.Period {
		return aggregates.Period{Type: aggregates.Daily, Value: time.Date(2026, 3, 1+i, 0, 0, 0, 0, time.UTC).Format("2006-01-02")}
	}
	for i := range days {
		e.putPartial(aggregates.NoCurrency, 3, day(i), big, 1, "2026-04-01T00:00:00Z")
		e.putPartial(aggregates.NoCurrency, 4, day(i), small, 1, "2026-04-01T00:00:00Z")
	}
	path := e.rollupBase() + "?period=DAILY&from=2026-03-01&to=2026-03-31"
	var got []writer.RollupTotals
	pages := 0
	for next := path; next != ""; pages++ {
		require.Less(t, pages, days, "the pages never end")
		r := e.send(req{method: "GET", path: next})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
		var pg writer.RollupRange
		require.NoError(t, json.Unmarshal(r.Body, &pg))
		got = append(got, pg.Items...)
		next = ""
		if pg.NextCursor != "" {
			next = path + "&cursor=" + url.QueryEscape(pg.NextCursor)
		}
	}
	// A page makes at most 8 Queries of 200 items per lane, one per period
	// of lane 3 as each skips the rest of its period's entry items: 8
	// periods on the first page, 4 on the second (reading through the entry
	// items, 1,600 items would hold 5 periods a page).
	assert.Equal(t, 2, pages, "lane 3's Queries are bounded per page, each one period")
	require.Len(t, got, days)
	for i, it := range got {
		assert.Equal(t, day(i).Value, it.Period)
		assert.Equal(t, writer.Totals{TotalIncome: "400", TotalExpense: "0.5", TransactionCount: 401}, it.Totals, "day %d: both lanes", i)
		assert.Equal(t, int64(2), it.Branches)
	}
}

// TestTenantBudget_ChargesARollupsBatchGetItem: the read units of a
// roll-up's BatchGetItem (its only call here: the currency is named and no
// partial has a full map) are charged to the tenant's budget, as every
// other read is.
func TestTenantBudget_ChargesARollupsBatchGetItem(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), func(c *writer.Config) {
		c.Now = frozen
		c.TenantBudget = writer.BudgetConfig{Rate: 1000, Timeout: patient}
	})
	fig := &aggregates.Report{}
	fig.Add(aggregates.Totals{Income: dec("1"), Count: 1}, [3]string{"x", "", ""})
	e.putPartial(aggregates.NoCurrency, 0, month("2026-01"), fig, 1, "2026-02-01T00:00:00Z")
	e.putPartial(aggregates.NoCurrency, 17, month("2026-01"), fig, 1, "2026-02-01T00:00:00Z")
	before := e.calls.Calls("Query")
	r := e.send(req{method: "GET", path: e.rollupBase() + "/MONTHLY/2026-01?currency=-"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Equal(t, 1, e.calls.Calls("BatchGetItem"))
	assert.Equal(t, before, e.calls.Calls("Query"), "no Query: the currency is named, no map is full")
	assert.Positive(t, testutil.ToFloat64(e.metrics.TenantBudgetCharged.WithLabelValues("read")), "the BatchGetItem's read units")
}

// TestRollups_ReadCostIsOneBatchGetItemOrOneQueryPerLane: a day's or a
// month's roll-up is one BatchGetItem of the 32 partials (no map full: no Query),
// a year of months 32 Queries, one per partial partition; naming no
// currency adds one Query (the branch partition). It logs the read units
// the budget charged (DynamoDB Local's accounting; docs/design.md "Reads").
func TestRollups_ReadCostIsOneBatchGetItemOrOneQueryPerLane(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), func(c *writer.Config) {
		c.Now = frozen
		c.TenantBudget = writer.BudgetConfig{Rate: 1e6, Burst: 1e6, Timeout: patient}
	})
	fig := &aggregates.Report{}
	for i := range 24 {
		fig.Add(aggregates.Totals{Income: dec("123.45"), Count: 1}, [3]string{fmt.Sprintf("category %02d", i%8), fmt.Sprintf("cc %d", i%3), []string{"card", "cash", "pix"}[i%3]})
	}
	for m := 1; m <= 12; m++ {
		for lane := range aggregates.RollupLanes {
			e.putPartial(aggregates.NoCurrency, lane, month(fmt.Sprintf("2026-%02d", m)), fig, 1, "2026-12-31T00:00:00Z")
		}
	}
	for lane := range aggregates.RollupLanes {
		e.putPartial(aggregates.NoCurrency, lane, aggregates.Period{Type: aggregates.Daily, Value: "2026-06-15"}, fig, 1, "2026-12-31T00:00:00Z")
	}
	read := func() float64 { return testutil.ToFloat64(e.metrics.TenantBudgetCharged.WithLabelValues("read")) }
	for _, tc := range []struct {
		path             string
		batchGets, query int
	}{
		{"/DAILY/2026-06-15?currency=-", 1, 0},
		{"/MONTHLY/2026-06?currency=-", 1, 0},
		{"/MONTHLY/2026-06", 1, 1},
		{"?period=MONTHLY&from=2026-01&to=2026-12&currency=-", 0, aggregates.RollupLanes},
		{"?period=MONTHLY&from=2026-01&to=2026-12", 0, aggregates.RollupLanes + 1},
	} {
		r0, b0, q0 := read(), e.calls.Calls("BatchGetItem"), e.calls.Calls("Query")
		r := e.send(req{method: "GET", path: e.rollupBase() + tc.path})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
		assert.Equal(t, tc.batchGets, e.calls.Calls("BatchGetItem")-b0, tc.path)
		assert.Equal(t, tc.query, e.calls.Calls("Query")-q0, tc.path)
		t.Logf("%s: %.1f read units, %d bytes answered", tc.path, read()-r0, len(r.Body))
	}
}
