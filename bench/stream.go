package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

// BatchWriter is the part of DynamoDB Load writes with.
type BatchWriter interface {
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

// Load writes ops to table as a backlog: BatchWriteItem requests of up to
// 25 changes, in order, a request never holding two changes of one item,
// each item stamped with updatedAt when its request is sent. With workers >
// 1, consecutive requests go out concurrently (round robin), so the stream
// keeps the order only roughly.
func Load(ctx context.Context, api BatchWriter, table string, ops []Op, workers int) error {
	var batches [][]Op
	var cur []Op
	seen := map[aggregates.Key]bool{}
	for _, op := range ops {
		if len(cur) == 25 || seen[op.Key] {
			batches = append(batches, cur)
			cur, seen = nil, map[aggregates.Key]bool{}
		}
		cur = append(cur, op)
		seen[op.Key] = true
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	workers = max(1, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(batches) && errs[w] == nil; i += workers {
				errs[w] = writeBatch(ctx, api, table, batches[i])
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func writeBatch(ctx context.Context, api BatchWriter, table string, ops []Op) error {
	now := time.Now()
	reqs := make([]ddbtypes.WriteRequest, len(ops))
	for i, op := range ops {
		if op.Kind == OpDelete {
			reqs[i].DeleteRequest = &ddbtypes.DeleteRequest{Key: map[string]ddbtypes.AttributeValue{"PK": sAV(op.Key.PK), "SK": sAV(op.Key.SK)}}
		} else {
			reqs[i].PutRequest = &ddbtypes.PutRequest{Item: stamped(op.New, now)}
		}
	}
	pending := map[string][]ddbtypes.WriteRequest{table: reqs}
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt > 10 {
			return errors.New("load: items still unprocessed after 10 attempts")
		}
		out, err := api.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
		if err != nil {
			return fmt.Errorf("load: %w", err)
		}
		pending = out.UnprocessedItems
	}
	return nil
}

// Put writes one change as the writer does (PutItem, or DeleteItem),
// stamping updatedAt with now.
func Put(ctx context.Context, api *dynamodb.Client, table string, op Op, now time.Time) error {
	var err error
	if op.Kind == OpDelete {
		_, err = api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: map[string]ddbtypes.AttributeValue{"PK": sAV(op.Key.PK), "SK": sAV(op.Key.SK)}})
	} else {
		_, err = api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: stamped(op.New, now)})
	}
	return err
}

// shardIterator opens the stream's only shard (DynamoDB Local has one) at
// TRIM_HORIZON, or AT_SEQUENCE_NUMBER at when set, and returns the shard's
// id with it.
func shardIterator(ctx context.Context, streams poller.Streams, arn, at string) (*string, string, error) {
	d, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &arn})
	if err != nil {
		return nil, "", fmt.Errorf("describe stream: %w", err)
	}
	if n := len(d.StreamDescription.Shards); n != 1 {
		return nil, "", fmt.Errorf("stream has %d shards; the bench reads DynamoDB Local's single shard", n)
	}
	shard := d.StreamDescription.Shards[0].ShardId
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: &arn, ShardId: shard,
		ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon}
	if at != "" {
		in.ShardIteratorType, in.SequenceNumber = streamtypes.ShardIteratorTypeAtSequenceNumber, &at
	}
	out, err := streams.GetShardIterator(ctx, in)
	if err != nil {
		return nil, "", fmt.Errorf("shard iterator: %w", err)
	}
	return out.ShardIterator, aws.ToString(shard), nil
}

// Drain reads the stream from the trim horizon to its current end with
// GetRecords pages of up to limit records (at most 1,000, the API's limit), as fast as it can, writing
// nothing: the ceiling of any consumer of this DynamoDB Local. It returns
// the records read and the time taken, and the last record's sequence
// number.
func Drain(ctx context.Context, streams poller.Streams, arn string, limit int) (n int, took time.Duration, last string, err error) {
	start := time.Now()
	iter, _, err := shardIterator(ctx, streams, arn, "")
	if err != nil {
		return 0, 0, "", err
	}
	for iter != nil {
		out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(int32(min(limit, 1000)))})
		if err != nil {
			return n, 0, last, fmt.Errorf("drain: %w", err)
		}
		if len(out.Records) == 0 {
			break
		}
		n += len(out.Records)
		last = aws.ToString(out.Records[len(out.Records)-1].Dynamodb.SequenceNumber)
		iter = out.NextShardIterator
	}
	return n, time.Since(start), last, nil
}

// Function is a Lambda function as the event source mapping sees it: the
// raw event in, the raw response out (lambda.Handler's Invoke).
type Function interface {
	Invoke(ctx context.Context, payload []byte) ([]byte, error)
}

// ESM plays the Lambda event source mapping of a DynamoDB stream: it reads
// the shard in order with GetRecords pages of up to BatchSize records and
// invokes the function with each page as a DynamoDB event, one invocation
// at a time (ParallelizationFactor 1). A whole-batch error is retried with
// the same batch; a response naming batch item failures makes it resume at
// the first one named (ReportBatchItemFailures, no bisection).
//
// With Duplicates, 1% of the records are delivered twice: every page's
// first ⌈1%⌉ records are first invoked as a batch of their own, twice (a
// batch whose response was lost, retried by the mapping from the same first
// record), and then the rest of the page. Both deliveries start at a record
// where the mapping may resume, as the run-marker guard assumes (L1 of
// docs/exactly-once.md).
//
// With Window set it plays a mapping with TumblingWindowInSeconds instead
// (runTumbling).
type ESM struct {
	Streams    poller.Streams
	StreamARN  string
	BatchSize  int
	Duplicates bool
	// Window is the mapping's TumblingWindowInSeconds (0: standard mode).
	Window time.Duration
	// PollInterval is the wait after an empty page in live mode (Lambda
	// polls a shard four times a second).
	PollInterval time.Duration
	// Read, when set, sees every page read.
	Read func(recs []processor.Record)

	// Counts of what was delivered: invocations, records (duplicates
	// included), duplicates, and tumbling windows closed.
	Invocations, Delivered, Redelivered, Windows int
}

