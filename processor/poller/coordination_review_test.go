package poller_test

// Holes the review of issue 23's coordination table found in discovery and
// expiry, each fixed.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// lateChildren is the scripted stream with ShardFilter CHILD_SHARDS
// answered as AWS does (only the children of the shard, one page), except
// that the first lookup of each parent finds no child yet: AWS may list a
// closed shard's child a little later than the close (streamemu's doc,
// "Deviations"; KCL's "Incomplete shard list: Closed shard ... has no
// children", awslabs/amazon-kinesis-client#164).
type lateChildren struct {
	poller.Streams
	f     *fakeStream
	mu    sync.Mutex
	asked map[string]bool
}

func (c *lateChildren) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	if in.ShardFilter == nil {
		return c.Streams.DescribeStream(ctx, in, opts...)
	}
	parent := aws.ToString(in.ShardFilter.ShardId)
	c.mu.Lock()
	first := !c.asked[parent]
	c.asked[parent] = true
	c.mu.Unlock()
	desc := &st.StreamDescription{StreamArn: aws.String(c.f.arn), StreamStatus: st.StreamStatusEnabled, StreamViewType: st.StreamViewTypeNewAndOldImages}
	if !first {
		c.f.mu.Lock()
		for _, s := range c.f.shards {
			if s.parent != parent {
				continue
			}
			sh := st.Shard{ShardId: aws.String(s.id), ParentShardId: aws.String(s.parent), SequenceNumberRange: &st.SequenceNumberRange{StartingSequenceNumber: aws.String(s.startSeq())}}
			if s.closed {
				sh.SequenceNumberRange.EndingSequenceNumber = aws.String(s.endSeq())
			}
			desc.Shards = append(desc.Shards, sh)
		}
		c.f.mu.Unlock()
	}
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: desc}, nil
}

// Issue 23 review: the poller that finished a shard looked its children up
// once; an answer without
// children (the child not listed yet) is taken as "no children": nothing
// is registered, the lookup is dropped, and neither this poller nor any
// other reads the child until the next listing of the whole stream,
// DiscoverInterval later (5 minutes by default, an hour here), while its
// records waited. Now a finished shard found without children is looked
// up again at each pass for a while (childlessRetry).
func TestPoller_AChildListedLateIsLookedUpAgain(t *testing.T) {
	e := newEnv(t, 2331)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 40)...)
	streams := &lateChildren{Streams: f.client("P"), f: f, asked: map[string]bool{}}
	tp := e.poller(t, "P", streams, nil, func(c *poller.Config) { c.DiscoverInterval = time.Hour })
	stop := start(t, tp)
	eventually(t, "A read", 20*time.Second, func() bool { return counter(t, tp.m.RecordsRead) >= 40 })

	f.appendTo("shardId-A", e.write(t, 20)...)
	f.close("shardId-A")
	f.addShard("shardId-B", "shardId-A")
	f.appendTo("shardId-B", e.write(t, 30)...)
	eventually(t, "A finished", 20*time.Second, func() bool { return logged(tp.logs.lines(), "shard finished") >= 1 })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && counter(t, tp.m.RecordsRead) < 90 {
		time.Sleep(100 * time.Millisecond)
	}
	got := counter(t, tp.m.RecordsRead)
	stop()
	if got < 90 {
		t.Errorf("child B not read within 30 s of its parent's end (records read %v of 90): found only at the next listing, DiscoverInterval later", got)
	}
}

