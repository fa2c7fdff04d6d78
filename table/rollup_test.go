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

func rollupPeriod(typ aggregates.PeriodType, v string) aggregates.Period {
	return aggregates.Period{Type: typ, Value: v}
}

// rollupDelta builds a delta of n category names (and one cost centre) for
// a period, with totals and a branch transition.
func rollupDelta(n int, branches int64) *aggregates.RollupDelta {
	d := &aggregates.RollupDelta{Branches: branches}
	for i := range n {
		d.Add(aggregates.Totals{Income: decimal.RequireFromString("1.25"), Count: 1}, [3]string{fmt.Sprintf("cat-%03d", i), "", ""})
	}
	d.Add(aggregates.Totals{Expense: decimal.RequireFromString("0.5"), Count: -1}, [3]string{"", "ops", ""})
	return d
}

func sumPieces(pieces []map[aggregates.Period]*aggregates.RollupDelta) map[aggregates.Period]*aggregates.RollupDelta {
	out := map[aggregates.Period]*aggregates.RollupDelta{}
	for _, piece := range pieces {
		for p, d := range piece {
			if out[p] == nil {
				out[p] = &aggregates.RollupDelta{}
			}
			out[p].Merge(d)
		}
	}
	return out
}

func TestRollupDelta_EncodesAndDecodesBack(t *testing.T) {
	day, month := rollupPeriod(aggregates.Daily, "2026-11-27"), rollupPeriod(aggregates.Monthly, "2026-11")
	periods := map[aggregates.Period]*aggregates.RollupDelta{day: rollupDelta(3, 1), month: rollupDelta(2, -1)}
	key := aggregates.RollupDeltaKey("acme", 7, "shard-1~0042~g0", "BRL", 0)
	item := table.EncodeRollupDelta(key, "BRL", periods, "2026-11-27T10:00:00Z")
	assert.Equal(t, &types.AttributeValueMemberS{Value: table.EntityRollupDelta}, item[table.AttrEntityType])

	got, err := table.DecodeRollupDelta(item)
	require.NoError(t, err)
	assert.Equal(t, key, got.Key)
	assert.Equal(t, "acme", got.Tenant)
	assert.Equal(t, 7, got.Lane)
	assert.Equal(t, "BRL", got.Currency)
	require.Len(t, got.Periods, 2)
	for p, want := range periods {
		assert.True(t, got.Periods[p].Report.Equal(&want.Report), "%s: got %s; want %s", p, &got.Periods[p].Report, &want.Report)
		assert.Equal(t, want.Branches, got.Periods[p].Branches, "%s branches", p)
	}
	partials := got.Partials()
	want := aggregates.RollupKey{Tenant: "acme", Currency: "BRL", Lane: 7, Period: day}.Report()
	require.Contains(t, partials, want, "a delta folds into the partial of its own lane")
	assert.Equal(t, "TENANT#acme#ROLLUP#BRL#7", want.Key().PK)
}

