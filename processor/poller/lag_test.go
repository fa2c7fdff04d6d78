package poller_test

import (
	"context"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

// commitClock measures write → commit exactly: it notes the write time
// (updatedAt) of every transaction INSERT or MODIFY record the poller reads,
// and when a commit transaction lands, every noted record up to the
// sequence number its checkpoint guard claims is committed. (A REMOVE
// carries no write time; the processor falls back to the minute-rounded
// ApproximateCreationDateTime for it.) Records whose delta is zero commit
// nothing and are left out.
type commitClock struct {
	*dynamodb.Client
	streams poller.Streams

	mu      sync.Mutex
	seen    map[string]bool
	pending map[string]time.Time
	lags    []float64
}

func (c *commitClock) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := c.Client.TransactWriteItems(ctx, in, opts...)
	if err != nil || len(in.TransactItems) == 0 || in.TransactItems[0].Update == nil {
		return out, err
	}
	now := time.Now()
	last, _ := in.TransactItems[0].Update.ExpressionAttributeValues[":last"].(*ddbtypes.AttributeValueMemberS)
	if last == nil {
		return out, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for seq, wrote := range c.pending {
		if processor.CompareSequence(seq, last.Value) <= 0 {
			c.lags = append(c.lags, now.Sub(wrote).Seconds())
			delete(c.pending, seq)
		}
	}
	return out, err
}

func (c *commitClock) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	return c.streams.DescribeStream(ctx, in, opts...)
}

func (c *commitClock) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	return c.streams.GetShardIterator(ctx, in, opts...)
}

func (c *commitClock) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	out, err := c.streams.GetRecords(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range out.Records {
		seq := aws.ToString(r.Dynamodb.SequenceNumber)
		if c.seen[seq] || r.EventName == st.OperationTypeRemove {
			continue
		}
		c.seen[seq] = true
		ua, _ := r.Dynamodb.NewImage["updatedAt"].(*st.AttributeValueMemberS)
		if ua == nil || !changesReports(processor.Transactions(processor.FromStream(r, ""))) {
			continue // no write time, or nothing to commit
		}
		if t, err := time.Parse(time.RFC3339Nano, ua.Value); err == nil {
			c.pending[seq] = t
		}
	}
	return out, nil
}

// changesReports reports whether a record's delta is not zero.
func changesReports(old, new *aggregates.Transaction) bool {
	switch {
	case old == nil || new == nil:
		return old != new
	}
	return old.Type != new.Type || !old.Amount.Equal(new.Amount) || old.Category != new.Category ||
		old.CostCenter != new.CostCenter || old.PaymentMethod != new.PaymentMethod || old.Date != new.Date
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)) + 0.5)
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// bucketQuantile estimates a quantile from a Prometheus histogram the way
// histogram_quantile() does (linear within the bucket).
func bucketQuantile(h *dto.Histogram, q float64) float64 {
	total := float64(h.GetSampleCount())
	if total == 0 {
		return 0
	}
	rank := q * total
	lower, prevCount := 0.0, 0.0
	for _, b := range h.GetBucket() {
		c := float64(b.GetCumulativeCount())
		if c >= rank {
			if c == prevCount {
				return b.GetUpperBound()
			}
			return lower + (b.GetUpperBound()-lower)*(rank-prevCount)/(c-prevCount)
		}
		lower, prevCount = b.GetUpperBound(), c
	}
	return lower
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// The poller against DynamoDB Local's real stream, with its default read
// pacing (200 ms between reads, 1 s idle backoff) and batching window (1 s),
// while a writer puts
// transaction changes at a steady rate. Reports p50/p99 of
// ledger_stream_lag_seconds (from its buckets) and of the exact write →
// commit times behind it: the workload stamps updatedAt at the write, and
// the processor measures from it (DynamoDB Local rounds
// ApproximateCreationDateTime to the minute, so it is not used).
//
//	LEDGER_LAG_RATE=50 LEDGER_LAG_SECONDS=10 go test ./processor/poller -run Lag -v
func TestPoller_LagAtSteadyWriteRate(t *testing.T) {
	rate := envInt("LEDGER_LAG_RATE", 50)
	secs := envInt("LEDGER_LAG_SECONDS", 8)
	ctx := context.Background()
	db := ddbtest.Client(t)
	table := newTableName(t)
	arn, err := poller.ResolveStream(ctx, db, table)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	pm := processor.NewMetrics(reg)
	clock := &commitClock{Client: db, streams: poller.NewStreamsClient(ddbtest.Config(t)), seen: map[string]bool{}, pending: map[string]time.Time{}}
	proc, err := processor.New(clock, processor.Config{Table: table}, pm)
	require.NoError(t, err)
	logs := &logSink{}
	p, err := poller.New(clock, db, proc, poller.Config{
		Table: table, StreamARN: arn, Owner: "lag",
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}, poller.NewMetrics(reg))
	require.NoError(t, err)
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	eventually(t, "ready", 10*time.Second, p.Ready)

	w := ledgertest.NewWorkload(21)
	interval := time.Second / time.Duration(rate)
	tick := time.NewTicker(interval)
	n := rate * secs
	kinds := map[string]int{}
	for i := 0; i < n; i++ {
		<-tick.C
		kind, err := w.Step(ctx, db, table)
		require.NoError(t, err)
		kinds[kind]++
	}
	tick.Stop()
	// Let the last writes commit.
	time.Sleep(2500 * time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	clock.mu.Lock()
	vals := append([]float64(nil), clock.lags...)
	clock.mu.Unlock()
	sort.Float64s(vals)
	require.NotEmpty(t, vals)
	var m dto.Metric
	require.NoError(t, pm.Lag.(prometheus.Metric).Write(&m))
	t.Logf("lag at %d writes/s for %ds (%d changes; idle backoff 1s, 200ms between reads, batching window %s):", rate, secs, n, poller.BatchWindowSetting.Default)
	t.Logf("  write → commit, measured (%d INSERT/MODIFY records):  p50 %.3fs  p99 %.3fs  max %.3fs",
		len(vals), percentile(vals, 0.50), percentile(vals, 0.99), vals[len(vals)-1])
	t.Logf("  ledger_stream_lag_seconds (%d observations, from buckets):  p50 %.3fs  p99 %.3fs",
		m.GetHistogram().GetSampleCount(), bucketQuantile(m.GetHistogram(), 0.50), bucketQuantile(m.GetHistogram(), 0.99))
	// The lag is a figure (logged above; the benchmark's steady-rate run
	// measures it), not an assertion: a loaded machine stretches it.

	diffs, _, err := processor.Reconcile(ctx, db, table, processor.Scope{})
	require.NoError(t, err)
	assert.Empty(t, diffs)
}
