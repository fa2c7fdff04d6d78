package poller_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor/poller"
)

// backlogStream is a stream of shards that are all far behind: every
// shard holds records past every read (pages are always full), generated
// on demand so that the stream itself takes no memory. Each record is a
// MODIFY of a report-like item with old and new images of about 1 KB in
// all (SizeBytes 1,000: a page of 1,000 is AWS's 1 MB response limit). The
// items are not transactions, so the processor steps over them (no commit)
// and the reader moves the checkpoint every CheckpointInterval: what is
// measured is the records held, not the table's write path.
type backlogStream struct {
	arn    string
	shards int
	kb     int // each record's size: 1 KB, or larger (LEDGER_BENCH_RECORD_KB)
	reads  atomic.Int64
}

func (b *backlogStream) id(i int) string { return fmt.Sprintf("shardId-%08d", i) }

func (b *backlogStream) DescribeStream(_ context.Context, in *dynamodbstreams.DescribeStreamInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	start := 0
	if s := aws.ToString(in.ExclusiveStartShardId); s != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(s, "shardId-"))
		if err != nil {
			return nil, err
		}
		start = n + 1
	}
	desc := &st.StreamDescription{StreamArn: aws.String(b.arn), StreamStatus: st.StreamStatusEnabled, StreamViewType: st.StreamViewTypeNewAndOldImages}
	end := min(start+100, b.shards)
	for i := start; i < end; i++ {
		desc.Shards = append(desc.Shards, st.Shard{ShardId: aws.String(b.id(i)),
			SequenceNumberRange: &st.SequenceNumberRange{StartingSequenceNumber: aws.String(seqOf(1))}})
	}
	if end < b.shards {
		desc.LastEvaluatedShardId = aws.String(b.id(end - 1))
	}
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: desc}, nil
}

func seqOf(pos int64) string { return fmt.Sprintf("%021d", pos) }

func (b *backlogStream) GetShardIterator(_ context.Context, in *dynamodbstreams.GetShardIteratorInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	pos := int64(1)
	switch in.ShardIteratorType {
	case st.ShardIteratorTypeTrimHorizon:
	case st.ShardIteratorTypeAfterSequenceNumber, st.ShardIteratorTypeAtSequenceNumber:
		n, err := strconv.ParseInt(aws.ToString(in.SequenceNumber), 10, 64)
		if err != nil {
			return nil, err
		}
		pos = n
		if in.ShardIteratorType == st.ShardIteratorTypeAfterSequenceNumber {
			pos++
		}
	default:
		return nil, errors.New("backlog stream: iterator type " + string(in.ShardIteratorType))
	}
	return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: aws.String(aws.ToString(in.ShardId) + "/" + strconv.FormatInt(pos, 10))}, nil
}

func (b *backlogStream) GetRecords(_ context.Context, in *dynamodbstreams.GetRecordsInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	b.reads.Add(1)
	shard, p, ok := strings.Cut(aws.ToString(in.ShardIterator), "/")
	pos, err := strconv.ParseInt(p, 10, 64)
	if !ok || err != nil {
		return nil, errors.New("backlog stream: bad iterator")
	}
	// At most 1 MB a page, as AWS answers.
	n := min(int(aws.ToInt32(in.Limit)), max(1, 1000/b.kb))
	out := &dynamodbstreams.GetRecordsOutput{Records: make([]st.Record, n)}
	for i := range out.Records {
		out.Records[i] = backlogRecord(shard, pos+int64(i), b.kb)
	}
	out.NextShardIterator = aws.String(shard + "/" + strconv.FormatInt(pos+int64(n), 10))
	return out, nil
}

// backlogRecord is a MODIFY of a report-like item: two images of a dozen
// attributes, about 1 KB in all.
func backlogRecord(shard string, pos int64, kb int) st.Record {
	image := func(v int64) map[string]st.AttributeValue {
		m := map[string]st.AttributeValue{
			"PK":         &st.AttributeValueMemberS{Value: "BENCH#" + shard},
			"SK":         &st.AttributeValueMemberS{Value: fmt.Sprintf("REPORT#daily#2026-11-%02d#branch-%04d", pos%28+1, pos%1000)},
			"entityType": &st.AttributeValueMemberS{Value: "BENCH"},
			"version":    &st.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)},
			"updatedAt":  &st.AttributeValueMemberS{Value: "2026-11-26T10:00:00.000000000Z"},
		}
		totals := map[string]st.AttributeValue{}
		for _, c := range []string{"debits", "credits", "fees", "refunds", "count", "net"} {
			totals[c] = &st.AttributeValueMemberN{Value: strconv.FormatInt(v*1234567+int64(len(c)), 10)}
		}
		m["totals"] = &st.AttributeValueMemberM{Value: totals}
		m["currency"] = &st.AttributeValueMemberS{Value: "EUR"}
		m["note"] = &st.AttributeValueMemberS{Value: strings.Repeat("x", 180+(kb-1)*500)}
		return m
	}
	return st.Record{
		EventID:   aws.String(shard + "-" + strconv.FormatInt(pos, 10)),
		EventName: st.OperationTypeModify,
		Dynamodb: &st.StreamRecord{
			ApproximateCreationDateTime: aws.Time(time.Now()),
			Keys:                        map[string]st.AttributeValue{"PK": &st.AttributeValueMemberS{Value: "BENCH#" + shard}, "SK": &st.AttributeValueMemberS{Value: "REPORT"}},
			OldImage:                    image(pos - 1),
			NewImage:                    image(pos),
			SequenceNumber:              aws.String(seqOf(pos)),
			SizeBytes:                   aws.Int64(int64(kb) * 1000),
			StreamViewType:              st.StreamViewTypeNewAndOldImages,
		},
	}
}

