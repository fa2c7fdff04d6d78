package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// StreamReader is the part of the DynamoDB Streams API InFlight uses, and
// every other reader of the stream (the poller's Streams, ledgertest's
// ReadAll, ledgerctl lag): DescribeStream, GetShardIterator, GetRecords.
type StreamReader interface {
	DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// InFlightResult is what InFlight found: per branch, how many records with
// an effect on its reports no guard has committed yet; whether the reading
// stopped at maxRecords; and the shards whose consumer has no committed
// position yet (opened at LATEST, no commit so far). In the last two cases
// every branch counts as in flight.
type InFlightResult struct {
	Branches map[Scope]int
	// Periods counts the same records by the tenant roll-up cells (tenant,
	// currency, period) their images name: a roll-up repair holds those
	// periods only (docs/exactly-once.md, roll-up review hole 7).
	Periods      map[RollupCell]int
	Truncated    bool
	Unpositioned []string
}

// Settled reports whether no record of branch s is in flight.
func (r InFlightResult) Settled(s Scope) bool {
	return !r.Truncated && len(r.Unpositioned) == 0 && r.Branches[s] == 0
}

// PeriodSettled reports whether no record naming roll-up cell c is in
// flight.
func (r InFlightResult) PeriodSettled(c RollupCell) bool {
	return !r.Truncated && len(r.Unpositioned) == 0 && r.Periods[c] == 0
}

// InFlight reads the consumers' guards and the stream and returns the
// branches that have transaction records with an effect that no guard has
// committed yet: the records a repair must not fold twice
// (docs/exactly-once.md, "Repairing while consumers run").
//
//   - A shard with a checkpoint (poller, tumbling-window Lambda): every
//     record after it is in flight (a half-committed batch's, a tumbling
//     window's not yet final, a stuck shard's).
//   - A shard without one (standard-mode Lambda): its records from the
//     trim horizon, less those inside runs whose markers exist.
//
// It reads at most maxRecords records in all (0: no limit).
func (p *Processor) InFlight(ctx context.Context, streams StreamReader, streamARN string, maxRecords int) (InFlightResult, error) {
	res := InFlightResult{Branches: map[Scope]int{}, Periods: map[RollupCell]int{}}
	var shards []streamtypes.Shard
	var start *string
	for {
		out, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &streamARN, ExclusiveStartShardId: start})
		if err != nil {
			return res, fmt.Errorf("in flight: describe stream: %w", err)
		}
		shards = append(shards, out.StreamDescription.Shards...)
		if start = out.StreamDescription.LastEvaluatedShardId; start == nil {
			break
		}
	}
	read := 0
	for _, sh := range shards {
		id := aws.ToString(sh.ShardId)
		item, err := p.getCheckpoint(ctx, aggregates.CheckpointKey(streamARN, id))
		if err != nil {
			return res, fmt.Errorf("in flight: checkpoint of %s: %w", id, err)
		}
		c, _ := table.DecodeCheckpoint(id, item)
		cp := c.Position() // a fenced checkpoint's pos (protocol 4): step X
		if c.Finished {
			continue // closed and read to its end
		}
		if c.StartAt != "" && cp == "" {
			res.Unpositioned = append(res.Unpositioned, id)
			continue
		}
		budget := -1
		if maxRecords > 0 {
			budget = maxRecords - read
		}
		closed := sh.SequenceNumberRange != nil && sh.SequenceNumberRange.EndingSequenceNumber != nil
		recs, truncated, err := readShard(ctx, streams, streamARN, id, cp, closed, budget)
		if err != nil {
			return res, fmt.Errorf("in flight: shard %s: %w", id, err)
		}
		read += len(recs)
		if truncated {
			res.Truncated = true
			return res, nil
		}
		committed := make([]bool, len(recs))
		if cp == "" {
			if committed, err = p.coveredByMarkers(ctx, recs); err != nil {
				return res, fmt.Errorf("in flight: run markers of %s: %w", id, err)
			}
		}
		for i := range recs {
			if committed[i] {
				continue
			}
			c := classify(&recs[i])
			if c.rollup != nil {
				// A roll-up delta's INSERT not folded yet: its item is
				// counted from its lane, unless it was deleted by hand, and
				// then the record is folded anyway (change.go): its
				// periods are held too.
				for p := range c.rollup.Periods {
					res.Periods[RollupCell{Tenant: c.rollup.Tenant, Currency: c.rollup.Currency, Period: p}]++
				}
				continue
			}
			if !c.isTxn || !c.effective() {
				continue
			}
			for _, tx := range []*aggregates.Transaction{c.old, c.new} {
				if tx != nil {
					res.Branches[Scope{Tenant: tx.Tenant, Branch: tx.Branch}]++
					for _, p := range tx.Stamp.Periods {
						res.Periods[RollupCell{Tenant: tx.Tenant, Currency: aggregates.RollupCurrency(tx.Currency), Period: p}]++
					}
				}
			}
		}
	}
	return res, nil
}

