package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
)

// TestReconcile_JSONOnStdoutProgressOnStderr runs reconcile --json with a
// progress line on every step (LEDGER_PROGRESS_EVERY=0, as a long reconcile
// prints every 5 s): the lines are on stderr, stdout is one JSON object,
// before and after a report is corrupted.
func TestReconcile_JSONOnStdoutProgressOnStderr(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t), "LEDGER_PROGRESS_EVERY": "0"}
	require.NoError(t, ledgertest.NewWorkload(5).Run(ctx, c, table, 100))

	code, out, errOut := run(t, env, "reconcile", "--json")
	require.Equal(t, exitDiff, code, out+errOut) // no consumer ran: every report is missing
	var v reconcileView
	require.NoError(t, json.Unmarshal([]byte(out), &v), "stdout: %s", out)
	assert.Equal(t, table, v.Table)
	assert.Positive(t, v.Transactions)
	assert.Greater(t, v.ItemsRead, v.Transactions, "the key Scan's items, then each branch's")
	assert.Positive(t, v.ReadUnits)
	require.NotEmpty(t, v.Differences)
	d := v.Differences[0]
	assert.Equal(t, "acme", d.Tenant)
	assert.True(t, strings.HasPrefix(d.PK, "TENANT#acme#BRANCH#"+d.Branch), d.PK)
	assert.Equal(t, d.Period, d.SK)
	assert.NotEmpty(t, d.Lines)

	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	assert.Contains(t, lines[0], "reconcile: scanning keys: ")
	last := lines[len(lines)-1]
	assert.Contains(t, last, "reconcile: ")
	assert.Contains(t, last, "differences, 100% (")
	for _, l := range lines {
		assert.True(t, strings.HasPrefix(l, "reconcile: "), "stderr line %q", l)
	}

	// One branch (no key scan), a stray item in a report partition.
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]ddbtypes.AttributeValue{
		"PK": &ddbtypes.AttributeValueMemberS{Value: "TENANT#acme#BRANCH#north#REPORTING"},
		"SK": &ddbtypes.AttributeValueMemberS{Value: "NOT-A-PERIOD"},
	}})
	require.NoError(t, err)
	code, out, errOut = run(t, env, "reconcile", "--json", "--tenant", "acme", "--branch", "north")
	require.Equal(t, exitDiff, code, out+errOut)
	v = reconcileView{}
	require.NoError(t, json.Unmarshal([]byte(out), &v), "stdout: %s", out)
	var stray *differenceView
	for i := range v.Differences {
		if v.Differences[i].Stray {
			stray = &v.Differences[i]
		}
	}
	require.NotNil(t, stray, out)
	assert.Equal(t, "NOT-A-PERIOD", stray.SK)
	assert.Empty(t, stray.Tenant)
	assert.NotContains(t, errOut, "scanning keys")
	assert.Contains(t, errOut, "reconcile: 1/1 branches")

	code, _, errOut = run(t, env, "reconcile", "--json", "--repair")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "--json")
}

// TestReplay_ProgressOnStderrResultsOnStdout replays the fixture directory
// with a progress line on every step: files and records on stderr, one
// result line per file on stdout.
func TestReplay_ProgressOnStderrResultsOnStdout(t *testing.T) {
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t), "LEDGER_PROGRESS_EVERY": "0"}
	files, err := filepath.Glob(filepath.Join(fixtureEvents, "*.json"))
	require.NoError(t, err)

	code, out, errOut := run(t, env, "replay", fixtureEvents)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, errOut, "replay: reading 0/")
	assert.Contains(t, errOut, "replay: 0/")
	assert.NotContains(t, out, "replay: ")
	assert.Len(t, strings.Split(strings.TrimSpace(out), "\n"), len(files)+1, "a line per file and the total: %s", out)

	env["LEDGER_PROGRESS_EVERY"] = "off"
	code, _, errOut = run(t, env, "replay", fixtureEvents)
	require.Equal(t, exitOK, code, errOut)
	assert.Empty(t, errOut)
}
