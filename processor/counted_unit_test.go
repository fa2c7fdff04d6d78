package processor

import (
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

var updateCounted = flag.Bool("update-counted", false, "rewrite testdata/counted/*.json from countedCases")

// counted fixtures: testdata/counted/<class>--<rule>.json, one Lambda
// stream record each (the form records are quarantined and replayed in),
// whose class for its branch's applied item is the file name's prefix.

// writerImage is a transaction item as the writer leaves it: its count
// changes and the sig of what it holds (table.Count).
func writerImage(changes int64, amount string) map[string]ddbtypes.AttributeValue {
	img := txnImage("b", "2024-01-02", "x", "INCOME", amount, "food")
	img[table.AttrVersion] = table.Int(changes)
	table.Count(img, changes)
	return img
}

func tombstoneOf(img map[string]ddbtypes.AttributeValue, changes int64) map[string]ddbtypes.AttributeValue {
	tomb := maps.Clone(img)
	for _, name := range table.TombstoneRemoves {
		delete(tomb, name)
	}
	tomb[table.AttrDeletedAt] = table.S("2024-01-03T00:00:00Z")
	table.Count(tomb, changes)
	return tomb
}

// probeOf is the rebase's probe of img (B2): count and probe moved, sig
// of the result, nothing else.
func probeOf(img map[string]ddbtypes.AttributeValue, changes int64) map[string]ddbtypes.AttributeValue {
	p := maps.Clone(img)
	p[table.AttrChanges] = table.Int(changes)
	p[table.AttrProbe] = table.S("rebase-1")
	delete(p, table.AttrSig)
	p[table.AttrSig] = table.SigAV(table.Sig(p))
	return p
}

func with(img map[string]ddbtypes.AttributeValue, name string, v ddbtypes.AttributeValue) map[string]ddbtypes.AttributeValue {
	out := maps.Clone(img)
	if v == nil {
		delete(out, name)
	} else {
		out[name] = v
	}
	return out
}

// countedCases are the fixtures' records, named <class>--<the rule it pins>.
func countedCases() map[string]Record {
	rec := func(event string, old, new map[string]ddbtypes.AttributeValue) Record {
		img := new
		if img == nil {
			img = old
		}
		return Record{EventID: "e1", EventName: event, SequenceNumber: "100", StreamViewType: "NEW_AND_OLD_IMAGES",
			StreamARN:           "arn:aws:dynamodb:us-east-1:000000000000:table/ledger/stream/2024-01-01T00:00:00.000",
			ApproximateCreation: time.Date(2024, 1, 3, 0, 0, 0, 0, time.UTC), Keys: keysOf(img), OldImage: old, NewImage: new}
	}
	v1, v2 := writerImage(1, "5"), writerImage(2, "7")
	tomb3 := tombstoneOf(v2, 3)
	marked := with(tomb3, table.AttrCompacting, table.S("compact-1"))
	table.Count(marked, 4)
	unmarked4 := maps.Clone(tomb3)
	table.Count(unmarked4, 4)
	plain := txnImage("b", "2024-01-02", "x", "INCOME", "5", "food") // no changes, no sig
	junk := map[string]ddbtypes.AttributeValue{"PK": v1["PK"], "SK": table.S("JUNK"), "entityType": table.S("JUNK")}
	table.Count(junk, 1)
	keptCount := with(v2, table.AttrAmount, &ddbtypes.AttributeValueMemberN{Value: "9"}) // changes and sig as they were
	probe := probeOf(v2, 3)
	probeOfPlain := probeOf(plain, 1)
	afterProbeKeptProbe := with(probe, table.AttrAmount, &ddbtypes.AttributeValueMemberN{Value: "8"})
	table.Count(afterProbeKeptProbe, 4)
	afterProbeKeptProbe[table.AttrProbe] = table.S("rebase-1")
	afterProbeKeptProbe[table.AttrSig] = table.SigAV(table.Sig(with(afterProbeKeptProbe, table.AttrSig, nil)))
	byTTL := rec("REMOVE", marked, nil)
	byTTL.ByTTL = true
	wrongView := rec("INSERT", nil, v1)
	wrongView.StreamViewType = "NEW_IMAGE"
	return map[string]Record{
		"applied--insert-with-changes-1-and-its-sig":                                     rec("INSERT", nil, v1),
		"applied--modify-stepping-changes-by-one-with-its-sig":                           rec("MODIFY", v1, v2),
		"applied--modify-to-a-tombstone-stepping-by-one":                                 rec("MODIFY", v2, tomb3),
		"applied--compaction-mark-of-a-tombstone-stepping-by-one":                        rec("MODIFY", tomb3, marked),
		"compacted--remove-of-a-tombstone-marked-by-a-compaction-with-its-sig":           rec("REMOVE", marked, nil),
		"foreign--remove-of-a-marked-tombstone-by-the-ttl-service":                       byTTL,
		"applied--modify-after-a-probe-that-kept-probe-is-an-ordinary-change":            rec("MODIFY", probe, afterProbeKeptProbe),
		"probed--probe-images-equal-but-changes-probe-sig-its-count-stepped-and-its-sig": rec("MODIFY", v2, probe),
		"probed--probe-of-an-item-without-changes":                                       rec("MODIFY", plain, probeOfPlain),
		"foreign--probe-whose-sig-does-not-match":                                        rec("MODIFY", v2, with(probe, table.AttrSig, table.SigAV(make([]byte, table.SigSize)))),
		"foreign--probe-that-does-not-step-the-count":                                    rec("MODIFY", v2, probeOf(v2, 2)),
		"foreign--probe-attribute-added-without-a-count":                                 rec("MODIFY", plain, with(plain, table.AttrProbe, table.S("rebase-1"))),
		"foreign--remove-of-a-live-item-the-writer-never-hard-deletes":                   rec("REMOVE", v2, nil),
		"foreign--remove-of-a-tombstone-not-marked-by-a-compaction":                      rec("REMOVE", unmarked4, nil),
		"foreign--remove-of-a-marked-tombstone-whose-sig-does-not-match":                 rec("REMOVE", with(marked, table.AttrChanges, table.Int(9)), nil),
		"foreign--insert-without-changes":                                                rec("INSERT", nil, plain),
		"foreign--insert-with-changes-2":                                                 rec("INSERT", nil, writerImage(2, "5")),
		"foreign--modify-without-changes-on-either-side":                                 rec("MODIFY", plain, with(plain, table.AttrAmount, &ddbtypes.AttributeValueMemberN{Value: "6"})),
		"foreign--modify-that-keeps-the-count-and-sig":                                   rec("MODIFY", v2, keptCount),
		"foreign--modify-stepping-by-two":                                                rec("MODIFY", v1, writerImage(3, "7")),
		"foreign--modify-lowering-the-count-a-restore":                                   rec("MODIFY", v2, v1),
		"foreign--modify-whose-new-sig-does-not-match":                                   rec("MODIFY", v1, with(v2, table.AttrSig, table.SigAV(make([]byte, table.SigSize)))),
		"foreign--modify-with-probe-that-changes-a-figure":                               rec("MODIFY", v2, with(probe, table.AttrAmount, &ddbtypes.AttributeValueMemberN{Value: "1"})),
		"foreign--item-of-the-partition-that-is-no-transaction":                          rec("INSERT", nil, junk),
		"foreign--record-of-the-wrong-view-type":                                         wrongView,
		"foreign--modify-from-a-writer-image-to-one-without-changes-a-direct-put":        rec("MODIFY", v2, plain),
	}
}

func TestCountOf_Fixtures(t *testing.T) {
	dir := filepath.Join("testdata", "counted")
	cases := countedCases()
	if *updateCounted {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for name, r := range cases {
			ev, err := ToLambda(r)
			require.NoError(t, err)
			raw, err := json.MarshalIndent(ev, "", "  ")
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, name+".json"), append(raw, '\n'), 0o644))
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	assert.ElementsMatch(t, slices.Collect(maps.Keys(cases)), names, "a fixture per case (go test -run TestCountOf_Fixtures -update-counted ./processor/)")
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			var ev events.DynamoDBEventRecord
			require.NoError(t, json.Unmarshal(raw, &ev))
			r := FromLambda(ev)
			require.NoError(t, r.DecodeErr)
			c := classify(&r)
			want, _, _ := strings.Cut(name, "--")
			assert.Equal(t, want, c.kind.String())
			assert.Equal(t, branchID{"t", "b"}, c.branch)
			assert.True(t, c.counted())
		})
	}
}

