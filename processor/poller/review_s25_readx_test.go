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
// built"), open; step F did not close it (review of F, S25-F1): protocol
// 3's pollers are what they are (F's rollout replaces the fleet before the
// first fence, runbook "Upgrading to protocol 4"), and a poller of
// protocol 4 meets a fence of protocol 5 the same way, modelled here. A poller of this version that holds the lease
// of a shard whose checkpoint a poller of protocol 4 fenced commits nothing
// on it (X holds: every read finds the fence, counted as newer_protocol),
// but it keeps the lease: its reader fails MaxReadFailures times, restarts
// after a pause, and so on for the life of the process, so the shard is
// read by no one until this poller leaves the fleet (a rolling deploy of F
// in which it takes such a lease, by expiry or balancing, stalls the
// shard). What F needs: the poller gives the lease up and does not take it
// again (or F's rollout replaces the fleet before the first fence).
// Skipped until then; it fails today on the lease still held. It takes a
// table of the pool: raise tables.Size by one when it is unskipped.
func TestPoller_ReviewS25X4_AProtocolFencedShardIsGivenUp(t *testing.T) {
	t.Skip("S25-X4/S25-F1 (open): a poller keeps the lease of a shard fenced by a later protocol; docs/exactly-once.md, reviews of session 25")
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
	eventually(t, "the reader meeting the fence three times", 20*time.Second, func() bool { return counter(t, fenced) >= 3 })
	assert.Zero(t, counter(t, tp.pm.Commits.WithLabelValues("committed")), "committed over the fence")
	eventually(t, "the lease given up", 10*time.Second, func() bool { return counter(t, tp.m.LeasesHeld) == 0 })
}
