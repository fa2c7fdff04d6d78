package processor

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// ShardRange names records of one shard a consumer was handed (a
// tumbling window's): the lowest and the highest sequence number among
// them.
type ShardRange struct {
	StreamARN, ShardID string
	First, Last        string
}

// maxEmptyPages bounds the empty GetRecords pages CommitShardRange reads
// in a row before the record it knows to be there: DynamoDB Streams may
// answer empty pages inside a shard, never forever.
const maxEmptyPages = 1000

// CommitShardRange commits the records of shard r.ShardID up to r.Last,
// reading them from the stream itself, as batches of at most batchRecords
// records under the shard's checkpoint (a ShardGuard with CommitBatches):
// the tumbling-window Lambda's commit (docs/exactly-once.md, "Tumbling
// windows"). The records a consumer was handed only say where the range
// ends: everything committed is read from the stream, in order and
// complete, so a window delivered in part, twice or out of order commits
// the same batches, and a half-committed batch is always finished (read
// on to its last record, past r.Last if need be).
//
// The shard is read after its checkpoint, or, when it has none, from
// r.First (the first record the mapping delivered: its starting
// position). Records trimmed from the stream before anyone read them are
// lost as for the poller (the reports are short of them until reconcile
// --repair). Reading stops at r.Last; a closed shard that ends before it,
// or an error, returns what was committed so far with the error, and a
// call with the same range resumes from the checkpoint.
func (p *Processor) CommitShardRange(ctx context.Context, streams StreamReader, r ShardRange, batchRecords int) (Result, error) {
	var total Result
	if r.StreamARN == "" || r.ShardID == "" || r.Last == "" {
		return total, fmt.Errorf("commit shard range: stream %q, shard %q, last record %q: all three are needed", r.StreamARN, r.ShardID, r.Last)
	}
	if batchRecords < 1 {
		return total, fmt.Errorf("commit shard range: batch of %d records", batchRecords)
	}
	g := p.ShardGuard(r.StreamARN, r.ShardID)
	g.CommitBatches()
	cp, err := g.Checkpoint(ctx)
	if err != nil {
		return total, err
	}
	target := r.Last
	if g.pending != nil && CompareSequence(g.pending.to, target) > 0 {
		target = g.pending.to // a half-committed batch is finished first, whatever the range
	}
	if cp != "" && CompareSequence(cp, target) >= 0 {
		return total, nil
	}
	iter, g, err := p.openRange(ctx, streams, g, r, cp)
	if err != nil {
		return total, err
	}
	var held []Record
	done, empty := false, 0
	for !done && iter != nil {
		out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(1000)})
		if err != nil {
			return total, fmt.Errorf("read shard %s: %w", r.ShardID, err)
		}
		iter = out.NextShardIterator
		if len(out.Records) == 0 {
			if empty++; empty > maxEmptyPages && iter != nil {
				return total, fmt.Errorf("shard %s: %d empty pages in a row before record %s", r.ShardID, empty, target)
			}
		} else {
			empty = 0
		}
		for i := range out.Records {
			rec := FromStream(out.Records[i], r.StreamARN)
			c := CompareSequence(rec.SequenceNumber, target)
			if c <= 0 {
				held = append(held, rec)
			}
			if c >= 0 {
				done = true
				break
			}
		}
		if len(held) == 0 || !done && iter != nil && len(held) < batchRecords {
			continue
		}
		res, err := p.Process(ctx, g, held)
		total.add(res)
		var be *BatchError
		if errors.Is(err, ErrIncompleteBatch) && errors.As(err, &be) {
			// A half-committed batch reaches past the records held (cut at
			// batchRecords, or left by another commit of this shard since
			// the checkpoint was loaded): keep them and read on to its end.
			held = held[be.Index:]
			if g.pending != nil && CompareSequence(g.pending.to, target) > 0 {
				target, done = g.pending.to, false
			}
			if !done {
				continue
			}
		}
		if err != nil {
			return total, fmt.Errorf("commit shard %s through %s: %w", r.ShardID, target, err)
		}
		held = nil
	}
	if !done {
		return total, fmt.Errorf("shard %s ended before record %s", r.ShardID, target)
	}
	return total, nil
}

// openRange opens an iterator on r's shard: after the checkpoint cp, or at
// r.First without one, declared as g's origin. When the records after
// the checkpoint were trimmed it returns a fresh guard that knows it and
// an iterator at the trim horizon, as the poller's reader does.
func (p *Processor) openRange(ctx context.Context, streams StreamReader, g *ShardGuard, r ShardRange, cp string) (*string, *ShardGuard, error) {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(r.StreamARN), ShardId: aws.String(r.ShardID)}
	switch {
	case cp != "":
		in.ShardIteratorType, in.SequenceNumber = streamtypes.ShardIteratorTypeAfterSequenceNumber, aws.String(cp)
		g.SetOrigin(cp)
	case r.First != "":
		in.ShardIteratorType, in.SequenceNumber = streamtypes.ShardIteratorTypeAtSequenceNumber, aws.String(r.First)
		g.SetOrigin("") // the mapping's start: binding unless someone else created the checkpoint first
	default:
		return nil, g, fmt.Errorf("shard %s has no checkpoint and the range no first record to read from", r.ShardID)
	}
	out, err := streams.GetShardIterator(ctx, in)
	var trimmed *streamtypes.TrimmedDataAccessException
	if errors.As(err, &trimmed) {
		p.cfg.Logger.Error("stream records were trimmed before they were read: they are lost to every consumer; reading from TRIM_HORIZON; run `ledgerctl reconcile --repair` to restore the reports",
			"shard", r.ShardID, "checkpoint", cp, "error", err.Error())
		g = p.ShardGuard(r.StreamARN, r.ShardID)
		g.CommitBatches()
		g.Trimmed()
		in.ShardIteratorType, in.SequenceNumber = streamtypes.ShardIteratorTypeTrimHorizon, nil
		out, err = streams.GetShardIterator(ctx, in)
	}
	if err != nil {
		return nil, g, fmt.Errorf("open shard %s %s: %w", r.ShardID, in.ShardIteratorType, err)
	}
	return out.ShardIterator, g, nil
}

// add sums another Process result into r (Committed counts records done
// across calls).
func (r *Result) add(o Result) {
	r.Committed += o.Committed
	r.Applied += o.Applied
	r.Duplicates += o.Duplicates
	r.Quarantined += o.Quarantined
	r.Ignored += o.Ignored
	r.Runs += o.Runs
}
