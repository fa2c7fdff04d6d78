package bench

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

// lagClock measures write → commit for every record with an effect: the
// write time is the updatedAt the writer stamped in the new image (so
// REMOVE records, which carry none, are left out, as in the poller's lag
// test); the commit time is when the transaction (or, per record, the last
// update) that applied it returned.
type lagClock struct {
	mu      sync.Mutex
	pending map[string]time.Time // sequence number → write time
	samples []float64
}

func newLagClock() *lagClock { return &lagClock{pending: map[string]time.Time{}} }

// writeTime returns the record's updatedAt when it changes a report.
func writeTime(r processor.Record) (time.Time, bool) {
	if !changesAReport(r) {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, str(r.NewImage["updatedAt"]))
	return t, err == nil
}

// changesAReport reports whether r has a new image whose change moves a
// report (a modify that puts back a category it had moves none).
func changesAReport(r processor.Record) bool {
	old, new := processor.Transactions(r)
	if new == nil {
		return false
	}
	f := aggregates.NewFold()
	f.AddChange(old, new)
	return len(f.Keys()) > 0
}

func (c *lagClock) read(recs []processor.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range recs {
		if t, ok := writeTime(r); ok {
			if _, seen := c.pending[r.SequenceNumber]; !seen {
				c.pending[r.SequenceNumber] = t
			}
		}
	}
}

// committed records that every pending record up to last is committed.
func (c *lagClock) committed(last string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for seq, t := range c.pending {
		if processor.CompareSequence(seq, last) <= 0 {
			c.samples = append(c.samples, at.Sub(t).Seconds())
			delete(c.pending, seq)
		}
	}
}

func (c *lagClock) applied(r processor.Record, at time.Time) {
	if t, ok := writeTime(r); ok {
		c.sample(at.Sub(t))
	}
}

func (c *lagClock) sample(d time.Duration) {
	c.mu.Lock()
	c.samples = append(c.samples, d.Seconds())
	c.mu.Unlock()
}

// percentiles returns the sample count and the p50 and p99 (nearest rank).
func (c *lagClock) percentiles() (n int, p50, p99 float64) {
	c.mu.Lock()
	s := append([]float64(nil), c.samples...)
	c.mu.Unlock()
	if len(s) == 0 {
		return 0, 0, 0
	}
	sort.Float64s(s)
	rank := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return len(s), rank(0.50), rank(0.99)
}

// commitHook passes the processor's DynamoDB calls to the meter and tells
// the lag clock, after each commit transaction, up to which sequence
// number the run's guard claims records: the checkpoint's :last (poller) or
// the run marker's sequenceNumber (Lambda handler).
type commitHook struct {
	*Meter
	clock *lagClock
}

func (h commitHook) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := h.Meter.TransactWriteItems(ctx, in, opts...)
	if err != nil || h.clock == nil || len(in.TransactItems) == 0 {
		return out, err
	}
	var last ddbtypes.AttributeValue
	switch g := in.TransactItems[0]; {
	case g.Update != nil:
		last = g.Update.ExpressionAttributeValues[":last"]
	case g.Put != nil:
		last = g.Put.Item["sequenceNumber"]
	}
	if seq := str(last); seq != "" {
		h.clock.committed(seq, time.Now())
	}
	return out, err
}

// streamHook wraps the poller's Streams client: it shows every page read to
// the lag clock, notes when the poller asks for the page after the one
// holding the source's last record (everything before it is processed
// then), and, with rewind, makes every page's last ⌈1%⌉ records be read
// again by the next GetRecords (as a reader restarting from an older
// position would): 1% duplicate delivery.
type streamHook struct {
	poller.Streams
	arn    string
	clock  *lagClock
	rewind bool
	last   string // the source's last sequence number

	mu       sync.Mutex
	shard    *string
	sawLast  bool
	doneAt   time.Time
	done     chan struct{}
	reread   int
	recordsN int
}

func newStreamHook(s poller.Streams, arn, last string, rewind bool, clock *lagClock) *streamHook {
	return &streamHook{Streams: s, arn: arn, last: last, rewind: rewind, clock: clock, done: make(chan struct{})}
}

func (h *streamHook) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	h.mu.Lock()
	h.shard = in.ShardId
	h.mu.Unlock()
	return h.Streams.GetShardIterator(ctx, in, opts...)
}

func (h *streamHook) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	h.mu.Lock()
	if h.sawLast && h.doneAt.IsZero() {
		h.doneAt = time.Now()
		close(h.done)
	}
	shard := h.shard
	h.mu.Unlock()
	out, err := h.Streams.GetRecords(ctx, in, opts...)
	if err != nil || len(out.Records) == 0 {
		return out, err
	}
	recs := make([]processor.Record, len(out.Records))
	for i := range out.Records {
		recs[i] = processor.FromStream(out.Records[i], h.arn)
	}
	if h.clock != nil {
		h.clock.read(recs)
	}
	h.mu.Lock()
	h.recordsN += len(recs)
	if h.last != "" && processor.CompareSequence(recs[len(recs)-1].SequenceNumber, h.last) >= 0 {
		h.sawLast = true
	}
	h.mu.Unlock()
	n := len(out.Records)
	if d := (n + 99) / 100; h.rewind && d < n && out.NextShardIterator != nil && shard != nil {
		after := aws.ToString(out.Records[n-d-1].Dynamodb.SequenceNumber)
		it, err := h.Streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
			StreamArn: &h.arn, ShardId: shard, ShardIteratorType: streamtypes.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: &after,
		})
		if err != nil {
			return nil, err
		}
		out.NextShardIterator = it.ShardIterator
		h.mu.Lock()
		h.reread += d
		h.mu.Unlock()
	}
	return out, nil
}
