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
	"github.com/ledger-dev/ledger/processor/poller"
)

// goneAfterListing stands in front of the real DynamoDB Local stream: its
// first DescribeStream answer lists the shards; every later one lists
// none, and every GetShardIterator answers ResourceNotFoundException, as
// AWS answers for a shard trimmed away with its records.
type goneAfterListing struct {
	poller.Streams
	listed atomic.Bool
}

func (s *goneAfterListing) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	return nil, &st.ResourceNotFoundException{Message: aws.String("Requested resource not found: Shard does not exist")}
}

func (s *goneAfterListing) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	out, err := s.Streams.DescribeStream(ctx, in, opts...)
	if err != nil || s.listed.CompareAndSwap(false, true) {
		return out, err
	}
	d := *out.StreamDescription
	d.Shards, d.LastEvaluatedShardId = nil, nil
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: &d}, nil
}

// A shard gone from the stream before the drain finished it (its records
// after the checkpoint lost with it) makes a drain whose work is otherwise
// done return a DrainLossError naming the shard (poller --drain exits 4),
// not nil (session 23, D3). Fails with the drain returning nil, as before.
func TestPoller_ADrainThatFoundAShardGoneUnfinishedSaysSo(t *testing.T) {
	e := newEnv(t, 63)
	require.NoError(t, e.w.Run(context.Background(), e.ddb, e.table, 20))
	arn, err := poller.ResolveStream(context.Background(), e.ddb, e.table)
	require.NoError(t, err)
	s := &goneAfterListing{Streams: poller.NewStreamsClient(ddbtest.Config(t))}
	tp := e.poller(t, "d", s, nil, func(c *poller.Config) { c.StreamARN, c.Drain = arn, true })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	derr := tp.Run(ctx)
	require.NoError(t, ctx.Err(), "the drain did not exit")

	require.ErrorIs(t, derr, poller.ErrDrainLost)
	var lost *poller.DrainLossError
	require.ErrorAs(t, derr, &lost)
	assert.Empty(t, lost.Trims)
	require.Len(t, lost.Gone, 1, "%v", derr)
	assert.Contains(t, derr.Error(), lost.Gone[0].Shard)
	assert.Contains(t, derr.Error(), "gone from the stream before the drain finished")
	assert.Positive(t, logged(tp.logs.lines(), "shard is gone from the stream"))
}