// Issue 23 review: a finished shard's checkpoint is written (finished mark) a moment before
// its lease (the release), so it expires first, and TTL deletes each of
// them at its own time within about two days. In between, the lease item
// still describes the shard (startingSequenceNumber), no checkpoint says
// it is finished and the stream no longer lists it, so every poller's
// learnShards adds it back: it takes the lease (expiresAt + 7 days), opens
// the shard, gets ResourceNotFoundException, lists the whole stream to
// confirm (ShardGone, and forceList) and releases the lease (expiresAt + 7
// days again). p.gone lives in memory, so every poller started later
// (deploys, scaling) does it again, and each time the zombie's lease is
// renewed for a week: the lease partition every pass reads accumulates
// zombies, and each costs every new poller a take, a release and two
// listings of the whole stream (DescribeStream: 10 calls a second).
// Now a lease nobody wrote for longer than the stream's retention
// (table.LeaseStale) teaches no shard, and a finished shard's checkpoint
// and lease expire two days after it finished (table.FinishedRetention).
func TestPoller_AStaleLeaseOfAShardGoneIsNotTakenAgain(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2332)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 30)...)
	f.close("shardId-A")
	f.addShard("shardId-B", "shardId-A")
	f.appendTo("shardId-B", e.write(t, 20)...)
	e.drain(t, "p1", nil)
	e.requireReconciled(t)

	// A week on: A aged out of the stream; TTL deleted its checkpoint but
	// not yet its lease.
	coord := table.CoordinationTableName(e.table)
	f.mu.Lock()
	f.shards = f.shards[1:]
	f.mu.Unlock()
	_, err := e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(coord), Key: table.Key(aggregates.CheckpointKey(f.arn, "shardId-A"))})
	require.NoError(t, err)
	_, err = e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(coord), Key: table.Key(aggregates.LeaseKey(f.arn, "shardId-A")),
		UpdateExpression:          aws.String("SET #ua = :ua"),
		ExpressionAttributeNames:  map[string]string{"#ua": table.AttrUpdatedAt},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":ua": table.S(time.Now().Add(-8 * 24 * time.Hour).UTC().Format(time.RFC3339Nano))},
	})
	require.NoError(t, err)
	leaseA := func() map[string]ddbtypes.AttributeValue {
		out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord), Key: table.Key(aggregates.LeaseKey(f.arn, "shardId-A")), ConsistentRead: aws.Bool(true)})
		require.NoError(t, err)
		return out.Item
	}
	before := leaseA()
	require.NotNil(t, before)
	listings := f.calls["DescribeStream"]
	time.Sleep(1100 * time.Millisecond) // expiresAt counts in seconds

	tp := e.drain(t, "p2", nil)
	after := leaseA()
	assert.Equal(t, before[table.AttrLeaseCounter], after[table.AttrLeaseCounter], "the lease of a shard gone for a week was taken again")
	assert.Equal(t, before[table.AttrExpiresAt], after[table.AttrExpiresAt], "and its expiry pushed a week on")
	assert.Zero(t, logged(tp.logs.lines(), "shard is gone from the stream"), "the poller probed a shard finished a week ago")
	t.Logf("whole-stream listings by p2: %d", f.calls["DescribeStream"]-listings)
}

// throttledChildren answers ShardFilter CHILD_SHARDS as AWS does, but
// refuses every such lookup with LimitExceededException while on; it
// counts the listings of the whole stream.
type throttledChildren struct {
	poller.Streams
	f                 *fakeStream
	on                atomic.Bool
	refused, listings atomic.Int64
}

func (c *throttledChildren) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	if in.ShardFilter == nil {
		c.listings.Add(1)
		return c.Streams.DescribeStream(ctx, in, opts...)
	}
	if c.on.Load() {
		c.refused.Add(1)
		return nil, &st.LimitExceededException{Message: aws.String("Rate exceeded for DescribeStream")}
	}
	answer := &lateChildren{Streams: c.Streams, f: c.f, asked: map[string]bool{aws.ToString(in.ShardFilter.ShardId): true}}
	return answer.DescribeStream(ctx, in, opts...)
}

// Issue 23, found by the fleet benchmark (100 shards: 73 throttled child
// lookups, 2,805 of 3,596 DescribeStream calls refused): a child lookup
// (one DescribeStream call) refused by DescribeStream's rate fell back to
// listing the whole stream, every page of it against the same rate (71
// pages at 7,055 shards), and the listings of 8 pollers kept the rate
// exhausted. Now a throttled lookup waits for the next pass.
func TestPoller_AThrottledChildLookupWaitsInsteadOfListingTheStream(t *testing.T) {
	e := newEnv(t, 2324)
	f := e.stream
	f.addShard("shardId-A", "")
	f.addShard("shardId-X", "")
	f.split([]string{"shardId-A", "shardId-X"}, e.write(t, 40))
	c := &throttledChildren{Streams: f.client("P"), f: f}
	p := e.poller(t, "P", c, nil, func(cfg *poller.Config) { cfg.DiscoverInterval = time.Hour })
	stop := start(t, p)
	eventually(t, "both leases held", 15*time.Second, func() bool { return counter(t, p.m.LeasesHeld) == 2 })
	listed := c.listings.Load()

	c.on.Store(true)
	f.appendTo("shardId-A", e.write(t, 20)...)
	f.close("shardId-A")
	f.addShard("shardId-B", "shardId-A")
	f.addShard("shardId-C", "shardId-A")
	f.split([]string{"shardId-B", "shardId-C"}, e.write(t, 40))
	eventually(t, "lookups refused", 15*time.Second, func() bool { return c.refused.Load() > 1 })
	time.Sleep(2 * time.Second)
	assert.Equal(t, listed, c.listings.Load(), "no listing of the whole stream for a throttled lookup")

	c.on.Store(false)
	eventually(t, "X, B and C held", 30*time.Second, func() bool { return counter(t, p.m.LeasesHeld) == 3 })
	assert.Equal(t, listed, c.listings.Load(), "the children found by CHILD_SHARDS")
	stop()
	e.drain(t, "D", nil)
	e.requireReconciled(t)
}
