package processor_test

import (
	"context"
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

// Review (adversarial, session 25): step X as built (docs/exactly-once.md,
// "Review (adversarial, session 25): step X as built").

// TestReviewS25X1_ARepairDoesNotUnfenceAHeadFencedAfterItsRead: S25-X1.
// The fence of an old-layout head is one update that keeps every figure
// and, as designed (F, R1) and as fenceHeads writes it, does not touch
// updatedAt. A repair of this version that read the head before the fence
// (one started before the flags said protocol 4: ledgerctl checks them
// once, at its start) put its item on condition of that updatedAt only,
// which still held: the head went back to the old layout (a numeric
// transactionCount, txCount gone), F-b's un-fencing by a race. The repair's
// put now also conditions on the layout it read: the report is skipped,
// the head stays fenced, and the next repair writes it fenced.
func TestReviewS25X1_ARepairDoesNotUnfenceAHeadFencedAfterItsRead(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(2521).Run(ctx, e.ddb, e.table, 30))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	_, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs)
	require.NoError(t, err)
	e.requireReconciled(t)
	unfenceHeads(t, e) // as a consumer of protocol 3 left them (updatedAt kept)

	// Damage one head's income (updatedAt kept): one difference to repair.
	heads := scanEntity(t, e, aggregates.EntityReport)
	require.NotEmpty(t, heads)
	k := table.KeyOf(heads[0])
	_, err = e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(e.table), Key: table.Key(k),
		UpdateExpression:          aws.String("SET #i = #i + :one"),
		ExpressionAttributeNames:  map[string]string{"#i": table.AttrTotalIncome},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": table.Int(1)},
	})
	require.NoError(t, err)
	diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
	require.NoError(t, err)
	require.Len(t, diffs, 1)

	// Protocol 4's fence lands between the repair's read and its write.
	_, err = e.ddb.UpdateItem(ctx, table.FenceHead(e.table, k)) // keeps updatedAt (R1/B1)
	require.NoError(t, err)
	res, err := processor.Repair(ctx, e.ddb, e.table, diffs, time.Now())
	require.NoError(t, err)
	head := func() map[string]ddbtypes.AttributeValue {
		out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.table), Key: table.Key(k), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		return out.Item
	}
	assert.Equal(t, table.S(table.HeadFence), head()[table.AttrTransactionCount], "the head was un-fenced by a repair that read it before the fence")
	assert.Contains(t, head(), table.AttrTxCount)
	assert.Len(t, res.Skipped, 1, "the report is skipped: its head changed layout since the read")

	// The next repair reads it fenced and writes it fenced, repaired.
	diffs, _, err = processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
	require.NoError(t, err)
	require.Len(t, diffs, 1)
	res, err = processor.Repair(ctx, e.ddb, e.table, diffs, time.Now())
	require.NoError(t, err)
	assert.Equal(t, 1, res.Repaired)
	e.requireReconciled(t)
	assert.Equal(t, table.S(table.HeadFence), head()[table.AttrTransactionCount])
}

// TestReviewS25X2_TheProtocolFenceIsCounted: S25-X2. A consumer of this
// version that meets a checkpoint fenced by a later protocol refused it by
// name but counted nothing: the poller's reader took it for a read failure
// (ledger_poller_reader_restarts_total{reason="error"}, as any other) and
// the tumbling function's batch failed with no metric of its own. Each
// guard read that finds the fence now counts
// ledger_aggregate_conflicts_total{reason="newer_protocol"}, as a roll-up
// delta of a newer format counts newer_delta_format.
func TestReviewS25X2_TheProtocolFenceIsCounted(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(2522).Run(ctx, e.ddb, e.table, 20))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	_, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[:10])
	require.NoError(t, err)
	setFence(t, e, shard, 5) // fenced at 4 by the commit above; a later protocol

	q := e.processor(t, prometheus.NewRegistry(), nil)
	counted := q.Metrics().Conflicts.WithLabelValues(processor.ConflictNewerProtocol)
	for attempt := 1; attempt <= 2; attempt++ {
		_, err = q.Process(ctx, q.ShardGuard(e.streamARN, shard), recs[10:])
		require.ErrorIs(t, err, table.ErrCheckpointProtocol)
		assert.Equal(t, float64(attempt), testutil.ToFloat64(counted), "each read that finds the fence is counted")
	}
	g := q.ShardGuard(e.streamARN, shard)
	_, err = g.Checkpoint(ctx)
	require.ErrorIs(t, err, table.ErrCheckpointProtocol)
	assert.Equal(t, float64(3), testutil.ToFloat64(counted))
}

// S25-X5 (a part parked on a fenced head names the fence) is moot since
// step F: this version updates fenced heads (CheckReportItem no longer
// lists them, nothing is parked); its test went with table.FenceRefusal.
