package streamemu_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

var tables = ddbtest.Pool{Size: 8} // 7 tests and BenchmarkStream

// The emulation is what every consumer takes.
var _ processor.StreamReader = (*streamemu.Stream)(nil)

// fixture is a fresh table on DynamoDB Local and an emulation of its
// stream.
type fixture struct {
	ddb   *dynamodb.Client
	table string
	arn   string
	up    *dynamodbstreams.Client
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{ddb: ddbtest.Client(t), table: tables.Table(t)}
	arn, err := poller.ResolveStream(context.Background(), f.ddb, f.table)
	require.NoError(t, err)
	f.arn = arn
	f.up = poller.NewStreamsClient(ddbtest.Config(t))
	return f
}

func (f *fixture) stream(t testing.TB, cfg streamemu.Config) *streamemu.Stream {
	t.Helper()
	cfg.StreamARN = f.arn
	s, err := streamemu.New(f.up, cfg)
	require.NoError(t, err)
	return s
}

// put writes n versions of each of items items (PK item-i, one SK).
func (f *fixture) put(t *testing.T, items, versions int) {
	t.Helper()
	for v := range versions {
		for i := range items {
			_, err := f.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: map[string]ddbtypes.AttributeValue{
				"PK": &ddbtypes.AttributeValueMemberS{Value: fmt.Sprintf("EMU#item-%d", i)},
				"SK": &ddbtypes.AttributeValueMemberS{Value: "V"},
				"v":  &ddbtypes.AttributeValueMemberN{Value: fmt.Sprint(v)},
			}})
			require.NoError(t, err)
		}
	}
}

// version writes version v of each of items items (PK item-i, one SK).
func (f *fixture) version(t *testing.T, items, v int) {
	t.Helper()
	for i := range items {
		_, err := f.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: map[string]ddbtypes.AttributeValue{
			"PK": &ddbtypes.AttributeValueMemberS{Value: fmt.Sprintf("EMU#item-%d", i)},
			"SK": &ddbtypes.AttributeValueMemberS{Value: "V"},
			"v":  &ddbtypes.AttributeValueMemberN{Value: fmt.Sprint(v)},
		}})
		require.NoError(t, err)
	}
}

// readShard reads a shard from TRIM_HORIZON to its end (closed) or its
// current end (open).
func readShard(t *testing.T, s *streamemu.Stream, arn, id string) (recs []st.Record, closedEnd bool) {
	t.Helper()
	ctx := context.Background()
	it, err := s.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &arn, ShardId: &id, ShardIteratorType: st.ShardIteratorTypeTrimHorizon})
	require.NoError(t, err)
	iter := it.ShardIterator
	for iter != nil {
		out, err := s.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(7)})
		require.NoError(t, err)
		recs = append(recs, out.Records...)
		if out.NextShardIterator == nil {
			return recs, true
		}
		if len(out.Records) == 0 {
			return recs, false
		}
		iter = out.NextShardIterator
	}
	return recs, true
}

func describeAll(t *testing.T, s *streamemu.Stream, arn string, limit int32) (shards []st.Shard, pages int) {
	t.Helper()
	var start *string
	for {
		out, err := s.DescribeStream(context.Background(), &dynamodbstreams.DescribeStreamInput{StreamArn: &arn, Limit: aws.Int32(limit), ExclusiveStartShardId: start})
		require.NoError(t, err)
		pages++
		shards = append(shards, out.StreamDescription.Shards...)
		if start = out.StreamDescription.LastEvaluatedShardId; start == nil {
			return shards, pages
		}
	}
}

func item(r st.Record) string { return r.Dynamodb.Keys["PK"].(*st.AttributeValueMemberS).Value }

