package poller_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// emptyAroundReopen is the emulation whose GetRecords on the shard id
// answers, before any record: two empty pages (next iterator at the same
// place), then an expired iterator, then, on the iterator the reader
// opens again, one more empty page; then the emulation's own pages. Each
// empty page is what DynamoDB Streams' GetRecords reference allows before
// records ("it might take multiple calls to get to a portion of the shard
// that contains stream records"), on an iterator just opened as on one
// read on.
type emptyAroundReopen struct {
	*streamemu.Stream
	id    string
	calls atomic.Int32
}

func (s *emptyAroundReopen) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	if id, ok := streamemu.IteratorShard(aws.ToString(in.ShardIterator)); ok && id == s.id {
		switch s.calls.Add(1) {
		case 1, 2, 4:
			return &dynamodbstreams.GetRecordsOutput{NextShardIterator: in.ShardIterator}, nil
		case 3:
			return nil, &streamtypes.ExpiredIteratorException{Message: aws.String("emulated: iterator expired")}
		}
	}
	return s.Stream.GetRecords(ctx, in, opts...)
}

// Review (adversarial, session 25) of the drain's empty pages in a row,
// S25-D1: the count of empty pages survived a reopen of the iterator (an
// expired iterator, failures, a trim, a failed commit), so a drain that
// read two empty pages, reopened, and read one empty page on the new
// iterator took the shard's current end as reached after one page of
// that iterator: D2 again, with every record of the shard readable at its
// start uncommitted. The pages in a row are now counted on one iterator
// chain (docs/exactly-once.md, assumption E: "each read with the next
// iterator of the one before").
func TestPoller_ReviewS25DrainEmptyPagesCountedAcrossAReopen(t *testing.T) {
	ctx := context.Background()
	e := newEmuEnv(t, 251, streamemu.Config{Shards: 2})
	e.write(t, 100)
	require.NoError(t, e.s.Sync(ctx))
	atStart := e.s.History()
	var open string
	for _, sh := range e.s.Shards() {
		if !sh.Closed {
			open = sh.ID
			break
		}
	}
	inOpen := 0
	for _, h := range atStart {
		if h.Shard == open {
			inOpen++
		}
	}
	require.NotZero(t, inOpen, "records in the open shard before the drain")
	hook := &emptyAroundReopen{Stream: e.s, id: open}
	tp := e.poller(t, "drain", hook, func(c *poller.Config) { c.Drain, c.LeaseDuration = true, 30*time.Second })
	e.runDrain(t, tp, 90*time.Second)
	require.GreaterOrEqual(t, hook.calls.Load(), int32(4), "the pages and the expiry were answered")
	_, cps, err := table.ReadStreamState(ctx, e.ddb, table.CoordinationTableName(e.table), e.stream.arn, nil)
	require.NoError(t, err)
	missed := 0
	for _, h := range atStart {
		if processor.CompareSequence(cps[h.Shard].Seq, h.Seq) < 0 {
			missed++
		}
	}
	assert.Zero(t, missed, "records readable at the drain's start and not committed (of %d; %d in the open shard %s)", len(atStart), inOpen, open)
	e.finish(t, nil)
}
