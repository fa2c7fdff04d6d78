package processor_test

// The move of checkpoints from the ledger table to the coordination table
// (table.MigrateStreamState) against consumers of both versions: holes the
// review of issue 23's coordination table found, each fixed.

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
	"github.com/ledger-dev/ledger/table"
)

// toLegacy moves the env's checkpoint of shard from the coordination table
// to where versions before it kept it (ledger table, STREAM#{arn}), as an
// earlier version would have left it.
func toLegacy(t *testing.T, e *env, shard string) {
	t.Helper()
	ctx := context.Background()
	coord := table.CoordinationTableName(e.table)
	k := aggregates.CheckpointKey(e.streamARN, shard)
	out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord), Key: table.Key(k), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	require.NotNil(t, out.Item)
	item := maps.Clone(out.Item)
	maps.Copy(item, table.Key(legacyCheckpointKey(e, shard)))
	delete(item, "legacyTombstone") // no version before the coordination table wrote it
	// Nor the fenced layout of protocol 4 (this version's commits leave
	// it): the old layout, at the same position.
	if pos, ok := item[table.AttrPos]; ok {
		item[table.AttrSequenceNumber] = pos
	} else if _, fenced := item[table.AttrSequenceNumber].(*ddbtypes.AttributeValueMemberM); fenced {
		delete(item, table.AttrSequenceNumber)
	}
	delete(item, table.AttrPos)
	delete(item, table.AttrCountedTo)
	_, err = e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: item})
	require.NoError(t, err)
	_, err = e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(coord), Key: table.Key(k)})
	require.NoError(t, err)
}

func legacyCheckpointKey(e *env, shard string) aggregates.Key {
	return aggregates.Key{PK: aggregates.LeasePK(e.streamARN), SK: aggregates.CheckpointKey(e.streamARN, shard).SK}
}

// oldVersionCommit tries to apply recs as a consumer of the version before
// the coordination table does after its checkpoint was migrated away: its
// commit claims the ledger table's STREAM#{arn} / SHARD#{shard} item on the
// old claim's condition (no checkpoint and no pending batch, or the
// checkpoint it read and no pending batch) in the same transaction as the
// reports. The claim is simulated first, then the reports applied by a
// consumer under run markers (which, like the old version, knows nothing
// of the coordination table and its legacy tombstones); it reports whether
// the claim landed.
func oldVersionCommit(t *testing.T, e *env, shard string, recs []processor.Record) bool {
	t.Helper()
	return oldVersionCommitFrom(t, e, shard, "", recs)
}

// oldVersionCommitFrom is oldVersionCommit from the checkpoint prev the
// old consumer read ("": none): its claim requires the ledger table's
// checkpoint at prev (or none) and no pending batch.
func oldVersionCommitFrom(t *testing.T, e *env, shard, prev string, recs []processor.Record) bool {
	t.Helper()
	ctx := context.Background()
	cond := "attribute_not_exists(#seq) AND attribute_not_exists(#pt)"
	values := map[string]ddbtypes.AttributeValue{
		":last": table.S(recs[len(recs)-1].SequenceNumber), ":now": table.S(time.Now().UTC().Format(time.RFC3339Nano)),
	}
	if prev != "" {
		cond = "#seq = :prev AND attribute_not_exists(#pt)"
		values[":prev"] = table.S(prev)
	}
	_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(e.table), Key: table.Key(legacyCheckpointKey(e, shard)),
		UpdateExpression:          aws.String("SET #seq = :last, #ua = :now"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#seq": table.AttrSequenceNumber, "#pt": "pendingTo", "#ua": table.AttrUpdatedAt},
		ExpressionAttributeValues: values,
	})
	var ccf *ddbtypes.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false
	}
	require.NoError(t, err)
	scratch := table.CoordinationTableName(newTableName(t))
	p, err := processor.New(e.ddb, processor.Config{Table: e.table, CoordinationTable: scratch, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}, nil)
	require.NoError(t, err)
	res, err := p.Process(ctx, p.MarkerGuard(), recs)
	require.NoError(t, err)
	require.Equal(t, len(recs), res.Committed)
	return true
}

// Issue 23 review: a consumer of the version before the coordination table
// still running after `ledgerctl coordination migrate` (the Lambda's
// mapping left enabled, an old pod restarted by a rolling deployment)
// committed "from nothing" into the ledger table once the migration had
// deleted its checkpoint there, and the new consumers, reading the
// migrated checkpoint, applied the same records again. The migration now
// leaves a tombstone no version can commit on: the old consumer stalls.
func TestMigrate_AnOldConsumerStillRunningStallsOnTheTombstone(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(2301).Run(ctx, e.ddb, e.table, 30))
	shard, recs := e.records(t)
	require.GreaterOrEqual(t, len(recs), 30)

	// The old version committed recs[:10].
	p := e.processor(t, nil, nil)
	_, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[:10])
	require.NoError(t, err)
	toLegacy(t, e, shard)

	// Consumers stopped (no lease held): the migration moves it.
	res, err := table.MigrateStreamState(ctx, e.ddb, e.table, table.CoordinationTableName(e.table), e.streamARN, time.Now(), table.MigrateOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, res.Checkpoints)

	// An old-version consumer still runs: its claim fails on the tombstone.
	assert.False(t, oldVersionCommit(t, e, shard, recs[10:15]), "an old consumer committed over the tombstone")
	found, err := table.LegacyStreamState(ctx, e.ddb, e.table, e.streamARN)
	require.NoError(t, err)
	require.False(t, found, "a tombstone is not the old layout's state")

	// A new-version consumer (a fresh process) reads the shard from its
	// migrated checkpoint.
	fresh := e.processor(t, nil, nil)
	_, err = fresh.Process(ctx, fresh.ShardGuard(e.streamARN, shard), recs[10:])
	require.NoError(t, err)
	e.requireReconciled(t)
}

