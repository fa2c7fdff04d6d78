package processor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

func sAV(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
func nAV(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberN{Value: v} }

// putTxn writes a valid transaction of tenant t.
func putTxn(t *testing.T, e *env, branch, date, id, amount, category, costCenter string) {
	t.Helper()
	k := aggregates.Key{PK: aggregates.TransactionPK("t", branch), SK: date + "#" + id}
	item := map[string]ddbtypes.AttributeValue{
		"PK": sAV(k.PK), "SK": sAV(k.SK), "entityType": sAV(aggregates.EntityTransaction),
		"type": sAV("INCOME"), "amount": nAV(amount), "category": sAV(category),
		"createdAt": sAV(date + "T12:00:00Z"),
	}
	if costCenter != "" {
		item["costCenter"] = sAV(costCenter)
	}
	_, err := e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: item})
	require.NoError(t, err)
}

func reportKey(branch string, pt aggregates.PeriodType, v string) aggregates.ReportKey {
	return aggregates.ReportKey{Tenant: "t", Branch: branch, Period: aggregates.Period{Type: pt, Value: v}}
}

// TestCommit_RefusedReportItemsAreParkedOnceAndTheRestCommits damages two
// report items the way a user (or an attacker with another path to the
// table) could: a total rewritten as a string, and a report item padded to
// DynamoDB's 400 KB limit. A batch touching them and other branches
// commits: the other reports are exact, the refused deltas are parked
// (once, although the commit's answer is lost and retried), counted by
// reason, and a branch of many names keeps its report item bounded
// through entry items. reconcile names every damaged report and parked
// delta; --repair heals them all and clears the parked deltas.
func TestCommit_RefusedReportItemsAreParkedOnceAndTheRestCommits(t *testing.T) {
	for _, mode := range []string{"batch", "runs"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			// A transaction of another branch first: in batch mode it is the
			// shard's first run, which creates the checkpoint.
			putTxn(t, e, "first", "2024-01-01", "f0", "1", "rent", "")
			// Damage next (their stream records are not transactions).
			typed := table.EncodeReport
			bad, _ := typed(reportKey("typo", aggregates.Daily, "2024-01-02"), &aggregates.Report{}, "x")
			bad[table.AttrTotalIncome] = sAV("12")
			big, _ := typed(reportKey("big", aggregates.Yearly, "2024"), &aggregates.Report{}, "x")
			big["pad"] = sAV(strings.Repeat("p", 400*1024-table.ItemSize(big)-16))
			// An inline entry lacking a figure: an update adds to the
			// figures in place, which DynamoDB refuses.
			held := &aggregates.Report{}
			held.Add(aggregates.Totals{Count: 1}, [3]string{"rent", "", ""})
			lack, _ := typed(reportKey("lack", aggregates.Daily, "2024-01-02"), held, "x")
			delete(lack[aggregates.ByCategory.Attribute()].(*ddbtypes.AttributeValueMemberM).Value["rent"].(*ddbtypes.AttributeValueMemberM).Value, table.AttrTransactionCount)
			for _, it := range []map[string]ddbtypes.AttributeValue{bad, big, lack} {
				_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: it})
				require.NoError(t, err)
			}
			for i := range 3 {
				putTxn(t, e, "typo", "2024-01-02", fmt.Sprint("a", i), "10", "rent", "")
				putTxn(t, e, "big", "2024-01-03", fmt.Sprint("b", i), "10", "rent", "")
				putTxn(t, e, "good", "2024-01-02", fmt.Sprint("c", i), "10", "rent", "ops")
				putTxn(t, e, "lack", "2024-01-02", fmt.Sprint("d", i), "10", "rent", "")
			}
			for i := range 3 * table.MaxInlineEntries {
				putTxn(t, e, "wide", "2024-02-01", fmt.Sprint("w", i), "1", fmt.Sprintf("c-%03d", i%(table.MaxInlineEntries+7)), fmt.Sprintf("cost centre %03d", i))
			}
			shard, recs := e.records(t)

			reg := prometheus.NewRegistry()
			p, err := processor.New(e.faulty, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}, processor.NewMetrics(reg))
			require.NoError(t, err)
			g := p.ShardGuard(e.streamARN, shard)
			if mode == "batch" {
				g.CommitBatches()
				// The first commit of a shard is a run, up to its first
				// record with an effect: give it its checkpoint.
				_, err = p.Process(ctx, g, recs[:1])
				require.NoError(t, err)
				recs = recs[1:]
			}
			// Every commit that lands has its answer lost once: the retry
			// must find its guard taken and park nothing twice.
			lost := map[int]bool{}
			calls := 0
			e.faults.Decide = func(op string) ledgertest.Fault {
				if op != "TransactWriteItems" {
					return ledgertest.Pass
				}
				calls++
				if calls%2 == 0 && !lost[calls] {
					lost[calls] = true
					return ledgertest.LoseAnswer
				}
				return ledgertest.Pass
			}
			for len(recs) > 0 {
				n := min(len(recs), 40)
				_, err := p.Process(ctx, g, recs[:n])
				require.NoError(t, err)
				recs = recs[n:]
			}
			e.faults.Decide = nil

			assert.Equal(t, 2.0, testutil.ToFloat64(p.Metrics().Parked.WithLabelValues(processor.ParkedMalformed)), "the typo and lack reports' deltas")
			assert.GreaterOrEqual(t, testutil.ToFloat64(p.Metrics().Parked.WithLabelValues(processor.ParkedTooLarge)), 1.0, "the padded report's delta")

			// The wide branch's report item stays bounded: names past the
			// inline limit are entry items.
			wide, err := table.ReadReport(ctx, e.ddb, e.table, reportKey("wide", aggregates.Yearly, "2024"), true)
			require.NoError(t, err)
			assert.NotEmpty(t, wide.Entries)
			assert.LessOrEqual(t, len(wide.Item[aggregates.ByCostCenter.Attribute()].(*ddbtypes.AttributeValueMemberM).Value), table.MaxInlineEntries)
			got, problems := wide.Decode()
			require.Empty(t, problems)
			assert.Len(t, got.Breakdowns[aggregates.ByCostCenter], 3*table.MaxInlineEntries)
			assert.Equal(t, int64(3*table.MaxInlineEntries), got.Count)

			diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
			require.NoError(t, err)
			var named []string
			parked := 0
			for _, d := range diffs {
				named = append(named, d.Report.Tenant+"/"+d.Report.Branch)
				parked += d.Parked
			}
			for _, d := range diffs {
				assert.Contains(t, []string{"typo", "big", "lack"}, d.Report.Branch, "only the damaged branches differ: %s", d)
			}
			assert.Contains(t, named, "t/typo")
			assert.Contains(t, named, "t/big")
			assert.Contains(t, named, "t/lack")
			assert.Equal(t, int(testutil.ToFloat64(p.Metrics().Parked.WithLabelValues(processor.ParkedMalformed))+
				testutil.ToFloat64(p.Metrics().Parked.WithLabelValues(processor.ParkedTooLarge))), parked, "one parked item per parked delta")

			list, err := processor.ListParked(ctx, e.ddb, e.table)
			require.NoError(t, err)
			require.Len(t, list, parked)
			for _, pd := range list {
				assert.Contains(t, []string{"typo", "big", "lack"}, pd.Report.Branch)
				assert.Contains(t, []string{processor.ParkedMalformed, processor.ParkedTooLarge}, pd.Reason)
				assert.NotEmpty(t, pd.Detail)
				assert.NotEmpty(t, pd.From)
				assert.Equal(t, int64(3), pd.Delta.Count, "the three records of the branch, in one commit")
			}

			res, err := processor.Repair(ctx, e.ddb, e.table, diffs, time.Now())
			require.NoError(t, err)
			assert.Empty(t, res.Skipped)
			assert.Empty(t, res.Partial)
			assert.Equal(t, len(diffs), res.Repaired)
			e.requireReconciled(t)
			out, err := e.ddb.Query(ctx, &dynamodb.QueryInput{TableName: &e.table, IndexName: aws.String("GSI1"),
				KeyConditionExpression:    aws.String("GSI1PK = :p"),
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": sAV(aggregates.ParkedIndexPK)}})
			require.NoError(t, err)
			assert.Empty(t, out.Items, "the repair cleared the parked deltas")
		})
	}
}
