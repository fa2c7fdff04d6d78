package main

import (
	"context"
	"sync"
	"testing"
	"time"

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
)

// TestRebase_TheCommandRebasesABranchWhileAConsumerCommits: keys written
// before counting (no changes: nothing of the branch is proven) and a
// damaged report; `reconcile --repair --rebase` with a batch consumer
// committing the stream meanwhile probes the branch, waits for its probes,
// writes the reports and resets the applied item; the branch reconciles;
// `unfence` then clears fencedAt with the fences.
func TestRebase_TheCommandRebasesABranchWhileAConsumerCommits(t *testing.T) {
	ctx := context.Background()
	table, env := createdTable(t)
	coord := ledgertable.CoordinationTableName(table)
	c := ddbtest.Client(t)
	require.NoError(t, ledgertest.NewWorkload(2626).Run(ctx, c, table, 60))
	info, err := ledgertable.DescribeTable(ctx, c, table)
	require.NoError(t, err)
	streams := dynamodbstreams.NewFromConfig(ddbtest.Config(t))
	p, err := processor.New(c, processor.Config{Table: table}, nil)
	require.NoError(t, err)
	pass := func() {
		shards, err := ledgertest.ReadAll(ctx, streams, info.StreamARN, nil)
		require.NoError(t, err)
		for _, s := range shards {
			g := p.ShardGuard(info.StreamARN, s.ID)
			g.CommitBatches()
			_, err := p.Process(ctx, g, s.Records)
			require.NoError(t, err)
		}
	}
	pass()
	const tenant, branch = "acme", "north"
	heads, err := c.Query(ctx, &dynamodb.QueryInput{TableName: &table, KeyConditionExpression: aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": ledgertable.S(aggregates.ReportPK(tenant, branch))}, ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	var headKeys []aggregates.Key
	for _, item := range heads.Items {
		if et, _ := ledgertable.String(item, ledgertable.AttrEntityType); et == aggregates.EntityReport {
			headKeys = append(headKeys, ledgertable.KeyOf(item))
		}
	}
	require.GreaterOrEqual(t, len(headKeys), 3)
	// A head put back in the old layout (B1 fences it), and one deleted
	// (B5 creates it again, fenced).
	_, err = c.UpdateItem(ctx, ledgertable.UnfenceHead(table, headKeys[1]))
	require.NoError(t, err)
	_, err = c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: ledgertable.Key(headKeys[2])})
	require.NoError(t, err)
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table, Key: ledgertable.Key(headKeys[0]),
		UpdateExpression:          aws.String("SET #i = :d"),
		ExpressionAttributeNames:  map[string]string{"#i": ledgertable.AttrTotalIncome},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":d": &ddbtypes.AttributeValueMemberN{Value: "12345"}}})
	require.NoError(t, err)
	code, out, _ := run(t, env, "reconcile", "--rollups=false", "--tenant", tenant, "--branch", branch)
	require.Equal(t, exitDiff, code, out)

	// The consumer commits the stream while the rebase runs.
	stop, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				pass()
			}
		}
	}()
	code, out, errOut := run(t, env, "reconcile", "--repair", "--rebase", "--tenant", tenant, "--branch", branch, "--wait", "1m")
	once.Do(func() { close(stop) })
	<-done
	require.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, "rebased acme/north")
	assert.Contains(t, out, "roll-ups are unproven", "a report's figures changed")
	pass()
	code, out, _ = run(t, env, "reconcile", "--rollups=false", "--tenant", tenant, "--branch", branch)
	require.Equal(t, exitOK, code, out)
	a, err := ledgertable.GetApplied(ctx, c, coord, tenant, branch)
	require.NoError(t, err)
	assert.NotEmpty(t, a.FencedAt)
	assert.Empty(t, a.Rebasing)
	assert.Equal(t, a.Foreign, a.ForeignAck)
	for _, k := range headKeys {
		got, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: ledgertable.Key(k), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		assert.True(t, ledgertable.FencedHead(got.Item), "head %s fenced after the rebase", k)
	}

	code, out, errOut = run(t, env, "unfence")
	require.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, "rebase marks cleared (fencedAt): 1")
	a, err = ledgertable.GetApplied(ctx, c, coord, tenant, branch)
	require.NoError(t, err)
	assert.Empty(t, a.FencedAt)
}

