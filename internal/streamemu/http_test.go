package streamemu_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
)

// The front end is what a consumer in another process takes: the SDK's
// own client, pointed at it.
var _ processor.StreamReader = (*dynamodbstreams.Client)(nil)

// serve starts the HTTP front end of s and returns the SDK's Streams
// client (as the consumers build it) pointed at it.
func serve(t *testing.T, s *streamemu.Stream) *dynamodbstreams.Client {
	t.Helper()
	srv := httptest.NewServer(streamemu.Handler(s))
	t.Cleanup(srv.Close)
	return poller.NewStreamsClient(ddbtest.Config(t), func(o *dynamodbstreams.Options) {
		o.BaseEndpoint = aws.String(srv.URL)
		o.RetryMaxAttempts = 1
	})
}

// utc gives records a canonical creation time (the SDK decodes epoch
// seconds into UTC; the emulation holds DynamoDB Local's decoding).
func utc(recs []st.Record) []st.Record {
	out := make([]st.Record, len(recs))
	for i, r := range recs {
		d := *r.Dynamodb
		if d.ApproximateCreationDateTime != nil {
			d.ApproximateCreationDateTime = aws.Time(d.ApproximateCreationDateTime.UTC())
		}
		r.Dynamodb = &d
		out[i] = r
	}
	return out
}

// readAll reads a shard from TRIM_HORIZON through any reader, in pages of
// 7.
func readAll(t *testing.T, r processor.StreamReader, arn, id string) []st.Record {
	t.Helper()
	ctx := context.Background()
	it, err := r.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &arn, ShardId: &id, ShardIteratorType: st.ShardIteratorTypeTrimHorizon})
	require.NoError(t, err)
	var recs []st.Record
	for iter := it.ShardIterator; iter != nil; {
		out, err := r.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(7)})
		require.NoError(t, err)
		recs = append(recs, out.Records...)
		if len(out.Records) == 0 {
			break // an open shard's current end
		}
		iter = out.NextShardIterator
	}
	return recs
}

