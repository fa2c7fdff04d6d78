package poller_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// Review, session 15 (hole 5b): a poller of the new version running while
// `ledgerctl coordination migrate` was refused (a consumer of the old
// layout committed between the copy of a checkpoint and its tombstone)
// found the refused run's copy, behind the old layout's checkpoint, and
// read and committed from it: the old consumer's records a second time.
// The copy is fenced: the reader waits on it, reading and committing
// nothing (logged once; conflicts_total{reason="migration_fence"} at each
// look), keeps its lease, and reads on from the moved checkpoint once the
// migration has run to its end: every record once, no stuck shard.
func TestPoller_WaitsOnACheckpointFencedByARefusedMigrationUntilItIsReleased(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2351)
	f := e.stream
	coord := table.CoordinationTableName(e.table)
	key := aggregates.CheckpointKey(f.arn, "shardId-A")
	item := func() map[string]ddbtypes.AttributeValue {
		out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord), Key: table.Key(key), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		require.NotNil(t, out.Item)
		return out.Item
	}
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 30)...)
	e.drain(t, "old-1", nil)
	copied := item()
	f.appendTo("shardId-A", e.write(t, 10)...)
	e.drain(t, "old-2", nil) // the old consumer's commits after the copy

	// What the refused run left: the old layout's checkpoint where the old
	// consumer moved it, the copy of the one before, fenced.
	// (Both in the old layout: no version before the coordination table
	// wrote protocol 4's fence, which this version's commits leave.)
	copied = oldLayout(copied)
	legacy := oldLayout(item())
	maps.Copy(legacy, table.Key(aggregates.Key{PK: aggregates.LeasePK(f.arn), SK: key.SK}))
	_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: legacy})
	require.NoError(t, err)
	copied["migratedFrom"], copied["migrationFence"] = copied[table.AttrUpdatedAt], table.S(e.table)
	_, err = e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(coord), Item: copied})
	require.NoError(t, err)
	recs := e.write(t, 20)
	f.appendTo("shardId-A", recs...)
	last := aws.ToString(recs[len(recs)-1].Dynamodb.SequenceNumber)

	tp := e.poller(t, "new", nil, nil, func(c *poller.Config) { c.MaxIdleBackoff = 200 * time.Millisecond })
	stop := start(t, tp)
	fence := tp.pm.Conflicts.WithLabelValues(processor.ConflictMigrationFence)
	eventually(t, "the reader looking at the fence three times", 20*time.Second, func() bool { return counter(t, fence) >= 3 })
	assert.Zero(t, counter(t, tp.pm.Commits.WithLabelValues("committed")), "committed from the copy")
	assert.Zero(t, counter(t, tp.m.RecordsRead), "read from the copy")
	assert.Equal(t, copied[table.AttrSequenceNumber], item()[table.AttrSequenceNumber], "the copy moved")
	assert.Equal(t, 1, logged(tp.logs.lines(), "the shard's checkpoint is a copy"), "said once per reader")
	assert.Equal(t, 1.0, counter(t, tp.m.LeasesHeld), "the lease is kept while waiting")

	// The old consumer stopped, the migration runs to its end.
	res, err := table.MigrateStreamState(ctx, e.ddb, e.table, coord, f.arn, time.Now(), table.MigrateOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, res.Checkpoints)
	eventually(t, "the poller at the stream's last record", 30*time.Second, func() bool {
		cp, _ := table.DecodeCheckpoint("shardId-A", item())
		return cp.Seq == last
	})
	stop()
	assert.Equal(t, 1, logged(tp.logs.lines(), "the migration released the shard's checkpoint"))
	e.requireReconciled(t)
}

// oldLayout is a checkpoint item of this version (the fenced layout of
// protocol 4) as a version before the fence wrote it: sequenceNumber the
// position, without pos and countedTo.
func oldLayout(item map[string]ddbtypes.AttributeValue) map[string]ddbtypes.AttributeValue {
	out := maps.Clone(item)
	if pos, ok := out[table.AttrPos]; ok {
		out[table.AttrSequenceNumber] = pos
	} else if _, fenced := out[table.AttrSequenceNumber].(*ddbtypes.AttributeValueMemberM); fenced {
		delete(out, table.AttrSequenceNumber)
	}
	delete(out, table.AttrPos)
	delete(out, table.AttrCountedTo)
	return out
}
