package processor

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ledger-dev/ledger/table"
)

// ShardRange names records of one shard a consumer was handed (a
// tumbling window's): the lowest and the highest sequence number among
// them. Partial marks a range that may not hold the first record handed
// over yet (an early commit of a window: records a window processes again
// may come out of order), which may then not start a shard without a
// checkpoint.
type ShardRange struct {
	StreamARN, ShardID string
	First, Last        string
	Partial            bool
}

// maxEmptyPages bounds the empty GetRecords pages CommitShardRange reads
// in a row before the record it knows to be there: DynamoDB Streams may
// answer empty pages inside a shard, never forever.
const maxEmptyPages = 1000

// errShardGone is wrapped by openRange when the stream no longer has the
// shard (it closed and aged out of the 24-hour retention), as ShardGone
// confirmed.
var errShardGone = errors.New("the shard is no longer in the stream")

// ShardGone reports whether the stream streamARN no longer has shard:
// DescribeStream answers that the stream does not exist, or lists every
// shard of the stream (all pages) without it. A ResourceNotFoundException
// from GetShardIterator or GetRecords alone is no proof (a transient
// answer would lose the shard's records): a reader confirms it here before
// it gives a shard up. DescribeStream's other errors are returned, and
// then nothing is known. Only a first page's ResourceNotFoundException
// says the stream is gone: a later page's may name the shard it starts
// after, trimmed away while the pages were read (AWS does not document the
// answer), and the listing starts over (review, session 15: it answered
// "gone" for a shard the stream still had, whose children then became
// readable before it was read to its end).
func ShardGone(ctx context.Context, streams StreamReader, streamARN, shard string) (bool, error) {
	var start *string
	restarted := 0
	for {
		out, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(streamARN), ExclusiveStartShardId: start})
		var notFound *streamtypes.ResourceNotFoundException
		if errors.As(err, &notFound) && start != nil {
			if restarted++; restarted > 3 {
				return false, fmt.Errorf("describe stream %s: the page after a listed shard is refused: %v", streamARN, err)
			}
			start = nil
			continue
		}
		if errors.As(err, &notFound) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("describe stream %s: %w", streamARN, err)
		}
		d := out.StreamDescription
		if d == nil {
			return false, fmt.Errorf("describe stream %s: no stream description", streamARN)
		}
		for _, s := range d.Shards {
			if aws.ToString(s.ShardId) == shard {
				return false, nil
			}
		}
		start = d.LastEvaluatedShardId
		if aws.ToString(start) == "" {
			return true, nil
		}
	}
}

// CommitShardRange commits the records of shard r.ShardID up to r.Last,
// reading them from the stream itself, as batches of at most batchRecords
// records under the shard's checkpoint (a ShardGuard with CommitBatches):
// the tumbling-window Lambda's commit (docs/exactly-once.md, "Tumbling
// windows"). The records a consumer was handed only say where the range
// ends: everything committed is read from the stream, in order and
// complete, so a window delivered in part, twice or out of order commits
// the same batches, and a half-committed batch is always finished (read
// on to its last record, past r.Last if need be). Records without effect
// at the end of the range move the checkpoint over them, as the poller's
// reader does, so that the next commit does not read them again.
//
// The shard is read after its checkpoint, or, when it has none, from
// r.First (the first record of the window: the mapping's position); a
// Partial range without a checkpoint commits nothing. A shard without a
// checkpoint whose r.First was trimmed gets one there, created by the
// abandon transaction that counts the loss once, and the window goes on
// from it (docs/exactly-once.md, "Trims, session 24", T24-1, and its
// review, S24-T1). Records trimmed from
// the stream before anyone read them, and a shard gone from the stream
// (a ResourceNotFoundException that ShardGone confirms; one it does not is
// an error, retried by the mapping), are lost as for the poller (logged at
// error level; the reports are short of them until reconcile --repair). A closed shard that ends before
// r.Last, or an error, returns what was committed so far with the error,
// and a call with the same range resumes from the checkpoint. A checkpoint
// that is a migration's copy not released yet commits nothing and returns
// an error wrapping table.ErrCheckpointFenced: the handler keeps an early
// commit's window, and the mapping retries a final one, until the
// migration releases it.
func (p *Processor) CommitShardRange(ctx context.Context, streams StreamReader, r ShardRange, batchRecords int) (Result, error) {
	return p.commitShardRange(ctx, streams, r, batchRecords, true)
}

