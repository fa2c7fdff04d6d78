package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	ledgertable "github.com/ledger-dev/ledger/table"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestReconcile_ExitStatusLikeDiffAndRepair(t *testing.T) {
	ctx := context.Background()
	endpoint := ddbtest.Endpoint(t)
	table := ddbtest.TableName(t)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": endpoint}

	code, out, errOut := run(t, env, "table", "create")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "created")
	code, out, _ = run(t, env, "table", "create")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "already exists")
	code, _, errOut = run(t, env, "table", "describe")
	require.Equal(t, exitOK, code, errOut)

	// Transactions, then the processor over the stream: no difference.
	c := ddbtest.Client(t)
	require.NoError(t, ledgertest.NewWorkload(5).Run(ctx, c, table, 200))
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(t, err)
	shards, err := ledgertest.ReadAll(ctx, dynamodbstreams.NewFromConfig(ddbtest.Config(t)), info.StreamARN, nil)
	require.NoError(t, err)
	p, err := processor.New(c, processor.Config{Table: table}, nil)
	require.NoError(t, err)
	_, err = p.Process(ctx, p.ShardGuard(info.StreamARN, shards[0].ID), shards[0].Records)
	require.NoError(t, err)

	code, out, errOut = run(t, env, "reconcile")
	require.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, " 0 differences")

	// Corrupt one report: found (exit 1), repaired (exit 1), then clean.
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &table,
		Key:                       map[string]ddbtypes.AttributeValue{"PK": &ddbtypes.AttributeValueMemberS{Value: "TENANT#acme#BRANCH#north#REPORTING"}, "SK": &ddbtypes.AttributeValueMemberS{Value: "YEARLY#2024"}},
		UpdateExpression:          aws.String("SET totalIncome = totalIncome + :one"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "0.01"}},
	})
	require.NoError(t, err)
	code, out, _ = run(t, env, "reconcile", "--tenant", "acme", "--branch", "north")
	require.Equal(t, exitDiff, code, out)
	assert.Contains(t, out, "YEARLY#2024")
	assert.Contains(t, out, "totals: got income=")

	code, out, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--settle", "0s")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, "repaired 1 reports")
	code, out, _ = run(t, env, "reconcile")
	require.Equal(t, exitOK, code, out)

	// Damage of every kind is a difference (exit 1, never 2), named, and
	// repaired; parked deltas are listed by ledgerctl parked.
	damaged, err := ledgertest.Damage(ctx, c, table, "acme", "north")
	require.NoError(t, err)
	code, out, errOut = run(t, env, "reconcile")
	require.Equal(t, exitDiff, code, out+errOut)
	for _, k := range damaged {
		assert.Contains(t, out, k.Key().SK)
	}
	assert.Contains(t, out, "totalIncome is not a number")
	assert.Contains(t, out, "byCategory is not a map")
	assert.Contains(t, out, "bytes, more than")
	code, out, errOut = run(t, env, "parked")
	require.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, "0 parked deltas")
	code, out, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--settle", "0s")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, fmt.Sprintf("repaired %d reports", len(damaged)))
	code, out, _ = run(t, env, "reconcile")
	require.Equal(t, exitOK, code, out)
}

func TestRun_ErrorsExitTwo(t *testing.T) {
	endpoint := ddbtest.Endpoint(t)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", nil, nil, "usage"},
		{"unknown command", nil, []string{"frobnicate"}, "unknown command"},
		{"bench moved", nil, []string{"bench", "-quick"}, "cmd/ledgerbench"},
		{"half a scope", nil, []string{"reconcile", "--tenant", "acme"}, "both --tenant and --branch"},
		{"bad flag", nil, []string{"reconcile", "--nope"}, "flag provided but not defined"},
		{"stuck-after negative", nil, []string{"reconcile", "--stuck-after", "-1m"}, "--stuck-after must not be negative"},
		{"stuck-after for a branch", nil, []string{"reconcile", "--tenant", "acme", "--branch", "north", "--stuck-after", "1h"}, "whole table only, with --rollups"},
		{"stuck-after without roll-ups", nil, []string{"reconcile", "--rollups=false", "--stuck-after", "2h"}, "whole table only, with --rollups"},
		{"drop-malformed-open without a rebase", nil, []string{"reconcile", "--repair", "--drop-malformed-open"}, "--drop-malformed-open goes with --repair --rebase"},
		{"quiescent for a branch", nil, []string{"reconcile", "--tenant", "acme", "--branch", "north", "--quiescent"}, "whole table only, with --rollups"},
		{"missing table", map[string]string{"LEDGER_TABLE": "no-such-table", "AWS_ENDPOINT_URL": endpoint}, []string{"reconcile"}, "no-such-table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env == nil {
				tt.env = map[string]string{"AWS_ENDPOINT_URL": endpoint}
			}
			code, _, errOut := run(t, tt.env, tt.args...)
			assert.Equal(t, exitError, code)
			assert.Contains(t, errOut, tt.want)
		})
	}
}

