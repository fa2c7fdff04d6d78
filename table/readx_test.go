package table_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
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

// TestDecodeCheckpoint_BothLayouts: step X. A checkpoint in the fenced
// layout of protocol 4 (sequenceNumber the map {fence: 4}, the position in
// pos) decodes with Fence 4 and its position for a reader (Position), and
// with no Seq: the position a consumer of this version commits from, whose
// claims condition on sequenceNumber as a string or absent. shardFinished,
// which the drain's finished test reads, is read in both layouts.
func TestDecodeCheckpoint_BothLayouts(t *testing.T) {
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	fence := func(v types.AttributeValue) types.AttributeValue {
		return &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"fence": v}}
	}
	const s42 = "000000000000000000042"
	for _, tc := range []struct {
		name     string
		item     map[string]types.AttributeValue
		seq, pos string
		fence    int64
		finished bool
	}{
		{name: "none", item: nil},
		{name: "old layout", item: map[string]types.AttributeValue{"sequenceNumber": s(s42)}, seq: s42, pos: s42},
		{name: "old layout, finished", item: map[string]types.AttributeValue{"sequenceNumber": s(s42), "shardFinished": &types.AttributeValueMemberBOOL{Value: true}}, seq: s42, pos: s42, finished: true},
		{name: "fenced", item: map[string]types.AttributeValue{"sequenceNumber": fence(n("4")), "pos": s(s42)}, pos: s42, fence: 4},
		{name: "fenced, finished", item: map[string]types.AttributeValue{"sequenceNumber": fence(n("4")), "pos": s(s42), "shardFinished": &types.AttributeValueMemberBOOL{Value: true}}, pos: s42, fence: 4, finished: true},
		{name: "fenced before its first position", item: map[string]types.AttributeValue{"sequenceNumber": fence(n("4"))}, fence: 4},
		{name: "fenced by an unreadable protocol", item: map[string]types.AttributeValue{"sequenceNumber": fence(s("x")), "pos": s(s42)}, pos: s42, fence: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := table.DecodeCheckpoint("shard-1", tc.item)
			require.NoError(t, err)
			assert.Equal(t, tc.seq, c.Seq, "Seq, what this version's consumers commit from")
			assert.Equal(t, tc.pos, c.Position(), "Position, what readers read")
			assert.Equal(t, tc.fence, c.Fence)
			assert.Equal(t, tc.finished, c.Finished)
		})
	}
}

// TestFlags_ProtocolIsReadAndAboveThisVersionRefuses: step X. The flags
// item may carry protocol (N); this version (table.Protocol, 3) reads it,
// and ProtocolAbove, which ledgerctl reconcile --repair asks, refuses
// under a higher one or one it cannot read, naming both numbers. protocol
// is no flag name.
func TestFlags_ProtocolIsReadAndAboveThisVersionRefuses(t *testing.T) {
	c := ddbtest.Client(t)
	name := ddbtest.NewTable(t, c)
	ctx := t.Context()
	assert.Equal(t, 3, table.Protocol)
	require.Error(t, table.ValidateFlagName("protocol"))

	f, err := table.GetFlags(ctx, c, name)
	require.NoError(t, err)
	assert.Equal(t, int64(0), f.Protocol, "a table of this version has no protocol")
	require.NoError(t, f.ProtocolAbove(table.Protocol))

	for _, tc := range []struct {
		v       types.AttributeValue
		want    int64
		wantErr string
	}{
		{v: table.Int(3), want: 3},
		{v: table.Int(2), want: 2},
		{v: table.Int(4), want: 4, wantErr: "the table is at protocol 4 (flags item), this version speaks protocol 3"},
		{v: table.S("4"), wantErr: "no integer"},
	} {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(name), Key: table.Key(aggregates.FlagsKey()),
			UpdateExpression:          aws.String("SET #p = :p"),
			ExpressionAttributeNames:  map[string]string{"#p": "protocol"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": tc.v},
		})
		require.NoError(t, err)
		f, err := table.GetFlags(ctx, c, name)
		require.NoError(t, err)
		assert.Equal(t, tc.want, f.Protocol)
		assert.NotContains(t, f.Values, "protocol")
		err = f.ProtocolAbove(table.Protocol)
		if tc.wantErr == "" {
			assert.NoError(t, err)
		} else {
			assert.ErrorContains(t, err, tc.wantErr)
		}
	}
}