// commitShardRange is CommitShardRange; again allows one more call when a
// shard without a checkpoint whose records were all trimmed is found with
// one created by another consumer before the range's end.
func (p *Processor) commitShardRange(ctx context.Context, streams StreamReader, r ShardRange, batchRecords int, again bool) (Result, error) {
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
	if errors.Is(err, table.ErrCheckpointFenced) {
		p.cfg.Logger.Warn("the shard's checkpoint is a copy `ledgerctl coordination migrate` has not released yet: nothing is committed on the shard until a run of the migration ends without error; the window is tried again",
			"shard", r.ShardID, "through", r.Last)
	}
	if err != nil {
		return total, err
	}
	if cp == "" && r.Partial {
		return total, nil // the window's final commit starts the shard, from its first record
	}
	target, reach := r.Last, "" // reach: a pending batch's last record, which a batch must hold
	if g.pending != nil {
		reach = g.pending.to
		target = maxSeq(target, reach)
	}
	if cp != "" && CompareSequence(cp, target) >= 0 {
		return total, nil
	}
	opened := g
	iter, g, err := p.openRange(ctx, streams, g, r, cp)
	trimmed := g != opened // the records after cp were trimmed: g knows it
	if errors.Is(err, errShardGone) {
		p.cfg.Logger.Error("the shard is gone from the stream before its records were committed: they are lost to every consumer; run `ledgerctl reconcile --repair` to restore the reports",
			"shard", r.ShardID, "checkpoint", cp, "through", target, "error", err.Error())
		return total, nil
	}
	if err != nil {
		return total, err
	}
	if trimmed && cp == "" {
		// A shard without a checkpoint, opened at the window's first
		// record, which was trimmed: a trim takes a prefix of the shard,
		// so no record up to r.First can be read again, and the records
		// after it up to the trim horizon are lost with it. The abandon
		// creates the checkpoint at r.First, counted once (lostAt,
		// lostAfter = r.First), before anything is read; the window is
		// then decided again from it as after any trim after a
		// checkpoint: the readable records of the window are committed
		// after it, or, none being readable up to the target, the
		// checkpoint is carried to the target within the counted gap
		// (docs/exactly-once.md, "Trims, session 24", T24-1, and its
		// review, S24-T1). A checkpoint another consumer created
		// meanwhile is theirs: at or past the target, the window is done;
		// before it, the window is decided again from it.
		now, err := g.abandonStart(ctx, r.First)
		switch {
		case err != nil:
			return total, err
		case now != "" && CompareSequence(now, target) >= 0:
			return total, nil
		case now != "" && again:
			return p.commitShardRange(ctx, streams, r, batchRecords, false)
		}
		return total, fmt.Errorf("shard %s: its first records up to %s were trimmed and the checkpoint stands at %q", r.ShardID, r.First, now)
	}
	var held, page []Record // page: read, not yet held
	taken := ""             // the last record held so far
	reached, empty := false, 0
	for {
		// Hold records up to the target, or a batch's worth (and, while a
		// pending batch is unfinished, up to its last record).
		for !reached && (len(held) < batchRecords || reach != "" && CompareSequence(taken, reach) < 0) {
			if len(page) == 0 {
				if iter == nil {
					break // a closed shard's end
				}
				if page, iter, err = p.readPage(ctx, streams, r, iter); err != nil {
					return total, err
				}
				if len(page) > 0 {
					empty = 0
				} else if empty++; empty > maxEmptyPages && iter != nil {
					return total, fmt.Errorf("shard %s: %d empty pages in a row before record %s", r.ShardID, empty, target)
				}
				continue
			}
			c := CompareSequence(page[0].SequenceNumber, target)
			if c > 0 {
				reached = true
				break
			}
			held, taken, page = append(held, page[0]), page[0].SequenceNumber, page[1:]
			reached = c == 0
		}
		end := iter == nil && len(page) == 0
		if len(held) == 0 {
			if reached || end {
				break
			}
			continue
		}
		res, err := p.Process(ctx, g, held)
		total.add(res)
		var be *BatchError
		if errors.Is(err, ErrIncompleteBatch) && errors.As(err, &be) && g.pending != nil && !end {
			// A half-committed batch reaches past the records held (left
			// by another commit of this shard since the checkpoint was
			// read): keep them and read on to its end.
			held, reach = held[be.Index:], g.pending.to
			if CompareSequence(reach, target) > 0 {
				target, reached = reach, false
			}
			continue
		}
		if err != nil {
			return total, fmt.Errorf("commit shard %s through %s: %w", r.ShardID, target, err)
		}
		held, reach = nil, ""
	}
	if trimmed && taken == "" && (reached || cp != "") {
		// Not one record up to the target could be read after the trim:
		// the first readable one is past it, or (a closed shard's end
		// before the target) there is none. Every record after the
		// checkpoint up to the target is in the trimmed gap: counted once
		// (the abandon, or the count already on the checkpoint), then the
		// checkpoint moves over them so that the mapping's retry, and the
		// next window, start after the target (docs/exactly-once.md,
		// "Trims, session 23", T23-2 and T23-3).
		if _, err := g.AbandonTrimmed(ctx); err != nil {
			return total, err
		}
		return total, g.carryLoss(ctx, target)
	}
	if !reached {
		return total, fmt.Errorf("shard %s ended before record %s", r.ShardID, target)
	}
	return total, p.moveOver(ctx, g, taken)
}