// DynamoDB Local's one shard is presented as several by partition key:
// every record of an item is in one shard of each generation, in order;
// shards close after their record count and roll or split; sequence
// numbers are digit strings increasing within each shard and from parent
// to child; the listing pages and CHILD_SHARDS filter agree with the
// lineage.
func TestStream_ShardsByPartitionKeyRollAndSplitWithLineage(t *testing.T) {
	f := newFixture(t)
	s := f.stream(t, streamemu.Config{Shards: 3, RollRecords: 40, SplitRatio: 0.5, MaxOpenShards: 8, Seed: 7})
	f.put(t, 30, 8) // 240 records
	require.NoError(t, s.Sync(context.Background()))

	shards, pages := describeAll(t, s, f.arn, 4)
	require.Greater(t, len(shards), 3, "shards closed and had children")
	assert.Equal(t, (len(shards)+3)/4, pages, "pages of 4")
	byID := map[string]st.Shard{}
	for _, sh := range shards {
		byID[aws.ToString(sh.ShardId)] = sh
	}
	splits, rolls := 0, 0
	seen := map[string][]string{} // item → its values' versions in read order, over the lineage
	for _, sh := range shards {
		id := aws.ToString(sh.ShardId)
		kids, err := s.DescribeStream(context.Background(), &dynamodbstreams.DescribeStreamInput{StreamArn: &f.arn,
			ShardFilter: &st.ShardFilter{Type: st.ShardFilterTypeChildShards, ShardId: &id}})
		require.NoError(t, err)
		for _, k := range kids.StreamDescription.Shards {
			assert.Equal(t, id, aws.ToString(k.ParentShardId))
			assert.True(t, processor.CompareSequence(aws.ToString(k.SequenceNumberRange.StartingSequenceNumber), aws.ToString(sh.SequenceNumberRange.EndingSequenceNumber)) > 0,
				"a child's sequence numbers follow its parent's")
		}
		switch n := len(kids.StreamDescription.Shards); {
		case n == 2:
			splits++
		case n == 1:
			rolls++
		case sh.SequenceNumberRange.EndingSequenceNumber != nil:
			t.Errorf("closed shard %s has no child", id)
		}
	}
	assert.Positive(t, splits)
	assert.Positive(t, rolls)

	// Read parents before children: each item's versions come in order.
	done := map[string]bool{}
	for len(done) < len(shards) {
		for _, sh := range shards {
			id, parent := aws.ToString(sh.ShardId), aws.ToString(sh.ParentShardId)
			if done[id] || (parent != "" && !done[parent]) {
				continue
			}
			recs, closedEnd := readShard(t, s, f.arn, id)
			assert.Equal(t, sh.SequenceNumberRange.EndingSequenceNumber != nil, closedEnd)
			prev := aws.ToString(sh.SequenceNumberRange.StartingSequenceNumber)
			for _, r := range recs {
				seq := aws.ToString(r.Dynamodb.SequenceNumber)
				assert.Regexp(t, `^[0-9]{21}$`, seq)
				assert.Equal(t, 1, processor.CompareSequence(seq, prev), "increasing within the shard")
				prev = seq
				if !strings.HasPrefix(item(r), "EMU#") {
					continue // the table's own items (the flags item)
				}
				seen[item(r)] = append(seen[item(r)], r.Dynamodb.NewImage["v"].(*st.AttributeValueMemberN).Value)
			}
			done[id] = true
		}
	}
	require.Len(t, seen, 30)
	for it, vs := range seen {
		assert.Equal(t, []string{"0", "1", "2", "3", "4", "5", "6", "7"}, vs, "item %s", it)
	}
	assert.Empty(t, s.EarlyReads(), "every parent was read to its end first")
	n := 0
	for _, e := range s.History() {
		if strings.HasPrefix(item(e.Record), "EMU#") {
			n++
		}
	}
	assert.Equal(t, 240, n)
}

// Records older than the retention are trimmed (TRIM_HORIZON moves, an
// iterator or sequence number into them answers
// TrimmedDataAccessException), a closed shard is deleted once its close is
// older than the retention (ResourceNotFoundException), an iterator
// expires after IteratorTTL, and reading a child before its parent's end
// is noted.
func TestStream_TrimsExpiresAndDetectsChildrenReadEarly(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	clock := streamemu.NewManual(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	s := f.stream(t, streamemu.Config{Shards: 1, Clock: clock, Retention: 24 * time.Hour, IteratorTTL: 15 * time.Minute})
	f.put(t, 5, 2)
	require.NoError(t, s.Sync(ctx))
	parent := s.Shards()[0].ID
	old, _ := readShard(t, s, f.arn, parent)
	require.GreaterOrEqual(t, len(old), 10)
	it, err := s.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &f.arn, ShardId: &parent, ShardIteratorType: st.ShardIteratorTypeTrimHorizon})
	require.NoError(t, err)

	clock.Advance(16 * time.Minute)
	_, err = s.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator})
	var expired *st.ExpiredIteratorException
	require.ErrorAs(t, err, &expired)

	clock.Advance(12 * time.Hour)
	kids, err := s.Close(parent, false)
	require.NoError(t, err)
	f.put(t, 5, 1)
	require.NoError(t, s.Sync(ctx))
	// The child read before its parent's end: noted.
	recs, _ := readShard(t, s, f.arn, kids[0])
	require.NotEmpty(t, recs)
	require.Len(t, s.EarlyReads(), 1)
	assert.Equal(t, parent, s.EarlyReads()[0].Parent)

	clock.Advance(12 * time.Hour) // the parent's records are 24h old: trimmed
	_, err = s.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &f.arn, ShardId: &parent,
		ShardIteratorType: st.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: old[3].Dynamodb.SequenceNumber})
	var trimmed *st.TrimmedDataAccessException
	require.ErrorAs(t, err, &trimmed)
	rest, closedEnd := readShard(t, s, f.arn, parent)
	assert.Empty(t, rest, "TRIM_HORIZON is past every record")
	assert.True(t, closedEnd)

	clock.Advance(12 * time.Hour) // closed 24h ago: deleted
	_, err = s.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &f.arn, ShardId: &parent, ShardIteratorType: st.ShardIteratorTypeTrimHorizon})
	var nf *st.ResourceNotFoundException
	require.ErrorAs(t, err, &nf)
	shards, _ := describeAll(t, s, f.arn, 100)
	require.Len(t, shards, 1)
	assert.Equal(t, parent, aws.ToString(shards[0].ParentShardId), "the orphan still names its parent")
}

