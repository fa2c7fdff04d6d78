package processor_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Review (adversarial, session 27) of step R's fixes (docs/exactly-once.md,
// "Review (adversarial, session 27): step R's fixes").

// S27-R2 (issue 25's leftover b of S26-R2): an open mark that names no
// batch (not {label}~{shard}~{to}: no consumer writes one; here a foreign
// write) refused the counted repair and the rebase forever, each naming
// the other (or nothing the operator could do but edit the applied item by
// hand). No group of any batch adds counts with such a mark or removes it,
// so removing it under the rebase's pin of open as read loses nothing: the
// rebase does it when told (DropMalformedOpen, ledgerctl
// --drop-malformed-open), which both refusals now name. A well-formed mark
// of a pending batch is not dropped by the option.
func TestReviewS27_R2_AMalformedOpenMarkIsDroppedByTheRebaseWhenTold(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	writeTxn(t, e, "m", "2024-06-03", "t1", "10")
	writeTxn(t, e, "m", "2024-06-04", "t2", "5")
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass()
	markRebased(t, e, "m")
	coord := table.CoordinationTableName(e.table)
	_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &coord, Key: table.Key(aggregates.AppliedKey("t", "m")),
		UpdateExpression:          aws.String("ADD #o :m"),
		ExpressionAttributeNames:  map[string]string{"#o": table.AttrOpen},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":m": &ddbtypes.AttributeValueMemberSS{Value: []string{"junk"}}}})
	require.NoError(t, err)
	monthly := reportKey("m", aggregates.Monthly, "2024-06")
	damage(t, e, monthly, "1")

	repair := func() error {
		_, err := processor.CountedRepair(ctx, e.ddb, e.table, processor.CountedRepairOptions{
			Tenant: "t", Branch: "m", StreamARN: e.streamARN, Log: t.Logf})
		return err
	}
	err = repair()
	require.ErrorIs(t, err, processor.ErrNotProven)
	t.Log(err)
	assert.Contains(t, err.Error(), "--drop-malformed-open", "the counted repair names the way out")
	opts := processor.RebaseOptions{Tenant: "t", Branch: "m", StreamARN: e.streamARN, Wait: time.Minute, Poll: 20 * time.Millisecond, Log: t.Logf}
	_, err = processor.Rebase(ctx, e.ddb, e.table, opts)
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), "--drop-malformed-open", "the rebase names the way out")

	// Told, the rebase removes it (a batch consumer commits its probes).
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				c.pass()
			}
		}
	}()
	opts.DropMalformedOpen = true
	res, err := processor.Rebase(ctx, e.ddb, e.table, opts)
	close(stop)
	<-done
	require.NoError(t, err)
	assert.Equal(t, []string{"junk"}, res.StaleOpen)
	assert.Empty(t, appliedOf(t, e, "t", "m").Open)
	c.pass()
	e.requireReconciled(t)

	// The counted repair runs again.
	damage(t, e, monthly, "1")
	require.NoError(t, repair())
	e.requireReconciled(t)
	assert.Equal(t, "15", storedIncome(t, e, monthly))
}

// S27-R3: the token `<id>/<round>/<j>` (S26-R1) is unique only while ids
// are: a caller that passes the same CountedRepairOptions.ID to two
// repairs of one branch (no ledgerctl path does) left, after the first
// (one transaction: token <id>/1/1, epoch E+1), the token the second's
// first transaction sets. An abandon's epoch step before that transaction
// (epoch E+2 = E' + 1, E' = E+1 pinned by the second) and its
// cancellation: the re-read found epoch E'+1 and token <id>/1/1, "landed",
// and the second repair returned success with its report not written.
// Fixed: the token also names the epoch its transaction sets, a value set
// once (every writer moves the epoch by one under the previous value), so
// whatever the id no other write leaves it.
func TestReviewS27_R3_AnIDUsedTwiceIsNotTakenForTheSecondsLanding(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	writeTxn(t, e, "d", "2024-06-03", "t1", "10")
	c := newConsumer(t, e, "marker", nil, processor.Config{})
	c.pass()
	markRebased(t, e, "d")
	monthly := reportKey("d", aggregates.Monthly, "2024-06")
	coord := table.CoordinationTableName(e.table)
	repair := func(hook func(string)) (processor.CountedRepairResult, error) {
		o := processor.CountedRepairOptions{Tenant: "t", Branch: "d", ID: "rp-fixed", Log: t.Logf}
		if hook != nil {
			processor.SetCountedRepairHook(&o, hook)
		}
		return processor.CountedRepair(ctx, e.ddb, e.table, o)
	}
	damage(t, e, monthly, "1")
	res, err := repair(nil)
	require.NoError(t, err)
	require.Equal(t, 1, res.Transactions)
	e.requireReconciled(t)

	damage(t, e, monthly, "1")
	abandoned := false
	res, err = repair(func(step string) {
		if step == "R5" && !abandoned {
			abandoned = true // a rebase pinned and abandoned before R6
			_, err := e.ddb.UpdateItem(ctx, table.RebasePin(coord, "t", "d", "rb-r3"))
			require.NoError(t, err)
			_, err = e.ddb.UpdateItem(ctx, table.AbandonRebase(coord, "t", "d", "rb-r3"))
			require.NoError(t, err)
		}
	})
	require.NoError(t, err)
	t.Logf("rounds %d, transactions %d", res.Rounds, res.Transactions)
	assert.Equal(t, 2, res.Rounds, "the first round's transaction did not land: a new round")
	assert.Equal(t, "10", storedIncome(t, e, monthly))
	e.requireReconciled(t)
}
