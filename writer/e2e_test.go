package writer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// domain turns an API transaction into the domain's, for the oracle fold:
// its periods those of its UTC date (aggregates.LegacyStamp), what the
// default calendar and period types give, as every report was before
// business calendars.
func domain(t *testing.T, tx writer.Transaction) aggregates.Transaction {
	t.Helper()
	created, err := time.Parse(time.RFC3339Nano, tx.CreatedAt)
	require.NoError(t, err)
	amount, err := aggregates.ParseAmount(tx.Amount)
	require.NoError(t, err)
	return aggregates.Transaction{
		Tenant: tx.Tenant, Branch: tx.Branch, ID: tx.ID, Type: aggregates.Type(tx.Type), Amount: amount,
		Category: tx.Category, CostCenter: tx.CostCenter, PaymentMethod: tx.PaymentMethod,
		CreatedAt: created, Date: aggregates.DateOf(created), Stamp: aggregates.LegacyStamp(aggregates.DateOf(created)),
	}
}

// served converts a report the writer served back to figures.
func served(t *testing.T, r writer.Report) *aggregates.Report {
	t.Helper()
	totals := func(x writer.Totals) aggregates.Totals {
		i, err := aggregates.ParseAmount(x.TotalIncome)
		require.NoError(t, err)
		e, err := aggregates.ParseAmount(x.TotalExpense)
		require.NoError(t, err)
		return aggregates.Totals{Income: i, Expense: e, Count: x.TransactionCount}
	}
	out := &aggregates.Report{Totals: totals(r.Totals)}
	for d, m := range map[aggregates.Dimension]map[string]writer.Totals{
		aggregates.ByCategory: r.ByCategory, aggregates.ByCostCenter: r.ByCostCenter, aggregates.ByPaymentMethod: r.ByPaymentMethod,
	} {
		for name, x := range m {
			if out.Breakdowns[d] == nil {
				out.Breakdowns[d] = map[string]aggregates.Totals{}
			}
			out.Breakdowns[d][name] = totals(x)
		}
	}
	return out
}

