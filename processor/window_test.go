package processor_test

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

func checkpointOf(t *testing.T, e *env, shard string) (string, bool) {
	t.Helper()
	g := e.processor(t, nil, nil).ShardGuard(e.streamARN, shard)
	cp, err := g.Checkpoint(context.Background())
	require.NoError(t, err)
	return cp, g.Pending()
}

// The tumbling-window commit reads its range from the stream and commits
// it in batches (far fewer transactions than runs), stops at the range's
// end, and does nothing for a range already committed.
func TestCommitShardRange_CommitsTheRangeFromTheStreamAsBatches(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(31).Run(ctx, e.ddb, e.table, 300))
	shard, recs := e.records(t)
	p := e.processor(t, nil, e.faulty)
	r := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[0].SequenceNumber, Last: recs[150].SequenceNumber}

	res, err := p.CommitShardRange(ctx, e.streams, r, 100)
	require.NoError(t, err)
	assert.Equal(t, 151, res.Committed)
	cp, pending := checkpointOf(t, e, shard)
	assert.Equal(t, recs[150].SequenceNumber, cp, "stopped at the range's end")
	assert.False(t, pending)

	r.Last = recs[len(recs)-1].SequenceNumber
	before := e.faults.Calls("TransactWriteItems")
	res, err = p.CommitShardRange(ctx, e.streams, r, 100)
	require.NoError(t, err)
	assert.Equal(t, len(recs)-151, res.Committed, "read after the checkpoint")
	batched := e.faults.Calls("TransactWriteItems") - before
	assert.Positive(t, batched)
	e.requireReconciled(t)

	res, err = p.CommitShardRange(ctx, e.streams, r, 100)
	require.NoError(t, err)
	assert.Zero(t, res.Committed, "nothing after the checkpoint")
	assert.Equal(t, before+batched, e.faults.Calls("TransactWriteItems"))
}

// Without a checkpoint the range is read from its first record: what came
// before it (before the mapping's starting position) is not the window's.
func TestCommitShardRange_WithoutCheckpointStartsAtTheFirstRecord(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(32).Run(ctx, e.ddb, e.table, 120))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	res, err := p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[40].SequenceNumber, Last: recs[99].SequenceNumber}, 1000)
	require.NoError(t, err)
	assert.Equal(t, 60, res.Committed)
	cp, _ := checkpointOf(t, e, shard)
	assert.Equal(t, recs[99].SequenceNumber, cp)

	_, err = p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard}, 1000)
	assert.ErrorContains(t, err, "all three are needed")
}

// A batch left half-committed (a window's commit killed between its group
// transactions) is finished by the next commit of the shard even when that
// one's range ends before the batch does (a shorter or older window
// delivered again): it reads on to the batch's last record, and never
// commits a group twice.
func TestCommitShardRange_FinishesAHalfCommittedBatchPastItsRange(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(33).Run(ctx, e.ddb, e.table, 200))
	shard, recs := e.records(t)
	start := halfCommitted(t, e, recs, shard, 150)

	p := e.processor(t, nil, nil)
	_, err := p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[0].SequenceNumber, Last: recs[start+5].SequenceNumber}, 1000)
	require.NoError(t, err)
	cp, pending := checkpointOf(t, e, shard)
	assert.Equal(t, recs[149].SequenceNumber, cp, "the pending batch finished, past the range")
	assert.False(t, pending)

	_, err = p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[0].SequenceNumber, Last: recs[len(recs)-1].SequenceNumber}, 1000)
	require.NoError(t, err)
	e.requireReconciled(t)
}

