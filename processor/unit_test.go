package processor

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

func TestCompareSequence_ComparesAsNumbers(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"000000000000000000009", "10", -1},
		{"10", "000000000000000000009", 1},
		{"000000000000000000010", "10", 0},
		{"1405400000000002063282832", "999999999999999999999", 1},
		{"2", "10", -1},
	}
	for _, tt := range tests {
		t.Run(tt.a+"_"+tt.b, func(t *testing.T) {
			assert.Equal(t, tt.want, CompareSequence(tt.a, tt.b))
		})
	}
}

func txnImage(branch, date, id, typ, amount, category string) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{
		"PK": table.S(aggregates.TransactionPK("t", branch)), "SK": table.S(date + "#" + id),
		"entityType": table.S("TRANSACTION"), "type": table.S(typ),
		"amount": &ddbtypes.AttributeValueMemberN{Value: amount}, "category": table.S(category),
		"createdAt": table.S(date + "T12:00:00Z"),
	}
}

func keysOf(img map[string]ddbtypes.AttributeValue) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{"PK": img["PK"], "SK": img["SK"]}
}

func TestClassify(t *testing.T) {
	valid := txnImage("b", "2024-01-02", "x", "INCOME", "5", "food")
	invalid := txnImage("b", "2024-01-02", "x", "INCOME", "5", "")
	tomb := maps.Clone(valid)
	for _, name := range table.TombstoneRemoves {
		delete(tomb, name)
	}
	tomb[table.AttrDeletedAt] = table.S("2024-01-03T00:00:00Z")
	report := map[string]ddbtypes.AttributeValue{"PK": table.S("TENANT#t#BRANCH#b#REPORTING"), "SK": table.S("DAILY#2024-01-02")}
	history := table.Key(aggregates.HistoryKey("t", "b", "x", 1))
	history["entityType"], history["transaction"] = table.S(aggregates.EntityTransaction), table.S("{}")
	tests := []struct {
		name          string
		rec           Record
		isTxn         bool
		old, new      bool
		invalidReason aggregates.Reason
	}{
		{"insert", Record{EventName: "INSERT", Keys: keysOf(valid), NewImage: valid}, true, false, true, ""},
		{"modify", Record{EventName: "MODIFY", Keys: keysOf(valid), OldImage: valid, NewImage: valid}, true, true, true, ""},
		{"remove", Record{EventName: "REMOVE", Keys: keysOf(valid), OldImage: valid}, true, true, false, ""},
		{"modify to invalid subtracts the old", Record{EventName: "MODIFY", Keys: keysOf(valid), OldImage: valid, NewImage: invalid}, true, true, false, aggregates.ReasonCategory},
		{"fix of an invalid item adds the new, no quarantine", Record{EventName: "MODIFY", Keys: keysOf(valid), OldImage: invalid, NewImage: valid}, true, false, true, ""},
		{"modify to a tombstone subtracts the old, no quarantine", Record{EventName: "MODIFY", Keys: keysOf(valid), OldImage: valid, NewImage: tomb}, true, true, false, ""},
		{"modify from a tombstone adds the new", Record{EventName: "MODIFY", Keys: keysOf(valid), OldImage: tomb, NewImage: valid}, true, false, true, ""},
		{"a tombstone changed again does nothing", Record{EventName: "MODIFY", Keys: keysOf(valid), OldImage: tomb, NewImage: tomb}, true, false, false, ""},
		{"insert of a tombstone does nothing", Record{EventName: "INSERT", Keys: keysOf(valid), NewImage: tomb}, true, false, false, ""},
		{"remove of a tombstone (compaction) does nothing", Record{EventName: "REMOVE", Keys: keysOf(valid), OldImage: tomb}, true, false, false, ""},
		{"remove of an invalid item does nothing", Record{EventName: "REMOVE", Keys: keysOf(valid), OldImage: invalid}, true, false, false, ""},
		{"report records are ignored", Record{EventName: "MODIFY", Keys: report, NewImage: report, DecodeErr: fmt.Errorf("bad {}")}, false, false, false, ""},
		{"history records are ignored", Record{EventName: "INSERT", Keys: keysOf(history), NewImage: history}, false, false, false, ""},
		{"undecodable transaction is quarantined", Record{EventName: "INSERT", Keys: keysOf(valid), DecodeErr: fmt.Errorf("bad")}, true, false, false, aggregates.ReasonShape},
		{"unknown event", Record{EventName: "UPSERT", Keys: keysOf(valid), NewImage: valid}, true, false, false, aggregates.ReasonShape},
		{"insert without image", Record{EventName: "INSERT", Keys: keysOf(valid)}, true, false, false, aggregates.ReasonShape},
		{"wrong view type", Record{EventName: "INSERT", Keys: keysOf(valid), NewImage: valid, StreamViewType: "KEYS_ONLY"}, true, false, false, aggregates.ReasonShape},
		{"no keys", Record{EventName: "INSERT", NewImage: valid}, true, false, false, aggregates.ReasonShape},
		{"no sequence number", Record{EventName: "INSERT", Keys: keysOf(valid), NewImage: valid, SequenceNumber: "-"}, true, false, false, aggregates.ReasonShape},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			switch tt.rec.SequenceNumber {
			case "":
				tt.rec.SequenceNumber = "1"
			case "-":
				tt.rec.SequenceNumber = ""
			}
			c := classify(&tt.rec)
			assert.Equal(t, tt.isTxn, c.isTxn)
			assert.Equal(t, tt.old, c.old != nil, "old")
			assert.Equal(t, tt.new, c.new != nil, "new")
			if tt.invalidReason == "" {
				assert.Nil(t, c.invalid)
			} else {
				require.NotNil(t, c.invalid)
				assert.Equal(t, tt.invalidReason, c.invalid.Reason)
			}
		})
	}
}

