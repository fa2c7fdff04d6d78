package poller

import (
	"context"
	"errors"
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

// pagedStreams lists shards shard-0…shard-(n-1), two a page, and refuses
// every page from the throttleFrom-th on with LimitExceededException while
// throttled is set, as DescribeStream's rate does.
type pagedStreams struct {
	Streams
	n, throttleFrom int
	mu              sync.Mutex
	throttled       bool
	asked           map[string]int // pages answered, by ExclusiveStartShardId
}

func (s *pagedStreams) DescribeStream(_ context.Context, in *dynamodbstreams.DescribeStreamInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from := 0
	if id := aws.ToString(in.ExclusiveStartShardId); id != "" {
		_, _ = fmt.Sscanf(id, "shard-%d", &from)
		from++
	}
	if s.throttled && from/2 >= s.throttleFrom {
		return nil, &st.LimitExceededException{Message: aws.String("Rate exceeded for DescribeStream")}
	}
	s.asked[aws.ToString(in.ExclusiveStartShardId)]++
	d := &st.StreamDescription{StreamStatus: st.StreamStatusEnabled}
	end := min(from+2, s.n)
	for i := from; i < end; i++ {
		d.Shards = append(d.Shards, st.Shard{ShardId: aws.String(fmt.Sprintf("shard-%d", i)),
			SequenceNumberRange: &st.SequenceNumberRange{StartingSequenceNumber: aws.String(fmt.Sprintf("%021d", 100*(i+1)))}})
	}
	if end < s.n {
		d.LastEvaluatedShardId = aws.String(fmt.Sprintf("shard-%d", end-1))
	}
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: d}, nil
}

// Issue 23: a listing throttled past its time pauses (the coordinator has
// leases to renew) and goes on from the page it reached: the pages already
// read are not asked for again, and the listing ends with every shard.
func TestListing_APausedListingGoesOnFromItsPage(t *testing.T) {
	s := &pagedStreams{n: 7, throttleFrom: 2, throttled: true, asked: map[string]int{}}
	var l listing
	start := time.Now()
	_, _, err := l.run(context.Background(), s, nil, "arn", time.Now().Add(100*time.Millisecond))
	require.ErrorIs(t, err, errListingPaused)
	assert.Less(t, time.Since(start), time.Second, "paused in time")
	assert.Len(t, l.shards, 4, "the two pages read are kept")

	s.mu.Lock()
	s.throttled = false
	s.mu.Unlock()
	shards, _, err := l.run(context.Background(), s, nil, "arn", time.Now().Add(100*time.Millisecond))
	require.NoError(t, err)
	require.Len(t, shards, 7)
	for i, sh := range shards {
		assert.Equal(t, fmt.Sprintf("shard-%d", i), sh.id)
	}
	for page, n := range s.asked {
		assert.Equal(t, 1, n, "page after %q asked for once", page)
	}
	assert.Zero(t, l.seen, "the listing is over: the next one starts afresh")

	// Without a time bound (nothing to renew) a throttled listing waits
	// the pages out, as before, until maxListThrottles.
	s.mu.Lock()
	s.throttled = true
	s.mu.Unlock()
	go func() {
		time.Sleep(300 * time.Millisecond)
		s.mu.Lock()
		s.throttled = false
		s.mu.Unlock()
	}()
	shards, _, err = l.run(context.Background(), s, nil, "arn", time.Time{})
	require.NoError(t, err)
	assert.Len(t, shards, 7)
	assert.False(t, errors.Is(err, errListingPaused))
}