// vmHWM is the process's peak resident set size (VmHWM), in KiB.
func vmHWM(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// The measurement behind BENCHMARKS.md's "Issue 23: the records budget":
// one poller holding LEDGER_BENCH_HELD_SHARDS leases (e.g. 1000) of shards
// that are all behind, for LEDGER_BENCH_HELD_SECONDS (default 60) once it
// holds them all, with LEDGER_BENCH_MAX_HELD_RECORDS as its budget
// (default: the poller's) and records of LEDGER_BENCH_RECORD_KB (default
// 1; 80 is a record of two report items near their 40 KB). It logs the process's peak RSS (VmHWM), the
// budget's peak and the records read. Skipped unless the shard count is
// set; run it alone (its peak RSS is the process's):
//
//	LEDGER_BENCH_HELD_SHARDS=1000 nice go test -count=1 -run TestHeldMemory -v ./processor/poller/
func TestHeldMemory_ManyShardsBehind(t *testing.T) {
	shards, _ := strconv.Atoi(os.Getenv("LEDGER_BENCH_HELD_SHARDS"))
	if shards <= 0 {
		t.Skip("a measurement: set LEDGER_BENCH_HELD_SHARDS (e.g. 1000)")
	}
	seconds := 60
	if s, err := strconv.Atoi(os.Getenv("LEDGER_BENCH_HELD_SECONDS")); err == nil && s > 0 {
		seconds = s
	}
	budget, _ := strconv.Atoi(os.Getenv("LEDGER_BENCH_MAX_HELD_RECORDS"))
	kb, _ := strconv.Atoi(os.Getenv("LEDGER_BENCH_RECORD_KB"))
	e := newEnv(t, 2304)
	stream := &backlogStream{arn: e.stream.arn, shards: shards, kb: max(1, kb)}
	before := vmHWM(t)
	tp := e.poller(t, "bench", stream, nil, func(c *poller.Config) {
		// Production settings but the budget; leases long enough that
		// 1,000 renewals fit in a renewal interval on DynamoDB Local.
		*c = poller.Config{Table: c.Table, StreamARN: c.StreamARN, Owner: c.Owner, Logger: c.Logger,
			MaxHeldRecords: budget, LeaseDuration: 2 * time.Minute, DiscoverInterval: time.Minute, ShutdownTimeout: 5 * time.Second}
	})
	// Not start's stop: with every core busy decoding, DynamoDB Local is
	// slow and a renewal round of 1,000 leases can outlast its 30 s.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tp.Run(ctx) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Minute):
			t.Fatal("poller did not stop within 5 minutes")
		}
	}
	defer cancel()
	eventually(t, "every lease held", 10*time.Minute, func() bool { return counter(t, tp.m.LeasesHeld) == float64(shards) })
	held := time.Now()
	peakHeld := 0.0
	for time.Since(held) < time.Duration(seconds)*time.Second {
		peakHeld = max(peakHeld, counter(t, tp.m.HeldRecords))
		time.Sleep(100 * time.Millisecond)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	hwm := vmHWM(t)
	t.Logf("%d shards behind, records of %d KB, budget %v records and %v bytes: peak RSS (VmHWM) %d MiB (%d MiB before the poller started), budget peak in use %d records, held_records peak (sampled) %.0f, "+
		"%v records read in %d GetRecords over %ds, heap in use now %d MiB, GOGC default",
		shards, stream.kb, counter(t, tp.m.HeldBudget), counter(t, tp.m.HeldBytesBudget), hwm/1024, before/1024, poller.BudgetPeak(tp.Poller), peakHeld,
		counter(t, tp.m.RecordsRead), stream.reads.Load(), seconds, ms.HeapInuse>>20)
	stop()
	t.Logf("peak RSS (VmHWM) after the shutdown: %d MiB", vmHWM(t)/1024)
}