// TestRebase_ARunningRebaseRefusesAnotherUntilAbandoned: a rebase whose
// process died leaves rebasing set; another rebase of the branch is
// refused by its id, writing nothing; --abandon clears it and moves the
// epoch; a second --abandon of the same id is refused; the flags are
// checked before anything.
func TestRebase_ARunningRebaseRefusesAnotherUntilAbandoned(t *testing.T) {
	ctx := context.Background()
	table, env := createdTable(t)
	coord := ledgertable.CoordinationTableName(table)
	c := ddbtest.Client(t)

	code, _, errOut := run(t, env, "reconcile", "--rebase", "--tenant", "acme", "--branch", "north")
	require.Equal(t, exitError, code)
	assert.Contains(t, errOut, "go with --repair --rebase")

	_, err := c.UpdateItem(ctx, ledgertable.RebasePin(coord, "acme", "north", "rb-dead"))
	require.NoError(t, err)
	code, out, errOut := run(t, env, "reconcile", "--repair", "--rebase", "--tenant", "acme", "--branch", "north", "--wait", "1s")
	require.Equal(t, exitError, code, out)
	assert.Contains(t, errOut, "rebase rb-dead runs")
	a, err := ledgertable.GetApplied(ctx, c, coord, "acme", "north")
	require.NoError(t, err)
	assert.Equal(t, "rb-dead", a.Rebasing, "another's rebase is left as it is")
	assert.Zero(t, a.Epoch)

	code, out, errOut = run(t, env, "reconcile", "--repair", "--rebase", "--abandon", "rb-dead", "--tenant", "acme", "--branch", "north")
	require.Equal(t, exitOK, code, out+errOut)
	a, err = ledgertable.GetApplied(ctx, c, coord, "acme", "north")
	require.NoError(t, err)
	assert.Empty(t, a.Rebasing)
	assert.Equal(t, int64(1), a.Epoch, "the epoch moved: the abandoned rebase's B5 can no longer land")

	code, _, errOut = run(t, env, "reconcile", "--repair", "--rebase", "--abandon", "rb-dead", "--tenant", "acme", "--branch", "north")
	require.Equal(t, exitError, code)
	assert.Contains(t, errOut, "no rebase rb-dead")
}

// TestRebase_HoldSetsAndReleasesTheBranchsWriteHold: --hold puts the
// rebase's id in the branch item's writeHold for the rebase and removes it
// at the end; a branch without a directory item cannot be held, and
// nothing runs.
func TestRebase_HoldSetsAndReleasesTheBranchsWriteHold(t *testing.T) {
	ctx := context.Background()
	table, env := createdTable(t)
	c := ddbtest.Client(t)

	code, _, errOut := run(t, env, "reconcile", "--repair", "--rebase", "--hold", "--hold-wait", "1ms", "--tenant", "acme", "--branch", "north")
	require.Equal(t, exitError, code)
	assert.Contains(t, errOut, "hold the writes of acme/north")

	item := ledgertable.Key(aggregates.BranchKey("acme", "north"))
	item[ledgertable.AttrEntityType] = ledgertable.S("BRANCH")
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: item})
	require.NoError(t, err)
	code, out, errOut := run(t, env, "reconcile", "--repair", "--rebase", "--hold", "--hold-wait", "1ms", "--tenant", "acme", "--branch", "north")
	require.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, "writes of acme/north held")
	assert.Contains(t, out, "rebased acme/north")
	assert.Contains(t, out, "writes of acme/north released")
	got, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: ledgertable.Key(aggregates.BranchKey("acme", "north")), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.NotContains(t, got.Item, ledgertable.AttrWriteHold)
}
