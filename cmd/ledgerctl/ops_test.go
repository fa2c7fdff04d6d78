package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	ledgertable "github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

const fixtureEvents = "../../fixtures/events"

// golden is the part of a fixtures/golden file these tests compare.
type golden struct {
	Records, Applied, Quarantined, Ignored, Duplicates int
	Reports                                            []struct {
		PK, SK                    string
		TotalIncome, TotalExpense string
		TransactionCount          int64
	}
}

func readGolden(t *testing.T, name string) golden {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../fixtures/golden", name+".json"))
	require.NoError(t, err)
	var g golden
	require.NoError(t, json.Unmarshal(b, &g))
	return g
}

func TestReplay_FixtureAppliesOnceAndReportPrintsIt(t *testing.T) {
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	file := filepath.Join(fixtureEvents, "insert-basics.json")
	g := readGolden(t, "insert-basics")

	code, out, errOut := run(t, env, "replay", file)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, strconv.Itoa(g.Records)+" records: "+strconv.Itoa(g.Applied)+" applied, 0 duplicates")

	// Again: nothing applied, every record a duplicate.
	code, out, errOut = run(t, env, "replay", file)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, strconv.Itoa(g.Records)+" records: 0 applied, "+strconv.Itoa(g.Records)+" duplicates")

	// report --json agrees with the golden reports, one period type at a time.
	for _, pt := range []string{"DAILY", "MONTHLY", "YEARLY"} {
		code, out, errOut = run(t, env, "report", "--tenant", "basics", "--branch", "main", "--period", pt, "--json")
		require.Equal(t, exitOK, code, errOut)
		var got []writer.Report
		require.NoError(t, json.Unmarshal([]byte(out), &got), out)
		var want []string
		for _, r := range g.Reports {
			if strings.HasPrefix(r.SK, pt+"#") {
				want = append(want, r.SK+" "+r.TotalIncome+" "+r.TotalExpense+" "+strconv.FormatInt(r.TransactionCount, 10))
			}
		}
		var have []string
		for _, r := range got {
			have = append(have, r.PeriodType+"#"+r.PeriodValue+" "+r.TotalIncome+" "+r.TotalExpense+" "+strconv.FormatInt(r.TransactionCount, 10))
		}
		assert.Equal(t, want, have, pt)
	}

	// The table form, with a breakdown.
	code, out, errOut = run(t, env, "report", "--tenant", "basics", "--branch", "main", "--breakdown", "category")
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.GreaterOrEqual(t, len(lines), 2, out)
	assert.Regexp(t, `^tenant\s+branch\s+period\s+income\s+expense\s+net\s+count$`, lines[0])
	assert.Regexp(t, `(?m)^basics\s+main\s+2024-01\s+`, out)
	assert.Regexp(t, `(?m)^\s+sales\s+`, out, "category rows under the report")

	code, out, _ = run(t, env, "report", "--tenant", "basics", "--branch", "nowhere")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "no MONTHLY reports")
}

func TestReplay_DirectoryAndCLITimestamps(t *testing.T) {
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}

	// A directory: every fixture, in name order, then a total.
	entries, err := filepath.Glob(filepath.Join(fixtureEvents, "*.json"))
	require.NoError(t, err)
	code, out, errOut := run(t, env, "replay", fixtureEvents)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "in "+strconv.Itoa(len(entries))+" files")

	// What 'aws dynamodbstreams get-records' prints: ISO timestamps, extra
	// fields, no eventSourceARN.
	b, err := os.ReadFile(filepath.Join(fixtureEvents, "remove.json"))
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	for _, r := range doc["Records"].([]any) {
		rec := r.(map[string]any)
		delete(rec, "eventSourceARN")
		rec["dynamodb"].(map[string]any)["ApproximateCreationDateTime"] = "2024-01-15T12:00:00+00:00"
	}
	doc["NextShardIterator"] = "arn:aws:dynamodb:…|1|AAAA"
	cli := filepath.Join(t.TempDir(), "get-records.json")
	b, err = json.Marshal(doc)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cli, b, 0o644))
	code, out, errOut = run(t, env, "replay", cli)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "0 applied", "remove.json was replayed with the directory already")
}

