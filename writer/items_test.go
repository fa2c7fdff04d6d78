package writer

import (
	"fmt"
	"testing"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// TestDecodeReport_NamesTheReportAndLeavesOutZeroEntries checks what the
// writer adds to table.DecodeReport (whose own cases are in infra): a
// refusal names the report, an all-zero entry is not shown.
func TestDecodeReport_NamesTheReportAndLeavesOutZeroEntries(t *testing.T) {
	k := aggregates.ReportKey{Tenant: "acme", Branch: "north", Period: aggregates.Period{Type: aggregates.Monthly, Value: "2026-01"}}
	_, err := decodeReport(k, &table.StoredReport{Key: k, Item: map[string]ddbtypes.AttributeValue{
		"entityType": &ddbtypes.AttributeValueMemberS{Value: "REPORT"}, "transactionCount": &ddbtypes.AttributeValueMemberN{Value: "1.5"}}})
	assert.EqualError(t, err, fmt.Sprintf("report %s is malformed (ledgerctl reconcile --repair mends it): transactionCount 1.5 is not an integer", k))

	rep := &aggregates.Report{}
	rep.Add(aggregates.Totals{Income: decimal.RequireFromString("1.10"), Count: 1}, [3]string{"x#y", "", ""})
	rep.Add(aggregates.Totals{}, [3]string{"gone", "", ""})
	item, _ := table.EncodeReport(k, rep, "2026-02-01T00:00:00Z")
	got, err := decodeReport(k, &table.StoredReport{Key: k, Item: item})
	require.NoError(t, err)
	assert.Equal(t, Report{
		Tenant: "acme", Branch: "north", PeriodType: "MONTHLY", PeriodValue: "2026-01", UpdatedAt: "2026-02-01T00:00:00Z",
		ByCategory:      map[string]Totals{"x#y": {TotalIncome: "1.1", TotalExpense: "0", TransactionCount: 1}},
		ByCostCenter:    map[string]Totals{},
		ByPaymentMethod: map[string]Totals{},
		Totals:          Totals{TotalIncome: "1.1", TotalExpense: "0", TransactionCount: 1},
	}, got)
}

// TestDecodeReport_AFencedHeadIsServedNotMalformed: step X of the counted
// repair (docs/exactly-once.md, second review, F-b). A report item in the
// fenced layout of protocol 4 (transactionCount "v4", the count in
// txCount) is served with its figures, not answered with a 500 "report …
// is malformed", as it was before X.
func TestDecodeReport_AFencedHeadIsServedNotMalformed(t *testing.T) {
	k := aggregates.ReportKey{Tenant: "acme", Branch: "north", Period: aggregates.Period{Type: aggregates.Monthly, Value: "2026-01"}}
	rep := &aggregates.Report{}
	rep.Add(aggregates.Totals{Income: decimal.RequireFromString("1.10"), Count: 1}, [3]string{"x#y", "", ""})
	rep.Add(aggregates.Totals{Expense: decimal.RequireFromString("2"), Count: 1}, [3]string{"x#y", "", ""})
	item, _ := table.EncodeReport(k, rep, "2026-02-01T00:00:00Z")
	item[table.AttrTxCount] = item[table.AttrTransactionCount]
	item[table.AttrTransactionCount] = table.S(table.HeadFence)
	got, err := decodeReport(k, &table.StoredReport{Key: k, Item: item})
	require.NoError(t, err)
	assert.Equal(t, Totals{TotalIncome: "1.1", TotalExpense: "2", TransactionCount: 2}, got.Totals)
	assert.Equal(t, map[string]Totals{"x#y": {TotalIncome: "1.1", TotalExpense: "2", TransactionCount: 2}}, got.ByCategory)
}