// Randomized: windows of a shard committed through a DynamoDB that drops
// requests and loses answers, ranges delivered again, shorter, longer and
// out of turn (the mapping's retries and duplicate deliveries); after a
// last clean commit the reports equal the oracle's fold.
func TestCommitShardRange_ExactUnderLostAnswersAndRedelivery(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(34).Run(ctx, e.ddb, e.table, 400))
	shard, recs := e.records(t)
	rng := rand.New(rand.NewPCG(34, 0))
	p, err := processor.New(e.faulty, processor.Config{Table: e.table, MaxItemsPerRun: 6, MaxEntriesPerItem: 3,
		MaxAttempts: 2, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, nil)
	require.NoError(t, err)
	e.faults.Decide = func(op string) ledgertest.Fault {
		if op != "TransactWriteItems" && op != "UpdateItem" {
			return ledgertest.Pass
		}
		switch rng.IntN(10) {
		case 0:
			return ledgertest.Drop
		case 1:
			return ledgertest.LoseAnswer
		}
		return ledgertest.Pass
	}
	failed := 0
	for pos := 0; pos < len(recs); {
		last := min(pos+rng.IntN(120), len(recs)-1)
		if rng.IntN(5) == 0 && pos > 0 {
			last = rng.IntN(pos) // an older window delivered again
		}
		r := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[0].SequenceNumber, Last: recs[last].SequenceNumber}
		if _, err := p.CommitShardRange(ctx, e.streams, r, 10+rng.IntN(100)); err != nil {
			failed++
			continue // the mapping retries; maybe with another window
		}
		pos = max(pos, last+1)
	}
	e.faults.Decide = nil
	_, err = p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[0].SequenceNumber, Last: recs[len(recs)-1].SequenceNumber}, 100)
	require.NoError(t, err)
	assert.Positive(t, failed, "faults were injected")
	e.requireReconciled(t)
}

// Review of issue 16: a shard without a checkpoint (every new child shard
// until its first commit) may be started only by a window's final commit,
// whose range holds the window's first record. A window processed again
// may deliver its records out of order: an early commit of recs[100..249]
// starting the shard there would lose recs[0..99] for good when they came
// later. Such a (Partial) commit waits for the final one.
func TestCommitShardRange_OnlyAFinalRangeStartsAShard(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(41).Run(ctx, e.ddb, e.table, 300))
	shard, recs := e.records(t)
	require.Greater(t, len(recs), 260)
	p := e.processor(t, nil, nil)
	res, err := p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[100].SequenceNumber, Last: recs[249].SequenceNumber, Partial: true}, 100)
	require.NoError(t, err)
	assert.Zero(t, res.Committed)
	_, err = p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[0].SequenceNumber, Last: recs[len(recs)-1].SequenceNumber}, 100)
	require.NoError(t, err)
	e.requireReconciled(t)

	// With a checkpoint, an early commit reads after it: complete.
	require.NoError(t, ledgertest.NewWorkload(44).Run(ctx, e.ddb, e.table, 100))
	_, all := e.records(t)
	_, err = p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: all[len(all)-10].SequenceNumber, Last: all[len(all)-1].SequenceNumber, Partial: true}, 100)
	require.NoError(t, err)
	e.requireReconciled(t)
}

// Review of issue 16: records without effect at the end of a range (the
// consumers' own report and checkpoint writes come back through the
// stream after every commit) move the checkpoint over them, as the
// poller's reader does: the next window does not read them again.
func TestCommitShardRange_MovesTheCheckpointOverRecordsWithoutEffect(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(42).Run(ctx, e.ddb, e.table, 100))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	_, err := p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: recs[0].SequenceNumber, Last: recs[len(recs)-1].SequenceNumber}, 100)
	require.NoError(t, err)
	_, all := e.records(t) // now with the commit's own writes after it
	require.Greater(t, len(all), len(recs), "the commit's writes came back through the stream")

	res, err := p.CommitShardRange(ctx, e.streams, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
		First: all[len(recs)].SequenceNumber, Last: all[len(all)-1].SequenceNumber}, 100)
	require.NoError(t, err)
	assert.Equal(t, len(all)-len(recs), res.Committed, "records read and finished")
	cp, pending := checkpointOf(t, e, shard)
	assert.Equal(t, all[len(all)-1].SequenceNumber, cp)
	assert.False(t, pending)
	e.requireReconciled(t)
}