// Over HTTP, through the SDK's client, the emulation answers what it
// answers in process: the same listing page by page (lineage, sequence
// number ranges), the same CHILD_SHARDS, the same records in every shard
// with every kind of attribute value, and ListStreams names the stream.
func TestHandler_SDKClientSeesTheSameStreamOverHTTP(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	s := f.stream(t, streamemu.Config{Shards: 3, RollRecords: 30, SplitRatio: 1, MaxOpenShards: 8, Seed: 11})
	c := serve(t, s)

	// An item with every kind of attribute value, empty map and list too.
	every := map[string]ddbtypes.AttributeValue{
		"PK": &ddbtypes.AttributeValueMemberS{Value: "EMU#every"}, "SK": &ddbtypes.AttributeValueMemberS{Value: "V"},
		"s": &ddbtypes.AttributeValueMemberS{Value: "São Paulo \"quoted\" \u2028"}, "n": &ddbtypes.AttributeValueMemberN{Value: "-12.34"},
		"b": &ddbtypes.AttributeValueMemberB{Value: []byte{0, 1, 2, 0xff}}, "t": &ddbtypes.AttributeValueMemberBOOL{Value: true},
		"f": &ddbtypes.AttributeValueMemberBOOL{Value: false}, "null": &ddbtypes.AttributeValueMemberNULL{Value: true},
		"ss": &ddbtypes.AttributeValueMemberSS{Value: []string{"a", "b"}}, "ns": &ddbtypes.AttributeValueMemberNS{Value: []string{"1", "2.5"}},
		"bs": &ddbtypes.AttributeValueMemberBS{Value: [][]byte{{1}, {2, 3}}},
		"l": &ddbtypes.AttributeValueMemberL{Value: []ddbtypes.AttributeValue{&ddbtypes.AttributeValueMemberS{Value: "x"},
			&ddbtypes.AttributeValueMemberL{Value: []ddbtypes.AttributeValue{}}, &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{}}}},
		"m": &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{"inner": &ddbtypes.AttributeValueMemberN{Value: "7"},
			"deep": &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{"z": &ddbtypes.AttributeValueMemberNULL{Value: true}}}}},
		"em": &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{}},
	}
	_, err := f.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: every})
	require.NoError(t, err)
	f.put(t, 25, 6) // 150 records
	_, err = f.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(f.table), Key: map[string]ddbtypes.AttributeValue{
		"PK": &ddbtypes.AttributeValueMemberS{Value: "EMU#every"}, "SK": &ddbtypes.AttributeValueMemberS{Value: "V"}}})
	require.NoError(t, err)
	require.NoError(t, s.Sync(ctx))

	want, _ := describeAll(t, s, f.arn, 4)
	var got []st.Shard
	pages := 0
	for start := (*string)(nil); ; pages++ {
		out, err := c.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &f.arn, Limit: aws.Int32(4), ExclusiveStartShardId: start})
		require.NoError(t, err)
		d := out.StreamDescription
		assert.Equal(t, f.arn, aws.ToString(d.StreamArn))
		assert.Equal(t, st.StreamStatusEnabled, d.StreamStatus)
		assert.Equal(t, st.StreamViewTypeNewAndOldImages, d.StreamViewType)
		assert.Equal(t, f.table, aws.ToString(d.TableName))
		assert.NotEmpty(t, d.KeySchema)
		got = append(got, d.Shards...)
		if start = d.LastEvaluatedShardId; start == nil {
			break
		}
	}
	require.Greater(t, len(want), 3, "shards rolled and split")
	assert.Equal(t, want, got, "the listing, over HTTP as in process")
	assert.Equal(t, (len(want)+3)/4, pages+1)

	splits := 0
	done := map[string]bool{}
	for len(done) < len(want) {
		for _, sh := range want {
			id, parent := aws.ToString(sh.ShardId), aws.ToString(sh.ParentShardId)
			if done[id] || parent != "" && !done[parent] {
				continue
			}
			filter := &st.ShardFilter{Type: st.ShardFilterTypeChildShards, ShardId: aws.String(id)}
			kidsHTTP, err := c.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &f.arn, ShardFilter: filter})
			require.NoError(t, err)
			kids, err := s.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &f.arn, ShardFilter: filter})
			require.NoError(t, err)
			assert.Equal(t, kids.StreamDescription.Shards, kidsHTTP.StreamDescription.Shards, "children of %s", id)
			if len(kids.StreamDescription.Shards) == 2 {
				splits++
			}
			assert.Equal(t, utc(readAll(t, s, f.arn, id)), utc(readAll(t, c, f.arn, id)), "records of %s", id)
			done[id] = true
		}
	}
	assert.Positive(t, splits)

	// The item with every kind of value, as the SDK decoded it.
	var insert, remove *st.Record
	for _, sh := range want {
		for _, r := range readAll(t, c, f.arn, aws.ToString(sh.ShardId)) {
			if item(r) == "EMU#every" {
				switch r.EventName {
				case st.OperationTypeInsert:
					insert = &r
				case st.OperationTypeRemove:
					remove = &r
				}
			}
		}
	}
	require.NotNil(t, insert)
	require.NotNil(t, remove)
	wantImage := map[string]st.AttributeValue{}
	for k, v := range every {
		wantImage[k] = toStreamValue(v)
	}
	assert.Equal(t, wantImage, insert.Dynamodb.NewImage)
	assert.Equal(t, wantImage, remove.Dynamodb.OldImage)
	assert.Nil(t, remove.Dynamodb.NewImage)
	assert.NotNil(t, insert.Dynamodb.ApproximateCreationDateTime)
	assert.Positive(t, aws.ToInt64(insert.Dynamodb.SizeBytes))

	ls, err := c.ListStreams(ctx, &dynamodbstreams.ListStreamsInput{TableName: aws.String(f.table)})
	require.NoError(t, err)
	require.Len(t, ls.Streams, 1)
	assert.Equal(t, f.arn, aws.ToString(ls.Streams[0].StreamArn))
	ls, err = c.ListStreams(ctx, &dynamodbstreams.ListStreamsInput{TableName: aws.String("another")})
	require.NoError(t, err)
	assert.Empty(t, ls.Streams)
}