// AWS's limits answer LimitExceededException: DescribeStream beyond its
// rate, GetRecords beyond a shard's rate, and a third reader of a shard.
// The rates are tiny so that no refill can come between two calls.
func TestStream_LimitsAnswerLimitExceeded(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	var le *st.LimitExceededException
	s := f.stream(t, streamemu.Config{Shards: 1, Limits: streamemu.Limits{DescribeStreamPerSecond: 0.001, GetRecordsPerShardPerSecond: 0.001}})
	_, err := s.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &f.arn})
	require.NoError(t, err)
	_, err = s.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &f.arn})
	require.ErrorAs(t, err, &le)
	assert.Equal(t, 1, s.Refused("DescribeStream", "LimitExceededException"))
	id := s.Shards()[0].ID
	it, err := s.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &f.arn, ShardId: &id, ShardIteratorType: st.ShardIteratorTypeLatest})
	require.NoError(t, err)
	out, err := s.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator})
	require.NoError(t, err)
	_, err = s.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: out.NextShardIterator})
	require.ErrorAs(t, err, &le, "a second GetRecords on the shard")

	s = f.stream(t, streamemu.Config{Shards: 1, Limits: streamemu.Limits{ReadersPerShard: 2, ReaderIdle: time.Hour}})
	id = s.Shards()[0].ID
	var iters []*string
	for range 3 {
		it, err := s.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &f.arn, ShardId: &id, ShardIteratorType: st.ShardIteratorTypeLatest})
		require.NoError(t, err)
		iters = append(iters, it.ShardIterator)
	}
	for _, it := range iters[:2] {
		out, err := s.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it})
		require.NoError(t, err)
		_, err = s.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: out.NextShardIterator})
		require.NoError(t, err, "a reader's next iterator is the same reader")
	}
	_, err = s.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iters[2]})
	require.ErrorAs(t, err, &le, "a third reader")
	assert.Equal(t, 1, s.Refused("GetRecords", "LimitExceededException"))
}

// A stream of many shards over several days (issue 23's scale, small):
// shards roll and split by the clock, records are trimmed and closed
// shards deleted after the retention, and through all of it the listing's
// pages are exactly the shards in the stream, in id order, with their
// records still readable up to the retention; HistoryFilter keeps only the
// records it chooses.
func TestStream_ListingAndRecordsStayExactAsShardsAreDeletedOverDays(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	clock := streamemu.NewManual(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	s := f.stream(t, streamemu.Config{Shards: 40, RollAfter: 4 * time.Hour, SplitRatio: 0.3, MaxOpenShards: 60, Clock: clock, Seed: 9,
		HistoryFilter: func(r st.Record) bool { return strings.HasSuffix(item(r), "-1") }})
	deletedSeen := 0
	everListed := map[string]bool{}
	for day := range 3 {
		f.version(t, 20, day) // 20 records (EMU#item-0..19), one of them EMU#item-1
		require.NoError(t, s.Sync(ctx))
		for range 8 {
			clock.Advance(3 * time.Hour)
			shards, pages := describeAll(t, s, f.arn, 7)
			want := s.Shards()
			require.Len(t, shards, len(want), "day %d: the listing is the stream", day)
			assert.Equal(t, (len(want)+6)/7, pages)
			open := 0
			for i, sh := range shards {
				id := aws.ToString(sh.ShardId)
				assert.Equal(t, want[i].ID, id, "in id order")
				if i > 0 {
					assert.Less(t, aws.ToString(shards[i-1].ShardId), id)
				}
				everListed[id] = true
				if sh.SequenceNumberRange.EndingSequenceNumber == nil {
					open++
				}
			}
			assert.GreaterOrEqual(t, open, 40, "the open shards cover the hash space")
		}
		for id := range everListed {
			if _, err := s.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &f.arn, ShardId: aws.String(id),
				ShardIteratorType: st.ShardIteratorTypeTrimHorizon}); err != nil {
				var nf *st.ResourceNotFoundException
				require.ErrorAs(t, err, &nf)
				deletedSeen++
				delete(everListed, id)
			}
		}
	}
	assert.Greater(t, deletedSeen, 40, "shards closed over a day ago were deleted")
	f.version(t, 20, 3)
	require.NoError(t, s.Sync(ctx))
	clock.Advance(3 * time.Hour)
	// The last records are in the stream; the first days' were trimmed.
	got := 0
	for _, sh := range s.Shards() {
		recs, _ := readShard(t, s, f.arn, sh.ID)
		for _, r := range recs {
			if strings.HasPrefix(item(r), "EMU#") {
				got++
			}
		}
	}
	assert.Equal(t, 20, got, "the last 20 records, the others trimmed")
	h := s.History()
	require.Len(t, h, 4, "EMU#item-1, once a day")
	for _, e := range h {
		assert.Equal(t, "EMU#item-1", item(e.Record))
	}
}
