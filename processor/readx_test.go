package processor_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/table"
)

// Steps X and F of the counted repair (docs/exactly-once.md, "Cost to
// build, and the order"; "F as built (session 25)"): this version reads
// both layouts of protocol 3 and 4 and writes protocol 4's fences; a fence
// of a later protocol keeps its consumers from committing.

// setFence rewrites the fence of the env's checkpoint of shard (fenced by
// this version's first commit) to protocol p.
func setFence(t *testing.T, e *env, shard string, p int64) {
	t.Helper()
	_, err := e.ddb.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.CheckpointKey(e.streamARN, shard)),
		UpdateExpression:          aws.String("SET #seq = :fence"),
		ConditionExpression:       aws.String("attribute_type(#seq, :M)"),
		ExpressionAttributeNames:  map[string]string{"#seq": table.AttrSequenceNumber},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":fence": &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{"fence": table.Int(p)}}, ":M": table.S("M")},
	})
	require.NoError(t, err)
}

// unfenceHeads puts every report head of the env's table back in the old
// layout (table.UnfenceHead: as a consumer of protocol 3 left them) and
// returns their keys.
func unfenceHeads(t *testing.T, e *env) map[aggregates.Key]bool {
	t.Helper()
	keys := map[aggregates.Key]bool{}
	for _, item := range scanEntity(t, e, aggregates.EntityReport) {
		_, err := e.ddb.UpdateItem(context.Background(), table.UnfenceHead(e.table, table.KeyOf(item)))
		require.NoError(t, err)
		keys[table.KeyOf(item)] = true
	}
	return keys
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

// TestFence_TheFirstCommitFencesTheCheckpointAndALaterProtocolIsRefused:
// the first commit of this version on a shard leaves its checkpoint fenced
// (sequenceNumber {fence: 4}, pos its last record, countedTo "": nothing
// was claimed before it); the in-flight check of reconcile --repair reads
// it at pos (no shard unpositioned); a checkpoint fenced by a later
// protocol (5) is refused by name (table.ErrCheckpointProtocol) and left
// as it was; back at this version's fence, a later batch commit (plan
// layout 6, ClaimGroup) moves pos only and keeps countedTo, and the
// reports reconcile.
func TestFence_TheFirstCommitFencesTheCheckpointAndALaterProtocolIsRefused(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(2511).Run(ctx, e.ddb, e.table, 40))
	shard, recs := e.records(t)
	require.GreaterOrEqual(t, len(recs), 40)
	p := e.processor(t, nil, nil)
	_, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[:20])
	require.NoError(t, err)
	item := coordCheckpoint(t, e, shard)
	cp, err := table.DecodeCheckpoint(shard, item)
	require.NoError(t, err)
	assert.Equal(t, int64(4), cp.Fence, "fenced by the first commit")
	assert.Equal(t, recs[19].SequenceNumber, cp.Pos)
	assert.Equal(t, table.S(""), item[table.AttrCountedTo], "countedTo: nothing claimed before the fence")

	flight, err := p.InFlight(ctx, e.streams, e.streamARN, 0)
	require.NoError(t, err)
	assert.NotEmpty(t, flight.Branches, "recs[20:] are in flight, read from pos")
	assert.Empty(t, flight.Unpositioned)

	setFence(t, e, shard, 5)
	fenced := coordCheckpoint(t, e, shard)
	q := e.processor(t, nil, nil)
	_, err = q.Process(ctx, q.ShardGuard(e.streamARN, shard), recs[20:])
	require.ErrorIs(t, err, table.ErrCheckpointProtocol)
	assert.ErrorContains(t, err, "protocol 5, this version's 4")
	assert.Equal(t, fenced, coordCheckpoint(t, e, shard), "the checkpoint of protocol 5 is left as it was")

	setFence(t, e, shard, 4)
	q = e.processor(t, nil, nil)
	g := q.ShardGuard(e.streamARN, shard)
	g.CommitBatches()
	_, err = q.Process(ctx, g, recs[20:])
	require.NoError(t, err)
	item = coordCheckpoint(t, e, shard)
	cp, err = table.DecodeCheckpoint(shard, item)
	require.NoError(t, err)
	assert.Equal(t, int64(4), cp.Fence)
	assert.Equal(t, recs[len(recs)-1].SequenceNumber, cp.Pos, "a later commit moves pos")
	assert.Equal(t, table.S(""), item[table.AttrCountedTo], "and keeps countedTo")
	e.requireReconciled(t)
}

