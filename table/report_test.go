package table_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

func TestEncodeReport_DecodesToTheSameFigures(t *testing.T) {
	k := aggregates.ReportKey{Tenant: "acme", Branch: "north", Period: aggregates.Period{Type: aggregates.Monthly, Value: "2026-01"}}
	rep := &aggregates.Report{}
	rep.Add(aggregates.Totals{Income: decimal.RequireFromString("1.10"), Count: 1}, [3]string{"x#y", "ops", ""})
	rep.Add(aggregates.Totals{Expense: decimal.RequireFromString("0.00000001"), Count: 1}, [3]string{"café ☕", "", "card"})

	item, entries := table.EncodeReport(k, rep, "2026-02-01T00:00:00Z")
	assert.Empty(t, entries, "a few names fit inline")
	assert.Equal(t, &types.AttributeValueMemberS{Value: aggregates.EntityReport}, item[table.AttrEntityType])
	assert.Equal(t, &types.AttributeValueMemberS{Value: "MONTHLY"}, item[table.AttrPeriodType])
	assert.Equal(t, &types.AttributeValueMemberS{Value: "2026-01"}, item[table.AttrPeriodValue])
	assert.Equal(t, &types.AttributeValueMemberS{Value: "2026-02-01T00:00:00Z"}, item[table.AttrUpdatedAt])
	got, problems := (&table.StoredReport{Key: k, Item: item}).Decode()
	require.Empty(t, problems)
	assert.True(t, got.Equal(rep), "got %s; want %s", got, rep)

	empty, _ := table.EncodeReport(k, &aggregates.Report{}, "2026-02-01T00:00:00Z")
	for _, d := range aggregates.Dimensions {
		assert.NotContains(t, empty, d.Attribute(), "an empty breakdown is left out")
	}
}

// TestEncodeReport_SpillsPastTheInlineLimitAndDecodesBack: a report of
// many names keeps MaxInlineEntries of each dimension inline, in name
// order, and the rest as entry items that sort after the report item; the
// items decode to the same figures, and a name in both places sums.
func TestEncodeReport_SpillsPastTheInlineLimitAndDecodesBack(t *testing.T) {
	k := aggregates.ReportKey{Tenant: "acme", Branch: "north", Period: aggregates.Period{Type: aggregates.Yearly, Value: "2026"}}
	rep := &aggregates.Report{}
	for i := range 100 {
		rep.Add(aggregates.Totals{Income: decimal.NewFromInt(int64(i + 1)), Count: 1}, [3]string{fmt.Sprintf("c%03d", i), fmt.Sprintf("cc#%03d", i%40), "card"})
	}
	item, entries := table.EncodeReport(k, rep, "2026-02-01T00:00:00Z")
	require.Len(t, entries, (100-table.MaxInlineEntries)+(40-table.MaxInlineEntries))
	inline := item[aggregates.ByCategory.Attribute()].(*types.AttributeValueMemberM).Value
	assert.Len(t, inline, table.MaxInlineEntries)
	assert.Contains(t, inline, "c000")
	assert.NotContains(t, inline, "c099")
	set := table.ReportSet{}
	require.NoError(t, set.Add(item))
	for _, e := range entries {
		require.NoError(t, set.Add(e))
		sk := e[table.AttrSK].(*types.AttributeValueMemberS).Value
		assert.True(t, strings.HasPrefix(sk, "YEARLY#2026#"), sk)
	}
	require.Len(t, set, 1)
	got, problems := set[k].Decode()
	require.Empty(t, problems)
	assert.True(t, got.Equal(rep), "got %s; want %s", got, rep)

	// The same name inline and in an entry item: the figures add up.
	set[k].Entries = append(set[k].Entries, table.EncodeEntry(k, aggregates.ByCategory, "c000", aggregates.Totals{Income: decimal.NewFromInt(5), Count: 2}))
	got, problems = set[k].Decode()
	require.Empty(t, problems)
	assert.Equal(t, "6", got.Breakdowns[aggregates.ByCategory]["c000"].Income.String())
	assert.Equal(t, int64(3), got.Breakdowns[aggregates.ByCategory]["c000"].Count)
}

// TestDecodeReport_MissingFiguresAreZeroMalformedOnesAreProblems holds the
// cases the writer and the consumers once checked they agreed on: a
// malformed figure reads as zero and is named, never a failure.
func TestDecodeReport_MissingFiguresAreZeroMalformedOnesAreProblems(t *testing.T) {
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	m := func(kv ...any) types.AttributeValue {
		out := map[string]types.AttributeValue{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1].(types.AttributeValue)
		}
		return &types.AttributeValueMemberM{Value: out}
	}
	one := &aggregates.Report{Totals: aggregates.Totals{Income: decimal.NewFromInt(1)}}
	for _, tc := range []struct {
		name    string
		item    map[string]types.AttributeValue
		want    *aggregates.Report
		wantErr string
	}{
		{name: "empty", item: map[string]types.AttributeValue{}, want: &aggregates.Report{}},
		{name: "figures missing", item: map[string]types.AttributeValue{"totalIncome": n("1")}, want: one},
		{name: "inline entry lacking figures", item: map[string]types.AttributeValue{"byCategory": m("a", m("totalIncome", n("1")))}, wantErr: `byCategory["a"] lacks totalExpense`},
		{name: "zero entry", item: map[string]types.AttributeValue{"transactionCount": n("0"), "byCategory": m("a", m("totalIncome", n("0"), "totalExpense", n("0"), "transactionCount", n("0")))}, want: &aggregates.Report{}},
		{name: "count not integer", item: map[string]types.AttributeValue{"transactionCount": n("1.5")}, wantErr: "transactionCount 1.5 is not an integer"},
		{name: "income not a number", item: map[string]types.AttributeValue{"totalIncome": &types.AttributeValueMemberS{Value: "1"}}, wantErr: "totalIncome is not a number"},
		{name: "breakdown not a map", item: map[string]types.AttributeValue{"byCostCenter": &types.AttributeValueMemberS{Value: "x"}}, wantErr: "byCostCenter is not a map"},
		{name: "entry not a map", item: map[string]types.AttributeValue{"byPaymentMethod": m("card", n("1"))}, wantErr: `byPaymentMethod["card"] is not a map`},
		{name: "bad number", item: map[string]types.AttributeValue{"totalExpense": n("1e")}, wantErr: "totalExpense: "},
		{name: "oversized", item: map[string]types.AttributeValue{"byCategory": m("a", m("totalIncome", n("1"), "pad", &types.AttributeValueMemberS{Value: strings.Repeat("x", 300<<10)}))}, wantErr: "bytes, more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			item := map[string]types.AttributeValue{table.AttrEntityType: &types.AttributeValueMemberS{Value: aggregates.EntityReport}}
			for a, v := range tc.item {
				item[a] = v
			}
			got, problems := (&table.StoredReport{Item: item}).Decode()
			if tc.wantErr != "" {
				require.NotEmpty(t, problems)
				assert.Contains(t, strings.Join(problems, "\n"), tc.wantErr)
				assert.NotEmpty(t, table.CheckReportItem(item), "a commit would be refused on it")
				return
			}
			require.Empty(t, problems)
			assert.Empty(t, table.CheckReportItem(item))
			assert.True(t, got.Equal(tc.want), "got %s; want %s", got, tc.want)
		})
	}
}
