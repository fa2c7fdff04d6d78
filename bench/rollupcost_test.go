package bench

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	ledgertable "github.com/ledger-dev/ledger/table"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func TestClassifyRollupKey(t *testing.T) {
	classify := ClassifyRollupKey("t-coordination")
	for _, tt := range []struct {
		table, pk, want string
	}{
		{"t-coordination", "STREAM#arn#0", KindCoordination},
		{"t-coordination", "ROLLUPSTAGE#label#shardId-1", KindStaging},
		{"t-coordination", aggregates.AppliedKey("acme", "br0001").PK, KindApplied},
		{"t", aggregates.AppliedKey("acme", "br0001").PK, KindOther},             // only in the coordination table
		{"t-coordination", aggregates.RollupLanePK("acme", 3), KindCoordination}, // the table decides first
		{"t", aggregates.RollupLanePK("acme", 3), KindLane},
		{"t", aggregates.RollupPK("acme", "BRL", 31), KindPartial},
		{"t", aggregates.RollupPK("acme", aggregates.NoCurrency, 0), KindPartial},
		{"t", aggregates.ReportPK("acme", "br0001"), KindBranch},
		{"t", aggregates.TransactionPK("acme", "br0001"), KindOther},
		{"t", "QUARANTINE#x", KindOther},
	} {
		assert.Equal(t, tt.want, classify(tt.table, tt.pk), "%s %s", tt.table, tt.pk)
	}
}

func TestWithCurrency_DealsBranchesAndCutsYen(t *testing.T) {
	for _, tt := range []struct {
		branch, amount, wantCur, wantAmount string
	}{
		{"br0003", "12.34", "BRL", "12.34"},
		{"br0004", "7.05", "EUR", "7.05"},
		{"br0002", "12.34", "JPY", "12"},
		{"br1000", "0.50", "EUR", "0.50"},
		{"br0005", "0.50", "JPY", "1"}, // never a zero amount
	} {
		got := withCurrency(map[string]ddbtypes.AttributeValue{"branchId": sAV(tt.branch), "amount": nAV(tt.amount)})
		assert.Equal(t, tt.wantCur, str(got[aggregates.AttrCurrency]), tt.branch)
		assert.Equal(t, tt.wantAmount, got["amount"].(*ddbtypes.AttributeValueMemberN).Value, tt.branch)
	}
	assert.Nil(t, withCurrency(nil))
	ops := rollupOps(200, 1, 24)
	require.Len(t, ops, 200)
	for _, op := range ops {
		if op.New == nil {
			continue
		}
		tx, err := aggregates.ParseTransaction(ledgertable.Image(op.New))
		require.NoError(t, err, "every generated change is a valid transaction in its currency")
		require.NoError(t, aggregates.CheckAmountDigits(tx.Amount, tx.Currency), "%s", op.Key)
	}
}

func TestRollupCostRow_Bound(t *testing.T) {
	for _, tt := range []struct {
		name string
		row  RollupCostRow
		want RollupBound
	}{
		{"none", RollupCostRow{}, RollupBound{}},
		{"measured", RollupCostRow{Commits: 150, Kinds: map[string]KindCost{
			KindBranch:  {Units: 5000, Transactions: 100},
			KindLane:    {Units: 1600, Writes: 600},
			KindPartial: {Units: 2000, KeyTouches: 200},
		}}, RollupBound{BranchCommits: 100, LaneUnitsPerCommit: 16, DeltaPutsPerCommit: 3, PartialUnitsPerTouch: 10,
			TableCommits: 1000 * float64(aggregates.RollupLanes) / 16, LaneShardCommits: 100}},
		{"roll-ups off", RollupCostRow{Commits: 100, Kinds: map[string]KindCost{KindBranch: {Units: 5000}}}, RollupBound{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.row.Bound())
		})
	}
}

