package processor_test

import (
	"context"
	"errors"
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

// Review, session 16, hole S16-F1, fixed in session 17: the migration fence
// guarded the shards whose checkpoint the migration copied, not a shard
// that had none. Every claim now requires the checkpoint's legacy
// tombstone, which a guard puts at the shard's ledger-table key before its
// first commit (docs/exactly-once.md, "A shard's legacy tombstone").

// oldClaimFromNothing is a consumer of the version before the coordination
// table claiming shard from nothing in the ledger table, up to last (the
// old claim's condition, as oldVersionCommit sends it); it reports whether
// the claim landed.
func oldClaimFromNothing(t *testing.T, e *env, shard, last string) bool {
	t.Helper()
	_, err := e.ddb.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(e.table), Key: table.Key(legacyCheckpointKey(e, shard)),
		UpdateExpression:          aws.String("SET #seq = :last, #ua = :now"),
		ConditionExpression:       aws.String("attribute_not_exists(#seq) AND attribute_not_exists(#pt)"),
		ExpressionAttributeNames:  map[string]string{"#seq": table.AttrSequenceNumber, "#pt": "pendingTo", "#ua": table.AttrUpdatedAt},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":last": table.S(last), ":now": table.S(time.Now().UTC().Format(time.RFC3339Nano))},
	})
	var ccf *ddbtypes.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false
	}
	require.NoError(t, err)
	return true
}

// TestReviewS16_OldConsumerOnAShardWithoutACheckpointAtTheMigration: the
// migration ran while the shard had no checkpoint in the ledger table (it
// appeared after the migration listed the checkpoints: a child shard, or
// one a consumer opened at LATEST and never committed on). A new-version
// consumer commits on it from nothing in the coordination table (its
// legacy check found nothing in the ledger table); a consumer of the
// version before the coordination table that still runs (the mapping
// left enabled: the case the fence is for) claimed the same shard from
// nothing in the ledger table, where no tombstone stood, and applied the
// same records a second time. The new consumer's first commit now leaves
// a tombstone there first: the old claim fails.
func TestReviewS16_OldConsumerOnAShardWithoutACheckpointAtTheMigration(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(1601).Run(ctx, e.ddb, e.table, 20))
	shard, recs := e.records(t)
	require.GreaterOrEqual(t, len(recs), 20)

	// The migration finds no checkpoint of the shard: nothing is fenced.
	res, err := table.MigrateStreamState(ctx, e.ddb, e.table, table.CoordinationTableName(e.table), e.streamARN, time.Now(), table.MigrateOptions{})
	require.NoError(t, err)
	require.Zero(t, res.Checkpoints)

	// A new-version consumer commits the shard's first records.
	p := e.processor(t, nil, nil)
	_, err = p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[:10])
	require.NoError(t, err)

	// An old-version consumer still running claims them from nothing and,
	// when that lands, applies them: emulated by a consumer under run
	// markers, which applies the same records without the new version's
	// legacy check.
	claimed := oldClaimFromNothing(t, e, shard, recs[9].SequenceNumber)
	if claimed {
		old := e.processor(t, nil, nil)
		_, err := old.Process(ctx, old.MarkerGuard(), recs[:10])
		require.NoError(t, err)
	}
	assert.False(t, claimed, "an old consumer claimed, from nothing, a shard a new one had committed on")

	// The new version reads on; the reports must hold each record once.
	fresh := e.processor(t, nil, nil)
	_, err = fresh.Process(ctx, fresh.ShardGuard(e.streamARN, shard), recs)
	require.NoError(t, err)
	e.requireReconciled(t)
}

