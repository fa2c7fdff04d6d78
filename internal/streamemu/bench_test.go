package streamemu_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ledger-dev/ledger/internal/streamemu"
)

// BenchmarkStream is a call's cost on a stream of 100 and of 1,000 open
// shards with a day of history behind them (shards rolling every ~4 hours,
// a fifth of the closes splits: several thousand closed shards at 1,000),
// records spread over every shard: a page of DescribeStream, a
// CHILD_SHARDS lookup, GetShardIterator at a sequence number, GetRecords,
// and the clock moving a second per call (the schedule's closes and the
// retention's trims) under GetRecords. The figures should not grow with
// the shards (issue 23: the emulation at AWS's scale).
//
//	go test -run '^$' -bench BenchmarkStream ./internal/streamemu/
func BenchmarkStream(b *testing.B) {
	ctx := context.Background()
	f := newFixture(b)
	const items = 4000
	for i := 0; i < items; i += 25 {
		reqs := make([]ddbtypes.WriteRequest, 0, 25)
		for j := i; j < i+25; j++ {
			reqs = append(reqs, ddbtypes.WriteRequest{PutRequest: &ddbtypes.PutRequest{Item: map[string]ddbtypes.AttributeValue{
				"PK": &ddbtypes.AttributeValueMemberS{Value: fmt.Sprintf("EMU#item-%d", j)},
				"SK": &ddbtypes.AttributeValueMemberS{Value: "V"},
			}}})
		}
		if _, err := f.ddb.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddbtypes.WriteRequest{f.table: reqs}}); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range []int{100, 1000} {
		clock := streamemu.NewManual(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
		s := f.stream(b, streamemu.Config{Shards: n, RollAfter: 4 * time.Hour, SplitRatio: 0.2, MaxOpenShards: n + n/10,
			Clock: clock, Seed: 23, PullInterval: time.Hour})
		clock.Advance(23 * time.Hour) // a day of rolls and splits, no record yet
		if err := s.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		var open, closed []string
		for _, sh := range s.Shards() {
			if sh.Closed {
				closed = append(closed, sh.ID)
			} else if sh.Records > 0 {
				open = append(open, sh.ID)
			}
		}
		b.Logf("%d open shards: %d shards in the stream, %d closed, %d open with records", n, len(s.Shards()), len(closed), len(open))
		arn := &f.arn
		b.Run(fmt.Sprintf("shards=%d/DescribeStreamPage", n), func(b *testing.B) {
			var start *string
			for b.Loop() {
				out, err := s.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: arn, ExclusiveStartShardId: start})
				if err != nil {
					b.Fatal(err)
				}
				start = out.StreamDescription.LastEvaluatedShardId
			}
		})
		b.Run(fmt.Sprintf("shards=%d/DescribeStreamChildShards", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				id := closed[i%len(closed)]
				i++
				if _, err := s.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: arn,
					ShardFilter: &st.ShardFilter{Type: st.ShardFilterTypeChildShards, ShardId: &id}}); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The first record of every open shard with records, to open
		// iterators at.
		first := make([]*string, len(open))
		for i, id := range open {
			it, err := s.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: arn, ShardId: aws.String(id), ShardIteratorType: st.ShardIteratorTypeTrimHorizon})
			if err != nil {
				b.Fatal(err)
			}
			out, err := s.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator, Limit: aws.Int32(1)})
			if err != nil {
				b.Fatal(err)
			}
			first[i] = out.Records[0].Dynamodb.SequenceNumber
		}
		b.Run(fmt.Sprintf("shards=%d/GetShardIteratorAtSequence", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				j := i % len(open)
				i++
				if _, err := s.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: arn, ShardId: &open[j],
					ShardIteratorType: st.ShardIteratorTypeAtSequenceNumber, SequenceNumber: first[j]}); err != nil {
					b.Fatal(err)
				}
			}
		})
		iters := make([]*string, len(open))
		for i, id := range open {
			it, err := s.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: arn, ShardId: aws.String(id), ShardIteratorType: st.ShardIteratorTypeTrimHorizon})
			if err != nil {
				b.Fatal(err)
			}
			iters[i] = it.ShardIterator
		}
		b.Run(fmt.Sprintf("shards=%d/GetRecords", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				j := i % len(open)
				i++
				if _, err := s.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iters[j], Limit: aws.Int32(100)}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("shards=%d/GetRecordsWhileTheClockMoves", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				clock.Advance(time.Second)
				j := i % len(open)
				i++
				it, err := s.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: arn, ShardId: &open[j], ShardIteratorType: st.ShardIteratorTypeLatest})
				if err != nil {
					continue // closed and deleted since: the schedule plays on
				}
				if _, err := s.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
