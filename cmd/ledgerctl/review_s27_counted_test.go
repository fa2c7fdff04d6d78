package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 27) of step R's fixes (docs/exactly-once.md,
// "Review (adversarial, session 27): step R's fixes").

// rebasedBranches writes three counted transactions in each of branches
// (tenant, branch) of table, commits them with a batch consumer, marks
// each branch rebased (fencedAt, as its B5 sets it) and damages its
// monthly report by 7.
func rebasedBranches(t *testing.T, table string, branches ...[2]string) {
	t.Helper()
	ctx := context.Background()
	c := ddbtest.Client(t)
	coord := ledgertable.CoordinationTableName(table)
	for _, b := range branches {
		for i := range 3 {
			item := map[string]ddbtypes.AttributeValue{
				"PK": ledgertable.S(aggregates.TransactionPK(b[0], b[1])), "SK": ledgertable.S(fmt.Sprintf("2024-06-0%d#t%d", i+1, i)),
				"entityType": ledgertable.S(aggregates.EntityTransaction), "type": ledgertable.S("INCOME"),
				"amount": ledgertable.Int(int64(10 * (i + 1))), "category": ledgertable.S("rent"),
				"createdAt": ledgertable.S(fmt.Sprintf("2024-06-0%dT12:00:00Z", i+1)), "version": ledgertable.Int(1),
			}
			ledgertable.Count(item, 1)
			_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: item})
			require.NoError(t, err)
		}
	}
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(t, err)
	p, err := processor.New(c, processor.Config{Table: table}, nil)
	require.NoError(t, err)
	shards, err := ledgertest.ReadAll(ctx, dynamodbstreams.NewFromConfig(ddbtest.Config(t)), info.StreamARN, nil)
	require.NoError(t, err)
	for _, s := range shards {
		g := p.ShardGuard(info.StreamARN, s.ID)
		g.CommitBatches()
		_, err := p.Process(ctx, g, s.Records)
		require.NoError(t, err)
	}
	for _, b := range branches {
		_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &coord, Key: ledgertable.Key(aggregates.AppliedKey(b[0], b[1])),
			UpdateExpression:          aws.String("SET #fat = :now, #fa = :z"),
			ExpressionAttributeNames:  map[string]string{"#fat": ledgertable.AttrFencedAt, "#fa": ledgertable.AttrForeignAck},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":now": ledgertable.S("2026-11-28T00:00:00Z"), ":z": ledgertable.Int(0)}})
		require.NoError(t, err)
		k := aggregates.ReportKey{Tenant: b[0], Branch: b[1], Period: aggregates.Period{Type: aggregates.Monthly, Value: "2024-06"}}
		_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table, Key: ledgertable.Key(k.Key()),
			UpdateExpression:          aws.String("SET #i = #i + :d"),
			ExpressionAttributeNames:  map[string]string{"#i": ledgertable.AttrTotalIncome},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":d": ledgertable.Int(7)}})
		require.NoError(t, err)
	}
}

// faultyEnvironment is ledgerctl's environment for table whose DynamoDB
// client goes through faults (one attempt a call: a fault reaches the
// caller).
func faultyEnvironment(t *testing.T, table string, env map[string]string, faults *ledgertest.FaultTransport) (*environment, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var out, errOut bytes.Buffer
	client := dynamodb.NewFromConfig(ddbtest.Config(t, infra.WithTransportWrapper(func(next http.RoundTripper) http.RoundTripper {
		faults.Next = next
		return faults
	})), func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	return &environment{table: table, coordination: ledgertable.CoordinationTableName(table), getenv: func(k string) string { return env[k] },
		stdout: &out, stderr: &errOut, client: client}, &out, &errOut
}

// S27-R1 (and the leftover c of S26-R3: its print at ledgerctl's level):
// `reconcile --repair` repairs branch acme/a (counted: its figures
// changed), then the counted repair of beta/b fails with its outcome
// unknown (its transaction's answer lost, the re-read dropped). On an
// error ledgerctl printed the roll-up line of the failing branch's tenant
// only, and returned before the loop that names the others: acme's
// roll-ups, off by the repair that landed, were named by nothing. Fixed:
// every tenant whose figures changed (or may have) is named before
// ledgerctl fails.
func TestReviewS27_R1_AFailedRepairNamesTheRollupsOfEveryTenantBefore(t *testing.T) {
	table, env := createdTable(t)
	rebasedBranches(t, table, [2]string{"acme", "a"}, [2]string{"beta", "b"})
	faults := &ledgertest.FaultTransport{}
	var txs atomic.Int64
	var lost atomic.Bool
	faults.Decide = func(op string) ledgertest.Fault {
		switch {
		case op == "TransactWriteItems" && txs.Add(1) == 2: // beta/b's R6
			lost.Store(true)
			return ledgertest.LoseAnswer
		case op == "GetItem" && lost.Load():
			return ledgertest.Drop
		}
		return ledgertest.Pass
	}
	e, out, errOut := faultyEnvironment(t, table, env, faults)
	code := e.reconcile(context.Background(), []string{"--repair", "--rollups=false", "--settle", "0s"})
	faults.Decide = nil
	t.Log(out.String() + errOut.String())
	require.Equal(t, exitError, code)
	assert.Contains(t, out.String(), "repaired acme/a (counted")
	assert.Contains(t, out.String(), "report figures of tenant beta may have changed: its roll-ups are unproven", "S26-R3's print")
	assert.Contains(t, out.String(), "report figures of tenant acme changed: its roll-ups are unproven", "the tenant repaired before the error")

	// Both landed: the branches are exact.
	code, o, _ := run(t, env, "reconcile", "--rollups=false")
	assert.Equal(t, exitOK, code, o)
}
