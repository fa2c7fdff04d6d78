package main

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// S26-B4 (docs/exactly-once.md, "Review (adversarial, session 26): step B
// as built"): a ledgerctl holding a branch's writes (--hold) dies, during
// --hold-wait (before its pin) or during the rebase (after it). Its
// writeHold stays on the branch item and the branch's writes are refused
// (503) for good: --abandon with the rebase's id (printed with the hold)
// releases it too, with or without a pin of that id.
func TestReviewS26_B4_AbandonReleasesTheHoldOfADeadRebase(t *testing.T) {
	ctx := context.Background()
	table, env := createdTable(t)
	coord := ledgertable.CoordinationTableName(table)
	c := ddbtest.Client(t)
	held := func(branch string) bool {
		got, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: ledgertable.Key(aggregates.BranchKey("acme", branch)), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		_, ok := got.Item[ledgertable.AttrWriteHold]
		return ok
	}
	for _, tc := range []struct {
		branch string
		pinned bool
	}{{"north", false}, {"south", true}} {
		t.Run(tc.branch, func(t *testing.T) {
			item := ledgertable.Key(aggregates.BranchKey("acme", tc.branch))
			item[ledgertable.AttrEntityType] = ledgertable.S("BRANCH")
			_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: item})
			require.NoError(t, err)
			_, err = c.UpdateItem(ctx, ledgertable.HoldBranch(table, "acme", tc.branch, "rb-dead"))
			require.NoError(t, err)
			if tc.pinned {
				_, err = c.UpdateItem(ctx, ledgertable.RebasePin(coord, "acme", tc.branch, "rb-dead"))
				require.NoError(t, err)
			}
			code, out, errOut := run(t, env, "reconcile", "--repair", "--rebase", "--abandon", "rb-dead", "--tenant", "acme", "--branch", tc.branch)
			assert.Equal(t, exitOK, code, out+errOut)
			assert.False(t, held(tc.branch), "the dead rebase's hold is released")
			a, err := ledgertable.GetApplied(ctx, c, coord, "acme", tc.branch)
			require.NoError(t, err)
			assert.Empty(t, a.Rebasing)
		})
	}
}

// S26-B6: ledgerctl unfence while a rebase runs: the rebase fences the
// branch's heads again at B4 and sets fencedAt at B5, after the unfence
// removed both. unfence refuses while any branch's rebasing is set.
func TestReviewS26_B6_UnfenceRefusesWhileABranchIsRebased(t *testing.T) {
	ctx := context.Background()
	table, env := createdTable(t)
	coord := ledgertable.CoordinationTableName(table)
	c := ddbtest.Client(t)
	_, err := c.UpdateItem(ctx, ledgertable.RebasePin(coord, "acme", "north", "rb-live"))
	require.NoError(t, err)
	code, out, errOut := run(t, env, "unfence")
	assert.Equal(t, exitError, code, out+errOut)
	assert.Contains(t, errOut, "rebase rb-live")
	code, out, errOut = run(t, env, "reconcile", "--repair", "--rebase", "--abandon", "rb-live", "--tenant", "acme", "--branch", "north")
	require.Equal(t, exitOK, code, out+errOut)
	code, out, errOut = run(t, env, "unfence")
	assert.Equal(t, exitOK, code, out+errOut)
}
