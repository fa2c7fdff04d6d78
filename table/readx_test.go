package table_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// TestDecodeReport_BothHeadLayouts: step X of the counted repair
// (docs/exactly-once.md, "Cost to build, and the order"). A report item in
// the fenced layout of protocol 4 (transactionCount the string "v4", the
// count in txCount) decodes to the same figures as the old layout, without
// a problem, for every reader (Decode: reconcile, the writer, ledgerctl,
// the roll-up readers). CheckReportItem, which decides what a commit of
// this version parks, names it all the same: this version's update of it
// is refused (F-a, pinned). A txCount beside a numeric count, and a
// string count that is not the fence, are malformations.
func TestDecodeReport_BothHeadLayouts(t *testing.T) {
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	figures := func(count int64) *aggregates.Report {
		return &aggregates.Report{Totals: aggregates.Totals{Income: decimal.NewFromInt(10), Expense: decimal.NewFromInt(3), Count: count}}
	}
	for _, tc := range []struct {
		name       string
		item       map[string]types.AttributeValue
		want       *aggregates.Report
		wantErr    string // a problem of Decode; "" none
		wantParked bool   // CheckReportItem names it
	}{
		{name: "old layout", item: map[string]types.AttributeValue{"transactionCount": n("7")}, want: figures(7)},
		{name: "fenced", item: map[string]types.AttributeValue{"transactionCount": s("v4"), "txCount": n("7")}, want: figures(7), wantParked: true},
		{name: "fenced without txCount", item: map[string]types.AttributeValue{"transactionCount": s("v4")}, want: figures(0), wantParked: true},
		{name: "fenced with a damaged txCount", item: map[string]types.AttributeValue{"transactionCount": s("v4"), "txCount": s("7")}, wantErr: "txCount is not a number", wantParked: true},
		{name: "fenced with a fractional txCount", item: map[string]types.AttributeValue{"transactionCount": s("v4"), "txCount": n("1.5")}, wantErr: "txCount 1.5 is not an integer", wantParked: true},
		{name: "txCount beside a numeric count", item: map[string]types.AttributeValue{"transactionCount": n("7"), "txCount": n("7")}, wantErr: `unknown attribute "txCount"`},
		{name: "a string count that is no fence", item: map[string]types.AttributeValue{"transactionCount": s("v5"), "txCount": n("7")}, wantErr: "transactionCount is not a number", wantParked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := aggregates.ReportKey{Tenant: "acme", Branch: "north", Period: aggregates.Period{Type: aggregates.Monthly, Value: "2026-01"}}
			item, _ := table.EncodeReport(k, figures(0), "2026-02-01T00:00:00Z")
			delete(item, table.AttrTransactionCount)
			for a, v := range tc.item {
				item[a] = v
			}
			got, problems := (&table.StoredReport{Key: k, Item: item}).Decode()
			if tc.wantErr != "" {
				assert.Contains(t, strings.Join(problems, "\n"), tc.wantErr)
			} else {
				require.Empty(t, problems)
				assert.True(t, got.Equal(tc.want), "got %s; want %s", got, tc.want)
			}
			refused := table.CheckReportItem(item)
			assert.Equal(t, tc.wantParked, len(refused) > 0, "CheckReportItem: %v", refused)
			if tc.wantParked && tc.wantErr == "" {
				assert.Contains(t, strings.Join(refused, "\n"), `fence "v4"`)
			}
		})
	}
}

// TestEncodeRepair_KeepsAFencedHeadFenced: F-b. A repair of this version
// rewrites a report item it read fenced in the fenced layout (the count in
// txCount, transactionCount "v4"), and one it read in the old layout (or
// absent) in the old layout; both decode to the repaired figures.
func TestEncodeRepair_KeepsAFencedHeadFenced(t *testing.T) {
	k := aggregates.ReportKey{Tenant: "acme", Branch: "north", Period: aggregates.Period{Type: aggregates.Monthly, Value: "2026-01"}}
	want := &aggregates.Report{}
	want.Add(aggregates.Totals{Income: decimal.NewFromInt(20), Count: 2}, [3]string{"food", "", "card"})
	old, _ := table.EncodeReport(k, &aggregates.Report{Totals: aggregates.Totals{Income: decimal.NewFromInt(10), Count: 1}}, "2026-02-01T00:00:00Z")
	fenced := map[string]types.AttributeValue{}
	for a, v := range old {
		fenced[a] = v
	}
	fenced[table.AttrTxCount] = old[table.AttrTransactionCount]
	fenced[table.AttrTransactionCount] = table.S(table.HeadFence)

	for _, tc := range []struct {
		name       string
		stored     *table.StoredReport
		wantFenced bool
	}{
		{"absent", nil, false},
		{"old layout", &table.StoredReport{Key: k, Item: old}, false},
		{"fenced", &table.StoredReport{Key: k, Item: fenced}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ri := table.EncodeRepair(k, want, tc.stored, "2026-02-02T00:00:00Z")
			assert.Equal(t, tc.wantFenced, table.FencedHead(ri.Item))
			if tc.wantFenced {
				assert.Equal(t, table.Int(2), ri.Item[table.AttrTxCount])
			} else {
				assert.Equal(t, table.Int(2), ri.Item[table.AttrTransactionCount])
				assert.NotContains(t, ri.Item, table.AttrTxCount)
			}
			got, problems := (&table.StoredReport{Key: k, Item: ri.Item}).Decode()
			require.Empty(t, problems)
			assert.True(t, got.Equal(want), "got %s; want %s", got, want)
		})
	}
}