// TestSplitRollupDelta_BoundsEveryItemAndKeepsTheSum: past E_d entries or
// 64 periods a delta is cut into several items, each within both bounds,
// whose sum is the delta, with a period's totals and branches once.
func TestSplitRollupDelta_BoundsEveryItemAndKeepsTheSum(t *testing.T) {
	manyPeriods := map[aggregates.Period]*aggregates.RollupDelta{}
	for i := range 70 {
		manyPeriods[rollupPeriod(aggregates.Daily, fmt.Sprintf("2026-%02d-%02d", 1+i/28, 1+i%28))] = rollupDelta(0, 1)
	}
	periodsOf := func(n, names int) map[aggregates.Period]*aggregates.RollupDelta {
		m := map[aggregates.Period]*aggregates.RollupDelta{}
		for i := range n {
			m[rollupPeriod(aggregates.Daily, fmt.Sprintf("2026-11-%02d", i+1))] = rollupDelta(names-1, 1)
		}
		return m
	}
	tests := []struct {
		name    string
		periods map[aggregates.Period]*aggregates.RollupDelta
		items   int
	}{
		{"one small period", map[aggregates.Period]*aggregates.RollupDelta{rollupPeriod(aggregates.Daily, "2026-11-27"): rollupDelta(3, 1)}, 1},
		{"a period of 32 entries", periodsOf(1, table.MaxRollupDeltaPeriodEntries), 1},
		{"a period of 33 entries", periodsOf(1, table.MaxRollupDeltaPeriodEntries+1), 2},
		{"two periods of 32: E_d", periodsOf(2, table.MaxRollupDeltaPeriodEntries), 1},
		{"three periods of 32: past E_d", periodsOf(3, table.MaxRollupDeltaPeriodEntries), 2},
		{"a period of 200 entries", periodsOf(1, 200), 7},
		{"70 periods of one entry: past 32 periods", manyPeriods, 3},
		{"only zeros", map[aggregates.Period]*aggregates.RollupDelta{rollupPeriod(aggregates.Daily, "2026-11-27"): {}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := sumPieces([]map[aggregates.Period]*aggregates.RollupDelta{tt.periods})
			pieces := table.SplitRollupDelta(tt.periods)
			require.Len(t, pieces, tt.items)
			for i, piece := range pieces {
				entries := 0
				for p, d := range piece {
					entries += d.Entries()
					assert.LessOrEqual(t, d.Entries(), table.MaxRollupDeltaPeriodEntries, "item %d period %s", i, p)
				}
				assert.LessOrEqual(t, entries, table.MaxRollupDeltaEntries, "item %d entries", i)
				assert.LessOrEqual(t, len(piece), table.MaxRollupDeltaPeriods, "item %d periods", i)
				// Every item decodes, so a consumer can fold it.
				item := table.EncodeRollupDelta(aggregates.RollupDeltaKey("acme", 0, "c", "EUR", i), "EUR", piece, "2026-11-27T10:00:00Z")
				_, err := table.DecodeRollupDelta(item)
				require.NoError(t, err, "item %d", i)
			}
			got := sumPieces(pieces)
			for p, w := range want {
				if w.IsZero() {
					assert.Nil(t, got[p], "%s: a zero delta is left out", p)
					continue
				}
				require.NotNil(t, got[p], "%s", p)
				assert.True(t, got[p].Report.Equal(&w.Report), "%s: got %s; want %s", p, &got[p].Report, &w.Report)
				assert.Equal(t, w.Branches, got[p].Branches, "%s branches", p)
			}
			items := table.RollupDeltaItems("acme", 3, "claim", "EUR", tt.periods, "2026-11-27T10:00:00Z")
			require.Len(t, items, tt.items)
			for n, item := range items {
				assert.Equal(t, aggregates.RollupDeltaKey("acme", 3, "claim", "EUR", n), table.KeyOf(item))
			}
		})
	}
}