// Issue 23 review: a migration whose first run copied a checkpoint and
// died before deleting the ledger table's, a consumer of the new version
// already deployed committing past that copy, and a second run copying the
// ledger table's item over it again moved the checkpoint back: the next
// consumer applied those records twice. The copy now records what it was
// copied from (migratedFrom), and a second run keeps a checkpoint that
// descends from the same item; one that does not is a conflict, refused.
func TestMigrate_ASecondRunKeepsACheckpointMovedOnFromItsCopy(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	coord := table.CoordinationTableName(e.table)
	require.NoError(t, ledgertest.NewWorkload(2302).Run(ctx, e.ddb, e.table, 30))
	shard, recs := e.records(t)

	p := e.processor(t, nil, nil)
	_, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[:10])
	require.NoError(t, err)
	toLegacy(t, e, shard)

	// Run 1 copies the checkpoint as the migration does, then dies before
	// it leaves its tombstone.
	out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.table), Key: table.Key(legacyCheckpointKey(e, shard)), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	copied := maps.Clone(out.Item)
	maps.Copy(copied, table.Key(aggregates.CheckpointKey(e.streamARN, shard)))
	copied["migratedFrom"] = out.Item[table.AttrUpdatedAt]
	_, err = e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: copied})
	require.NoError(t, err)

	// A consumer of this version refuses the copy: the ledger table still
	// holds the checkpoint it was copied from (review session 18).
	current := e.processor(t, nil, nil)
	_, err = current.Process(ctx, current.ShardGuard(e.streamARN, shard), recs[10:20])
	require.ErrorIs(t, err, table.ErrLegacyStreamState)
	// A consumer of a version between the coordination table and the
	// legacy tombstone (it read no legacy state under a checkpoint and
	// required no mark) commits the next records from the copy.
	midVersionCommit(t, e, shard, recs[9].SequenceNumber, recs[10:20])

	// Run 2 keeps the checkpoint that moved on, and leaves the tombstone.
	res, err := table.MigrateStreamState(ctx, e.ddb, e.table, coord, e.streamARN, time.Now(), table.MigrateOptions{})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Checkpoints)
	fresh := e.processor(t, nil, nil)
	_, err = fresh.Process(ctx, fresh.ShardGuard(e.streamARN, shard), recs[10:])
	require.NoError(t, err)
	e.requireReconciled(t)

	// A coordination checkpoint that is no copy of the ledger table's one
	// is a conflict: refused, nothing moved.
	toLegacy(t, e, shard)
	_, err = e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: copied})
	require.NoError(t, err)
	_, err = e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(coord), Key: table.Key(aggregates.CheckpointKey(e.streamARN, shard)),
		UpdateExpression: aws.String("REMOVE migratedFrom"),
	})
	require.NoError(t, err)
	_, err = table.MigrateStreamState(ctx, e.ddb, e.table, coord, e.streamARN, time.Now(), table.MigrateOptions{})
	assert.ErrorIs(t, err, table.ErrMigrationConflict)
}

// midVersionCommit applies recs as a consumer of a version from the
// coordination table to the legacy tombstone (session 17) did on a
// checkpoint in the coordination table at prev: its claim there requires
// the checkpoint at prev and no pending batch (no mark, no legacy read),
// and the records are applied under run markers, as oldVersionCommit
// does.
func midVersionCommit(t *testing.T, e *env, shard, prev string, recs []processor.Record) {
	t.Helper()
	ctx := context.Background()
	_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.CheckpointKey(e.streamARN, shard)),
		UpdateExpression:         aws.String("SET #seq = :last, #ua = :now"),
		ConditionExpression:      aws.String("#seq = :prev AND attribute_not_exists(#pt)"),
		ExpressionAttributeNames: map[string]string{"#seq": table.AttrSequenceNumber, "#pt": "pendingTo", "#ua": table.AttrUpdatedAt},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":last": table.S(recs[len(recs)-1].SequenceNumber), ":prev": table.S(prev),
			":now": table.S(time.Now().UTC().Format(time.RFC3339Nano)),
		},
	})
	require.NoError(t, err)
	scratch := table.CoordinationTableName(newTableName(t))
	p, err := processor.New(e.ddb, processor.Config{Table: e.table, CoordinationTable: scratch, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}, nil)
	require.NoError(t, err)
	res, err := p.Process(ctx, p.MarkerGuard(), recs)
	require.NoError(t, err)
	require.Equal(t, len(recs), res.Committed)
}

