package poller_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

// notFoundStreams stands in front of the real DynamoDB Local stream: it
// answers ResourceNotFoundException to the first notFound GetShardIterator
// calls, and while hide is set its DescribeStream leaves every shard out
// (a wrong answer: the shards are there all along).
type notFoundStreams struct {
	poller.Streams
	notFound atomic.Int32
	hide     atomic.Bool
}

func (s *notFoundStreams) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	if s.notFound.Add(-1) >= 0 {
		return nil, &st.ResourceNotFoundException{Message: aws.String("Requested resource not found: Shard does not exist")}
	}
	return s.Streams.GetShardIterator(ctx, in, opts...)
}

func (s *notFoundStreams) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	out, err := s.Streams.DescribeStream(ctx, in, opts...)
	if err != nil || !s.hide.Load() {
		return out, err
	}
	d := *out.StreamDescription
	d.Shards, d.LastEvaluatedShardId = nil, nil
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: &d}, nil
}

// realStream points env e's pollers at the table's real stream: the
// workload's writes, read back by DynamoDB Local, with the faults of s in
// front.
func realStream(t *testing.T, e *env, s *notFoundStreams) func(*poller.Config) {
	t.Helper()
	arn, err := poller.ResolveStream(context.Background(), e.ddb, e.table)
	require.NoError(t, err)
	s.Streams = poller.NewStreamsClient(ddbtest.Config(t))
	return func(c *poller.Config) { c.StreamARN = arn }
}

func reconciled(t *testing.T, e *env) func() bool {
	return func() bool {
		diffs, _, err := processor.Reconcile(context.Background(), e.ddb, e.table, processor.Scope{})
		require.NoError(t, err)
		return len(diffs) == 0
	}
}

// Issue 25, finding 4: a ResourceNotFoundException on opening a shard that
// DescribeStream still lists is no proof that the shard is gone. The
// reader retries it like any other failed open, and a drain commits every
// record instead of finishing with the shard given up.
func TestPoller_ATransientNotFoundIsRetriedNotTakenForAGoneShard(t *testing.T) {
	e := newEnv(t, 61)
	require.NoError(t, e.w.Run(context.Background(), e.ddb, e.table, 150))
	s := &notFoundStreams{}
	s.notFound.Store(2)
	cfg := realStream(t, e, s)
	tp := e.poller(t, "p1", s, nil, func(c *poller.Config) { cfg(c); c.Drain = true })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(t, tp.Run(ctx))

	assert.Zero(t, logged(tp.logs.lines(), "shard is gone from the stream"), "a shard the stream lists was taken for gone")
	assert.Positive(t, logged(tp.logs.lines(), "shard not found, yet the stream lists it"))
	assert.True(t, reconciled(t, e)(), "the drain committed every record")
}

// A shard wrongly confirmed gone (DescribeStream left it out once) is not
// given up for the life of the poller: the next listing that has it clears
// the mark, and its records are committed.
func TestPoller_AShardWronglyMarkedGoneIsReadAgainOnceListed(t *testing.T) {
	e := newEnv(t, 62)
	require.NoError(t, e.w.Run(context.Background(), e.ddb, e.table, 150))
	s := &notFoundStreams{}
	cfg := realStream(t, e, s)
	p := e.poller(t, "p1", s, nil, cfg)
	// The shards are listed first; then the stream answers as if they were
	// gone until the poller has marked them.
	s.notFound.Store(1000)
	s.hide.Store(false)
	stop := start(t, p)
	eventually(t, "the first open", 30*time.Second, func() bool { return s.notFound.Load() < 1000 })
	s.hide.Store(true)
	eventually(t, "a shard marked gone", 30*time.Second, func() bool { return logged(p.logs.lines(), "shard is gone from the stream") > 0 })
	s.notFound.Store(0)
	s.hide.Store(false)
	eventually(t, "every record committed", 60*time.Second, reconciled(t, e))
	stop()
	assert.Positive(t, logged(p.logs.lines(), "a shard marked gone is listed again"))
}