// Run delivers records to fn until a batch holding the record with sequence
// number until (or a later one) is acknowledged, or, with until "", until
// ctx ends (live mode; then it returns nil).
func (e *ESM) Run(ctx context.Context, fn Function, until string) error {
	if e.Window > 0 {
		return e.runTumbling(ctx, fn, until)
	}
	iter, _, err := shardIterator(ctx, e.Streams, e.StreamARN, "")
	if err != nil {
		return err
	}
	for {
		recs, next, err := e.read(ctx, iter, until)
		if err != nil {
			return liveEnd(ctx, until, err)
		}
		if len(recs) == 0 {
			iter = next
			continue
		}
		batches := [][]processor.Record{recs}
		if e.Duplicates {
			d := (len(recs) + 99) / 100
			batches = [][]processor.Record{recs[:d], recs[:d], recs[d:]}
			e.Redelivered += d
		}
		resume := ""
		for _, b := range batches {
			if len(b) == 0 {
				continue
			}
			if resume, err = e.invoke(ctx, fn, b); err != nil {
				return liveEnd(ctx, until, err)
			}
			if resume != "" {
				break
			}
		}
		if resume != "" {
			if iter, _, err = shardIterator(ctx, e.Streams, e.StreamARN, resume); err != nil {
				return err
			}
			continue
		}
		if until != "" && processor.CompareSequence(recs[len(recs)-1].SequenceNumber, until) >= 0 {
			return nil
		}
		iter = next
	}
}

// liveEnd is what Run returns when err ended it: nil in live mode (until
// "") once ctx has ended, else err.
func liveEnd(ctx context.Context, until string, err error) error {
	if ctx.Err() != nil && until == "" {
		return nil
	}
	return err
}

// read returns the records of the page at iter and the next iterator, or
// ctx's error once it has ended. An empty page is an error in backlog mode
// (the stream ended before until); in live mode read waits PollInterval
// and returns no records.
func (e *ESM) read(ctx context.Context, iter *string, until string) ([]processor.Record, *string, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	out, err := e.Streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(int32(e.BatchSize))})
	if err != nil {
		return nil, nil, fmt.Errorf("esm: get records: %w", err)
	}
	if len(out.Records) == 0 {
		if until != "" {
			return nil, nil, fmt.Errorf("esm: stream ended before record %s", until)
		}
		poll := e.PollInterval
		if poll <= 0 {
			poll = 250 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(poll):
		}
		return nil, out.NextShardIterator, nil
	}
	recs := make([]processor.Record, len(out.Records))
	for i := range out.Records {
		recs[i] = processor.FromStream(out.Records[i], e.StreamARN)
	}
	if e.Read != nil {
		e.Read(recs)
	}
	return recs, out.NextShardIterator, nil
}

// lambdaRecords encodes a batch as the event source mapping sends it.
func lambdaRecords(batch []processor.Record) ([]events.DynamoDBEventRecord, error) {
	out := make([]events.DynamoDBEventRecord, len(batch))
	for i, r := range batch {
		lr, err := processor.ToLambda(r)
		if err != nil {
			return nil, fmt.Errorf("esm: encode record %s: %w", r.EventID, err)
		}
		lr.AWSRegion = "us-east-1"
		out[i] = lr
	}
	return out, nil
}

// invoke delivers one batch, retrying whole-batch errors, and returns the
// sequence number to resume at ("" when the batch was acknowledged).
func (e *ESM) invoke(ctx context.Context, fn Function, batch []processor.Record) (string, error) {
	recs, err := lambdaRecords(batch)
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(events.DynamoDBEvent{Records: recs})
	if err != nil {
		return "", err
	}
	var resp events.DynamoDBEventResponse
	err = e.call(ctx, fn, payload, batch, func(out []byte) error {
		resp = events.DynamoDBEventResponse{}
		return json.Unmarshal(out, &resp)
	})
	if err != nil {
		return "", err
	}
	if len(resp.BatchItemFailures) == 0 {
		return "", nil
	}
	return resp.BatchItemFailures[0].ItemIdentifier, nil
}

// call invokes fn with payload, the event of batch, until it answers
// without an error and with a response that accept takes (the mapping
// retries a failed invocation with the same payload, here up to 5 times).
func (e *ESM) call(ctx context.Context, fn Function, payload []byte, batch []processor.Record, accept func(out []byte) error) error {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		e.Invocations++
		e.Delivered += len(batch)
		out, err := fn.Invoke(ctx, payload)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		if lastErr = accept(out); lastErr == nil {
			return nil
		}
		lastErr = fmt.Errorf("esm: response: %w", lastErr)
	}
	from := "no records"
	if len(batch) > 0 {
		from = fmt.Sprintf("%d records from %s", len(batch), batch[0].SequenceNumber)
	}
	return fmt.Errorf("esm: invocation with %s failed 5 times: %w", from, lastErr)
}