func TestLag_PendingTransactionsUntilCommitted(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	require.NoError(t, ledgertest.NewWorkload(7).Run(ctx, c, table, 40))

	// Nothing consumed: every transaction record is pending, and the oldest
	// is older than a nanosecond.
	code, out, errOut := run(t, env, "lag", "--json")
	require.Equal(t, exitOK, code, errOut)
	var before struct {
		Stream string
		Shards []shardLag
	}
	require.NoError(t, json.Unmarshal([]byte(out), &before), out)
	require.Len(t, before.Shards, 1, "DynamoDB Local has one shard")
	s := before.Shards[0]
	assert.Empty(t, s.Checkpoint)
	assert.Positive(t, s.PendingTxns)
	assert.GreaterOrEqual(t, s.Pending, s.PendingTxns)
	assert.NotNil(t, s.OldestTxn)
	code, _, errOut = run(t, env, "lag", "--max-age", "1ns")
	assert.Equal(t, exitDiff, code)
	assert.Contains(t, errOut, "older than 1ns")

	// Consume the shard with a checkpoint guard, as the poller does.
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(t, err)
	shards, err := ledgertest.ReadAll(ctx, dynamodbstreams.NewFromConfig(ddbtest.Config(t)), info.StreamARN, nil)
	require.NoError(t, err)
	p, err := processor.New(c, processor.Config{Table: table}, nil)
	require.NoError(t, err)
	_, err = p.Process(ctx, p.ShardGuard(info.StreamARN, shards[0].ID), shards[0].Records)
	require.NoError(t, err)

	code, out, errOut = run(t, env, "lag")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "stream "+info.StreamARN)
	assert.Regexp(t, `(?m)^shard\s+state\s+owner\s+checkpoint\s+last commit\s+pending\s+pending txns\s+oldest txn$`, out)
	row := regexpLine(t, out, shards[0].ID)
	fields := strings.Fields(row)
	require.Len(t, fields, 8, row)
	assert.Equal(t, "open", fields[1])
	assert.Equal(t, shards[0].Records[len(shards[0].Records)-1].SequenceNumber, fields[3], "checkpoint at the last record")
	assert.Equal(t, "0", fields[6], "no pending transaction: %s", row)
	assert.Equal(t, "-", fields[7])
	code, _, _ = run(t, env, "lag", "--max-age", "1ns")
	assert.Equal(t, exitOK, code, "nothing pending is late")

	// A checkpoint that is a migration's copy not released yet is shown
	// as such: no consumer commits on the shard until it is released.
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(ledgertable.CoordinationTableName(table)), Key: ledgertable.Key(aggregates.CheckpointKey(info.StreamARN, shards[0].ID)),
		UpdateExpression:          aws.String("SET migrationFence = :t"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":t": ledgertable.S(table)},
	})
	require.NoError(t, err)
	code, out, errOut = run(t, env, "lag")
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "fenced", strings.Fields(regexpLine(t, out, shards[0].ID))[1])
}

func regexpLine(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no line starting with %s in:\n%s", prefix, out)
	return ""
}

func TestSubcommands_RefuseBadUsage(t *testing.T) {
	endpoint := ddbtest.Endpoint(t)
	taken, err := net.Listen("tcp", ":0")
	require.NoError(t, err)
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	env := map[string]string{"AWS_ENDPOINT_URL": endpoint, "LEDGER_TABLE": "no-such-table"}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"report"}, "--tenant is required"},
		{[]string{"report", "--tenant", "a", "--currency", "usd"}, "--currency"},
		{[]string{"report", "--tenant", "a", "--branch", "b", "--period", "HOURLY"}, "or FISCAL_YEAR"},
		{[]string{"report", "--tenant", "a", "--branch", "b", "--period", "FISCAL_QUARTER", "--from", "2026-Q1"}, "--from"},
		{[]string{"report", "--tenant", "a", "--branch", "b", "--from", "2024-13"}, "--from"},
		{[]string{"report", "--tenant", "a", "--branch", "b", "--breakdown", "colour"}, "--breakdown"},
		{[]string{"replay"}, "usage: ledgerctl replay"},
		{[]string{"replay", "no/such/file.json"}, "no such file"},
		{[]string{"replay", "."}, "no *.json"},
		{[]string{"lag", "--max-records", "0"}, "--max-records"},
		{[]string{"lag"}, "no-such-table does not exist"},
		{[]string{"run", "extra"}, "unexpected argument"},
		{[]string{"run", "--ddb-port", port, "--data", t.TempDir()}, "port " + port + " for DynamoDB Local is taken"},
	} {
		code, _, errOut := run(t, env, tt.args...)
		assert.Equal(t, exitError, code, "%v", tt.args)
		assert.Contains(t, errOut, tt.want, "%v", tt.args)
	}
	// Every command has --help (exit 2 like any usage error, text on stderr).
	for _, cmd := range [][]string{{"run"}, {"report"}, {"replay"}, {"lag"}, {"reconcile"}, {"table", "create"}, {"table", "describe"}, {"token"}, {"flags", "get"}, {"flags", "set"}} {
		code, _, errOut := run(t, env, append(cmd, "--help")...)
		assert.Equal(t, exitError, code, "%v", cmd)
		assert.Contains(t, errOut, "usage: ledgerctl "+cmd[0], "%v", cmd)
	}
}

func TestSampleWorkload_IsFixedAndConsistent(t *testing.T) {
	a, finalA := sampleWorkload()
	b, finalB := sampleWorkload()
	require.Equal(t, a, b, "the same requests, keys included, on every run")
	assert.Equal(t, finalA, finalB)
	keys := map[string]bool{}
	creates := 0
	for _, op := range a {
		assert.False(t, keys[op.key], "idempotency key %s used twice", op.key)
		keys[op.key] = true
		if op.method == "POST" {
			creates++
			var body map[string]any
			require.NoError(t, json.Unmarshal([]byte(op.body), &body))
		} else {
			assert.Equal(t, "POST", a[op.ref].method, "changes refer to creates")
			assert.Equal(t, a[op.ref].branch, op.branch)
		}
	}
	deletes := 0
	for _, op := range a {
		if op.method == "DELETE" {
			deletes++
		}
	}
	assert.Equal(t, creates-deletes, finalA)
}
