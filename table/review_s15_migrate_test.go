package table_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
)

// oldCommitAfterCopy is the migration's API with a consumer of the version
// before the coordination table still running: right after the migration
// copied a checkpoint (its PutItem into the coordination table), the old
// consumer commits on the ledger table's checkpoint, once.
type oldCommitAfterCopy struct {
	*dynamodb.Client
	commit func(ctx context.Context)
}

func (a *oldCommitAfterCopy) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := a.Client.PutItem(ctx, in, opts...)
	if err == nil && a.commit != nil {
		a.commit(ctx)
		a.commit = nil
	}
	return out, err
}

// Review, session 15: `ledgerctl coordination migrate` decides that no
// consumer runs by comparing each lease's leaseExpiry (the owner's clock)
// with its own clock. An operator's clock ahead of the old poller's by more
// than a lease's remaining life (20 s), or a consumer whose lease just
// expired, passes that check while the consumer still runs. When it
// commits between the migration's copy and its tombstone, the tombstone's
// condition fails (ErrConsumerRunning, as it should), but the copy stays
// behind at the old value; the run after the consumer was stopped then
// found a copy of another version of the item and refused it as a conflict
// (ErrMigrationConflict), which the runbook answers with a repair by hand.
// An untouched copy of a previous run is now replaced.
func TestMigrate_ARunAfterAConsumerMovedTheCheckpointUnderTheCopyReplacesIt(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	name := ddbtest.NewTable(t, c)
	coord := table.CoordinationTableName(name)
	arn := "arn:aws:dynamodb:us-east-1:000000000000:table/" + name + "/stream/2026-01-01T00:00:00.000"
	legacy := aggregates.Key{PK: aggregates.LeasePK(arn), SK: aggregates.CheckpointKey(arn, "shardId-1").SK}
	operator := time.Now().UTC()
	put := func(k aggregates.Key, attrs map[string]types.AttributeValue) {
		item := table.Key(k)
		for a, v := range attrs {
			item[a] = v
		}
		_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: item})
		require.NoError(t, err)
	}
	put(legacy, map[string]types.AttributeValue{
		table.AttrEntityType: table.S(aggregates.EntityCheckpoint), table.AttrShardID: table.S("shardId-1"),
		table.AttrSequenceNumber: table.S("000000000000000000042"), table.AttrUpdatedAt: table.S(operator.Add(-time.Second).Format(time.RFC3339Nano)),
	})
	// The old poller holds the lease until 10 s from now on its clock; the
	// operator's clock is 30 s ahead of it.
	put(aggregates.Key{PK: aggregates.LeasePK(arn), SK: aggregates.LeaseKey(arn, "shardId-1").SK}, map[string]types.AttributeValue{
		table.AttrEntityType: table.S(aggregates.EntityLease), table.AttrShardID: table.S("shardId-1"),
		table.AttrLeaseOwner: table.S("old-poller"), table.AttrLeaseCounter: table.Int(3),
		table.AttrLeaseExpiry: table.S(operator.Add(-30 * time.Second).Add(10 * time.Second).Format(time.RFC3339Nano)),
		table.AttrUpdatedAt:   table.S(operator.Add(-30 * time.Second).Format(time.RFC3339Nano)),
	})

	api := &oldCommitAfterCopy{Client: c, commit: func(ctx context.Context) {
		// The old consumer's commit: its claim moves 42 to 57.
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(name), Key: table.Key(legacy),
			UpdateExpression:          aws.String("SET #seq = :last, #ua = :now"),
			ConditionExpression:       aws.String("#seq = :prev AND attribute_not_exists(#pt)"),
			ExpressionAttributeNames:  map[string]string{"#seq": table.AttrSequenceNumber, "#ua": table.AttrUpdatedAt, "#pt": "pendingTo"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":last": table.S("000000000000000000057"), ":prev": table.S("000000000000000000042"), ":now": table.S(time.Now().UTC().Format(time.RFC3339Nano))},
		})
		require.NoError(t, err)
	}}
	_, err := table.MigrateStreamState(ctx, api, name, coord, arn, operator, table.MigrateOptions{})
	require.ErrorIs(t, err, table.ErrConsumerRunning, "the tombstone's condition catches the commit")

	// The consumer is stopped (its lease released); the run again moves the
	// checkpoint as the ledger table has it now.
	put(aggregates.Key{PK: aggregates.LeasePK(arn), SK: aggregates.LeaseKey(arn, "shardId-1").SK}, map[string]types.AttributeValue{
		table.AttrEntityType: table.S(aggregates.EntityLease), table.AttrShardID: table.S("shardId-1"), table.AttrLeaseCounter: table.Int(4),
	})
	res, err := table.MigrateStreamState(ctx, c, name, coord, arn, time.Now(), table.MigrateOptions{})
	require.NoError(t, err, "the first run's copy is untouched: no conflict")
	assert.Equal(t, 1, res.Checkpoints)
	_, cps, err := table.ReadStreamState(ctx, c, coord, arn, nil)
	require.NoError(t, err)
	assert.Equal(t, "000000000000000000057", cps["shardId-1"].Seq, "the checkpoint the old consumer left, not the first run's copy")

	// A copy a consumer of this version moved on is still a conflict.
	put(legacy, map[string]types.AttributeValue{
		table.AttrEntityType: table.S(aggregates.EntityCheckpoint), table.AttrShardID: table.S("shardId-1"),
		table.AttrSequenceNumber: table.S("000000000000000000061"), table.AttrUpdatedAt: table.S(time.Now().UTC().Format(time.RFC3339Nano)),
	})
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(coord), Key: table.Key(aggregates.CheckpointKey(arn, "shardId-1")),
		UpdateExpression:          aws.String("SET #seq = :s, #ua = :now"),
		ExpressionAttributeNames:  map[string]string{"#seq": table.AttrSequenceNumber, "#ua": table.AttrUpdatedAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": table.S("000000000000000000070"), ":now": table.S(time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano))},
	})
	require.NoError(t, err)
	_, err = table.MigrateStreamState(ctx, c, name, coord, arn, time.Now(), table.MigrateOptions{})
	assert.ErrorIs(t, err, table.ErrMigrationConflict)
}

