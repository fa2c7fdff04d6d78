package aggregates

import (
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRollupKey_AsReportKeyAddressesThePartialsItems: a partial travels
// through the consumers as a ReportKey; its item, entry and parked keys are
// the partial's, and every one parses back to it.
func TestRollupKey_AsReportKeyAddressesThePartialsItems(t *testing.T) {
	rk := RollupKey{Tenant: "acme", Currency: NoCurrency, Lane: 12, Period: Period{Type: Daily, Value: "2026-11-27"}}
	k := rk.Report()
	require.True(t, k.IsRollup())
	back, ok := k.Rollup()
	require.True(t, ok)
	assert.Equal(t, rk, back)
	assert.Equal(t, rk.Key(), k.Key())
	assert.Equal(t, rk.EntryKey(ByCostCenter, "a#b"), k.EntryKey(ByCostCenter, "a#b"))
	assert.Equal(t, rk.ParkedKey("id"), k.ParkedKey("id"))

	for _, tt := range []struct {
		key  Key
		kind ReportItemKind
		name string
	}{
		{k.Key(), ReportHeader, ""},
		{k.EntryKey(ByCostCenter, "a#b"), ReportEntry, "a#b"},
		{k.ParkedKey("shard~1~g0"), ReportParked, "shard~1~g0"},
	} {
		ref, err := ParseReportItemKey(tt.key)
		require.NoError(t, err, "%s", tt.key)
		assert.Equal(t, k, ref.Report, "%s", tt.key)
		assert.Equal(t, tt.kind, ref.Kind)
		assert.Equal(t, tt.name, ref.Name)
	}
	branch := ReportKey{Tenant: "acme", Branch: "b", Period: rk.Period}
	assert.False(t, branch.IsRollup())
	_, ok = branch.Rollup()
	assert.False(t, ok)
	_, err := ParseReportKey(Key{PK: RollupPK("acme", "BRL", RollupLanes), SK: "DAILY#2026-11-27"})
	assert.Error(t, err, "a lane past K is no partial")
}

func TestBranchTransition_CountsCrossingsOfZero(t *testing.T) {
	for _, tt := range []struct{ c, d, want int64 }{
		{0, 1, 1}, {0, 3, 1}, {1, -1, -1}, {2, -2, -1}, {2, -1, 0}, {1, 1, 0}, {0, 0, 0}, {3, 0, 0}, {-1, 1, -1}, {1, -2, 0},
	} {
		assert.Equal(t, tt.want, BranchTransition(tt.c, tt.d), "c=%d d=%d", tt.c, tt.d)
	}
}

func TestRollupFold_SumsByTenantCurrencyAndPeriod(t *testing.T) {
	day := Period{Type: Daily, Value: "2026-11-27"}
	month := Period{Type: Monthly, Value: "2026-11"}
	r := func(amount string, cat string) *Report {
		rep := &Report{}
		rep.Add(Totals{Income: decimal.RequireFromString(amount), Count: 1}, [3]string{cat, "", ""})
		return rep
	}
	f := NewRollupFold()
	f.Add("acme", "BRL", day, r("10", "food"), 1)
	f.Add("acme", "BRL", day, r("5", "food"), 1)
	f.Add("acme", "BRL", month, r("15", "rent"), 0)
	f.Add("acme", "", day, r("7", "food"), 1)
	f.Add("beta", "BRL", day, r("1", "x"), 0)
	f.Add("beta", "EUR", day, nil, 0) // nothing: left out
	assert.Equal(t, []RollupGroup{{"acme", NoCurrency}, {"acme", "BRL"}, {"beta", "BRL"}}, f.Groups())
	brl := f.Periods(RollupGroup{"acme", "BRL"})
	assert.Equal(t, "income=15 expense=0 count=2", brl[day].Totals.String())
	assert.Equal(t, int64(2), brl[day].Branches)
	assert.Equal(t, "income=15 expense=0 count=2", brl[day].Breakdowns[ByCategory]["food"].String())
	assert.Equal(t, []Period{day, month}, SortedPeriods(brl))
}
