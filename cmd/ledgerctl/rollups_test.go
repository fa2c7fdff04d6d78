package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	ledgertable "github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// putRollupPartial stores a roll-up partial as the lane layout has it (a
// report item plus branches, entry items beyond the inline maps): the
// consumers do not write them on this branch yet.
func putRollupPartial(t *testing.T, c *dynamodb.Client, table string, k aggregates.RollupKey, r *aggregates.Report, branches int64) {
	t.Helper()
	item, entries := ledgertable.EncodeReport(aggregates.ReportKey{Tenant: k.Tenant, Branch: "shape", Period: k.Period}, r, "2026-02-01T00:00:00Z")
	item[ledgertable.AttrPK], item[ledgertable.AttrSK] = ledgertable.S(k.Key().PK), ledgertable.S(k.Key().SK)
	item[ledgertable.AttrRollupBranches] = &ddbtypes.AttributeValueMemberN{Value: fmt.Sprint(branches)}
	for _, en := range entries {
		ref, err := aggregates.ParseReportItemKey(ledgertable.KeyOf(en))
		require.NoError(t, err)
		ek := k.EntryKey(ref.Dim, ref.Name)
		en[ledgertable.AttrPK], en[ledgertable.AttrSK] = ledgertable.S(ek.PK), ledgertable.S(ek.SK)
	}
	for _, it := range append(entries, item) {
		_, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &table, Item: it})
		require.NoError(t, err)
	}
}

// TestReport_TenantRollupsOneTablePerCurrency: report without --branch
// prints the tenant's roll-ups, summed over the lanes with their entry
// items, one table per currency of its branches (or the one --currency
// names), and --json the writer's roll-up objects.
func TestReport_TenantRollupsOneTablePerCurrency(t *testing.T) {
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	ctx := context.Background()
	for id, cur := range map[string]string{"rio": "BRL", "porto": "EUR", "lisbon": "EUR"} {
		k := aggregates.BranchKey("chain", id)
		_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]ddbtypes.AttributeValue{
			ledgertable.AttrPK: ledgertable.S(k.PK), ledgertable.AttrSK: ledgertable.S(k.SK), ledgertable.AttrEntityType: ledgertable.S("BRANCH"),
			ledgertable.AttrCurrency: ledgertable.S(cur),
		}})
		require.NoError(t, err)
	}
	jan := aggregates.Period{Type: aggregates.Monthly, Value: "2026-01"}
	big := &aggregates.Report{}
	for i := range 40 { // 8 names in entry items
		big.Add(aggregates.Totals{Income: decimal.RequireFromString("2.5"), Count: 1}, [3]string{fmt.Sprintf("c%02d", i), "", ""})
	}
	small := &aggregates.Report{}
	small.Add(aggregates.Totals{Expense: decimal.RequireFromString("1"), Count: 1}, [3]string{"c39", "", ""})
	putRollupPartial(t, c, table, aggregates.RollupKey{Tenant: "chain", Currency: "BRL", Lane: 1, Period: jan}, big, 1)
	putRollupPartial(t, c, table, aggregates.RollupKey{Tenant: "chain", Currency: "BRL", Lane: 30, Period: jan}, small, 1)
	putRollupPartial(t, c, table, aggregates.RollupKey{Tenant: "chain", Currency: "EUR", Lane: 0, Period: jan}, small, 2)

	code, out, errOut := run(t, env, "report", "--tenant", "chain")
	require.Equal(t, exitOK, code, errOut)
	brl, eur, ok := strings.Cut(out, "MONTHLY roll-ups of tenant chain in EUR")
	require.True(t, ok, out)
	assert.Contains(t, brl, "MONTHLY roll-ups of tenant chain in BRL")
	assert.Regexp(t, `(?m)^BRL\s+2026-01\s+100\.00\s+1\.00\s+99\.00\s+41\s+2$`, brl)
	assert.Regexp(t, `(?m)^EUR\s+2026-01\s+0\.00\s+1\.00\s+-1\.00\s+1\s+2$`, eur)

	code, out, errOut = run(t, env, "report", "--tenant", "chain", "--currency", "EUR", "--breakdown", "category")
	require.Equal(t, exitOK, code, errOut)
	assert.NotContains(t, out, "BRL")
	assert.Regexp(t, `(?m)^\s+c39\s+0\.00\s+1\.00\s+-1\.00\s+1\s*$`, out)

	code, out, errOut = run(t, env, "report", "--tenant", "chain", "--currency", "BRL", "--json")
	require.Equal(t, exitOK, code, errOut)
	var views []writer.Rollup
	require.NoError(t, json.Unmarshal([]byte(out), &views), out)
	require.Len(t, views, 1)
	assert.Equal(t, writer.Totals{TotalIncome: "100", TotalExpense: "1", TransactionCount: 41}, views[0].Totals)
	assert.Equal(t, "99", views[0].Net)
	assert.Equal(t, int64(2), views[0].Branches)
	assert.Len(t, views[0].ByCategory, 40, "inline and entry-item names")
	assert.Equal(t, writer.Totals{TotalIncome: "2.5", TotalExpense: "1", TransactionCount: 2}, views[0].ByCategory["c39"], "an entry item of lane 1 plus lane 30's inline entry")

	code, out, _ = run(t, env, "report", "--tenant", "chain", "--currency", "JPY")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "no roll-ups yet")
	code, out, _ = run(t, env, "report", "--tenant", "nobody")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "has no branches")
	for _, args := range [][]string{{"--currency", "brl"}, {"--currency", "XXX"}, {"--branch", "rio", "--currency", "BRL"}} {
		code, _, errOut = run(t, env, append([]string{"report", "--tenant", "chain"}, args...)...)
		assert.Equal(t, exitError, code, "%v: %s", args, errOut)
	}
}
