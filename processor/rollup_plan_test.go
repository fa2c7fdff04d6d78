package processor

import (
	"fmt"
	"testing"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// currencyChanges are n inserts of tenant t over branches in three
// currencies (one without), each a new category on one of days days.
func currencyChanges(n, days int) []change {
	curs := []string{"BRL", "EUR", ""}
	var out []change
	for i := range n {
		img := txnImage(fmt.Sprint("b", i%6), fmt.Sprintf("2024-01-%02d", 1+i%days), fmt.Sprint(i), "INCOME", "1", fmt.Sprintf("cat%d", i))
		if c := curs[i%3]; c != "" {
			img[aggregates.AttrCurrency] = table.S(c)
		}
		out = append(out, classify(&Record{EventName: "INSERT", Keys: keysOf(img), NewImage: img, SequenceNumber: fmt.Sprint(i + 1)}))
	}
	return out
}

// TestPlan_RollupDeltasArePartOfTheGroups: plan layout 4 reserves in each
// group the room of the roll-up delta items its branch-report parts put
// (at least as many as the commit puts, never past the group's bound),
// and its digest covers them: the same records plan the same groups and
// digest, another K is refused by name, and a layout-3 plan reserves
// nothing.
func TestPlan_RollupDeltasArePartOfTheGroups(t *testing.T) {
	changes := currencyChanges(300, 20)
	fold := aggregates.NewFold()
	for i := range changes {
		changes[i].addTo(fold)
	}
	for _, items := range []int{99, 30, 7} {
		t.Run(fmt.Sprint("items=", items), func(t *testing.T) {
			plan := batchPlan{items: items, entries: 4, layout: planLayout, lanes: aggregates.RollupLanes}
			groups := planGroups(fold, nil, nil, plan)
			require.NotEmpty(t, groups)
			for k, g := range groups {
				assert.LessOrEqual(t, g.writes(), items, "group %d", k)
				rf := rollupFold(g.parts, nil)
				puts := 0
				for _, rg := range rf.Groups() {
					puts += len(table.SplitRollupDelta(rf.Periods(rg)))
				}
				assert.Equal(t, rollupItemCount(g.parts), g.rollupItems)
				assert.LessOrEqual(t, puts, g.rollupItems, "group %d: the commit puts no more delta items than reserved", k)
				assert.Positive(t, g.rollupItems, "group %d holds branch-report parts", k)
			}
			claim := func(k int) string { return fmt.Sprint("shard~9~g", k) }
			again := planGroups(fold, nil, nil, plan)
			assert.Equal(t, planDigest("9", plan, groups, claim), planDigest("9", plan, again, claim), "a resumer plans the same")
			v3 := batchPlan{items: items, entries: 4, layout: quarantineLayout}
			for _, g := range planGroups(fold, nil, nil, v3) {
				assert.Zero(t, g.rollupItems, "layout 3 puts no roll-up deltas")
			}
		})
	}
	parsed, err := parseBatchPlan("99/32/4/32")
	require.NoError(t, err)
	assert.Equal(t, batchPlan{items: 99, entries: 32, layout: 4, lanes: 32}, parsed)
	assert.Equal(t, "99/32/4/32", parsed.String())
	_, err = parseBatchPlan("99/32/4/16")
	assert.ErrorIs(t, err, errOldPlan, "another K is refused by name")
	v3, err := parseBatchPlan("99/32/3")
	require.NoError(t, err, "a version-3 batch is finished as planned")
	assert.Equal(t, batchPlan{items: 99, entries: 32, layout: 3}, v3)
}

// TestRollupItemCount_MatchesTheSplit: the planner's count of delta items
// is the number SplitRollupDelta cuts, at every bound.
func TestRollupItemCount_MatchesTheSplit(t *testing.T) {
	for _, tt := range []struct{ periods, names int }{{1, 1}, {1, 32}, {1, 33}, {3, 200}, {70, 1}, {64, 4}, {9, 32}, {100, 3}} {
		t.Run(fmt.Sprintf("%d periods × %d names", tt.periods, tt.names), func(t *testing.T) {
			ps := map[aggregates.Period]*aggregates.RollupDelta{}
			counts := map[aggregates.Period]map[entryID]bool{}
			for p := range tt.periods {
				period := aggregates.Period{Type: aggregates.Daily, Value: fmt.Sprintf("2024-%02d-%02d", 1+p/28, 1+p%28)}
				d := &aggregates.RollupDelta{}
				counts[period] = map[entryID]bool{}
				for n := range tt.names {
					d.Add(aggregates.Totals{Count: 1}, [3]string{fmt.Sprint("n", n), "", ""})
					counts[period][entryID{aggregates.ByCategory, fmt.Sprint("n", n)}] = true
				}
				ps[period] = d
			}
			assert.Equal(t, len(table.SplitRollupDelta(ps)), rollupItemsOf(counts))
		})
	}
}

// TestQuarantineForeignCurrency_OneReportOneCurrency (review hole 10): a
// record in another currency than the batch's earlier records of its
// report, or whose old and new images disagree on it, is quarantined with
// reason currency and contributes nothing; others are untouched.
func TestQuarantineForeignCurrency_OneReportOneCurrency(t *testing.T) {
	img := func(id, cur string) map[string]ddbtypes.AttributeValue {
		m := txnImage("b", "2024-01-02", id, "INCOME", "1", "food")
		if cur != "" {
			m[aggregates.AttrCurrency] = table.S(cur)
		}
		return m
	}
	other := txnImage("c", "2024-01-02", "9", "INCOME", "1", "food")
	other[aggregates.AttrCurrency] = table.S("EUR")
	changes := []change{
		classify(&Record{EventName: "INSERT", Keys: keysOf(img("1", "BRL")), NewImage: img("1", "BRL"), SequenceNumber: "1"}),
		classify(&Record{EventName: "INSERT", Keys: keysOf(img("2", "EUR")), NewImage: img("2", "EUR"), SequenceNumber: "2"}),
		classify(&Record{EventName: "MODIFY", Keys: keysOf(img("1", "")), OldImage: img("1", "BRL"), NewImage: img("1", "JPY"), SequenceNumber: "3"}),
		classify(&Record{EventName: "INSERT", Keys: keysOf(other), NewImage: other, SequenceNumber: "4"}),
		classify(&Record{EventName: "INSERT", Keys: keysOf(img("5", "BRL")), NewImage: img("5", "BRL"), SequenceNumber: "5"}),
	}
	quarantineForeignCurrency(changes)
	var reasons []string
	for _, c := range changes {
		r := ""
		if c.invalid != nil {
			r = string(c.invalid.Reason)
			assert.Nil(t, c.old)
			assert.Nil(t, c.new)
		}
		reasons = append(reasons, r)
	}
	assert.Equal(t, []string{"", "currency", "currency", "", ""}, reasons)
}
