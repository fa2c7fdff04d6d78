package infra_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
)

func TestEncodeReport_DecodesToTheSameFigures(t *testing.T) {
	k := aggregates.ReportKey{Tenant: "acme", Branch: "north", Period: aggregates.Period{Type: aggregates.Monthly, Value: "2026-01"}}
	rep := &aggregates.Report{}
	rep.Add(aggregates.Totals{Income: decimal.RequireFromString("1.10"), Count: 1}, [3]string{"x#y", "ops", ""})
	rep.Add(aggregates.Totals{Expense: decimal.RequireFromString("0.00000001"), Count: 1}, [3]string{"café ☕", "", "card"})

	item := infra.EncodeReport(k, rep, "2026-02-01T00:00:00Z")
	assert.Equal(t, &types.AttributeValueMemberS{Value: aggregates.EntityReport}, item[infra.AttrEntityType])
	assert.Equal(t, &types.AttributeValueMemberS{Value: "MONTHLY"}, item[infra.AttrPeriodType])
	assert.Equal(t, &types.AttributeValueMemberS{Value: "2026-01"}, item[infra.AttrPeriodValue])
	assert.Equal(t, &types.AttributeValueMemberS{Value: "2026-02-01T00:00:00Z"}, item[infra.AttrUpdatedAt])
	got, err := infra.DecodeReport(item)
	require.NoError(t, err)
	assert.True(t, got.Equal(rep), "got %s; want %s", got, rep)

	empty := infra.EncodeReport(k, &aggregates.Report{}, "2026-02-01T00:00:00Z")
	for _, d := range aggregates.Dimensions {
		assert.NotContains(t, empty, d.Attribute(), "an empty breakdown is left out")
	}
}

// TestDecodeReport_MissingFiguresAreZeroWrongTypesAreRefused holds the
// cases the writer and the consumers once checked they agreed on, now that
// both read report items with DecodeReport.
func TestDecodeReport_MissingFiguresAreZeroWrongTypesAreRefused(t *testing.T) {
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	m := func(kv ...any) types.AttributeValue {
		out := map[string]types.AttributeValue{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1].(types.AttributeValue)
		}
		return &types.AttributeValueMemberM{Value: out}
	}
	one := &aggregates.Report{}
	one.Breakdowns[aggregates.ByCategory] = map[string]aggregates.Totals{"a": {Income: decimal.NewFromInt(1)}}
	for _, tc := range []struct {
		name    string
		item    map[string]types.AttributeValue
		want    *aggregates.Report
		wantErr string
	}{
		{name: "empty", item: map[string]types.AttributeValue{}, want: &aggregates.Report{}},
		{name: "figures missing", item: map[string]types.AttributeValue{"byCategory": m("a", m("totalIncome", n("1")))}, want: one},
		{name: "zero entry", item: map[string]types.AttributeValue{"transactionCount": n("0"), "byCategory": m("a", m("totalIncome", n("0"), "totalExpense", n("0"), "transactionCount", n("0")))}, want: &aggregates.Report{}},
		{name: "count not integer", item: map[string]types.AttributeValue{"transactionCount": n("1.5")}, wantErr: "transactionCount 1.5 is not an integer"},
		{name: "income not a number", item: map[string]types.AttributeValue{"totalIncome": &types.AttributeValueMemberS{Value: "1"}}, wantErr: "totalIncome is not a number"},
		{name: "breakdown not a map", item: map[string]types.AttributeValue{"byCostCenter": &types.AttributeValueMemberS{Value: "x"}}, wantErr: "byCostCenter is not a map"},
		{name: "entry not a map", item: map[string]types.AttributeValue{"byPaymentMethod": m("card", n("1"))}, wantErr: `byPaymentMethod["card"] is not a map`},
		{name: "bad number", item: map[string]types.AttributeValue{"totalExpense": n("1e")}, wantErr: "totalExpense: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := infra.DecodeReport(tc.item)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.True(t, got.Equal(tc.want), "got %s; want %s", got, tc.want)
		})
	}
}