// coordCheckpoint reads the env's checkpoint item of shard from the
// coordination table.
func coordCheckpoint(t *testing.T, e *env, shard string) map[string]ddbtypes.AttributeValue {
	t.Helper()
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.CheckpointKey(e.streamARN, shard)), ConsistentRead: aws.Bool(true),
	})
	require.NoError(t, err)
	require.NotNil(t, out.Item)
	return out.Item
}

// Review, session 15 (hole 5b): a tumbling-window Lambda of the new
// version deployed before the migration ended meets the copy a refused
// run left: the ledger table's checkpoint is at recs[14] (an old consumer
// committed recs[10:15] after the copy was made), the copy at recs[9]. A
// commit from the copy applied recs[10:15] a second time. The copy is
// fenced: the window's final invocation commits nothing and fails, saying
// why (an error wrapping table.ErrCheckpointFenced;
// conflicts_total{reason="migration_fence"}), and the mapping's retry of
// it after the migration has run to its end commits the rest, once.
func TestMigrate_ATumblingWindowWaitsForTheMigrationToReleaseARefusedRunsCopy(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	coord := table.CoordinationTableName(e.table)
	require.NoError(t, ledgertest.NewWorkload(2304).Run(ctx, e.ddb, e.table, 30))
	shard, recs := e.records(t)
	require.GreaterOrEqual(t, len(recs), 30)

	// What a refused run leaves: the copy of the checkpoint at recs[9],
	// fenced, and the old layout's checkpoint moved on to recs[14] by the
	// old consumer's commit.
	old := e.processor(t, nil, nil)
	g := old.ShardGuard(e.streamARN, shard)
	_, err := old.Process(ctx, g, recs[:10])
	require.NoError(t, err)
	copied := coordCheckpoint(t, e, shard)
	_, err = old.Process(ctx, g, recs[10:15])
	require.NoError(t, err)
	movedCp, err := table.DecodeCheckpoint(shard, coordCheckpoint(t, e, shard))
	require.NoError(t, err)
	moved := movedCp.Seq
	toLegacy(t, e, shard)
	copied["migratedFrom"], copied["migrationFence"] = copied[table.AttrUpdatedAt], table.S(e.table)
	_, err = e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: copied})
	require.NoError(t, err)

	lambda := e.processor(t, prometheus.NewRegistry(), nil)
	h, err := handler.New(lambda, handler.Config{Mode: handler.Tumbling, Streams: e.streams})
	require.NoError(t, err)
	window := make([]events.DynamoDBEventRecord, len(recs))
	for i := range recs {
		window[i], err = processor.ToLambda(recs[i])
		require.NoError(t, err)
	}
	payload, err := json.Marshal(events.DynamoDBTimeWindowEvent{
		DynamoDBEvent: events.DynamoDBEvent{Records: window},
		TimeWindowProperties: events.TimeWindowProperties{
			ShardID: shard, EventSourceARN: e.streamARN, IsFinalInvokeForWindow: true,
			Window: events.Window{Start: events.RFC3339EpochTime{Time: time.Unix(1700000000, 0)}, End: events.RFC3339EpochTime{Time: time.Unix(1700000060, 0)}},
		},
	})
	require.NoError(t, err)
	_, err = h.Invoke(ctx, payload)
	require.ErrorIs(t, err, table.ErrCheckpointFenced, "a commit from the copy applies recs[10:15] a second time")
	assert.Positive(t, testutil.ToFloat64(lambda.Metrics().Conflicts.WithLabelValues(processor.ConflictMigrationFence)))
	assert.Zero(t, testutil.ToFloat64(lambda.Metrics().Commits.WithLabelValues("committed")))
	assert.Equal(t, copied[table.AttrSequenceNumber], coordCheckpoint(t, e, shard)[table.AttrSequenceNumber], "the copy stays where it was")

	// The old consumer stopped, the migration runs to its end; the
	// mapping's retry of the window (the same event) commits what is left.
	mres, err := table.MigrateStreamState(ctx, e.ddb, e.table, coord, e.streamARN, time.Now(), table.MigrateOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, mres.Checkpoints)
	out, err := h.Invoke(ctx, payload)
	require.NoError(t, err)
	var resp events.DynamoDBTimeWindowEventResponse
	require.NoError(t, json.Unmarshal(out, &resp))
	assert.Empty(t, resp.BatchItemFailures)
	assert.Empty(t, resp.State, "the window is done")
	after, err := table.DecodeCheckpoint(shard, coordCheckpoint(t, e, shard))
	require.NoError(t, err)
	assert.Equal(t, 1, processor.CompareSequence(after.Seq, moved), "committed after the checkpoint the old consumer left")
	e.requireReconciled(t)
}
