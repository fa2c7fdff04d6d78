package table_test

import (
	"context"
	"errors"
	"strings"
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

// Review, session 15 (hole 5b; gated until the fence was built): the same
// run, with a consumer of this version already deployed (the runbook says
// it only waits; it waited only on a shard without a checkpoint in the
// coordination table). Between the refused run and the next, the first
// run's copy of the checkpoint (42) was a live checkpoint while the ledger
// table's said 57: the new consumer claimed (42, …] and applied the
// records the old consumer applied in (42, 57] a second time, and the run
// after it found a copy moved on and refused it as a conflict. The copy is
// now written fenced (migrationFence, which every claim and move requires
// absent) and released only once the tombstone has landed.
func TestMigrate_ACopyLeftByARefusedRunIsNotClaimableUntilTheMoveIsDone(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	name := ddbtest.NewTable(t, c)
	coord := table.CoordinationTableName(name)
	arn := "arn:aws:dynamodb:us-east-1:000000000000:table/" + name + "/stream/2026-01-01T00:00:00.000"
	legacy := aggregates.Key{PK: aggregates.LeasePK(arn), SK: aggregates.CheckpointKey(arn, "shardId-1").SK}
	key := aggregates.CheckpointKey(arn, "shardId-1")
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
	cp := readCheckpoint(t, c, coord, key)
	assert.Equal(t, "000000000000000000042", cp.Seq, "the refused run's copy")
	assert.True(t, cp.Fenced, "the refused run's copy is fenced")

	// A consumer of this version claims its next run from the checkpoint
	// it finds in the coordination table: the guard action of a commit.
	claim := table.ClaimRun(coord, key, "shardId-1", "000000000000000000042", "000000000000000000060", time.Now())
	_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{claim}})
	requireConditionFailed(t, err, "a commit from the refused run's copy re-applies (42, 57], which the old consumer applied")

	// The consumer is stopped; the next run moves the checkpoint as the
	// ledger table has it now and releases the copy: claims go on from 57.
	res, err := table.MigrateStreamState(ctx, c, name, coord, arn, time.Now(), table.MigrateOptions{})
	require.NoError(t, err)
	assert.Equal(t, table.MigrateResult{Checkpoints: 1}, res)
	cp = readCheckpoint(t, c, coord, key)
	assert.Equal(t, "000000000000000000057", cp.Seq)
	assert.False(t, cp.Fenced, "released once its tombstone landed")
	claim = table.ClaimRun(coord, key, "shardId-1", "000000000000000000057", "000000000000000000060", time.Now())
	_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{claim}})
	require.NoError(t, err, "the released copy is the checkpoint")
}

// readCheckpoint reads the checkpoint under k from coord, consistently.
func readCheckpoint(t *testing.T, c *dynamodb.Client, coord string, k aggregates.Key) table.Checkpoint {
	t.Helper()
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(coord), Key: table.Key(k), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	require.NotNil(t, out.Item, "no checkpoint %s", k)
	cp, err := table.DecodeCheckpoint("", out.Item)
	require.NoError(t, err)
	return cp
}

// requireConditionFailed requires err to be a failed condition: a
// ConditionalCheckFailedException, or a transaction cancelled for one.
func requireConditionFailed(t *testing.T, err error, msg string) {
	t.Helper()
	var ccf *types.ConditionalCheckFailedException
	var tce *types.TransactionCanceledException
	switch {
	case errors.As(err, &ccf):
	case errors.As(err, &tce):
		require.NotEmpty(t, tce.CancellationReasons, msg)
		assert.Equal(t, "ConditionalCheckFailed", aws.ToString(tce.CancellationReasons[0].Code), msg)
	default:
		t.Fatalf("%s: got %v; want a failed condition", msg, err)
	}
}

// failRelease is the migration's API with the release of a copy (the
// UpdateItem that removes migrationFence) failing once: before DynamoDB
// saw it, or after it landed (its answer lost).
type failRelease struct {
	*dynamodb.Client
	landed bool // the failed release landed
	failed bool
}

func (a *failRelease) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if a.failed || !strings.HasPrefix(aws.ToString(in.UpdateExpression), "REMOVE #fence") {
		return a.Client.UpdateItem(ctx, in, opts...)
	}
	a.failed = true
	if a.landed {
		if _, err := a.Client.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return nil, errors.New("connection reset by peer")
}

// A run that fails between a checkpoint's tombstone and the release of its
// copy (a crash, a lost answer) leaves the copy fenced while the ledger
// table no longer holds the old layout's checkpoint: consumers start and
// wait on the fence. The next run releases it, whichever way the release
// failed, and a shard whose copy is released already is left as it is.
func TestMigrate_ARunFindingATombstoneWithItsCopyStillFencedReleasesIt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		landed   bool
		released int
	}{
		{"release failed", false, 1},
		{"release landed, its answer lost", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := ddbtest.Client(t)
			name := ddbtest.NewTable(t, c)
			coord := table.CoordinationTableName(name)
			arn := "arn:aws:dynamodb:us-east-1:000000000000:table/" + name + "/stream/2026-01-01T00:00:00.000"
			key := aggregates.CheckpointKey(arn, "shardId-1")
			item := table.Key(aggregates.Key{PK: aggregates.LeasePK(arn), SK: key.SK})
			item[table.AttrEntityType], item[table.AttrShardID] = table.S(aggregates.EntityCheckpoint), table.S("shardId-1")
			item[table.AttrSequenceNumber], item[table.AttrUpdatedAt] = table.S("000000000000000000042"), table.S(time.Now().UTC().Format(time.RFC3339Nano))
			_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: item})
			require.NoError(t, err)

			_, err = table.MigrateStreamState(ctx, &failRelease{Client: c, landed: tc.landed}, name, coord, arn, time.Now(), table.MigrateOptions{})
			require.Error(t, err)
			found, err := table.LegacyStreamState(ctx, c, name, arn)
			require.NoError(t, err)
			require.False(t, found, "the tombstone landed: consumers start")
			assert.Equal(t, !tc.landed, readCheckpoint(t, c, coord, key).Fenced)

			res, err := table.MigrateStreamState(ctx, c, name, coord, arn, time.Now(), table.MigrateOptions{})
			require.NoError(t, err)
			assert.Equal(t, table.MigrateResult{Released: tc.released}, res)
			cp := readCheckpoint(t, c, coord, key)
			assert.False(t, cp.Fenced)
			assert.Equal(t, "000000000000000000042", cp.Seq)

			// A consumer moves it on; a further run changes nothing.
			claim := table.ClaimRun(coord, key, "shardId-1", "000000000000000000042", "000000000000000000060", time.Now())
			_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{claim}})
			require.NoError(t, err)
			res, err = table.MigrateStreamState(ctx, c, name, coord, arn, time.Now(), table.MigrateOptions{})
			require.NoError(t, err)
			assert.Equal(t, table.MigrateResult{}, res)
			assert.Equal(t, "000000000000000000060", readCheckpoint(t, c, coord, key).Seq)
		})
	}
}