// readPage reads one page of r's shard, retrying throttles and errors
// that may pass with the same iterator.
func (p *Processor) readPage(ctx context.Context, streams StreamReader, r ShardRange, iter *string) ([]Record, *string, error) {
	var out *dynamodbstreams.GetRecordsOutput
	err := p.retry(ctx, "GetRecords", func(ctx context.Context) error {
		var err error
		out, err = streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(1000)})
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read shard %s: %w", r.ShardID, err)
	}
	recs := make([]Record, len(out.Records))
	for i := range out.Records {
		recs[i] = FromStream(out.Records[i], r.StreamARN)
	}
	return recs, out.NextShardIterator, nil
}

// moveOver moves the checkpoint of g up to seq, the last record read, when
// the records after the committed checkpoint had no effect (nothing
// committed them): the checkpoint's compare-and-set outside a commit,
// never over a half-committed batch. Losing the race to another commit
// changes nothing. After a trim met by a window holding no record (every
// record up to the window's last was trimmed: no Process call), the
// guard-alone abandon transaction is sent first (AbandonTrimmed), even
// when there is nothing to move over: lostAt and the loss count, and a
// pending batch whose records are gone given up.
func (p *Processor) moveOver(ctx context.Context, g *ShardGuard, seq string) error {
	cp, err := g.AbandonTrimmed(ctx)
	if err != nil || seq == "" || g.Pending() || cp != "" && CompareSequence(seq, cp) <= 0 {
		return err
	}
	in := table.AdvanceCheckpoint(p.cfg.CoordinationTable, g.key, g.shard, cp, seq, false, p.now())
	err = p.updateItem(ctx, in)
	var ccf *ddbtypes.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("move the checkpoint of shard %s over records without effect: %w", g.shard, err)
	}
	g.reset()
	return nil
}

func maxSeq(a, b string) string {
	if CompareSequence(a, b) >= 0 {
		return a
	}
	return b
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
	iter, trimmed, err := openShard(ctx, streams, in)
	var notFound *streamtypes.ResourceNotFoundException
	if errors.As(err, &notFound) {
		// Gone only when the stream says so: a not-found it contradicts
		// fails the invocation, which the mapping retries.
		gone, derr := ShardGone(ctx, streams, r.StreamARN, r.ShardID)
		switch {
		case derr != nil:
			return nil, g, fmt.Errorf("open shard %s: %w (whether the stream still has it is unknown: %w)", r.ShardID, err, derr)
		case gone:
			return nil, g, fmt.Errorf("shard %s: %w: %w", r.ShardID, errShardGone, err)
		}
		return nil, g, fmt.Errorf("open shard %s: not found, yet the stream still lists it: %w", r.ShardID, err)
	}
	if trimmed {
		p.cfg.Logger.Error("stream records were trimmed before they were read: they are lost to every consumer; reading from TRIM_HORIZON; run `ledgerctl reconcile --repair` to restore the reports",
			"shard", r.ShardID, "checkpoint", cp)
		g = p.ShardGuard(r.StreamARN, r.ShardID)
		g.CommitBatches()
		g.Trimmed(cp) // what is lost lies after the position opened after
	}
	if err != nil {
		return nil, g, fmt.Errorf("open shard %s %s: %w", r.ShardID, in.ShardIteratorType, err)
	}
	return iter, g, nil
}

// add sums another Process result into r (Committed counts records done
// across calls).
func (r *Result) add(o Result) {
	r.Committed += o.Committed
	r.Applied += o.Applied
	r.Duplicates += o.Duplicates
	r.Quarantined += o.Quarantined
	r.Ignored += o.Ignored
	r.Rollups += o.Rollups
	r.Runs += o.Runs
}