func TestPlanRuns_CutsAtItemAndEntryLimits(t *testing.T) {
	var changes []change
	for i := 0; i < 60; i++ {
		// Each record a new branch: 3 new report items per record.
		img := txnImage(fmt.Sprintf("b%d", i), "2024-01-02", "x", "INCOME", "1", "food")
		r := &Record{EventName: "INSERT", Keys: keysOf(img), NewImage: img, SequenceNumber: fmt.Sprint(i + 1)}
		changes = append(changes, classify(r))
	}
	runs := planRuns(changes, 99, 20, nil)
	require.Len(t, runs, 4)
	assert.Len(t, runs[0].changes, 16, "16 records × 3 reports × (report item + a possible entry item) = 96 writes")
	assert.Len(t, runs[3].changes, 12)

	changes = nil
	for i := 0; i < 45; i++ {
		// One branch and day, a new category each: the entries grow.
		img := txnImage("b", "2024-01-02", fmt.Sprint(i), "INCOME", "1", fmt.Sprintf("cat%d", i))
		changes = append(changes, classify(&Record{EventName: "INSERT", Keys: keysOf(img), NewImage: img, SequenceNumber: fmt.Sprint(i + 1)}))
	}
	runs = planRuns(changes, 99, 20, nil)
	require.Len(t, runs, 3)
	assert.Len(t, runs[0].changes, 20)
	assert.Len(t, runs[2].changes, 5)
	total := 0
	for _, r := range runs {
		total += len(r.changes)
	}
	assert.Equal(t, 45, total, "no record lost or split")
}

