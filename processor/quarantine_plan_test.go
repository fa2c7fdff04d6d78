package processor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// invalidChanges returns n classified records of invalid transactions
// (an empty category), each padded with a note of pad bytes.
func invalidChanges(n, pad int) []change {
	out := make([]change, n)
	for i := range out {
		img := txnImage("b", "2024-01-02", fmt.Sprint("bad", i), "INCOME", "1", "")
		img["note"] = table.S(strings.Repeat("x", pad))
		r := &Record{EventID: fmt.Sprint("ev-bad-", i), EventName: "INSERT", Keys: keysOf(img), NewImage: img, SequenceNumber: fmt.Sprint(1000 + i)}
		out[i] = classify(r)
	}
	return out
}

func TestPlanRuns_CountsAQuarantineItemPerInvalidRecordAndTheirBytes(t *testing.T) {
	t.Run("a write each", func(t *testing.T) {
		var got []int
		for _, r := range planRuns(invalidChanges(250, 0), 99, 32, nil) {
			got = append(got, len(r.changes))
			assert.Len(t, r.quarantine(), len(r.changes))
		}
		assert.Equal(t, []int{99, 99, 52}, got)
	})
	t.Run("beside report writes", func(t *testing.T) {
		var changes []change
		for i := 0; i < 30; i++ {
			img := txnImage(fmt.Sprint("b", i), "2024-01-02", "x", "INCOME", "1", "food")
			changes = append(changes, classify(&Record{EventName: "INSERT", Keys: keysOf(img), NewImage: img, SequenceNumber: fmt.Sprint(i + 1)}))
		}
		changes = append(changes, invalidChanges(50, 0)...)
		var got, quarantine []int
		for _, r := range planRuns(changes, 99, 32, nil) {
			got, quarantine = append(got, len(r.changes)), append(quarantine, len(r.quarantine()))
		}
		// 16 valid records: 96 writes and the run's roll-up delta item,
		// the 17th would pass 99; 14 records (84 writes, a delta item) and
		// 14 quarantine items; the other 36.
		assert.Equal(t, []int{16, 28, 36}, got)
		assert.Equal(t, []int{0, 14, 36}, quarantine)
	})
	t.Run("at most maxQuarantineBytes of them", func(t *testing.T) {
		big := invalidChanges(40, 60<<10) // about 61 KB each: 33 fit 2 MB
		per := quarantineBytes(&big[0])
		require.Greater(t, per, 60<<10)
		var got []int
		for _, r := range planRuns(big, 99, 32, nil) {
			got = append(got, len(r.changes))
		}
		assert.Equal(t, []int{maxQuarantineBytes / per, 40 - maxQuarantineBytes/per}, got)
	})
}

func TestPlanGroups_PlacesQuarantineItemsInTheRoomThenInGroupsOfTheirOwn(t *testing.T) {
	fold := aggregates.NewFold()
	for i := 0; i < 40; i++ {
		img := txnImage(fmt.Sprint("b", i), "2024-01-02", "x", "INCOME", "1", "food")
		c := classify(&Record{EventName: "INSERT", Keys: keysOf(img), NewImage: img, SequenceNumber: fmt.Sprint(i + 1)})
		fold.AddChange(c.old, c.new)
	}
	invalid := invalidChanges(250, 0)
	var list []*change
	for i := range invalid {
		list = append(list, &invalid[i])
	}
	list = append(list, &invalid[3])                                    // a record twice: one item
	plan := batchPlan{items: 99, entries: 32, layout: quarantineLayout} // the plan of layout 3; layout 4 reserves roll-up room too (rollup_test.go)
	groups := planGroups(fold, list, nil, plan)
	// 120 report parts of 2 writes: groups of 49 parts (98 writes), 49 and
	// 22; each group's room holds 1, 1 and 55 quarantine items, the other
	// 193 make groups of 99 and 94.
	var parts, quarantine []int
	seen := map[string]bool{}
	for _, g := range groups {
		parts, quarantine = append(parts, len(g.parts)), append(quarantine, len(g.quarantine))
		w := len(g.quarantine)
		for _, pt := range g.parts {
			w += pt.writes()
		}
		assert.LessOrEqual(t, w, 99)
		for _, c := range g.quarantine {
			assert.False(t, seen[c.rec.EventID], "%s placed twice", c.rec.EventID)
			seen[c.rec.EventID] = true
		}
	}
	assert.Equal(t, []int{49, 49, 22, 0, 0}, parts)
	assert.Equal(t, []int{1, 1, 55, 99, 94}, quarantine)
	assert.Len(t, seen, 250)
	assert.Equal(t, planDigest("9", plan, groups, noClaim), planDigest("9", plan, planGroups(fold, list, nil, plan), noClaim), "the same records, the same plan")

	v2 := batchPlan{items: 99, entries: 32, layout: 2}
	for _, g := range planGroups(fold, list, nil, v2) {
		assert.Empty(t, g.quarantine, "version 2 plans no quarantine items")
	}
	parsed, err := parseBatchPlan("99/32/2")
	require.NoError(t, err, "a version-2 batch is finished as planned")
	assert.Equal(t, v2, parsed)
	_, err = parseBatchPlan("99/32/1")
	assert.ErrorIs(t, err, errOldPlan)
}

func noClaim(int) string { return "" }

// A refused value as large as an item (a 300 KB type) is quoted by the
// detail: the quarantine item keeps the record whole up to 64 KB and the
// detail cut, so it stays far below DynamoDB's 400 KB item limit, as its
// truncated form does.
func TestQuarantineItem_StaysSmallWhateverTheRecordHolds(t *testing.T) {
	img := txnImage("b", "2024-01-02", "x", strings.Repeat("T", 300<<10), "1", "food")
	c := classify(&Record{EventID: "ev", EventName: "INSERT", Keys: keysOf(img), NewImage: img, SequenceNumber: "1"})
	require.NotNil(t, c.invalid)
	require.Greater(t, len(c.invalid.Error()), 300<<10)
	for _, truncate := range []bool{false, true} {
		item, truncated := quarantineItem(&c, time.Unix(0, 0), truncate)
		assert.True(t, truncated, "a record past 64 KB keeps its keys")
		size := 0
		for k, v := range item {
			s, _ := table.String(map[string]ddbtypes.AttributeValue{k: v}, k)
			size += len(k) + len(s) + 16
		}
		assert.Less(t, size, 8<<10)
	}
	assert.Less(t, quarantineBytes(&c), 8<<10)
}