// toStreamValue converts a DynamoDB attribute value into the Streams
// package's type of the same content.
func toStreamValue(v ddbtypes.AttributeValue) st.AttributeValue {
	switch v := v.(type) {
	case *ddbtypes.AttributeValueMemberS:
		return &st.AttributeValueMemberS{Value: v.Value}
	case *ddbtypes.AttributeValueMemberN:
		return &st.AttributeValueMemberN{Value: v.Value}
	case *ddbtypes.AttributeValueMemberB:
		return &st.AttributeValueMemberB{Value: v.Value}
	case *ddbtypes.AttributeValueMemberBOOL:
		return &st.AttributeValueMemberBOOL{Value: v.Value}
	case *ddbtypes.AttributeValueMemberNULL:
		return &st.AttributeValueMemberNULL{Value: v.Value}
	case *ddbtypes.AttributeValueMemberSS:
		return &st.AttributeValueMemberSS{Value: v.Value}
	case *ddbtypes.AttributeValueMemberNS:
		return &st.AttributeValueMemberNS{Value: v.Value}
	case *ddbtypes.AttributeValueMemberBS:
		return &st.AttributeValueMemberBS{Value: v.Value}
	case *ddbtypes.AttributeValueMemberL:
		l := []st.AttributeValue{}
		for _, e := range v.Value {
			l = append(l, toStreamValue(e))
		}
		return &st.AttributeValueMemberL{Value: l}
	case *ddbtypes.AttributeValueMemberM:
		m := map[string]st.AttributeValue{}
		for k, e := range v.Value {
			m[k] = toStreamValue(e)
		}
		return &st.AttributeValueMemberM{Value: m}
	}
	panic("unknown attribute value")
}

// The emulation's refusals reach the SDK as AWS's would: HTTP 400 with the
// error's type, decoded into the SDK's typed errors (trimmed, expired, not
// found, limit exceeded) or, for a ValidationException (which the Streams
// model does not declare), an API error with that code.
func TestHandler_ErrorsAreTheSDKsTypedErrors(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	clock := streamemu.NewManual(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	s := f.stream(t, streamemu.Config{Shards: 1, Clock: clock})
	c := serve(t, s)
	f.put(t, 4, 2)
	require.NoError(t, s.Sync(ctx))
	id := s.Shards()[0].ID
	old := readAll(t, c, f.arn, id)
	require.GreaterOrEqual(t, len(old), 8)
	it, err := c.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &f.arn, ShardId: &id, ShardIteratorType: st.ShardIteratorTypeTrimHorizon})
	require.NoError(t, err)

	clock.Advance(16 * time.Minute)
	_, err = c.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator})
	var expired *st.ExpiredIteratorException
	require.ErrorAs(t, err, &expired)
	assert.Contains(t, expired.ErrorMessage(), "maximum age")

	_, err = c.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String("not an iterator")})
	requireCode(t, err, "ValidationException")
	_, err = c.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator, Limit: aws.Int32(5000)})
	requireCode(t, err, "ValidationException")

	clock.Advance(12 * time.Hour)
	_, err = s.Close(id, true)
	require.NoError(t, err)
	clock.Advance(12 * time.Hour) // the records are a day old: trimmed
	_, err = c.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &f.arn, ShardId: &id,
		ShardIteratorType: st.ShardIteratorTypeAfterSequenceNumber, SequenceNumber: old[2].Dynamodb.SequenceNumber})
	var trimmed *st.TrimmedDataAccessException
	require.ErrorAs(t, err, &trimmed)
	assert.Equal(t, "The data you are trying to access has been trimmed.", trimmed.ErrorMessage())

	clock.Advance(12 * time.Hour) // closed a day ago: deleted
	_, err = c.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &f.arn, ShardId: &id, ShardIteratorType: st.ShardIteratorTypeTrimHorizon})
	var nf *st.ResourceNotFoundException
	require.ErrorAs(t, err, &nf)
	_, err = c.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(f.arn + "-other")})
	require.ErrorAs(t, err, &nf)
	gone, err := processor.ShardGone(ctx, c, f.arn, id)
	require.NoError(t, err)
	assert.True(t, gone, "ShardGone confirms it through the front end")

	limited := f.stream(t, streamemu.Config{Shards: 1, Limits: streamemu.Limits{DescribeStreamPerSecond: 0.001}})
	lc := serve(t, limited)
	_, err = lc.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &f.arn})
	require.NoError(t, err)
	_, err = lc.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &f.arn})
	var le *st.LimitExceededException
	require.ErrorAs(t, err, &le)
	assert.Equal(t, 1, limited.Refused("DescribeStream", "LimitExceededException"))
}

func requireCode(t *testing.T, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	require.True(t, errors.As(err, &ae), "an API error: %v", err)
	assert.Equal(t, code, ae.ErrorCode())
	assert.True(t, strings.Contains(err.Error(), code), "%v", err)
}