// TestFence_OldLayoutHeadsAreMovedOverByTheNextCommit: report heads a
// consumer of protocol 3 left in the old layout (here: unfenced after this
// version's first commit, its shape cache still taking them for fenced)
// are moved over by the next commit of this version: its update sent on
// the stale fenced shape fails its condition, the re-read finds the old
// layout, and the update moves the count over with the delta. Every head
// ends fenced with a numeric txCount, nothing is parked, and the reports
// reconcile (before step F, X's consumers parked every part of a fenced
// head: F-a).
func TestFence_OldLayoutHeadsAreMovedOverByTheNextCommit(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	w := ledgertest.NewWorkload(2512)
	require.NoError(t, w.Run(ctx, e.ddb, e.table, 40))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	g := p.ShardGuard(e.streamARN, shard)
	_, err := p.Process(ctx, g, recs)
	require.NoError(t, err)
	for _, item := range scanEntity(t, e, aggregates.EntityReport) {
		require.Equal(t, table.S(table.HeadFence), item[table.AttrTransactionCount], "every head fenced by its commit")
	}
	old := unfenceHeads(t, e)
	require.NotEmpty(t, old)
	e.requireReconciled(t)

	require.NoError(t, w.Run(ctx, e.ddb, e.table, 30))
	_, all := e.records(t)
	_, err = p.Process(ctx, g, all[len(recs):])
	require.NoError(t, err)
	assert.Empty(t, scanEntity(t, e, aggregates.EntityParked), "nothing parked")
	moved := 0
	for _, item := range scanEntity(t, e, aggregates.EntityReport) {
		if !table.FencedHead(item) {
			assert.True(t, old[table.KeyOf(item)], "a head in the old layout is one the commit did not touch: %s", table.KeyOf(item))
			continue
		}
		assert.IsType(t, &ddbtypes.AttributeValueMemberN{}, item[table.AttrTxCount], "head %s", table.KeyOf(item))
		if old[table.KeyOf(item)] {
			moved++
		}
	}
	assert.Positive(t, moved, "old heads moved over")
	e.requireReconciled(t)
}

// TestFence_TheFirstWriteRaisesTheProtocol: a Processor raises the flags'
// protocol before its first write, not before (an empty batch, as a
// Lambda's first invocation may be, writes nothing and needs no table),
// and a raise that fails keeps every write back: no checkpoint, no fence,
// until a later batch raises it.
func TestFence_TheFirstWriteRaisesTheProtocol(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(2512).Run(ctx, e.ddb, e.table, 20))
	shard, recs := e.records(t)
	protocol := func() table.Flags {
		f, err := table.GetFlags(ctx, e.ddb, e.table)
		require.NoError(t, err)
		return f
	}
	setProtocol := func(expr string, v ddbtypes.AttributeValue) {
		in := &dynamodb.UpdateItemInput{
			TableName: aws.String(e.table), Key: table.Key(aggregates.FlagsKey()),
			UpdateExpression: aws.String(expr), ExpressionAttributeNames: map[string]string{"#p": table.AttrProtocol},
		}
		if v != nil {
			in.ExpressionAttributeValues = map[string]ddbtypes.AttributeValue{":p": v}
		}
		_, err := e.ddb.UpdateItem(ctx, in)
		require.NoError(t, err)
	}
	checkpoint := func() map[string]ddbtypes.AttributeValue {
		out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.CheckpointKey(e.streamARN, shard)), ConsistentRead: aws.Bool(true),
		})
		require.NoError(t, err)
		return out.Item
	}

	p := e.processor(t, nil, nil)
	_, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), nil)
	require.NoError(t, err)
	assert.Equal(t, int64(0), protocol().Protocol, "an empty batch writes nothing")

	setProtocol("SET #p = :p", table.S("4"))
	_, err = p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[:10])
	require.ErrorContains(t, err, "is no integer")
	assert.Nil(t, checkpoint(), "no write before the protocol is said")

	setProtocol("REMOVE #p", nil)
	res, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[:10])
	require.NoError(t, err)
	assert.Equal(t, 10, res.Committed)
	assert.Equal(t, int64(table.Protocol), protocol().Protocol, "raised by the batch that wrote first")
	cp, err := table.DecodeCheckpoint(shard, checkpoint())
	require.NoError(t, err)
	assert.Equal(t, int64(table.Protocol), cp.Fence)

	setProtocol("SET #p = :p", table.Int(3))
	_, err = p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs[10:])
	require.NoError(t, err)
	assert.Equal(t, int64(3), protocol().Protocol, "within a minute of its raise a Processor raises no more (S26-P2: then it raises again, TestReviewS26P2_AProcessorLivingPastAnUnfenceRaisesAgainBeforeItFences)")
	e.requireReconciled(t)
}