// The other order: an old-version consumer claims a shard from nothing in
// the ledger table after a new-version consumer looked at it (its guard
// read no checkpoint, so its start check passed: no tombstone stood yet),
// or after a new-version poller moved the coordination checkpoint over
// records without effect (a move applies nothing, so it needs no
// tombstone). The new consumer's first commit is refused as
// ErrLegacyStreamState, commits nothing, and each record is applied once,
// by the old consumer; the refusal stands at the next try.
func TestLegacyTombstone_ANewConsumersFirstClaimAfterAnOldOnesIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before prepares the new consumer's state before the old claim.
		before func(t *testing.T, e *env, g *processor.ShardGuard, shard string, recs []processor.Record)
	}{
		{"the guard read no checkpoint", func(t *testing.T, e *env, g *processor.ShardGuard, _ string, _ []processor.Record) {
			cp, err := g.Checkpoint(context.Background())
			require.NoError(t, err)
			require.Empty(t, cp)
		}},
		{"a move over records without effect", func(t *testing.T, e *env, _ *processor.ShardGuard, shard string, recs []processor.Record) {
			coord := table.CoordinationTableName(e.table)
			_, err := e.ddb.UpdateItem(context.Background(), table.AdvanceCheckpoint(coord, aggregates.CheckpointKey(e.streamARN, shard), shard, "", recs[0].SequenceNumber, false, time.Now()))
			require.NoError(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			require.NoError(t, ledgertest.NewWorkload(1701).Run(ctx, e.ddb, e.table, 20))
			shard, recs := e.records(t)
			require.GreaterOrEqual(t, len(recs), 20)
			_, err := table.MigrateStreamState(ctx, e.ddb, e.table, table.CoordinationTableName(e.table), e.streamARN, time.Now(), table.MigrateOptions{})
			require.NoError(t, err)

			p := e.processor(t, nil, nil)
			g := p.ShardGuard(e.streamARN, shard)
			tc.before(t, e, g, shard, recs)
			from := 0
			if tc.name == "a move over records without effect" {
				from = 1 // the guard reads the moved checkpoint: records after it
			}

			// The old consumer claims every record and applies them.
			require.True(t, oldClaimFromNothing(t, e, shard, recs[len(recs)-1].SequenceNumber))
			old := e.processor(t, nil, nil)
			_, err = old.Process(ctx, old.MarkerGuard(), recs)
			require.NoError(t, err)

			_, err = p.Process(ctx, g, recs[from:])
			require.ErrorIs(t, err, table.ErrLegacyStreamState, "the new consumer's first claim after the old one's")
			_, err = p.Process(ctx, g, recs[from:])
			require.ErrorIs(t, err, table.ErrLegacyStreamState, "and at the next try")
			out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{
				TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.CheckpointKey(e.streamARN, shard)), ConsistentRead: aws.Bool(true),
			})
			require.NoError(t, err)
			cp, err := table.DecodeCheckpoint(shard, out.Item)
			require.NoError(t, err)
			assert.False(t, cp.Tombstoned, "no mark without the tombstone")
			e.requireReconciled(t)
		})
	}
}

// The tombstone is a write in the ledger table, so a record of its stream:
// one per shard's life. A consumer skips it (a checkpoint's key: no
// effect) and commits nothing for it, so it leads to no further write; a
// later commit on the shard, by a restarted consumer, puts no second one
// (the mark stands on the checkpoint); and a stream whose writes stop goes
// quiet: passes over the consumer's own records (reports, roll-up lanes)
// come to one that reads nothing.
func TestLegacyTombstone_OneRecordPerShardAndTheIdleStreamGoesQuiet(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	p := e.processor(t, nil, nil)
	var g *processor.ShardGuard
	var shard, last string
	tombs := 0
	// pass reads the records after the last one processed, counts the
	// tombstone's, and processes them; it returns how many it read.
	pass := func() int {
		t.Helper()
		after := map[string]string{}
		if shard != "" {
			after[shard] = last
		}
		shards, err := ledgertest.ReadAll(ctx, e.streams, e.streamARN, after)
		require.NoError(t, err)
		require.Len(t, shards, 1, "DynamoDB Local has one shard")
		recs := shards[0].Records
		if len(recs) == 0 {
			return 0
		}
		if g == nil {
			shard = shards[0].ID
			g = p.ShardGuard(e.streamARN, shard)
		}
		for _, r := range recs {
			if pk, _ := table.String(r.Keys, table.AttrPK); pk == aggregates.LeasePK(e.streamARN) {
				tombs++
			}
		}
		res, err := p.Process(ctx, g, recs)
		require.NoError(t, err)
		require.Equal(t, len(recs), res.Committed)
		last = recs[len(recs)-1].SequenceNumber
		return len(recs)
	}

	// quiet passes over the consumer's own records (reports, roll-up
	// lanes and the folds of them) until one reads nothing.
	quiet := func(msg string) {
		t.Helper()
		for range 5 {
			if pass() == 0 {
				return
			}
		}
		t.Fatalf("%s: five passes over the consumer's own records, each reading new ones", msg)
	}

	require.NoError(t, ledgertest.NewWorkload(1702).Run(ctx, e.ddb, e.table, 10))
	require.NotZero(t, pass(), "the workload's records")
	quiet("after the shard's first commit")
	assert.Equal(t, 1, tombs, "the tombstone's records after the shard's first commit")

	// A consumer restarted (a fresh guard reads the mark) commits more.
	p = e.processor(t, nil, nil)
	g = p.ShardGuard(e.streamARN, shard)
	require.NoError(t, ledgertest.NewWorkload(1703).Run(ctx, e.ddb, e.table, 5))
	require.NotZero(t, pass(), "more writes")
	quiet("after a later commit")
	assert.Equal(t, 1, tombs, "the tombstone's records after a later commit on the shard")
	e.requireReconciled(t)
}