// goneStreams answers as DynamoDB Streams does for a shard that is no
// longer in the stream (closed, and past the 24-hour retention): not found
// on GetShardIterator, and DescribeStream lists the stream's other shards
// (or, streamGone, says the stream does not exist either).
type goneStreams struct {
	processor.StreamReader
	shard      string
	streamGone bool
}

func (goneStreams) GetShardIterator(context.Context, *dynamodbstreams.GetShardIteratorInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	return nil, &streamtypes.ResourceNotFoundException{Message: aws.String("Requested resource not found: Shard does not exist")}
}

func (s goneStreams) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	if s.streamGone {
		return nil, &streamtypes.ResourceNotFoundException{Message: aws.String("Requested resource not found: Stream does not exist")}
	}
	out, err := s.StreamReader.DescribeStream(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	d := *out.StreamDescription
	d.Shards = nil
	for _, sh := range out.StreamDescription.Shards {
		if aws.ToString(sh.ShardId) != s.shard {
			d.Shards = append(d.Shards, sh)
		}
	}
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: &d}, nil
}

// Review of issue 16: a window's final invocation retried for more than a
// day (the mapping retries forever, with the same state) finds its closed
// shard gone from the stream: its records are lost to every consumer,
// which is logged, and the window succeeds, so the shard's children go on.
// Gone means DescribeStream agrees: the shard is not listed, or the stream
// itself no longer exists.
func TestCommitShardRange_AShardGoneFromTheStreamIsLostNotRetriedForever(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(43).Run(ctx, e.ddb, e.table, 20))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	for _, streamGone := range []bool{false, true} {
		_, err := p.CommitShardRange(ctx, goneStreams{StreamReader: e.streams, shard: shard, streamGone: streamGone}, processor.ShardRange{StreamARN: e.streamARN, ShardID: shard,
			First: recs[0].SequenceNumber, Last: recs[len(recs)-1].SequenceNumber}, 100)
		assert.NoError(t, err, "stream gone: %v", streamGone)
	}
}

// notFoundStreams answers ResourceNotFoundException to the first n
// GetShardIterator calls, in front of the real stream (whose DescribeStream
// still lists the shard): a transient answer, as a service hiccup gives.
type notFoundStreams struct {
	processor.StreamReader
	n *atomic.Int32
}

func (s notFoundStreams) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	if s.n.Add(-1) >= 0 {
		return nil, &streamtypes.ResourceNotFoundException{Message: aws.String("Requested resource not found: Shard does not exist")}
	}
	return s.StreamReader.GetShardIterator(ctx, in, opts...)
}

// Issue 25, finding 4: one ResourceNotFoundException on opening a shard
// the stream still lists is no proof the shard is gone. The window's
// commit fails (the mapping retries it) instead of succeeding without its
// records, and the retry commits them all.
func TestCommitShardRange_ATransientNotFoundFailsTheCommitAndTheRetryCommits(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	require.NoError(t, ledgertest.NewWorkload(44).Run(ctx, e.ddb, e.table, 60))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	n := &atomic.Int32{}
	n.Store(1)
	streams := notFoundStreams{StreamReader: e.streams, n: n}
	r := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[0].SequenceNumber, Last: recs[len(recs)-1].SequenceNumber}

	res, err := p.CommitShardRange(ctx, streams, r, 100)
	require.Error(t, err, "a shard the stream still lists is not gone: the window must fail, not lose its records")
	assert.ErrorContains(t, err, "the stream still lists it")
	assert.Zero(t, res.Committed)
	cp, _ := checkpointOf(t, e, shard)
	assert.Empty(t, cp)

	res, err = p.CommitShardRange(ctx, streams, r, 100)
	require.NoError(t, err)
	assert.Equal(t, len(recs), res.Committed)
	e.requireReconciled(t)
}
