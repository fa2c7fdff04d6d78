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
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Step X of the counted repair (docs/exactly-once.md, "Cost to build, and
// the order"): this version reads the fenced layouts of protocol 4 and
// writes its own; the fence keeps its consumers from committing.

// fenceCheckpoint rewrites the env's checkpoint of shard in the fenced
// layout of protocol 4: sequenceNumber {fence: 4}, the position in pos.
func fenceCheckpoint(t *testing.T, e *env, shard string) {
	t.Helper()
	item := coordCheckpoint(t, e, shard)
	pos := item[table.AttrSequenceNumber].(*ddbtypes.AttributeValueMemberS).Value
	_, err := e.ddb.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.CheckpointKey(e.streamARN, shard)),
		UpdateExpression:         aws.String("SET #seq = :fence, #pos = :pos"),
		ExpressionAttributeNames: map[string]string{"#seq": table.AttrSequenceNumber, "#pos": table.AttrPos},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":fence": &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{"fence": table.Int(4)}},
			":pos":   table.S(pos),
		},
	})
	require.NoError(t, err)
}

// fenceHeads rewrites every report item of the env's table in the fenced
// layout of protocol 4 (SET txCount = transactionCount, transactionCount =
// "v4", on condition of the old layout) and returns their keys.
func fenceHeads(t *testing.T, e *env) map[aggregates.Key]bool {
	t.Helper()
	ctx := context.Background()
	fenced := map[aggregates.Key]bool{}
	for _, item := range scanEntity(t, e, aggregates.EntityReport) {
		_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(e.table), Key: table.Key(aggregates.Key{PK: item[table.AttrPK].(*ddbtypes.AttributeValueMemberS).Value, SK: item[table.AttrSK].(*ddbtypes.AttributeValueMemberS).Value}),
			UpdateExpression:          aws.String("SET #tc = #n, #n = :v4"),
			ConditionExpression:       aws.String("attribute_type(#n, :N)"),
			ExpressionAttributeNames:  map[string]string{"#tc": table.AttrTxCount, "#n": table.AttrTransactionCount},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":v4": table.S(table.HeadFence), ":N": table.S("N")},
		})
		require.NoError(t, err)
		fenced[table.KeyOf(item)] = true
	}
	return fenced
}

func scanEntity(t *testing.T, e *env, entity string) []map[string]ddbtypes.AttributeValue {
	t.Helper()
	var out []map[string]ddbtypes.AttributeValue
	p := dynamodb.NewScanPaginator(e.ddb, &dynamodb.ScanInput{
		TableName: aws.String(e.table), ConsistentRead: aws.Bool(true),
		FilterExpression:          aws.String("#et = :et"),
		ExpressionAttributeNames:  map[string]string{"#et": table.AttrEntityType},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":et": table.S(entity)},
	})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		require.NoError(t, err)
		out = append(out, page.Items...)
	}
	return out
}

// TestReadX_AFencedCheckpointIsReadByInFlightAndRefusedByTheConsumer: a
// checkpoint fenced by protocol 4 is read by the in-flight check of
// reconcile --repair at its pos (the same branches in flight as before the
// fence; before X it read no position and took the whole shard for in
// flight), and a consumer of this version commits nothing over it: Process
// fails with table.ErrCheckpointProtocol (before X: "guard conflict
// without progress", its claims conditioned on attribute_not_exists
// (sequenceNumber)), and the checkpoint is left as it was.
func TestReadX_AFencedCheckpointIsReadByInFlightAndRefusedByTheConsumer(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(2511).Run(ctx, e.ddb, e.table, 40))
	shard, recs := e.records(t)
	require.GreaterOrEqual(t, len(recs), 40)
	p := e.processor(t, nil, nil)
	_, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[:20])
	require.NoError(t, err)

	before, err := p.InFlight(ctx, e.streams, e.streamARN, 0)
	require.NoError(t, err)
	require.NotEmpty(t, before.Branches, "recs[20:] are in flight")

	fenceCheckpoint(t, e, shard)
	fenced := coordCheckpoint(t, e, shard)
	after, err := e.processor(t, nil, nil).InFlight(ctx, e.streams, e.streamARN, 0)
	require.NoError(t, err)
	assert.Equal(t, before.Branches, after.Branches, "in flight after the fence: read from pos")
	assert.Empty(t, after.Unpositioned)

	q := e.processor(t, nil, nil)
	_, err = q.Process(ctx, q.ShardGuard(e.streamARN, shard), recs[20:])
	require.ErrorIs(t, err, table.ErrCheckpointProtocol)
	assert.ErrorContains(t, err, "protocol 4, this consumer's 3")
	assert.Equal(t, fenced, coordCheckpoint(t, e, shard), "the fenced checkpoint is left as it was")
}

// TestReadX_FencedHeadsReconcileAndTheRepairKeepsThemFenced: report heads
// fenced by protocol 4 reconcile without a difference (before X each was
// "malformed"); a consumer of this version that commits onto them parks
// its parts (F-a, pinned: its update of a fenced head is refused); and
// reconcile --repair folds the parked deltas in and leaves every head
// fenced (F-b: before X it wrote the old layout back).
func TestReadX_FencedHeadsReconcileAndTheRepairKeepsThemFenced(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	w := ledgertest.NewWorkload(2512)
	require.NoError(t, w.Run(ctx, e.ddb, e.table, 40))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	g := p.ShardGuard(e.streamARN, shard)
	_, err := p.Process(ctx, g, recs)
	require.NoError(t, err)
	fenced := fenceHeads(t, e)
	require.NotEmpty(t, fenced)
	e.requireReconciled(t)

	require.NoError(t, w.Run(ctx, e.ddb, e.table, 30))
	_, all := e.records(t)
	_, err = p.Process(ctx, g, all[len(recs):])
	require.NoError(t, err, "the commit lands, its parts on fenced heads parked")
	require.NotEmpty(t, scanEntity(t, e, aggregates.EntityParked), "a commit of this version parks its part of a fenced head")
	heads := func() map[aggregates.Key]map[string]ddbtypes.AttributeValue {
		out := map[aggregates.Key]map[string]ddbtypes.AttributeValue{}
		for _, item := range scanEntity(t, e, aggregates.EntityReport) {
			if fenced[table.KeyOf(item)] {
				out[table.KeyOf(item)] = item
			}
		}
		require.Len(t, out, len(fenced))
		return out
	}
	for k, item := range heads() {
		assert.Equal(t, table.S(table.HeadFence), item[table.AttrTransactionCount], "head %s", k)
	}

	diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
	require.NoError(t, err)
	require.NotEmpty(t, diffs, "the parked deltas are differences")
	_, err = processor.Repair(ctx, e.ddb, e.table, diffs, time.Now())
	require.NoError(t, err)
	e.requireReconciled(t)
	assert.Empty(t, scanEntity(t, e, aggregates.EntityParked))
	for k, item := range heads() {
		assert.Equal(t, table.S(table.HeadFence), item[table.AttrTransactionCount], "head %s after the repair", k)
		assert.IsType(t, &ddbtypes.AttributeValueMemberN{}, item[table.AttrTxCount], "head %s after the repair", k)
	}
}
