package processor_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/table"
)

// Review, session 16, gated (LEDGER_REVIEW_S16=1; it fails on this code):
// the migration fence guards the shards whose checkpoint the migration
// copied, not a shard that had none (docs/exactly-once.md, "A checkpoint
// moved from the ledger table (the fence)", review of session 16, hole
// S16-F1).

// TestReviewS16_OldConsumerOnAShardWithoutACheckpointAtTheMigration: the
// migration ran while the shard had no checkpoint in the ledger table (it
// appeared after the migration listed the checkpoints: a child shard, or
// one a consumer opened at LATEST and never committed on). A new-version
// consumer commits on it from nothing in the coordination table (its
// legacy check found nothing in the ledger table); a consumer of the
// version before the coordination table that still runs (the mapping
// left enabled: the case the fence is for) claims the same shard from
// nothing in the ledger table, where no tombstone stands, and applies the
// same records a second time. Fix (not built): the first claim or move of
// a shard's checkpoint in the coordination table puts, in the same
// transaction, a tombstone at the shard's ledger-table key (condition: no
// item there, or a tombstone), so an old version's claim from nothing
// fails on its pendingTo, and a new version's first claim after an old
// one's fails and is named ErrLegacyStreamState.
func TestReviewS16_OldConsumerOnAShardWithoutACheckpointAtTheMigration(t *testing.T) {
	if os.Getenv("LEDGER_REVIEW_S16") != "1" {
		t.Skip("LEDGER_REVIEW_S16=1: a hole the review of session 16 left open (it fails on this code)")
	}
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

	// An old-version consumer still running claims them from nothing (the
	// old claim's condition, as oldVersionCommit sends it) and, when that
	// lands, applies them: emulated by a consumer under run markers, which
	// applies the same records without the new version's legacy check.
	last := recs[9].SequenceNumber
	_, err = e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(e.table), Key: table.Key(legacyCheckpointKey(e, shard)),
		UpdateExpression:          aws.String("SET #seq = :last, #ua = :now"),
		ConditionExpression:       aws.String("attribute_not_exists(#seq) AND attribute_not_exists(#pt)"),
		ExpressionAttributeNames:  map[string]string{"#seq": table.AttrSequenceNumber, "#pt": "pendingTo", "#ua": table.AttrUpdatedAt},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":last": table.S(last), ":now": table.S(time.Now().UTC().Format(time.RFC3339Nano))},
	})
	var ccf *ddbtypes.ConditionalCheckFailedException
	claimed := !errors.As(err, &ccf)
	if claimed {
		require.NoError(t, err)
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