// Review, session 15, gated (LEDGER_REVIEW_S15=1; it fails on this code):
// the same run, with a consumer of this version already deployed (the
// runbook says it only waits; it waits only on a shard without a
// checkpoint in the coordination table). Between the refused run and the
// next, the first run's copy of the checkpoint (42) is a live checkpoint
// while the ledger table's says 57: the new consumer claims (42, …] and
// applies the records the old consumer applied in (42, 57] a second time.
// The run after it then finds a copy moved on and refuses it as a conflict
// (ErrMigrationConflict; the runbook's repair by hand restores the
// reports). Fix (not made: it changes every checkpoint claim's condition):
// the copy is written fenced (an attribute every claim and move requires
// absent, like the tombstone's pendingTo for the old version), and the
// fence is lifted, on condition that migratedFrom is unchanged, only once
// the tombstone has landed; a run finding a tombstone whose copy is still
// fenced lifts it.
func TestMigrate_ACopyLeftByARefusedRunIsNotClaimableUntilTheMoveIsDone(t *testing.T) {
	if os.Getenv("LEDGER_REVIEW_S15") != "1" {
		t.Skip("LEDGER_REVIEW_S15=1: a hole the review of session 15 left open (it fails on this code)")
	}
	ctx := context.Background()
	c := ddbtest.Client(t)
	name := ddbtest.NewTable(t, c)
	coord := table.CoordinationTableName(name)
	arn := "arn:aws:dynamodb:us-east-1:000000000000:table/" + name + "/stream/2026-01-01T00:00:00.000"
	legacy := aggregates.Key{PK: aggregates.LeasePK(arn), SK: aggregates.CheckpointKey(arn, "shardId-1").SK}
	item := table.Key(legacy)
	item[table.AttrEntityType], item[table.AttrShardID] = table.S(aggregates.EntityCheckpoint), table.S("shardId-1")
	item[table.AttrSequenceNumber], item[table.AttrUpdatedAt] = table.S("000000000000000000042"), table.S(time.Now().UTC().Format(time.RFC3339Nano))
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: item})
	require.NoError(t, err)
	api := &oldCommitAfterCopy{Client: c, commit: func(ctx context.Context) {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(name), Key: table.Key(legacy),
			UpdateExpression:          aws.String("SET #seq = :last, #ua = :now"),
			ExpressionAttributeNames:  map[string]string{"#seq": table.AttrSequenceNumber, "#ua": table.AttrUpdatedAt},
			ExpressionAttributeValues: map[string]types.AttributeValue{":last": table.S("000000000000000000057"), ":now": table.S(time.Now().UTC().Format(time.RFC3339Nano))},
		})
		require.NoError(t, err)
	}}
	_, err = table.MigrateStreamState(ctx, api, name, coord, arn, time.Now(), table.MigrateOptions{})
	require.ErrorIs(t, err, table.ErrConsumerRunning)

	// A consumer of this version claims its next run from the checkpoint
	// it finds in the coordination table: the guard action of a commit.
	claim := table.ClaimRun(coord, aggregates.CheckpointKey(arn, "shardId-1"), "shardId-1", "000000000000000000042", "000000000000000000060", time.Now())
	_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{claim}})
	assert.Error(t, err, "a commit from the refused run's copy re-applies (42, 57], which the old consumer applied")
}
