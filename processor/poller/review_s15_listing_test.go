package poller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// trimmingStreams lists shard-0…shard-(n-1), two a page, without the
// shards deleted (trimmed away); a page asked for after a deleted shard is
// refused with ResourceNotFoundException, as a stream may answer (AWS does
// not document it), and every page past throttleFrom is throttled while
// throttled is set.
type trimmingStreams struct {
	Streams
	n, throttleFrom int
	mu              sync.Mutex
	throttled       bool
	deleted         map[int]bool
	refused         int
}

func (s *trimmingStreams) DescribeStream(_ context.Context, in *dynamodbstreams.DescribeStreamInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from := 0
	if id := aws.ToString(in.ExclusiveStartShardId); id != "" {
		_, _ = fmt.Sscanf(id, "shard-%d", &from)
		if s.deleted[from] {
			s.refused++
			return nil, &st.ResourceNotFoundException{Message: aws.String("Requested resource not found: Shard does not exist")}
		}
		from++
	}
	if s.throttled && from >= 2*s.throttleFrom {
		return nil, &st.LimitExceededException{Message: aws.String("Rate exceeded for DescribeStream")}
	}
	d := &st.StreamDescription{StreamStatus: st.StreamStatusEnabled}
	i := from
	for ; i < s.n && len(d.Shards) < 2; i++ {
		if !s.deleted[i] {
			d.Shards = append(d.Shards, st.Shard{ShardId: aws.String(fmt.Sprintf("shard-%d", i)),
				SequenceNumberRange: &st.SequenceNumberRange{StartingSequenceNumber: aws.String(fmt.Sprintf("%021d", 100*(i+1)))}})
		}
	}
	if i < s.n {
		d.LastEvaluatedShardId = d.Shards[len(d.Shards)-1].ShardId
	}
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: d}, nil
}

// A listing paused by throttling resumes after the last shard of its last
// page. When that shard is trimmed away during the pause (a closed shard
// is deleted 24 hours after it closed: at 1,000 partitions, one every few
// seconds) and the stream refuses the page with ResourceNotFoundException,
// the listing used to return it, and the coordinator took it for the
// stream's end: Run returned "stream … no longer exists" and the poller
// exited. Now the listing starts over; only a first page's
// ResourceNotFoundException means the stream is gone.
func TestListing_AListingResumedAfterATrimmedShardStartsOver(t *testing.T) {
	s := &trimmingStreams{n: 7, throttleFrom: 1, throttled: true, deleted: map[int]bool{}}
	var l listing
	_, _, err := l.run(context.Background(), s, nil, "arn", time.Now().Add(100*time.Millisecond))
	require.ErrorIs(t, err, errListingPaused)
	require.Len(t, l.shards, 2, "paused after its first page, at shard-1")

	s.mu.Lock()
	s.throttled, s.deleted[0], s.deleted[1] = false, true, true // trimmed away during the pause
	s.mu.Unlock()
	shards, _, err := l.run(context.Background(), s, nil, "arn", time.Now().Add(100*time.Millisecond))
	require.NoError(t, err, "a page after a trimmed shard is not the stream's end")
	var ids []string
	for _, sh := range shards {
		ids = append(ids, sh.id)
	}
	assert.Equal(t, []string{"shard-2", "shard-3", "shard-4", "shard-5", "shard-6"}, ids)
	assert.Equal(t, 1, s.refused)

	// A stream that is gone answers the first page so: returned as it is.
	gone := &trimmingStreams{n: 0, deleted: map[int]bool{}}
	_, _, err = l.run(context.Background(), notFoundStreams{gone}, nil, "arn", time.Time{})
	var nf *st.ResourceNotFoundException
	require.ErrorAs(t, err, &nf)
}

// notFoundStreams answers every DescribeStream with ResourceNotFoundException.
type notFoundStreams struct{ Streams }

func (notFoundStreams) DescribeStream(context.Context, *dynamodbstreams.DescribeStreamInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	return nil, &st.ResourceNotFoundException{Message: aws.String("Requested resource not found: Stream does not exist")}
}