func TestPlanRuns_CountsOnlyTheEntriesPastTheMapsRoom(t *testing.T) {
	var changes []change
	for i := 0; i < 60; i++ {
		img := txnImage(fmt.Sprintf("b%d", i), "2024-01-02", "x", "INCOME", "1", "food")
		changes = append(changes, classify(&Record{EventName: "INSERT", Keys: keysOf(img), NewImage: img, SequenceNumber: fmt.Sprint(i + 1)}))
	}
	full := map[string]bool{}
	for i := range table.MaxInlineEntries {
		full[fmt.Sprint("other", i)] = true
	}
	tests := []struct {
		name  string
		known knownShape
		runs  []int
	}{
		{"nothing known: every entry a possible entry item", nil, []int{16, 16, 16, 12}},
		// 32 records × 3 report items and the run's roll-up delta item
		// (one tenant, one currency): 97 writes; 33 would be 100.
		{"absent items: every entry inline", func(aggregates.ReportKey) *table.ReportShape { return &table.ReportShape{} }, []int{32, 28}},
		{"full maps: every new entry an entry item", func(aggregates.ReportKey) *table.ReportShape {
			return &table.ReportShape{Present: [3]bool{true}, Entries: [3]map[string]bool{full}}
		}, []int{16, 16, 16, 12}},
		{"the entry already inline", func(aggregates.ReportKey) *table.ReportShape {
			return &table.ReportShape{Present: [3]bool{true}, Entries: [3]map[string]bool{{"food": true}}}
		}, []int{32, 28}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			for _, r := range planRuns(changes, 99, 20, tt.known) {
				got = append(got, len(r.changes))
			}
			assert.Equal(t, tt.runs, got)
		})
	}
}

