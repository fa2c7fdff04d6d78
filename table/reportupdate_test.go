package table_test

import (
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// A part of a report's delta holds up to MaxInlineEntries (32) entries
// (processor.Config.MaxEntriesPerItem): its update must fit DynamoDB's
// 4 KB expression limit in the longest form, every entry inline already
// with all three figures changing, and in every other.
func TestReportUpdate_ThirtyTwoEntriesFitOneExpression(t *testing.T) {
	k := aggregates.ReportKey{Tenant: "t", Branch: "b", Period: aggregates.Period{Type: aggregates.Yearly, Value: "2024"}}
	fig := aggregates.Totals{Income: decimal.RequireFromString("123456789.12"), Expense: decimal.RequireFromString("98765.43"), Count: 12345}
	full := func(d aggregates.Dimension, n int) *aggregates.Report {
		r := &aggregates.Report{Totals: fig}
		r.Breakdowns[d] = map[string]aggregates.Totals{}
		for i := range n {
			r.Breakdowns[d][fmt.Sprintf("name %02d", i)] = fig
		}
		return r
	}
	spread := &aggregates.Report{Totals: fig}
	for i := range table.MaxInlineEntries {
		d := aggregates.Dimensions[i%3]
		if spread.Breakdowns[d] == nil {
			spread.Breakdowns[d] = map[string]aggregates.Totals{}
		}
		spread.Breakdowns[d][fmt.Sprintf("name %02d", i)] = fig
	}
	inline := func(r *aggregates.Report) table.ReportShape {
		var sh table.ReportShape
		for _, d := range aggregates.Dimensions {
			if len(r.Breakdowns[d]) == 0 {
				continue
			}
			sh.Present[d] = true
			sh.Entries[d] = map[string]bool{}
			for name := range r.Breakdowns[d] {
				sh.Entries[d][name] = true
			}
		}
		return sh
	}
	fullMap := table.ReportShape{Present: [3]bool{true, true, true}}
	for _, d := range aggregates.Dimensions {
		fullMap.Entries[d] = map[string]bool{}
		for i := range table.MaxInlineEntries {
			fullMap.Entries[d][fmt.Sprintf("other %02d", i)] = true
		}
	}
	tests := []struct {
		name  string
		delta *aggregates.Report
		shape table.ReportShape
	}{
		{"32 inline entries of one map", full(aggregates.ByCategory, table.MaxInlineEntries), inline(full(aggregates.ByCategory, table.MaxInlineEntries))},
		{"32 inline entries over three maps", spread, inline(spread)},
		{"32 new entries, maps absent", spread, table.ReportShape{}},
		{"32 new entries, maps full: entry items", spread, fullMap},
		{"32 new entries, maps damaged: entry items", spread, table.ReportShape{Present: [3]bool{true, true, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := table.ReportUpdate("ledger", k, tt.delta, tt.shape, "2026-11-24T12:00:00.123456789Z")
			require.NoError(t, err)
			u := w.Updates[0]
			assert.LessOrEqual(t, len(aws.ToString(u.UpdateExpression)), 4096)
			assert.LessOrEqual(t, len(aws.ToString(u.ConditionExpression)), 4096)
		})
	}
}
