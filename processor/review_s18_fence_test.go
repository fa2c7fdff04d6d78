package processor_test

// Review (adversarial, session 18) of the legacy tombstone as built
// (S16-F1's fix: every claim requires the checkpoint's legacyTombstone mark,
// set by table.FenceLegacyCheckpoint): the holes found, each a test that
// fails without its fix (docs/exactly-once.md, "Review (adversarial,
// session 18): the legacy tombstone as built").

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
	"github.com/ledger-dev/ledger/table"
)

// coordItem reads the coordination table's checkpoint item of shard (nil:
// none).
func coordItem(t *testing.T, e *env, shard string) map[string]ddbtypes.AttributeValue {
	t.Helper()
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.CheckpointKey(e.streamARN, shard)), ConsistentRead: aws.Bool(true),
	})
	require.NoError(t, err)
	return out.Item
}

// R18-1 (double application, the tumbling-window Lambda): the mark says a
// tombstone stood when the fence landed, and the guard trusted it for the
// life of the coordination checkpoint, which every write renews. The
// runbook's rollback below the coordination table copies the checkpoints
// back over the tombstones by hand ("The coordination table": rolling
// back); the old consumers then move them on. On the way up again the
// runbook says a consumer of the new version deployed first only waits:
// the poller does (its start check finds the old checkpoints), but the
// tumbling-window Lambda has no start check, and its guard looked at the
// old key only when the coordination table had no checkpoint. Finding
// the one it wrote before the rollback, marked, it claimed from there
// and applied every record the old consumer had committed since a second
// time. The guard now reads the shard's old key at every load: a
// checkpoint there refuses the shard (ErrLegacyStreamState), whatever the
// mark says.
func TestReviewS18Fence_ACheckpointCopiedBackByARollbackIsRefusedUnderItsMark(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(1801).Run(ctx, e.ddb, e.table, 20))
	shard, recs := e.records(t)
	require.GreaterOrEqual(t, len(recs), 20)
	last := len(recs) - 1

	// The new version's tumbling window commits the first ten records:
	// fence (tombstone, mark) and claim.
	p := e.processor(t, nil, nil)
	first := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[0].SequenceNumber, Last: recs[9].SequenceNumber}
	_, err := p.CommitShardRange(ctx, e.streams, first, 1000)
	require.NoError(t, err)
	require.NotNil(t, coordItem(t, e, shard)[table.AttrSequenceNumber], "the window committed")

	// Rollback by hand (runbook): consumers stopped, the checkpoint copied
	// back to the ledger table over the tombstone. The coordination
	// table's copy stays, with its mark.
	_, err = e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: map[string]ddbtypes.AttributeValue{
		table.AttrPK: table.S(legacyCheckpointKey(e, shard).PK), table.AttrSK: table.S(legacyCheckpointKey(e, shard).SK),
		table.AttrEntityType: table.S(aggregates.EntityCheckpoint), table.AttrShardID: table.S(shard),
		table.AttrSequenceNumber: table.S(recs[9].SequenceNumber), table.AttrUpdatedAt: table.S(time.Now().UTC().Format(time.RFC3339Nano)),
	}})
	require.NoError(t, err)
	// The old version goes on from there and commits the rest.
	require.True(t, oldVersionCommitFrom(t, e, shard, recs[9].SequenceNumber, recs[10:]), "the rolled-back consumer goes on from the copied checkpoint")

	// Upgrade again: the new Lambda is enabled before the migration (it
	// should wait), and the mapping delivers the shard's next window.
	again := e.processor(t, nil, nil)
	_, err = again.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[10].SequenceNumber, Last: recs[last].SequenceNumber}, 1000)
	assert.ErrorIs(t, err, table.ErrLegacyStreamState, "a window on a shard whose checkpoint is in the ledger table again")
	e.requireReconciled(t)
}

// R18-2 (double application where a shard outlives its tombstone): the
// tombstone's TTL is 7 days from its fence and nothing renews it, while
// the mark lives as long as the checkpoint, which every write renews. On
// AWS no shard lives that long (hours; its records 24 hours), but
// DynamoDB Local, which `make run` keeps across runs, enforces the ledger
// table's TTL and never trims its one shard: a week on, a guard claimed
// under a mark whose tombstone was gone, and a consumer of the version
// before the coordination table (a checkout of it run against the same
// data) claimed the shard from nothing and applied it again. The guard
// now reads the old key at each load and, finding no tombstone under the
// mark, fences again before its next claim (a tombstone put again: 4
// write units, one stream record).
func TestReviewS18Fence_ATombstoneGoneUnderItsMarkIsPutAgain(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(1802).Run(ctx, e.ddb, e.table, 20))
	shard, recs := e.records(t)
	require.GreaterOrEqual(t, len(recs), 20)

	p := e.processor(t, nil, nil)
	_, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[:10])
	require.NoError(t, err)

	// A week on, the ledger table's TTL deletes the tombstone; the mark
	// stays with the checkpoint.
	_, err = e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.table), Key: table.Key(legacyCheckpointKey(e, shard))})
	require.NoError(t, err)
	require.Contains(t, coordItem(t, e, shard), "legacyTombstone")

	// The consumer restarts and commits more.
	p = e.processor(t, nil, nil)
	_, err = p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[10:])
	require.NoError(t, err)

	// An old consumer started on the same data claims the shard from
	// nothing.
	claimed := oldClaimFromNothing(t, e, shard, recs[len(recs)-1].SequenceNumber)
	if claimed {
		old := e.processor(t, nil, nil)
		_, err := old.Process(ctx, old.MarkerGuard(), recs)
		require.NoError(t, err)
	}
	assert.False(t, claimed, "an old consumer claimed, from nothing, a shard a new one committed on under a mark without its tombstone")
	e.requireReconciled(t)
}