// TestEndToEnd_ReportsServedEqualTheReconcileOracle drives the writer over
// HTTP with creates (some retried), patches of every aggregated field and
// deletes, runs the processor over the table's stream, and checks that the
// reports the writer serves equal the fold of the transactions the writer
// lists, and that processor.Reconcile finds no difference.
func TestEndToEnd_ReportsServedEqualTheReconcileOracle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, ownTable(t))
	rng := rand.New(rand.NewPCG(4, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	branches := []string{"north", "south"}
	// createdAt values around day, month, year and leap-day boundaries, with
	// offsets whose UTC date differs from the local one.
	times := []string{"2023-12-31T23:59:59.999Z", "2024-01-01T00:00:00Z", "2024-02-29T12:00:00+09:00",
		"2024-03-01T01:00:00+02:00", "2024-12-31T22:00:00-05:00", "2024-06-15T08:30:00.123456Z", "2025-01-01T00:00:00.001Z"}
	categories := []string{"food", "a.b", "café ☕", "with space", "k:v", "sl/ash", "R&D"}
	amounts := []string{"0.1", "1.10", "12345.6789", "0.00000001", "250", "99.99"}

	model := map[string]writer.Transaction{} // id → what the writer should hold
	post := func(branch, body, key string) writer.Transaction {
		r := e.send(req{method: "POST", path: "/v1/tenants/" + e.tenant + "/branches/" + branch + "/transactions", body: body,
			headers: []string{"Idempotency-Key", key}})
		require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
		return r.transaction(t)
	}
	for i := range 70 {
		body := map[string]any{"type": pick("INCOME", "EXPENSE"), "amount": pick(amounts...), "category": pick(categories...),
			"createdAt": pick(times...)}
		if rng.IntN(3) > 0 {
			body["costCenter"] = pick("cc-1", "ops")
		}
		if rng.IntN(3) > 0 {
			body["paymentMethod"] = pick("card", "cash", "pix")
		}
		raw, _ := json.Marshal(body)
		key := "e2e-" + strconv.Itoa(i)
		tx := post(pick(branches...), string(raw), key)
		model[tx.ID] = tx
		if i%10 == 0 { // a retry: replayed, not counted twice
			again := post(tx.Branch, string(raw), key)
			require.Equal(t, tx, again)
		}
	}
	ids := make([]string, 0, len(model))
	for id := range model {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids[:30] {
		tx := model[id]
		patch := map[string]any{}
		switch rng.IntN(5) {
		case 0:
			patch["amount"] = pick(amounts...)
		case 1:
			patch["type"] = map[string]string{"INCOME": "EXPENSE", "EXPENSE": "INCOME"}[tx.Type]
		case 2:
			patch["category"] = pick(categories...)
		case 3:
			patch["costCenter"] = nil
			patch["paymentMethod"] = pick("card", "wire")
		default:
			patch["amount"], patch["category"], patch["costCenter"] = pick(amounts...), pick(categories...), "ops"
		}
		raw, _ := json.Marshal(patch)
		r := e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/" + tx.Branch + "/transactions/" + id,
			body: string(raw), headers: []string{"If-Match", etagOf(tx.Version)}})
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
		model[id] = r.transaction(t)
	}
	for _, id := range ids[30:45] {
		tx := model[id]
		r := e.send(req{method: "DELETE", path: "/v1/tenants/" + e.tenant + "/branches/" + tx.Branch + "/transactions/" + id})
		require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
		delete(model, id)
	}

	// The stream consumer folds everything the writer wrote.
	info, err := table.DescribeTable(ctx, e.ddb, e.table)
	require.NoError(t, err)
	shards, err := ledgertest.ReadAll(ctx, dynamodbstreams.NewFromConfig(ddbtest.Config(t)), info.StreamARN, nil)
	require.NoError(t, err)
	p, err := processor.New(e.ddb, processor.Config{Table: e.table}, nil)
	require.NoError(t, err)
	historyRecords := 0
	for _, sh := range shards {
		res, err := p.Process(ctx, p.ShardGuard(info.StreamARN, sh.ID), sh.Records)
		require.NoError(t, err)
		assert.Zero(t, res.Quarantined, "the writer writes only valid transactions")
		for _, r := range sh.Records {
			if pk, _ := table.String(r.Keys, table.AttrPK); strings.HasSuffix(pk, "#HISTORY") {
				historyRecords++
			}
		}
	}
	// The audit trail's entries ride in the stream beside the transactions
	// (ignored by the consumer, above): one per write, none per replay.
	assert.Equal(t, 70+30+15, historyRecords)

	diffs, stats, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
	require.NoError(t, err)
	assert.Empty(t, diffs, "reconcile finds no difference")
	assert.Equal(t, len(model), stats.Transactions)
	assert.Zero(t, stats.Invalid)

	// What the writer lists is the model; what it serves is their fold.
	fold := aggregates.NewFold()
	listed := 0
	for _, b := range branches {
		for _, tx := range e.listAll(b) {
			assert.Equal(t, model[tx.ID], tx)
			fold.Add(domain(t, tx), +1)
			listed++
		}
	}
	require.Equal(t, len(model), listed)

	checked := 0
	for _, k := range fold.Keys() {
		want := fold.Report(k)
		want.Prune()
		got := e.getReport(k)
		assert.Empty(t, served(t, got).Diff(want), "%s", k)
		assert.NotEmpty(t, got.UpdatedAt, "%s says how fresh it is", k)
		checked++
	}
	t.Logf("%d transactions, %d stream records, %d reports equal to the oracle", len(model), len(shards[0].Records), checked)

	// The range endpoint serves the same figures, for every report of the
	// fold; reports whose transactions all went away are served with zeros.
	ranges := [][3]string{{"DAILY", "2023-12-31", "2024-12-30"}, {"DAILY", "2024-12-31", "2025-01-01"},
		{"MONTHLY", "2023-12", "2025-01"}, {"YEARLY", "2023", "2025"}}
	seen := map[aggregates.ReportKey]bool{}
	for _, b := range branches {
		for _, rg := range ranges {
			r := e.send(req{method: "GET", path: "/v1/tenants/" + e.tenant + "/branches/" + b + "/reports?period=" + rg[0] + "&from=" + rg[1] + "&to=" + rg[2]})
			require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
			var page writer.ReportRange
			require.NoError(t, json.Unmarshal(r.Body, &page))
			for _, got := range page.Items {
				k := aggregates.ReportKey{Tenant: e.tenant, Branch: b, Period: aggregates.Period{Type: aggregates.PeriodType(rg[0]), Value: got.PeriodValue}}
				want := fold.Report(k)
				if want == nil {
					want = &aggregates.Report{}
				}
				want.Prune()
				assert.Empty(t, served(t, got).Diff(want), "%s", k)
				seen[k] = true
			}
		}
	}
	for _, k := range fold.Keys() {
		assert.True(t, seen[k], "%s served by a range", k)
	}
}

// getReport reads report k through the writer's API and requires 200.
func (e *env) getReport(k aggregates.ReportKey) writer.Report {
	e.t.Helper()
	r := e.send(req{method: "GET", path: fmt.Sprintf("/v1/tenants/%s/branches/%s/reports/%s/%s", k.Tenant, k.Branch, k.Period.Type, k.Period.Value)})
	require.Equal(e.t, http.StatusOK, r.Status, "%s: answer %s", k, r)
	var got writer.Report
	require.NoError(e.t, json.Unmarshal(r.Body, &got))
	return got
}

func etagOf(v int64) string { return `"` + strconv.FormatInt(v, 10) + `"` }

// listAll follows the cursor through a branch's whole listing.
func (e *env) listAll(branch string) []writer.Transaction {
	e.t.Helper()
	var all []writer.Transaction
	cursor := ""
	for {
		path := "/v1/tenants/" + e.tenant + "/branches/" + branch + "/transactions?limit=17"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := e.send(req{method: "GET", path: path})
		require.Equal(e.t, http.StatusOK, r.Status, "answer %s", r)
		var page writer.ListPage
		require.NoError(e.t, json.Unmarshal(r.Body, &page))
		all = append(all, page.Items...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
}