// TestReconcileRepair_StrayItemIsNamedDeletedAndTheRestRepaired puts an
// item ledger never writes (SK JUNK) in a branch's report partition next to
// a damaged report (issue 25, finding 2: a stray item crashed --repair
// before it repaired anything). reconcile names it as a stray item; --repair
// deletes it, names what it deleted, and repairs the report; the next
// reconcile finds nothing.
func TestReconcileRepair_StrayItemIsNamedDeletedAndTheRestRepaired(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	require.NoError(t, ledgertest.NewWorkload(7).Run(ctx, c, table, 100))
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(t, err)
	passer(t, c, info.StreamARN, processor.Config{Table: table})()
	code, out, errOut := run(t, env, "reconcile")
	require.Equal(t, exitOK, code, out+errOut)

	pk := &ddbtypes.AttributeValueMemberS{Value: "TENANT#acme#BRANCH#north#REPORTING"}
	junk := map[string]ddbtypes.AttributeValue{"PK": pk, "SK": &ddbtypes.AttributeValueMemberS{Value: "JUNK"}}
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: junk})
	require.NoError(t, err)
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &table,
		Key:                       map[string]ddbtypes.AttributeValue{"PK": pk, "SK": &ddbtypes.AttributeValueMemberS{Value: "YEARLY#2024"}},
		UpdateExpression:          aws.String("SET totalIncome = totalIncome + :one"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "0.01"}},
	})
	require.NoError(t, err)

	code, out, errOut = run(t, env, "reconcile")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, "stray item TENANT#acme#BRANCH#north#REPORTING / JUNK")
	assert.Contains(t, out, "2 differences")

	code, out, errOut = run(t, env, "reconcile", "--repair", "--uncounted", "--settle", "0s")
	require.Equal(t, exitDiff, code, out+errOut)
	assert.Contains(t, out, "deleted stray item TENANT#acme#BRANCH#north#REPORTING / JUNK")
	assert.Contains(t, out, "repaired 1 reports; deleted 1 stray items;")

	got, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: junk, ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.Nil(t, got.Item, "the stray item is deleted")
	code, out, errOut = run(t, env, "reconcile")
	require.Equal(t, exitOK, code, out+errOut)
}

// passer is a consumer of cfg over the table of streamARN: each call
// processes every record so far (the guard skips what is committed).
// createdTable is a new table (and its coordination table) made by
// `ledgerctl table create`, with the environment that names it.
func createdTable(t *testing.T) (table string, env map[string]string) {
	t.Helper()
	table = ddbtest.TableName(t)
	env = map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}
	code, _, errOut := run(t, env, "table", "create")
	require.Equal(t, exitOK, code, errOut)
	return table, env
}

func passer(t testing.TB, c processor.DynamoDB, streamARN string, cfg processor.Config) func() {
	t.Helper()
	ctx := context.Background()
	p, err := processor.New(c, cfg, nil)
	require.NoError(t, err)
	return func() {
		t.Helper()
		shards, err := ledgertest.ReadAll(ctx, dynamodbstreams.NewFromConfig(ddbtest.Config(t)), streamARN, nil)
		require.NoError(t, err)
		for _, s := range shards {
			_, err = p.Process(ctx, p.ShardGuard(streamARN, s.ID), s.Records)
			require.NoError(t, err)
		}
	}
}
