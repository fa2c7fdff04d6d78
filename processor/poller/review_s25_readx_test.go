package poller_test

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
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// TestPoller_ReviewS25X4_AProtocolFencedShardIsGivenUp: S25-X4
// (docs/exactly-once.md, "Review (adversarial, session 25): step X as
// built"), carried over as S25-F1 in the review of F, fixed: a poller of
// protocol 4 meets a fence of protocol 5 (modelled here) the way protocol
// 3's meet protocol 4's. Before the fix it committed nothing on the shard
// (every read finds the fence, counted as newer_protocol) but kept the
// lease, restarting its reader for the life of the process, so the shard
// was read by no one. Now the reader ends at the fence, the lease is
// released, the shard is counted in ledger_poller_shards_protocol_fenced
// (and still as open, for LedgerShardUnread), and this poller does not
// take it again; a drain of this version fails naming the fence.
func TestPoller_ReviewS25X4_AProtocolFencedShardIsGivenUp(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2541)
	f := e.stream
	coord := table.CoordinationTableName(e.table)
	key := aggregates.CheckpointKey(f.arn, "shardId-A")
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 20)...)
	e.drain(t, "old-1", nil)
	// The drain of this version fenced the checkpoint at protocol 4; a
	// later protocol's fence (5) is what a poller of this version meets.
	_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(coord), Key: table.Key(key),
		UpdateExpression:          aws.String("SET #seq = :fence"),
		ConditionExpression:       aws.String("attribute_type(#seq, :M)"),
		ExpressionAttributeNames:  map[string]string{"#seq": table.AttrSequenceNumber},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":fence": &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{"fence": table.Int(5)}}, ":M": table.S("M")},
	})
	require.NoError(t, err)
	f.appendTo("shardId-A", e.write(t, 10)...)

	tp := e.poller(t, "v4", nil, nil, func(c *poller.Config) {
		c.MaxReadFailures, c.ThrottleBackoff, c.MaxThrottleBackoff = 2, time.Millisecond, 10*time.Millisecond
	})
	stop := start(t, tp)
	defer stop()
	fenced := tp.pm.Conflicts.WithLabelValues(processor.ConflictNewerProtocol)
	eventually(t, "the reader meeting the fence", 20*time.Second, func() bool { return counter(t, fenced) >= 1 })
	assert.Zero(t, counter(t, tp.pm.Commits.WithLabelValues("committed")), "committed over the fence")
	eventually(t, "the lease given up", 10*time.Second, func() bool {
		return counter(t, tp.m.LeasesHeld) == 0 && counter(t, tp.m.ProtocolFenced) == 1 && counter(t, tp.m.Shards.WithLabelValues("open")) == 1
	})
	// Not taken again: over several rounds the fence is met no more, the
	// lease stays free (released, no owner), and nothing is committed.
	met := counter(t, fenced)
	time.Sleep(4 * time.Second) // longer than a lease duration (3 s): many rounds
	assert.Equal(t, met, counter(t, fenced), "the fenced shard was taken again")
	assert.Zero(t, counter(t, tp.m.LeasesHeld), "the fenced shard's lease held again")
	assert.Zero(t, counter(t, tp.pm.Commits.WithLabelValues("committed")), "committed over the fence")

	// A drain of this version cannot keep its promise on that shard: it
	// fails naming the fence (it waited for ever before, its reader
	// restarting), and commits nothing.
	dp, err := e.drainLoss(t, "drain-v4", func(c *poller.Config) {
		c.MaxReadFailures, c.ThrottleBackoff, c.MaxThrottleBackoff = 2, time.Millisecond, 10*time.Millisecond
	})
	require.ErrorIs(t, err, table.ErrCheckpointProtocol)
	var pe *table.CheckpointProtocolError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, int64(5), pe.Fence)
	assert.Zero(t, counter(t, dp.pm.Commits.WithLabelValues("committed")), "the drain committed over the fence")
}

// TestPoller_AStoreMoveRaisesTheProtocol: the poller's own checkpoint
// writes (a move over records without effect, a start mark) fence the
// checkpoint as a commit does, so they too say protocol 4 in the flags
// first (processor.Processor.RaiseProtocol), whoever built the poller:
// here poller.New, not poller.NewService, which raises at start.
func TestPoller_AStoreMoveRaisesTheProtocol(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2542)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", withoutEffect(30)...)
	before, err := table.GetFlags(ctx, e.ddb, e.table)
	require.NoError(t, err)
	require.Zero(t, before.Protocol)
	tp := e.drain(t, "d", nil)
	assert.Zero(t, counter(t, tp.pm.Commits.WithLabelValues("committed")), "nothing to commit: the store moved the checkpoint")
	out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.CheckpointKey(f.arn, "shardId-A")), ConsistentRead: aws.Bool(true),
	})
	require.NoError(t, err)
	cp, err := table.DecodeCheckpoint("shardId-A", out.Item)
	require.NoError(t, err)
	assert.Equal(t, int64(table.Protocol), cp.Fence, "fenced by the store's move")
	after, err := table.GetFlags(ctx, e.ddb, e.table)
	require.NoError(t, err)
	assert.Equal(t, int64(table.Protocol), after.Protocol, "said before the fence")
}
