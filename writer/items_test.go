package writer

import (
	"testing"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
)

// TestDecodeReport_AgreesWithTheProcessor checks that the writer reads report
// items as processor.DecodeReport does: the same figures, the same refusals.
func TestDecodeReport_AgreesWithTheProcessor(t *testing.T) {
	k := aggregates.ReportKey{Tenant: "acme", Branch: "north", Period: aggregates.Period{Type: aggregates.Monthly, Value: "2026-01"}}
	rep := &aggregates.Report{}
	rep.Add(aggregates.Totals{Income: decimal.RequireFromString("1.10"), Count: 1}, [3]string{"x#y", "ops", ""})
	rep.Add(aggregates.Totals{Expense: decimal.RequireFromString("0.00000001"), Count: 1}, [3]string{"café ☕", "", "card"})
	n := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberN{Value: v} }
	m := func(kv ...any) ddbtypes.AttributeValue {
		out := map[string]ddbtypes.AttributeValue{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1].(ddbtypes.AttributeValue)
		}
		return &ddbtypes.AttributeValueMemberM{Value: out}
	}
	items := map[string]map[string]ddbtypes.AttributeValue{
		"encoded":             processor.EncodeReport(k, rep, "2026-02-01T00:00:00Z"),
		"empty":               {},
		"figures missing":     {"byCategory": m("a", m("totalIncome", n("1")))},
		"zero entry":          {"transactionCount": n("0"), "byCategory": m("a", m("totalIncome", n("0"), "totalExpense", n("0"), "transactionCount", n("0")))},
		"count not integer":   {"transactionCount": n("1.5")},
		"income not a number": {"totalIncome": &ddbtypes.AttributeValueMemberS{Value: "1"}},
		"breakdown not a map": {"byCostCenter": &ddbtypes.AttributeValueMemberS{Value: "x"}},
		"entry not a map":     {"byPaymentMethod": m("card", n("1"))},
		"bad number":          {"totalExpense": n("1e")},
	}
	for name, item := range items {
		want, werr := processor.DecodeReport(item)
		_, got, gerr := decodeReport(k, item)
		if werr != nil {
			assert.Error(t, gerr, name)
			continue
		}
		require.NoError(t, gerr, name)
		want.Prune()
		assert.True(t, got.Equal(want), "%s: got %s; want %s", name, got, want)
	}
}
