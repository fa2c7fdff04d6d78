package poller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/processor"
)

// TestPoller_DamagedReportsOfOneBranchStopNoOtherReport damages report
// items of one branch in every way the issue lists (a total of the wrong
// type, a breakdown that is not a map, an entry field of the wrong type,
// an item padded to DynamoDB's 400 KB limit, a report that should not
// exist, a report deleted) while a poller runs and writes continue to every
// branch. The poller never stops: the other branches' reports stay exact
// meanwhile, refused deltas are parked; reconcile names each damaged
// report, --repair heals them all, and after more writes and a drain there
// is no difference.
func TestPoller_DamagedReportsOfOneBranchStopNoOtherReport(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 41)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 300)...)
	e.drain(t, "p0", nil)
	e.requireReconciled(t)

	// The reports of acme/north, by period type.
	out, err := e.ddb.Query(ctx, &dynamodb.QueryInput{TableName: &e.table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": &ddbtypes.AttributeValueMemberS{Value: aggregates.ReportPK("acme", "north")}}})
	require.NoError(t, err)
	byType := map[aggregates.PeriodType][]aggregates.ReportKey{}
	for _, it := range out.Items {
		ref, err := aggregates.ParseReportItemKey(aggregates.Key{PK: it["PK"].(*ddbtypes.AttributeValueMemberS).Value, SK: it["SK"].(*ddbtypes.AttributeValueMemberS).Value})
		require.NoError(t, err)
		if ref.Kind == aggregates.ReportHeader {
			byType[ref.Report.Period.Type] = append(byType[ref.Report.Period.Type], ref.Report)
		}
	}
	require.GreaterOrEqual(t, len(byType[aggregates.Daily]), 3)
	require.GreaterOrEqual(t, len(byType[aggregates.Monthly]), 2)
	require.NotEmpty(t, byType[aggregates.Yearly])
	update := func(k aggregates.ReportKey, expr string, names map[string]string, values map[string]ddbtypes.AttributeValue) {
		t.Helper()
		_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table,
			Key:              map[string]ddbtypes.AttributeValue{"PK": &ddbtypes.AttributeValueMemberS{Value: k.Key().PK}, "SK": &ddbtypes.AttributeValueMemberS{Value: k.Key().SK}},
			UpdateExpression: aws.String(expr), ExpressionAttributeNames: names, ExpressionAttributeValues: values})
		require.NoError(t, err)
	}
	s := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	damaged := []aggregates.ReportKey{
		byType[aggregates.Daily][0], byType[aggregates.Monthly][0], byType[aggregates.Yearly][0],
		byType[aggregates.Daily][1], byType[aggregates.Monthly][1],
	}
	update(damaged[0], "SET totalIncome = :x", nil, map[string]ddbtypes.AttributeValue{":x": s("lots")})
	update(damaged[1], "SET byCategory = :x", nil, map[string]ddbtypes.AttributeValue{":x": s("not a map")})
	sr, err := infra.ReadReport(ctx, e.ddb, e.table, damaged[2], true)
	require.NoError(t, err)
	var entry string
	for name := range sr.Item[aggregates.ByPaymentMethod.Attribute()].(*ddbtypes.AttributeValueMemberM).Value {
		entry = name
	}
	update(damaged[2], "SET byPaymentMethod.#k.totalExpense = :x", map[string]string{"#k": entry}, map[string]ddbtypes.AttributeValue{":x": s("z")})
	sr, err = infra.ReadReport(ctx, e.ddb, e.table, damaged[3], true)
	require.NoError(t, err)
	update(damaged[3], "SET #p = :x", map[string]string{"#p": "padding"}, map[string]ddbtypes.AttributeValue{":x": s(strings.Repeat("p", 400*1024-infra.ItemSize(sr.Item)-64))})
	_, err = e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table, Key: map[string]ddbtypes.AttributeValue{
		"PK": s(damaged[4].Key().PK), "SK": s(damaged[4].Key().SK)}})
	require.NoError(t, err)
	ghost := aggregates.ReportKey{Tenant: "acme", Branch: "north", Period: aggregates.Period{Type: aggregates.Daily, Value: "2019-05-05"}}
	ghostReport := &aggregates.Report{}
	ghostReport.Add(aggregates.Totals{Count: 3}, [3]string{"phantom", "", ""})
	item, _ := infra.EncodeReport(ghost, ghostReport, "2019-05-06T00:00:00Z")
	_, err = e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: item})
	require.NoError(t, err)
	damaged = append(damaged, ghost)

	// Writes go on while a poller runs.
	p := e.poller(t, "p1", nil, nil, nil)
	stop := start(t, p)
	probe, err := processor.New(e.ddb, processor.Config{Table: e.table}, nil)
	require.NoError(t, err)
	caughtUp := func(last st.Record) func() bool {
		return func() bool {
			cp, err := probe.ShardGuard(e.stream.arn, "shardId-A").Checkpoint(ctx)
			require.NoError(t, err)
			return processor.CompareSequence(cp, aws.ToString(last.Dynamodb.SequenceNumber)) >= 0
		}
	}
	var last st.Record
	for range 5 {
		recs := e.write(t, 80)
		f.appendTo("shardId-A", recs...)
		last = recs[len(recs)-1]
	}
	eventually(t, "the poller to catch up past the damage", 60*time.Second, caughtUp(last))

	diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
	require.NoError(t, err)
	named := map[aggregates.ReportKey]bool{}
	for _, d := range diffs {
		assert.Equal(t, "acme/north", d.Report.Tenant+"/"+d.Report.Branch, "only the damaged branch differs: %s", d)
		named[d.Report] = true
	}
	for _, k := range damaged {
		assert.True(t, named[k], "reconcile names %s", k)
	}
	assert.Positive(t, counter(t, p.pm.Parked.WithLabelValues(processor.ParkedMalformed)), "deltas for the mistyped reports were parked")
	assert.Zero(t, counter(t, p.pm.Commits.WithLabelValues("failed")), "no commit failed: the shard never stopped")

	res, err := processor.Repair(ctx, e.ddb, e.table, diffs, time.Now())
	require.NoError(t, err)
	assert.Equal(t, len(diffs), res.Repaired, "skipped %v, partial %v", res.Skipped, res.Partial)
	recs := e.write(t, 100)
	f.appendTo("shardId-A", recs...)
	eventually(t, "the poller to drain the last writes", 60*time.Second, caughtUp(recs[len(recs)-1]))
	stop()
	e.requireReconciled(t)
}