func TestDecodeRollupDelta_RefusesWhatNoConsumerWrites(t *testing.T) {
	good := func() map[string]types.AttributeValue {
		return table.EncodeRollupDelta(aggregates.RollupDeltaKey("acme", 1, "c", "BRL", 0), "BRL",
			map[aggregates.Period]*aggregates.RollupDelta{rollupPeriod(aggregates.Daily, "2026-11-27"): rollupDelta(2, 1)}, "2026-11-27T10:00:00Z")
	}
	periods := func(item map[string]types.AttributeValue) map[string]types.AttributeValue {
		return item[table.AttrPeriods].(*types.AttributeValueMemberM).Value
	}
	day := func(item map[string]types.AttributeValue) map[string]types.AttributeValue {
		return periods(item)["DAILY#2026-11-27"].(*types.AttributeValueMemberM).Value
	}
	tests := []struct {
		name   string
		damage func(map[string]types.AttributeValue)
		want   string
	}{
		{"a branch report's partition", func(i map[string]types.AttributeValue) { i[table.AttrPK] = table.S("TENANT#acme#BRANCH#b#REPORTING") }, "not a roll-up lane"},
		{"a lane past K", func(i map[string]types.AttributeValue) { i[table.AttrPK] = table.S("TENANT#acme#ROLLUPLANE#32") }, "not a roll-up lane"},
		{"another entity", func(i map[string]types.AttributeValue) { i[table.AttrEntityType] = table.S("REPORT") }, "entityType"},
		{"no currency", func(i map[string]types.AttributeValue) { delete(i, table.AttrCurrency) }, "currency"},
		{"a currency that is no money", func(i map[string]types.AttributeValue) { i[table.AttrCurrency] = table.S("XXX") }, "currency"},
		{"a sort key of another currency", func(i map[string]types.AttributeValue) { i[table.AttrSK] = table.S("c#EUR#0") }, "sort key"},
		{"a sort key without a piece", func(i map[string]types.AttributeValue) { i[table.AttrSK] = table.S("c#BRL#x") }, "sort key"},
		{"periods not a map", func(i map[string]types.AttributeValue) { i[table.AttrPeriods] = table.S("x") }, "not a map"},
		{"a period that is none", func(i map[string]types.AttributeValue) { periods(i)["WEEKLY#1"] = periods(i)["DAILY#2026-11-27"] }, "period"},
		{"a figure of the wrong type", func(i map[string]types.AttributeValue) { day(i)[table.AttrTotalIncome] = table.S("1") }, "not a number"},
		{"branches not an integer", func(i map[string]types.AttributeValue) {
			day(i)[table.AttrBranches] = &types.AttributeValueMemberN{Value: "0.5"}
		}, "branches"},
		{"an unknown attribute", func(i map[string]types.AttributeValue) { day(i)["extra"] = table.S("x") }, "unknown attribute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			item := good()
			tt.damage(item)
			_, err := table.DecodeRollupDelta(item)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestPartial_IsAReportItemPlusBranches: a partial round-trips through the
// report layout with its branch count, is filed by ReportSet under its
// roll-up key, and branches is no unknown attribute on it (it is on a
// branch report).
func TestPartial_IsAReportItemPlusBranches(t *testing.T) {
	rk := aggregates.RollupKey{Tenant: "acme", Currency: "JPY", Lane: 31, Period: rollupPeriod(aggregates.Monthly, "2026-11")}
	d := rollupDelta(40, 12)
	item, entries := table.EncodePartial(rk, d, "2026-11-27T10:00:00Z")
	require.Len(t, entries, 40-table.MaxInlineEntries, "names past the inline map go to entry items")
	set := table.ReportSet{}
	require.NoError(t, set.Add(item))
	for _, e := range entries {
		require.NoError(t, set.Add(e))
	}
	sr := set[rk.Report()]
	require.NotNil(t, sr, "filed under the partial's report key")
	got, problems := sr.DecodeRollup()
	require.Empty(t, problems)
	assert.True(t, got.Report.Equal(&d.Report), "got %s; want %s", &got.Report, &d.Report)
	assert.Equal(t, int64(12), got.Branches)

	branch := aggregates.ReportKey{Tenant: "acme", Branch: "b", Period: rk.Period}
	bitem, _ := table.EncodeReport(branch, &aggregates.Report{}, "2026-11-27T10:00:00Z")
	bitem[table.AttrBranches] = table.Int(1)
	_, problems = (&table.StoredReport{Key: branch, Item: bitem}).Decode()
	assert.Contains(t, problems, `report item: unknown attribute "branches"`)

	item[table.AttrBranches] = table.S("12")
	_, problems = (&table.StoredReport{Key: rk.Report(), Item: item}).DecodeRollup()
	assert.NotEmpty(t, problems, "a branches that is no integer is named")
}
