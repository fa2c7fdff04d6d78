package processor_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Tests of the lead's fixes to step R in session 27 (docs/exactly-once.md,
// "Review (adversarial, session 27): step R's fixes", S27-R5).

// checkpointReadFault is the DynamoDB API of a counted repair whose reads
// of a checkpoint (R0's read of an open mark's checkpoint) fail with
// fail's error; every other call goes to DynamoDB Local.
// With appliedAgain, the checkpoint is read and the applied item's second
// read (R0's read again after the checkpoints, S27-R4) fails instead.
type checkpointReadFault struct {
	processor.RebaseAPI
	fail         func() error
	reads        int
	appliedAgain bool
	applied      int
}

func (f *checkpointReadFault) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	pk, _ := in.Key[table.AttrPK].(*ddbtypes.AttributeValueMemberS)
	switch {
	case pk != nil && strings.Contains(pk.Value, "#CHECKPOINTS#") && !f.appliedAgain:
		f.reads++
		return nil, f.fail()
	case pk != nil && strings.HasPrefix(pk.Value, aggregates.AppliedPrefix) && f.appliedAgain:
		if f.applied++; f.applied == 2 {
			return nil, f.fail()
		}
	}
	return f.RebaseAPI.GetItem(ctx, in, opts...)
}

// S27-R5: R0 reads the checkpoint of each open mark to tell a batch
// half-committed from one abandoned. The read only chooses the refusal's
// words, but an error of it was returned as the repair's error (not
// ErrNotProven): ledgerctl reconcile --repair stopped there, leaving the
// other branches unrepaired (TestReviewS27_R5_ACheckpointReadFailingLeavesOneBranchAlone
// in cmd/ledgerctl). Now it is a refusal of the branch naming the error
// ("run again"); a context that ended is still an error, so that a
// cancelled run is not reported as a branch left alone.
func TestReviewS27_R5_ACheckpointReadFailingRefusesTheBranch(t *testing.T) {
	e := newEnv(t)
	writeTxn(t, e, "o", "2024-06-03", "t1", "10")
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass()
	markRebased(t, e, "o")
	label := e.streamARN[strings.LastIndex(e.streamARN, "/")+1:]
	mark := label + "~" + shardOf(t, e) + "~99999999999999999999" // well formed: R0 reads its checkpoint
	coord := table.CoordinationTableName(e.table)
	_, err := e.ddb.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: &coord, Key: table.Key(aggregates.AppliedKey("t", "o")),
		UpdateExpression:          aws.String("ADD #o :m"),
		ExpressionAttributeNames:  map[string]string{"#o": table.AttrOpen},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":m": &ddbtypes.AttributeValueMemberSS{Value: []string{mark}}}})
	require.NoError(t, err)
	damage(t, e, reportKey("o", aggregates.Monthly, "2024-06"), "1")
	repair := func(ctx context.Context, api processor.RebaseAPI) error {
		_, err := processor.CountedRepair(ctx, api, e.table, processor.CountedRepairOptions{
			Tenant: "t", Branch: "o", StreamARN: e.streamARN, Log: t.Logf})
		return err
	}

	// Read, the checkpoint shows no pending batch: the mark is stale.
	err = repair(context.Background(), e.ddb)
	require.ErrorIs(t, err, processor.ErrNotProven)
	assert.Contains(t, err.Error(), "abandoned")

	// The read fails: the branch is refused, naming the error.
	injected := errors.New("injected: checkpoint read failed")
	f := &checkpointReadFault{RebaseAPI: e.ddb, fail: func() error { return injected }}
	err = repair(context.Background(), f)
	t.Log(err)
	require.Equal(t, 1, f.reads, "R0 read the mark's checkpoint")
	require.ErrorIs(t, err, processor.ErrNotProven, "a refusal of this branch, not the run's error")
	assert.Contains(t, err.Error(), injected.Error())
	assert.Contains(t, err.Error(), "run again")
	assert.NotContains(t, err.Error(), "(abandoned)", "the read chose nothing")

	// The applied item's read again fails: refused too, naming the error.
	f = &checkpointReadFault{RebaseAPI: e.ddb, fail: func() error { return injected }, appliedAgain: true}
	err = repair(context.Background(), f)
	t.Log(err)
	require.Equal(t, 2, f.applied, "R0 read the applied item again")
	require.ErrorIs(t, err, processor.ErrNotProven, "a refusal of this branch, not the run's error")
	assert.Contains(t, err.Error(), injected.Error())
	assert.Contains(t, err.Error(), "run again")

	// The context ends during the read: an error, not a refusal.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f = &checkpointReadFault{RebaseAPI: e.ddb, fail: func() error { cancel(); return ctx.Err() }}
	err = repair(ctx, f)
	t.Log(err)
	require.Equal(t, 1, f.reads)
	require.Error(t, err)
	assert.NotErrorIs(t, err, processor.ErrNotProven)
	assert.ErrorIs(t, err, context.Canceled)
}