// Records that are not of a transaction partition, or whose branch cannot
// be read, count nowhere; a repeat of the batch counts once.
func TestCountOf_OnlyTransactionPartitionsCountOnce(t *testing.T) {
	v1 := writerImage(1, "5")
	report := map[string]ddbtypes.AttributeValue{"PK": table.S("TENANT#t#BRANCH#b#REPORTING"), "SK": table.S("DAILY#2024-01-02")}
	history := table.Key(aggregates.HistoryKey("t", "b", "x", 1))
	for name, r := range map[string]Record{
		"report":          {EventName: "MODIFY", Keys: report, OldImage: report, NewImage: report},
		"history":         {EventName: "INSERT", Keys: history, NewImage: history},
		"no keys":         {EventName: "INSERT", NewImage: v1},
		"undecodable key": {EventName: "INSERT", DecodeErr: errors.New("keys: bad")},
	} {
		t.Run(name, func(t *testing.T) {
			r.SequenceNumber = "1"
			c := classify(&r)
			assert.False(t, c.counted())
			assert.Equal(t, countNone, c.kind)
		})
	}
	t.Run("a repeat in the batch counts once", func(t *testing.T) {
		recs := []Record{
			{EventID: "a", EventName: "INSERT", SequenceNumber: "1", Keys: keysOf(v1), NewImage: v1},
			{EventID: "a", EventName: "INSERT", SequenceNumber: "1", Keys: keysOf(v1), NewImage: v1},
		}
		changes := []change{classify(&recs[0]), classify(&recs[1])}
		dedupe(changes)
		assert.Equal(t, []table.AppliedCount{{Tenant: "t", Branch: "b", Applied: 1}}, appliedCounts(changes))
	})
}