// R18-3 (a refused or exhausted fence was nobody's failure): the fence is
// a write of the commit, sent before its transaction, and its failures
// returned before commitTx counted anything: a fence throttled past
// MaxAttempts (the upgrade's burst of fences on the one partition key
// STREAM#{arn}) and a fence refused because an old consumer claimed the
// shard (ErrLegacyStreamState: an old consumer running, the state the
// fence exists for) left ledger_commits_total{outcome="failed"} — the
// LedgerCommitsFailing alert's counter — untouched, and named no
// conflict reason. Each now counts a failed commit, and a refusal
// conflicts_total{reason="legacy_checkpoint"}; nothing is committed, and
// a throttled fence goes through at the next try.
func TestReviewS18Fence_AFailedFenceIsAFailedCommit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		throttle bool // every TransactWriteItems is throttled until the next try
		old      bool // an old consumer claims the shard after the guard's read
		want     error
		conflict float64 // conflicts_total{reason="legacy_checkpoint"}
	}{
		{name: "throttled past MaxAttempts", throttle: true},
		{name: "an old consumer's checkpoint", old: true, want: table.ErrLegacyStreamState, conflict: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			require.NoError(t, ledgertest.NewWorkload(1803).Run(ctx, e.ddb, e.table, 10))
			shard, recs := e.records(t)
			var throttling atomic.Bool
			throttling.Store(tc.throttle)
			e.faults.Decide = func(op string) ledgertest.Fault {
				if op == "TransactWriteItems" && throttling.Load() {
					return ledgertest.Throttle
				}
				return ledgertest.Pass
			}
			reg := prometheus.NewRegistry()
			p, err := processor.New(e.faulty, processor.Config{Table: e.table, MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, processor.NewMetrics(reg))
			require.NoError(t, err)
			m := p.Metrics()
			g := p.ShardGuard(e.streamARN, shard)
			cp, err := g.Checkpoint(ctx)
			require.NoError(t, err)
			require.Empty(t, cp)
			if tc.old {
				require.True(t, oldClaimFromNothing(t, e, shard, recs[len(recs)-1].SequenceNumber))
				old := e.processor(t, nil, nil)
				_, err := old.Process(ctx, old.MarkerGuard(), recs)
				require.NoError(t, err)
			}

			res, err := p.Process(ctx, g, recs)
			require.Error(t, err)
			assert.Zero(t, res.Committed)
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
			} else {
				assert.True(t, strings.Contains(err.Error(), "legacy tombstone"), "the error names the fence: %v", err)
				assert.Equal(t, 2.0, testutil.ToFloat64(m.Throttles.WithLabelValues("TransactWriteItems")), "the fence's throttled attempts before the last")
			}
			assert.Equal(t, 1.0, testutil.ToFloat64(m.Commits.WithLabelValues("failed")), "the commit whose fence failed")
			assert.Equal(t, tc.conflict, testutil.ToFloat64(m.Conflicts.WithLabelValues(processor.ConflictLegacyCheckpoint)))
			assert.NotContains(t, coordItem(t, e, shard), table.AttrSequenceNumber, "nothing committed")

			if tc.throttle {
				throttling.Store(false)
				res, err = p.Process(ctx, g, recs)
				require.NoError(t, err, "the next try")
				assert.Equal(t, len(recs), res.Committed)
			}
			e.requireReconciled(t)
		})
	}
}