func TestReportUpdate_ShapeDecidesTheFormAndIsTheCondition(t *testing.T) {
	p, err := New(nil, Config{Table: "t"}, nil)
	require.NoError(t, err)
	k := aggregates.ReportKey{Tenant: "t", Branch: "b", Period: aggregates.Period{Type: aggregates.Monthly, Value: "2024-01"}}
	delta := &aggregates.Report{}
	delta.Add(aggregates.Totals{Count: 1}, [3]string{"new.cat", "", ""})
	delta.Add(aggregates.Totals{Count: 2}, [3]string{"old#cat", "cc", ""})

	t.Run("missing maps are set whole, on condition they are still missing", func(t *testing.T) {
		w, err := p.reportWrites(k, delta, &shape{}, "now", table.UpdateOptions{})
		require.NoError(t, err)
		require.Len(t, w.updates, 1, "every name fits inline")
		u := w.updates[0]
		assert.Contains(t, *u.UpdateExpression, "#b0 = :v")
		assert.Contains(t, *u.UpdateExpression, "#b1 = :v")
		// An absent head is written fenced (protocol 4): its count moved
		// over on condition that no count came meanwhile.
		assert.Equal(t, "(attribute_not_exists(#n) OR #n = :c) AND attribute_not_exists(#b0) AND attribute_not_exists(#b1)", *u.ConditionExpression)
		assert.Contains(t, *u.UpdateExpression, "#tc = :n")
		assert.Contains(t, *u.UpdateExpression, "#n = :fv")
		assert.Contains(t, *u.UpdateExpression, "#i = if_not_exists(#i, :z) + :i")
	})
	t.Run("existing entries are incremented, new ones set, names never inline", func(t *testing.T) {
		sh := &shape{present: [3]bool{true, true, false}, entries: [3]map[string]bool{{"old#cat": true}, {}}}
		w, err := p.reportWrites(k, delta, sh, "now", table.UpdateOptions{})
		require.NoError(t, err)
		require.Len(t, w.updates, 1)
		u := w.updates[0]
		expr := *u.UpdateExpression + " " + *u.ConditionExpression
		assert.NotContains(t, expr, "old#cat")
		assert.NotContains(t, expr, "new.cat")
		var oldPH, newPH string
		for ph, name := range u.ExpressionAttributeNames {
			switch name {
			case "old#cat":
				oldPH = ph
			case "new.cat":
				newPH = ph
			}
		}
		require.NotEmpty(t, oldPH)
		require.NotEmpty(t, newPH)
		assert.Contains(t, *u.UpdateExpression, "#b0."+oldPH+".#n = #b0."+oldPH+".#n + :v")
		assert.Contains(t, *u.UpdateExpression, "#b0."+newPH+" = :v")
		assert.Contains(t, *u.ConditionExpression, "attribute_exists(#b0."+oldPH+")")
		assert.Contains(t, *u.ConditionExpression, "attribute_not_exists(#b0."+newPH+")")
		assert.Contains(t, *u.ConditionExpression, "size(#b0) <= :v")
		for ph := range u.ExpressionAttributeNames {
			assert.True(t, strings.Contains(expr, ph), "unused placeholder %s would be rejected", ph)
		}
	})
	t.Run("past the inline limit, new names go to entry items without a condition", func(t *testing.T) {
		full := map[string]bool{}
		for i := range table.MaxInlineEntries - 1 {
			full[fmt.Sprintf("c%02d", i)] = true
		}
		many := &aggregates.Report{}
		many.Add(aggregates.Totals{Count: 1}, [3]string{"a-new", "", ""})
		many.Add(aggregates.Totals{Count: 1}, [3]string{"b-new", "", ""})
		many.Add(aggregates.Totals{Count: 1}, [3]string{"c00", "", ""})
		sh := &shape{present: [3]bool{true}, entries: [3]map[string]bool{full}}
		w, err := p.reportWrites(k, many, sh, "now", table.UpdateOptions{})
		require.NoError(t, err)
		require.Len(t, w.updates, 2, "one name fits the map's last place, the other goes to its entry item")
		assert.Equal(t, []string{"a-new"}, w.inline[aggregates.ByCategory])
		head := *w.updates[0].UpdateExpression + " " + *w.updates[0].ConditionExpression
		assert.Contains(t, head, "size(#b0) <= :v")
		var bPH string
		for ph, name := range w.updates[0].ExpressionAttributeNames {
			if name == "b-new" {
				bPH = ph
			}
		}
		require.NotEmpty(t, bPH)
		assert.Contains(t, *w.updates[0].ConditionExpression, "attribute_not_exists(#b0."+bPH+")", "a name goes to its entry item only while the map does not hold it")
		e := w.updates[1]
		assert.Equal(t, k.EntryKey(aggregates.ByCategory, "b-new").SK, e.Key["SK"].(*ddbtypes.AttributeValueMemberS).Value)
		assert.Nil(t, e.ConditionExpression)
		assert.Contains(t, *e.UpdateExpression, "#n = if_not_exists(#n, :z) + :n")

		full["a-new"] = true
		w, err = p.reportWrites(k, many, sh, "now", table.UpdateOptions{})
		require.NoError(t, err)
		require.Len(t, w.updates, 2, "a full map takes no new name")
		assert.NotContains(t, aws.ToString(w.updates[0].ConditionExpression), "size(")
	})
}

func TestDedupe_RepeatsWithinABatchApplyOnce(t *testing.T) {
	img := txnImage("b", "2024-01-02", "x", "INCOME", "5", "food")
	rec := func(id, seq string) Record {
		return Record{EventID: id, EventName: "INSERT", SequenceNumber: seq, Keys: keysOf(img), NewImage: img}
	}
	recs := []Record{rec("a", "10"), rec("b", "11"), rec("a", "10"), rec("c", "9"), rec("d", "11"), rec("e", "12")}
	changes := make([]change, len(recs))
	for i := range recs {
		changes[i] = classify(&recs[i])
	}
	dedupe(changes)
	var dups []bool
	for _, c := range changes {
		dups = append(dups, c.dup)
	}
	assert.Equal(t, []bool{false, false, true, false, false, false}, dups,
		"same eventID again is a repeat; a lower or equal sequence number with another eventID is not (issue 12: out of order is not a repeat)")
	assert.Equal(t, "12", lastSequence(recs))
}
