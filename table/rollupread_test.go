package table_test

import (
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// partialItems lays out a partial as the lane layout has it: a report item
// (EncodeReport's placement) under the partial's key, plus branches, and
// its entry items under the partial's entry keys.
func partialItems(t *testing.T, k aggregates.RollupKey, r *aggregates.Report, branches types.AttributeValue) *table.StoredPartial {
	t.Helper()
	item, entries := table.EncodeReport(aggregates.ReportKey{Tenant: k.Tenant, Branch: "shape", Period: k.Period}, r, "2026-02-01T00:00:00Z")
	item[table.AttrPK], item[table.AttrSK] = table.S(k.Key().PK), table.S(k.Key().SK)
	if branches != nil {
		item[table.AttrRollupBranches] = branches
	}
	sp := &table.StoredPartial{Key: k, Item: item}
	for _, en := range entries {
		ref, err := aggregates.ParseReportItemKey(table.KeyOf(en))
		require.NoError(t, err)
		ek := k.EntryKey(ref.Dim, ref.Name)
		en[table.AttrPK], en[table.AttrSK] = table.S(ek.PK), table.S(ek.SK)
		sp.Entries = append(sp.Entries, en)
	}
	return sp
}

func TestStoredPartial_DecodesTheReportLayoutPlusBranches(t *testing.T) {
	k := aggregates.RollupKey{Tenant: "acme", Currency: "BRL", Lane: 7, Period: aggregates.Period{Type: aggregates.Monthly, Value: "2026-01"}}
	r := &aggregates.Report{}
	for i := range 40 {
		r.Add(aggregates.Totals{Income: decimal.RequireFromString("0.5"), Count: 1}, [3]string{fmt.Sprintf("c%02d", i), "#ops", ""})
	}
	sp := partialItems(t, k, r, table.Int(3))
	assert.True(t, sp.FullMap())
	require.Len(t, sp.Entries, 8)
	got, branches, problems := sp.Decode()
	assert.Empty(t, problems)
	assert.Equal(t, int64(3), branches)
	assert.True(t, got.Totals.Equal(r.Totals))
	assert.Len(t, got.Breakdowns[aggregates.ByCategory], 40)
	assert.Equal(t, int64(40), got.Breakdowns[aggregates.ByCostCenter]["#ops"].Count)

	small := &aggregates.Report{}
	small.Add(aggregates.Totals{Count: 1}, [3]string{"a", "", ""})
	assert.False(t, partialItems(t, k, small, nil).FullMap())
}

func TestStoredPartial_NamesWhatIsMalformed(t *testing.T) {
	k := aggregates.RollupKey{Tenant: "acme", Currency: aggregates.NoCurrency, Lane: 0, Period: aggregates.Period{Type: aggregates.Daily, Value: "2026-01-02"}}
	r := &aggregates.Report{}
	r.Add(aggregates.Totals{Income: decimal.RequireFromString("1"), Count: 1}, [3]string{"a", "", ""})
	for name, tc := range map[string]struct {
		branches types.AttributeValue
		entry    func(sp *table.StoredPartial)
		want     string
	}{
		"branches a string":    {branches: table.S("2"), want: "branches is not a number"},
		"branches a fraction":  {branches: &types.AttributeValueMemberN{Value: "1.5"}, want: "branches 1.5 is not an integer"},
		"an unknown attribute": {branches: table.Int(1), entry: func(sp *table.StoredPartial) { sp.Item["colour"] = table.S("red") }, want: `unknown attribute "colour"`},
		"an entry of another period": {branches: table.Int(1), entry: func(sp *table.StoredPartial) {
			sp.Entries = append(sp.Entries, map[string]types.AttributeValue{table.AttrPK: table.S(k.Key().PK), table.AttrSK: table.S("DAILY#2026-01-03#cat#a")})
		}, want: "is not an entry item of partial"},
		"an entry of no dimension": {branches: table.Int(1), entry: func(sp *table.StoredPartial) {
			sp.Entries = append(sp.Entries, map[string]types.AttributeValue{table.AttrPK: table.S(k.Key().PK), table.AttrSK: table.S("DAILY#2026-01-02#xx#a")})
		}, want: "is not an entry item of partial"},
	} {
		sp := partialItems(t, k, r, tc.branches)
		if tc.entry != nil {
			tc.entry(sp)
		}
		_, _, problems := sp.Decode()
		require.NotEmpty(t, problems, name)
		assert.Contains(t, fmt.Sprint(problems), tc.want, name)
	}
}
