package processor_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// startTrimmed is a shard whose records were trimmed from its start: an
// iterator asked at or after a sequence number is refused
// (TrimmedDataAccessException); TRIM_HORIZON opens after horizon (the
// first readable record is the one after it), or, with horizon "", at a
// closed shard's end (an empty page, no next iterator).
type startTrimmed struct {
	processor.StreamReader
	horizon string
}

func (s startTrimmed) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	switch in.ShardIteratorType {
	case streamtypes.ShardIteratorTypeAtSequenceNumber, streamtypes.ShardIteratorTypeAfterSequenceNumber:
		return nil, &streamtypes.TrimmedDataAccessException{Message: aws.String("trimmed (test)")}
	case streamtypes.ShardIteratorTypeTrimHorizon:
		if s.horizon == "" {
			return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: aws.String(closedEnd)}, nil
		}
		c := *in
		c.ShardIteratorType, c.SequenceNumber = streamtypes.ShardIteratorTypeAfterSequenceNumber, aws.String(s.horizon)
		return s.StreamReader.GetShardIterator(ctx, &c, opts...)
	}
	return s.StreamReader.GetShardIterator(ctx, in, opts...)
}

func (s startTrimmed) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	if aws.ToString(in.ShardIterator) == closedEnd {
		return &dynamodbstreams.GetRecordsOutput{}, nil
	}
	return s.StreamReader.GetRecords(ctx, in, opts...)
}

// T24-1 (issue 25's hole). A tumbling window on a shard without a
// checkpoint (opened at its First) whose every record was trimmed — the
// first readable record past its Last, or a closed shard's end — is
// abandoned once: the checkpoint is created at the window's Last with
// lostAt and lostAfter = Last, the loss count moves once, and the window
// succeeds; the mapping's retries and a duplicate invocation count
// nothing; a later window of the shard finds the gap counted. The same
// with the abandon's answer lost. Fails without it: the closed shard's
// window returns "ended before record" at every retry, the open shard's
// succeeds with no checkpoint and losses 0.
func TestAbandon_AWindowWithoutACheckpointWhoseRecordsWereAllTrimmedIsAbandonedOnce(t *testing.T) {
	for _, closed := range []bool{true, false} {
		for _, loseAnswer := range []bool{false, true} {
			t.Run("closed="+strconv.FormatBool(closed)+"/lost_answer="+strconv.FormatBool(loseAnswer), func(t *testing.T) {
				ctx := context.Background()
				e, shard, recs := trimShard(t, 33, 150, 110)
				r := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[80].SequenceNumber, Last: recs[100].SequenceNumber}
				streams := startTrimmed{e.streams, ""}
				if !closed {
					streams.horizon = recs[100].SequenceNumber
				}
				lost := false
				e.faults.Decide = func(op string) ledgertest.Fault {
					if loseAnswer && op == "TransactWriteItems" && !lost {
						lost = true
						return ledgertest.LoseAnswer
					}
					return ledgertest.Pass
				}
				defer func() { e.faults.Decide = nil }()
				p := fastProcessor(t, e, e.faulty)
				for try := range 3 {
					res, err := p.CommitShardRange(ctx, streams, r, 100)
					require.NoError(t, err, "try %d", try+1)
					assert.Zero(t, res.Committed)
					cp := cpItemOf(t, e, shard)
					assert.Equal(t, r.Last, cp.Seq, "try %d: the checkpoint created at the window's last record", try+1)
					assert.Equal(t, r.Last, cp.LostAfter, "try %d", try+1)
					assert.NotEmpty(t, cp.LostAt)
					assert.Equal(t, int64(1), lossesOf(t, e), "try %d: one gap, one count", try+1)
				}
				assert.Equal(t, loseAnswer, lost)
				// A duplicate invocation of the same window, by another
				// consumer that read no checkpoint either, counts nothing.
				_, err := e.processor(t, nil, nil).CommitShardRange(ctx, streams, r, 100)
				require.NoError(t, err)
				assert.Equal(t, int64(1), lossesOf(t, e))

				next := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[101].SequenceNumber, Last: recs[len(recs)-1].SequenceNumber}
				res, err := p.CommitShardRange(ctx, streams, next, 100)
				require.NoError(t, err)
				assert.Equal(t, next.Last, cpItemOf(t, e, shard).Seq)
				if !closed {
					assert.Equal(t, len(recs)-101, res.Committed, "the readable records after the gap are committed")
				}
				assert.Equal(t, int64(1), lossesOf(t, e), "the gap after the window: counted already")
			})
		}
	}
}

// T24-1, the races. The window's abandon (creating the checkpoint) finds
// a checkpoint another consumer created just before it lands: at the
// window's Last (a duplicate invocation's abandon), the window succeeds
// and counts nothing; before it (another consumer's commit of records it
// read before the trim), the window is decided again from that
// checkpoint, whose gap it counts once and carries to its Last. Fails
// without the re-decision: the second part's call errs (checkpoint before
// the target) or counts nothing.
func TestAbandon_AWindowWithoutACheckpointMeetsOneCreatedMeanwhile(t *testing.T) {
	for _, at := range []int{100, 90} {
		t.Run("created_at="+strconv.Itoa(at), func(t *testing.T) {
			ctx := context.Background()
			e, shard, recs := trimShard(t, 34, 150, 101)
			r := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[80].SequenceNumber, Last: recs[100].SequenceNumber}
			key := aggregates.CheckpointKey(e.streamARN, shard)
			done := false
			e.faults.Decide = func(op string) ledgertest.Fault {
				if op == "TransactWriteItems" && !done {
					done = true
					if at == 100 {
						a := table.Abandon{Shard: shard, Now: time.Now().Add(-time.Second), To: r.Last}
						_, err := e.ddb.TransactWriteItems(ctx, table.AbandonTx(table.CoordinationTableName(e.table), key, a))
						require.NoError(t, err)
					} else {
						committedTo(t, e, recs, shard, at+1)
					}
				}
				return ledgertest.Pass
			}
			defer func() { e.faults.Decide = nil }()
			p := fastProcessor(t, e, e.faulty)
			res, err := p.CommitShardRange(ctx, startTrimmed{e.streams, ""}, r, 100)
			require.NoError(t, err)
			require.True(t, done)
			assert.Zero(t, res.Committed)
			cp := cpItemOf(t, e, shard)
			assert.Equal(t, r.Last, cp.Seq)
			assert.Equal(t, r.Last, cp.LostAfter)
			assert.Equal(t, int64(1), lossesOf(t, e), "one count: the other consumer's, or the window's of the gap after it")
		})
	}
}