// TestMeter_KindsSplitUnitsTransactionsAndKeyTouches: one transaction
// writing two partials of one key, one of another, a lane item and a
// branch report, then a single write to the coordination table: each kind
// gets its units (twice inside the transaction), its item writes, one
// transaction, and one touch per partition key.
func TestMeter_KindsSplitUnitsTransactionsAndKeyTouches(t *testing.T) {
	ctx := context.Background()
	db := ddbtest.Client(t)
	table := ddbtest.NewTable(t, db)
	coord := ledgertable.CoordinationTableName(table)
	m := NewMeter(db)
	m.Classify = ClassifyRollupKey(coord)
	put := func(tbl, pk, sk string) ddbtypes.TransactWriteItem {
		return ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: &tbl, Item: map[string]ddbtypes.AttributeValue{"PK": sAV(pk), "SK": sAV(sk)}}}
	}
	p1, p2 := aggregates.RollupPK("acme", "BRL", 1), aggregates.RollupPK("acme", "BRL", 2)
	_, err := m.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
		put(table, p1, "DAILY#2026-11-27"), put(table, p1, "MONTHLY#2026-11"), put(table, p2, "DAILY#2026-11-27"),
		put(table, aggregates.RollupLanePK("acme", 5), "c#BRL#0"), put(table, aggregates.ReportPK("acme", "b1"), "DAILY#2026-11-27"),
	}})
	require.NoError(t, err)
	_, err = m.PutItem(ctx, &dynamodb.PutItemInput{TableName: &coord, Item: map[string]ddbtypes.AttributeValue{"PK": sAV("STREAM#s#0"), "SK": sAV("LEASE#x")}})
	require.NoError(t, err)

	kinds := m.Cost().Kinds
	assert.Equal(t, KindCost{Units: 6, TxUnits: 6, Writes: 3, Transactions: 1, KeyTouches: 2}, kinds[KindPartial])
	assert.Equal(t, KindCost{Units: 2, TxUnits: 2, Writes: 1, Transactions: 1, KeyTouches: 1}, kinds[KindLane])
	assert.Equal(t, KindCost{Units: 2, TxUnits: 2, Writes: 1, Transactions: 1, KeyTouches: 1}, kinds[KindBranch])
	assert.Equal(t, KindCost{Units: 1, Writes: 1}, kinds[KindCoordination])
	hot := map[string]string{}
	for _, k := range m.KeyRates(0) {
		if _, ok := hot[k.Kind]; !ok {
			hot[k.Kind] = k.PK
		}
	}
	assert.Equal(t, p1, hot[KindPartial], "the busiest partial key: two items in one second")
}

// TestRollupCostResult_Markdown: the report of a fixed result, against
// testdata/rollupcost.md (go test -run TestRollupCostResult_Markdown
// ./bench -update rewrites it).
func TestRollupCostResult_Markdown(t *testing.T) {
	res := &RollupCostResult{
		Config:   RollupCostConfig{Changes: 1000, Days: 1, Rate: 100, Pollers: 4, Seed: 24, Command: "ledgerbench rollups -changes 1000"},
		Machine:  Machine{CPUs: 2, GoVersion: "go1.x", LoadBefore: "1.00 1.00 1.00", LoadAfter: "2.00 2.00 2.00", DynamoDBLocal: "3.3.1"},
		Started:  time.Date(2026, 11, 26, 16, 0, 0, 0, time.UTC),
		Duration: 90 * time.Second,
		Rows: []RollupCostRow{
			{Phase: "live", Shards: 4, Pollers: 4, Rollups: true, Changes: 1000, WriteRate: 99.6, Took: 10 * time.Second, Commits: 40, PeakCommits: 9,
				Units: 9000, Kinds: map[string]KindCost{
					KindBranch: {Units: 5000, Transactions: 30}, KindLane: {Units: 1500, Writes: 120}, KindPartial: {Units: 2000, KeyTouches: 100},
					KindStaging: {Units: 300, Writes: 150}, KindApplied: {Units: 200, Writes: 100},
					KindCoordination: {Units: 500, TxUnits: 400}},
				Hot:  map[string]KeyRate{KindLane: {Peak: 40}, KindStaging: {Peak: 5}, KindPartial: {Peak: 60}, KindBranch: {Peak: 14}, KindApplied: {Peak: 3}, KindCoordination: {Peak: 8}},
				Keys: map[string]int{KindLane: 32, KindStaging: 3, KindPartial: 96, KindBranch: 900, KindApplied: 50, KindCoordination: 4}},
			{Phase: "live", Shards: 4, Pollers: 4, Rollups: false, Changes: 1000, WriteRate: 100, Took: 10 * time.Second, Commits: 20, PeakCommits: 5,
				Units: 5400, Kinds: map[string]KindCost{KindBranch: {Units: 5000}, KindCoordination: {Units: 400, TxUnits: 300}},
				Hot:  map[string]KeyRate{KindBranch: {Peak: 14}, KindCoordination: {Peak: 6}},
				Keys: map[string]int{KindBranch: 900, KindCoordination: 4}, Differences: 0},
		},
	}
	var b bytes.Buffer
	res.Markdown(&b)
	golden := filepath.Join("testdata", "rollupcost.md")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, b.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), b.String())
	assert.True(t, strings.Contains(b.String(), "| live | 4 | on | 100 | 40 (4.0, 9; 0) | 9000 | 5000 | 1500 | 300 | 2000 | 200 | 400 / 100 | 0 | +3600 (+67%) | 0 |"), b.String())
}
