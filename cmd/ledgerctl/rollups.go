package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// Tenant roll-ups in ledgerctl report (without --branch): read from the
// table with consistent reads (table.ReadRollups), one table per currency.

// rollupReport prints the roll-ups of tenant of period type pt, from and
// to inclusive ("" open), in currency cur or, when cur is "", in every
// currency of the tenant's branches.
func (e *environment) rollupReport(ctx context.Context, api QueryAPI, tenant, cur string, pt aggregates.PeriodType, from, to string, dim *aggregates.Dimension, asJSON bool) int {
	curs := []string{cur}
	if cur == "" {
		var err error
		if curs, err = table.BranchCurrencies(ctx, api, e.table, tenant, true); err != nil {
			return e.fail(err)
		}
	}
	var all [][]table.RollupSum
	for _, c := range curs {
		sums, err := table.ReadRollups(ctx, api, e.table, tenant, c, pt, from, to, true)
		if err != nil {
			return e.fail(err)
		}
		all = append(all, sums)
	}
	if asJSON {
		views := []writer.Rollup{}
		for _, sums := range all {
			for _, s := range sums {
				views = append(views, rollupView(s))
			}
		}
		b, err := json.MarshalIndent(views, "", "  ")
		if err != nil {
			return e.fail(err)
		}
		fmt.Fprintf(e.stdout, "%s\n", b)
		return exitOK
	}
	if len(curs) == 0 {
		fmt.Fprintf(e.stdout, "tenant %s has no branches: no roll-ups\n", tenant)
		return exitOK
	}
	for i, c := range curs {
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		if err := printRollups(e.stdout, tenant, c, pt, all[i], dim); err != nil {
			return e.fail(err)
		}
	}
	return exitOK
}

// printRollups writes the roll-ups of one currency as an aligned table
// under a line naming the currency, or says there are none.
func printRollups(w io.Writer, tenant, cur string, pt aggregates.PeriodType, sums []table.RollupSum, dim *aggregates.Dimension) error {
	name := cur
	if cur == aggregates.NoCurrency {
		name = "no currency (-)"
	}
	if len(sums) == 0 {
		_, err := fmt.Fprintf(w, "%s roll-ups of tenant %s in %s: no roll-ups yet\n", pt, tenant, name)
		return err
	}
	if _, err := fmt.Fprintf(w, "%s roll-ups of tenant %s in %s (all its branches in that currency):\n\n", pt, tenant, name); err != nil {
		return err
	}
	t := newTable("currency", "period", "income", "expense", "net", "count", "branches").alignRight(2, 3, 4, 5, 6)
	for _, s := range sums {
		r := s.Report.Totals
		t.add(cur, s.Period.Value, money(r.Income), money(r.Expense), money(r.Income.Sub(r.Expense)), fmt.Sprint(r.Count), fmt.Sprint(s.Branches))
		if dim == nil {
			continue
		}
		entries := s.Report.Breakdowns[*dim]
		for _, n := range sortedKeys(entries) {
			e := entries[n]
			t.add("", "  "+n, money(e.Income), money(e.Expense), money(e.Income.Sub(e.Expense)), fmt.Sprint(e.Count), "")
		}
	}
	return t.write(w)
}

// rollupView is a roll-up as the writer's API shows it (docs/api.md), all
// its entries on one page.
func rollupView(s table.RollupSum) writer.Rollup {
	t := s.Report.Totals
	v := writer.Rollup{RollupTotals: writer.RollupTotals{
		Tenant: s.Tenant, Currency: s.Currency, PeriodType: string(s.Period.Type), Period: s.Period.Value,
		Totals: totalsView(t), Net: aggregates.FormatAmount(t.Income.Sub(t.Expense)), Branches: s.Branches, UpdatedAt: s.UpdatedAt,
	}}
	maps := [3]*map[string]writer.Totals{&v.ByCategory, &v.ByCostCenter, &v.ByPaymentMethod}
	for _, d := range aggregates.Dimensions {
		*maps[d] = map[string]writer.Totals{}
		for name, e := range s.Report.Breakdowns[d] {
			(*maps[d])[name] = totalsView(e)
		}
	}
	return v
}

// rollups reads the sample tenant's roll-ups in currency cur of one period
// type, from and to inclusive, through the API (every page).
func (c *apiClient) rollups(ctx context.Context, pt aggregates.PeriodType, from, to, cur string) ([]writer.RollupTotals, error) {
	q := url.Values{"period": {string(pt)}, "from": {from}, "to": {to}, "currency": {cur}}
	var out []writer.RollupTotals
	for {
		var rr writer.RollupRange
		if err := c.do(ctx, http.MethodGet, "/v1/tenants/"+url.PathEscape(sampleTenant)+"/reports?"+q.Encode(), nil, "", &rr); err != nil {
			return nil, fmt.Errorf("roll-ups in %s: %w", cur, err)
		}
		out = append(out, rr.Items...)
		if rr.NextCursor == "" {
			return out, nil
		}
		q.Set("cursor", rr.NextCursor)
	}
}

// printChainRollups prints, after the branches' reports, the sample
// tenant's monthly and fiscal-year roll-ups (all its branches together),
// one table per currency of its branches (currencies maps a branch to its
// currency, "" for none), read through the writer's API; or says there are
// none yet (until the stream consumers write them).
func (c *apiClient) printChainRollups(ctx context.Context, w io.Writer, currencies map[string]string) error {
	seen := map[string]bool{}
	for _, b := range sampleBranches {
		cur := currencies[b]
		if cur == "" {
			cur = aggregates.NoCurrency
		}
		seen[cur] = true
	}
	curs := slices.Sorted(maps.Keys(seen))
	for _, v := range []struct {
		title    string
		pt       aggregates.PeriodType
		from, to string
	}{
		{"Monthly", aggregates.Monthly, sampleMonths[0], sampleMonths[len(sampleMonths)-1]},
		{"Fiscal-year", aggregates.FiscalYear, "FY2026", "FY2027"},
	} {
		fmt.Fprintf(w, "\n%s roll-ups of tenant %s (the whole chain, one table per currency; read through the writer's API):\n\n", v.title, sampleTenant)
		t := newTable("currency", "period", "income", "expense", "net", "count", "branches").alignRight(2, 3, 4, 5, 6)
		rows := 0
		for _, cur := range curs {
			items, err := c.rollups(ctx, v.pt, v.from, v.to, cur)
			if err != nil {
				return err
			}
			for _, it := range items {
				t.add(it.Currency, it.Period, moneyString(it.TotalIncome), moneyString(it.TotalExpense), moneyString(it.Net), fmt.Sprint(it.TransactionCount), fmt.Sprint(it.Branches))
				rows++
			}
		}
		if rows == 0 {
			fmt.Fprintf(w, "no roll-ups yet in %s (the stream consumers fold them in after the branch reports)\n", strings.Join(curs, ", "))
			continue
		}
		if err := t.write(w); err != nil {
			return err
		}
	}
	return nil
}

// moneyString prints a decimal string of the API as money does.
func moneyString(s string) string {
	d, err := decimal.NewFromString(s)
	if err != nil {
		return s
	}
	return money(d)
}