// What survives (no fix): the fence's answer lost (it landed: the retry
// finds its own writes, every SET if_not_exists), and two consumers
// fencing the same shard at once, one after the other's read of nothing
// (the second's transaction finds the first's tombstone and mark), each
// followed by an old consumer's claim from nothing, which fails.
func TestReviewS18Fence_ALostFenceAnswerAndTwoFencesAtOnceHold(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose bool // the first TransactWriteItems' answer is lost
		two  bool // a second consumer read nothing before the first fenced
	}{
		{name: "the fence's answer lost", lose: true},
		{name: "two consumers fence one shard", two: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			require.NoError(t, ledgertest.NewWorkload(1804).Run(ctx, e.ddb, e.table, 10))
			shard, recs := e.records(t)
			var n atomic.Int32
			e.faults.Decide = func(op string) ledgertest.Fault {
				if op == "TransactWriteItems" && n.Add(1) == 1 && tc.lose {
					return ledgertest.LoseAnswer
				}
				return ledgertest.Pass
			}
			reg := prometheus.NewRegistry()
			p, err := processor.New(e.faulty, processor.Config{Table: e.table, MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, processor.NewMetrics(reg))
			require.NoError(t, err)
			g := p.ShardGuard(e.streamARN, shard)
			var second *processor.ShardGuard
			q := e.processor(t, nil, nil)
			if tc.two {
				second = q.ShardGuard(e.streamARN, shard)
				_, err := second.Checkpoint(ctx) // reads nothing: it will fence too
				require.NoError(t, err)
			}
			_, err = p.Process(ctx, g, recs[:5])
			require.NoError(t, err)
			if tc.two {
				_, err = q.Process(ctx, second, recs)
				require.NoError(t, err, "the second consumer: its fence finds the first's, its claim fails and it goes on after the checkpoint")
			} else {
				_, err = p.Process(ctx, g, recs[5:])
				require.NoError(t, err)
			}
			assert.False(t, oldClaimFromNothing(t, e, shard, recs[len(recs)-1].SequenceNumber), "an old consumer's claim from nothing")
			e.requireReconciled(t)
		})
	}
}

// R18-4 (cost at scale): `ledgerctl coordination migrate` run again once
// the consumers of this version had fenced (the runbook's answer to a
// fence seen without a migration under way) read the fences' tombstones
// as moved checkpoints and tried to release a copy of each: a failed
// conditional write and a round trip per shard a commit touched in 7
// days (about 43,000 at 1,024 partitions). A fence's tombstone (no
// updatedAt, no sequenceNumber: nothing was copied) is now passed over.
func TestReviewS18Fence_AMigrationRunAgainWritesNothingForTheFencesTombstones(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(1805).Run(ctx, e.ddb, e.table, 10))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	_, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs)
	require.NoError(t, err)

	res, err := table.MigrateStreamState(ctx, e.faulty, e.table, table.CoordinationTableName(e.table), e.streamARN, time.Now(), table.MigrateOptions{})
	require.NoError(t, err)
	assert.Equal(t, table.MigrateResult{}, res)
	assert.Zero(t, e.faults.Calls("UpdateItem"), "writes for a fence's tombstone")
	assert.Zero(t, e.faults.Calls("PutItem")+e.faults.Calls("DeleteItem"), "other writes")
	assert.False(t, oldClaimFromNothing(t, e, shard, recs[len(recs)-1].SequenceNumber), "the tombstone stands")
}

// What survives (no fix): the version before the coordination table's
// LATEST start mark requires only sequenceNumber absent, so it lands on a
// fence's tombstone (setting startAt and updatedAt); the item keeps
// movedTo and pendingTo and stays a tombstone: that version's claim from
// nothing still fails, this version's guard reads on past it and
// commits, and a migration run again finds nothing to do there.
func TestReviewS18Fence_AnOldStartMarkOnATombstoneLeavesItATombstone(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(1806).Run(ctx, e.ddb, e.table, 10))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	_, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[:5])
	require.NoError(t, err)

	// The old poller's start mark (processor/poller/store.go before the
	// coordination table: markStart).
	_, err = e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(e.table), Key: table.Key(legacyCheckpointKey(e, shard)),
		UpdateExpression:         aws.String("SET #et = :et, #ua = :ua, #sh = :sh, #st = :st"),
		ConditionExpression:      aws.String("attribute_not_exists(#seq)"),
		ExpressionAttributeNames: map[string]string{"#et": table.AttrEntityType, "#ua": table.AttrUpdatedAt, "#sh": table.AttrShardID, "#st": "startAt", "#seq": table.AttrSequenceNumber},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":et": table.S(aggregates.EntityCheckpoint), ":ua": table.S(time.Now().UTC().Format(time.RFC3339Nano)),
			":sh": table.S(shard), ":st": table.S("LATEST"),
		},
	})
	require.NoError(t, err, "the old start mark lands on the tombstone")
	assert.False(t, oldClaimFromNothing(t, e, shard, recs[len(recs)-1].SequenceNumber), "the old claim from nothing after it")

	fresh := e.processor(t, nil, nil)
	_, err = fresh.Process(ctx, fresh.ShardGuard(e.streamARN, shard), recs)
	require.NoError(t, err, "a restarted consumer of this version")
	_, err = table.MigrateStreamState(ctx, e.ddb, e.table, table.CoordinationTableName(e.table), e.streamARN, time.Now(), table.MigrateOptions{})
	require.NoError(t, err, "a migration run again")
	assert.False(t, oldClaimFromNothing(t, e, shard, recs[len(recs)-1].SequenceNumber), "and after the migration")
	e.requireReconciled(t)
}