// The run planner counts one applied-item update per branch among its
// item limit: a run of records of many branches is cut where their
// updates would pass it.
func TestPlanRun_CountsOneAppliedUpdatePerBranch(t *testing.T) {
	var changes []change
	for i := 0; i < 60; i++ {
		// Each record a new branch: 3 report items, 3 possible entry
		// items, and (counting) its branch's applied item.
		img := txnImage("b"+strings.Repeat("x", i), "2024-01-02", "x", "INCOME", "1", "food")
		r := &Record{EventName: "INSERT", Keys: keysOf(img), NewImage: img, SequenceNumber: "1"}
		changes = append(changes, classify(r))
	}
	// One roll-up delta item besides (tenant t, no currency).
	assert.Len(t, planRun(changes, 98, 20, nil, false).changes, 16, "16 × 6 + 1 = 97 writes; 17 would be 103")
	r := planRun(changes, 98, 20, nil, true)
	assert.Len(t, r.changes, 13, "13 × (6 + 1) + 1 = 92 writes; 14 would be 99")
	counts := appliedCounts(r.changes)
	assert.Len(t, counts, 13)
	for _, c := range counts {
		assert.Equal(t, int64(1), c.Foreign, "no changes: foreign")
	}
}

// A TTL deletion's userIdentity is read from both sources, so that its
// REMOVE is never taken for a compaction's (the second review, C-b).
func TestRecord_TheTTLServicesIdentityIsReadFromBothSources(t *testing.T) {
	ttl := func(typ, principal string) *streamtypes.Identity {
		return &streamtypes.Identity{Type: aws.String(typ), PrincipalId: aws.String(principal)}
	}
	for name, tc := range map[string]struct {
		id   *streamtypes.Identity
		want bool
	}{
		"ttl":                {ttl("Service", "dynamodb.amazonaws.com"), true},
		"another service":    {ttl("Service", "other.amazonaws.com"), false},
		"no identity":        {nil, false},
		"a user, not a type": {ttl("User", "dynamodb.amazonaws.com"), false},
	} {
		t.Run(name, func(t *testing.T) {
			r := FromStream(streamtypes.Record{EventID: aws.String("e"), EventName: streamtypes.OperationTypeRemove, UserIdentity: tc.id,
				Dynamodb: &streamtypes.StreamRecord{SequenceNumber: aws.String("1")}}, "arn")
			assert.Equal(t, tc.want, r.ByTTL, "FromStream")
			ev, err := ToLambda(r)
			require.NoError(t, err)
			assert.Equal(t, tc.want, FromLambda(ev).ByTTL, "ToLambda and FromLambda")
		})
	}
}
