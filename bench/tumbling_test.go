package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

// windowRecorder is a tumbling-window function that counts the window's
// records in its state and records every event it gets; every failEvery-th
// invocation fails.
type windowRecorder struct {
	failEvery int
	calls     []windowCall
}

type windowCall struct {
	payload []byte
	ev      events.DynamoDBTimeWindowEvent
	failed  bool
	answer  map[string]string
}

func (w *windowRecorder) Invoke(_ context.Context, payload []byte) ([]byte, error) {
	c := windowCall{payload: payload}
	if err := json.Unmarshal(payload, &c.ev); err != nil {
		return nil, err
	}
	if w.failEvery > 0 && (len(w.calls)+1)%w.failEvery == 0 {
		c.failed = true
		w.calls = append(w.calls, c)
		return nil, errors.New("injected failure")
	}
	n, _ := strconv.Atoi(c.ev.State["records"])
	c.answer = map[string]string{"records": strconv.Itoa(n + len(c.ev.Records))}
	if c.ev.IsFinalInvokeForWindow {
		c.answer = map[string]string{}
	}
	w.calls = append(w.calls, c)
	return json.Marshal(events.DynamoDBTimeWindowEventResponse{TimeWindowEventResponseProperties: events.TimeWindowEventResponseProperties{State: c.answer}})
}

// restamped stands in front of DynamoDB Local's stream and stamps the
// n-th record's ApproximateCreationDateTime base + n/perSecond seconds:
// DynamoDB Local rounds it down to the minute (AWS to the second), which
// would put a short test's records all in one window.
type restamped struct {
	poller.Streams
	base      time.Time
	perSecond int
}

func (r restamped) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	out, err := r.Streams.GetRecords(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	for _, rec := range out.Records {
		n, err := strconv.Atoi(aws.ToString(rec.Dynamodb.SequenceNumber))
		if err != nil {
			return nil, err
		}
		rec.Dynamodb.ApproximateCreationDateTime = aws.Time(r.base.Add(time.Duration(n/r.perSecond) * time.Second))
	}
	return out, nil
}

// The tumbling mapping the bench plays: windows by ApproximateCreationDateTime,
// pages of BatchSize cut at window boundaries, the previous answer's state
// in every invocation, one final invocation per window, failed invocations
// retried with the same payload, and 1% of the records in invocations
// delivered twice with the same payload.
func TestESM_TumblingWindows(t *testing.T) {
	ctx := context.Background()
	db := ddbtest.Client(t)
	table := ddbtest.NewTable(t, db)
	ops := WorkloadB.Generate(60, 6)
	require.NoError(t, Load(ctx, db, table, ops, 1))
	streams := restamped{Streams: poller.NewStreamsClient(ddbtest.Config(t)), base: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), perSecond: 20}
	arn, err := poller.ResolveStream(ctx, db, table)
	require.NoError(t, err)
	n, _, last, err := Drain(ctx, streams, arn, 1000)
	require.NoError(t, err)
	d, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &arn})
	require.NoError(t, err)
	shard := *d.StreamDescription.Shards[0].ShardId

	fn := &windowRecorder{failEvery: 5}
	var read []processor.Record
	esm := &ESM{Streams: streams, StreamARN: arn, BatchSize: 7, Duplicates: true, Window: time.Second,
		Read: func(recs []processor.Record) { read = append(read, recs...) }}
	require.NoError(t, esm.Run(ctx, fn, last))
	require.Len(t, read, n, "every record read once")

	var got []processor.Record
	var prev *windowCall
	finals, repeats := 0, 0
	for i := range fn.calls {
		c := &fn.calls[i]
		ev := c.ev
		assert.Equal(t, shard, ev.ShardID)
		assert.Equal(t, arn, ev.EventSourceARN)
		assert.Equal(t, time.Second, ev.Window.End.Sub(ev.Window.Start.Time), "window length")
		assert.Zero(t, ev.Window.Start.UnixNano()%int64(time.Second), "windows start on whole seconds")
		if prev != nil && bytes.Equal(prev.payload, c.payload) {
			// A retry of a failed invocation, or a duplicate of one whose
			// answer was lost.
			if !prev.failed {
				repeats++
			}
			prev = c
			continue
		}
		require.True(t, prev == nil || !prev.failed, "a failed invocation is retried with the same payload")
		switch {
		case prev == nil || prev.ev.IsFinalInvokeForWindow:
			assert.Empty(t, ev.State, "a window starts with an empty state")
			if prev != nil {
				assert.True(t, ev.Window.Start.After(prev.ev.Window.Start.Time), "the next window is later")
			}
		default:
			assert.Equal(t, prev.answer, ev.State, "the previous answer's state")
			assert.Equal(t, prev.ev.Window.Start, ev.Window.Start, "the same window until its final invocation")
		}
		for _, lr := range ev.Records {
			r := processor.FromLambda(lr)
			assert.True(t, r.ApproximateCreation.Before(ev.Window.End.Time), "record %s created before its window ends", r.SequenceNumber)
			got = append(got, r)
		}
		if ev.IsFinalInvokeForWindow {
			finals++
		}
		prev = c
	}
	require.NotNil(t, prev)
	assert.True(t, prev.ev.IsFinalInvokeForWindow, "the backlog's last window is closed")
	require.Len(t, got, n, "every record delivered once, duplicates aside")
	for i := range got {
		assert.Equal(t, read[i].SequenceNumber, got[i].SequenceNumber, "in stream order")
	}
	assert.GreaterOrEqual(t, finals, 3, "20 records a second in windows of a second: at least three windows")
	assert.Equal(t, finals, esm.Windows)
	assert.Positive(t, repeats, "invocations whose answer was lost are delivered again")
	assert.Positive(t, esm.Redelivered)
}
