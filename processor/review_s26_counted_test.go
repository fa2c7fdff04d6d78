package processor_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 26) of step R as built (docs/exactly-once.md,
// "Review (adversarial, session 26): step R as built").

// S26-R1: the lost-answer recognition of R6 took `repaired = id` left by
// this repair's own earlier transaction, with an epoch another writer moved
// (an abandoned rebase: SET epoch + 1, REMOVE rebasing), for the landing of
// a later transaction that never landed. R6 of two transactions: the first
// lands (epoch E+1, repaired = id); before the second, a rebase pins the
// branch and is abandoned (epoch E+2); the second is cancelled; the re-read
// finds epoch E+2 = E + 2 and repaired = id: "landed". The repair returned
// success with the second transaction's reports not written. Fixed: each
// transaction sets repaired to its own token (the id, the round and j).
func TestReviewS26_R1_AnAbandonBetweenTwoTransactionsIsNotTakenForTheSecond(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	const days = 100
	for i := range days {
		writeTxn(t, e, "c", start.AddDate(0, 0, i).Format("2006-01-02"), fmt.Sprintf("t%d", i), "10")
	}
	c := newConsumer(t, e, "marker", nil, processor.Config{})
	c.pass()
	markRebased(t, e, "c")
	for i := range days {
		damage(t, e, reportKey("c", aggregates.Daily, start.AddDate(0, 0, i).Format("2006-01-02")), "1")
	}
	coord := table.CoordinationTableName(e.table)
	var txs atomic.Int64
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op == "TransactWriteItems" && txs.Add(1) == 2 {
			// A rebase pinned and abandoned between the two transactions.
			_, err := e.ddb.UpdateItem(ctx, table.RebasePin(coord, "t", "c", "rb-r1"))
			require.NoError(t, err)
			_, err = e.ddb.UpdateItem(ctx, table.AbandonRebase(coord, "t", "c", "rb-r1"))
			require.NoError(t, err)
		}
		return ledgertest.Pass
	}
	res, err := countedRepair(t, e.faulty, e, "c", nil)
	e.faults.Decide = nil
	require.NoError(t, err)
	t.Logf("rounds %d, transactions %d, reports %d", res.Rounds, res.Transactions, res.Reports)
	assert.Equal(t, 2, res.Rounds, "the second transaction did not land: a new round")
	e.requireReconciled(t)
}

// S26-R2: an open mark of a batch no longer pending (abandoned by
// abandon-batch or a trim) stays on the applied item until a rebase removes
// it; the counted repair refused such a branch forever telling the
// operator to let the consumer finish the batch or abandon it, which was
// done. It now reads each mark's checkpoint (StreamARN) and names the
// rebase for a stale mark (and keeps "half-committed" for a pending one).
func TestReviewS26_R2_AnAbandonedBatchsOpenMarkNamesTheRebase(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	batch6Txs(t, e, 120)
	crashMidBatch6(t, e, false)
	tenant, branch := openMarkBranch(t, e)
	_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.AppliedKey(tenant, branch)),
		UpdateExpression:          aws.String("SET #fat = :now, #fa = if_not_exists(#f, :z)"),
		ExpressionAttributeNames:  map[string]string{"#fat": table.AttrFencedAt, "#fa": table.AttrForeignAck, "#f": table.AttrForeign},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":now": sAV("2026-11-28T00:00:00Z"), ":z": nAV("0")}})
	require.NoError(t, err)
	repair := func() error {
		_, err := processor.CountedRepair(ctx, e.ddb, e.table, processor.CountedRepairOptions{
			Tenant: tenant, Branch: branch, StreamARN: e.streamARN, Log: t.Logf})
		return err
	}
	err = repair()
	require.ErrorIs(t, err, processor.ErrNotProven)
	assert.Contains(t, err.Error(), "half-committed", "pending: its consumer finishes it")

	shard := shardOf(t, e)
	key := aggregates.CheckpointKey(e.streamARN, shard)
	coord := table.CoordinationTableName(e.table)
	out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &coord, Key: table.Key(key), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	cp, err := table.DecodeCheckpoint(shard, out.Item)
	require.NoError(t, err)
	p, err := processor.New(e.ddb, processor.Config{Table: e.table}, nil)
	require.NoError(t, err)
	landed, err := p.AbandonCheckpoint(ctx, key, table.Abandon{Shard: shard, Prev: cp.Seq, Pending: cp.Pending, Now: time.Now().UTC()})
	require.NoError(t, err)
	require.True(t, landed)
	require.NotEmpty(t, appliedOf(t, e, tenant, branch).Open, "the abandon leaves the mark")

	err = repair()
	require.ErrorIs(t, err, processor.ErrNotProven)
	t.Log(err)
	assert.NotContains(t, err.Error(), "half-committed", "abandoned: no consumer will finish it")
	assert.Contains(t, err.Error(), "rebase", "only a rebase removes the mark")
}

// S26-R3: a transaction of R6 whose outcome is unknown (its answer lost,
// and the re-read failing too) may have landed and changed report figures;
// the repair stopped with the error and RollupsUnproven false (it was set
// for transactions known to have landed only), and ledgerctl, on the error,
// returned before naming any tenant's roll-ups. Now every transaction sent
// with a figure change sets it, whatever its outcome.
func TestReviewS26_R3_AnUnknownOutcomeNamesTheRollupsUnproven(t *testing.T) {
	e := newEnv(t)
	writeTxn(t, e, "u", "2024-06-03", "t1", "10")
	c := newConsumer(t, e, "marker", nil, processor.Config{})
	c.pass()
	markRebased(t, e, "u")
	damage(t, e, reportKey("u", aggregates.Monthly, "2024-06"), "1")
	var lost atomic.Bool
	e.faults.Decide = func(op string) ledgertest.Fault {
		switch {
		case op == "TransactWriteItems":
			lost.Store(true)
			return ledgertest.LoseAnswer
		case op == "GetItem" && lost.Load():
			return ledgertest.Drop
		}
		return ledgertest.Pass
	}
	res, err := countedRepair(t, e.faulty, e, "u", nil)
	e.faults.Decide = nil
	require.Error(t, err)
	t.Log(err)
	e.requireReconciled(t) // it landed: the report moved, its roll-up did not follow
	assert.True(t, res.RollupsUnproven, "a report's figures changed: the roll-ups are named")
}
