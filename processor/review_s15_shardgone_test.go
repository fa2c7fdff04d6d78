package processor_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor"
)

// trimDuringListing lists shard-0…shard-(n-1), one a page; shard-0 is
// trimmed away right after the first page is answered, and a page asked
// for after a shard the stream no longer has is refused with
// ResourceNotFoundException (AWS does not say what it answers then).
type trimDuringListing struct {
	processor.StreamReader
	n       int
	trimmed bool
	pages   int
}

func (s *trimDuringListing) DescribeStream(_ context.Context, in *dynamodbstreams.DescribeStreamInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	s.pages++
	from := 0
	if id := aws.ToString(in.ExclusiveStartShardId); id != "" {
		_, _ = fmt.Sscanf(id, "shard-%d", &from)
		if from == 0 && s.trimmed {
			return nil, &st.ResourceNotFoundException{Message: aws.String("Requested resource not found: Shard does not exist")}
		}
		from++
	}
	if from == 0 && s.trimmed {
		from = 1
	}
	d := &st.StreamDescription{Shards: []st.Shard{{ShardId: aws.String(fmt.Sprintf("shard-%d", from))}}}
	if from+1 < s.n {
		d.LastEvaluatedShardId = d.Shards[0].ShardId
	}
	s.trimmed = true
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: d}, nil
}

// Review, session 15: ShardGone lists the whole stream page by page; a
// page after a shard trimmed away while the pages were read answered
// ResourceNotFoundException, which ShardGone took for the stream's end:
// "gone" for a shard the stream still lists, so a reader gave it up and
// its children became readable before it was read to its end. Only a
// first page's ResourceNotFoundException means the stream is gone.
func TestShardGone_APageAfterATrimmedShardIsNotTheStreamsEnd(t *testing.T) {
	s := &trimDuringListing{n: 3}
	gone, err := processor.ShardGone(context.Background(), s, "arn", "shard-2")
	require.NoError(t, err)
	assert.False(t, gone, "shard-2 is listed")
	assert.Equal(t, 4, s.pages, "a page refused, then the listing again from its first page")

	s = &trimDuringListing{n: 3}
	gone, err = processor.ShardGone(context.Background(), s, "arn", "shard-9")
	require.NoError(t, err)
	assert.True(t, gone, "shard-9 is not listed")
}