// emptyPagesAtEnd is how many empty pages in a row end the reading of an
// open shard: GetRecords may answer an empty page before a shard's records
// ("it might take multiple calls to get to a portion of the shard that
// contains stream records"), so one empty page is not the end.
const emptyPagesAtEnd = 5

// openShard opens the iterator in asks for; when the records it names were
// trimmed from the stream (TrimmedDataAccessException: nothing of them can
// be read or committed any more) it opens at TRIM_HORIZON instead and says
// so. in is changed to what was opened.
func openShard(ctx context.Context, streams StreamReader, in *dynamodbstreams.GetShardIteratorInput) (iter *string, trimmed bool, err error) {
	out, err := streams.GetShardIterator(ctx, in)
	var te *streamtypes.TrimmedDataAccessException
	if errors.As(err, &te) {
		in.ShardIteratorType, in.SequenceNumber = streamtypes.ShardIteratorTypeTrimHorizon, nil
		trimmed = true
		out, err = streams.GetShardIterator(ctx, in)
	}
	if err != nil {
		return nil, trimmed, err
	}
	return out.ShardIterator, trimmed, nil
}

// readShard reads shard from just after sequence number after ("": its
// trim horizon) to its end: a closed shard until its iterator runs out, an
// open one until emptyPagesAtEnd empty pages in a row; at most budget
// records (< 0: no limit).
func readShard(ctx context.Context, streams StreamReader, arn, shard, after string, closed bool, budget int) (recs []Record, truncated bool, err error) {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: &arn, ShardId: &shard, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon}
	if after != "" {
		in.ShardIteratorType, in.SequenceNumber = streamtypes.ShardIteratorTypeAfterSequenceNumber, &after
	}
	iter, _, err := openShard(ctx, streams, in)
	if err != nil {
		return nil, false, err
	}
	empty := 0
	for iter != nil {
		out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
		if err != nil {
			return nil, false, err
		}
		for _, r := range out.Records {
			if budget >= 0 && len(recs) >= budget {
				return recs, true, nil
			}
			recs = append(recs, FromStream(r, arn))
		}
		if len(out.Records) > 0 {
			empty = 0
		} else if empty++; !closed && empty >= emptyPagesAtEnd {
			break // an open shard's current end
		}
		iter = out.NextShardIterator
	}
	return recs, false, nil
}

// coveredByMarkers says, for each record of a shard read from its trim
// horizon, whether it lies in a run whose marker exists (committed by the
// standard-mode Lambda). Each record's id is looked up under both marker
// keys (consistent reads): a marker keyed by a record's id names its run's
// last record, and an end-keyed marker (aggregates.RunEndMarkerKey) keyed
// by a run's last record names its first. So a run whose first record is
// trimmed is still found by its last, which is readable unless the whole
// run is trimmed: a readable record no marker covers is not committed
// (docs/exactly-once.md, "The design: counted changes", P). A run
// committed by a version before end-keyed markers is found by its first
// record only.
func (p *Processor) coveredByMarkers(ctx context.Context, recs []Record) ([]bool, error) {
	keys := make([]aggregates.Key, 0, 2*len(recs))
	for i := range recs {
		id := recordID(&recs[i])
		keys = append(keys, aggregates.RunMarkerKey(id), aggregates.RunEndMarkerKey(id))
	}
	markers := map[aggregates.Key]map[string]ddbtypes.AttributeValue{}
	for len(keys) > 0 {
		n := min(len(keys), 100)
		items, err := p.batchGet(ctx, keys[:n], table.AttrSequenceNumber, table.AttrFirstSequenceNumber)
		if err != nil {
			return nil, err
		}
		for k, item := range items {
			markers[k] = item
		}
		keys = keys[n:]
	}
	// The spans of the runs found, [first, last]: a start-keyed marker
	// starts at its own record, an end-keyed one ends at its own record.
	type span struct{ first, last string }
	var spans []span
	for i := range recs {
		id, seq := recordID(&recs[i]), recs[i].SequenceNumber
		if item, ok := markers[aggregates.RunMarkerKey(id)]; ok {
			if last, ok := table.RunMarkerEnd(item); ok {
				spans = append(spans, span{seq, last})
			}
		}
		if item, ok := markers[aggregates.RunEndMarkerKey(id)]; ok {
			if first, _, ok := table.RunMarkerSpan(item); ok {
				spans = append(spans, span{first, seq})
			}
		}
	}
	// A sweep in sequence order: a record is covered when the spans that
	// start at or before it reach it.
	slices.SortFunc(spans, func(a, b span) int { return CompareSequence(a.first, b.first) })
	order := make([]int, len(recs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return CompareSequence(recs[a].SequenceNumber, recs[b].SequenceNumber) })
	covered := make([]bool, len(recs))
	reach, j := "", 0
	for _, i := range order {
		seq := recs[i].SequenceNumber
		for ; j < len(spans) && CompareSequence(spans[j].first, seq) <= 0; j++ {
			if reach == "" || CompareSequence(spans[j].last, reach) > 0 {
				reach = spans[j].last
			}
		}
		covered[i] = reach != "" && CompareSequence(seq, reach) <= 0
	}
	return covered, nil
}
