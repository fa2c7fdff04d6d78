package ledgertest

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ledger-dev/ledger/processor"
)

// Shard is the records of one shard read so far, in order.
type Shard struct {
	ID      string
	Records []processor.Record
}

// ReadAll reads every record of every shard of the stream after the given
// per-shard sequence numbers (from the trim horizon for shards not in
// after), until each shard is caught up (a page comes back empty). It is a
// test reader: no leases, no checkpoints, parents not ordered before
// children (DynamoDB Local has one shard).
func ReadAll(ctx context.Context, api processor.StreamReader, streamARN string, after map[string]string) ([]Shard, error) {
	var shards []streamtypes.Shard
	var start *string
	for {
		out, err := api.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &streamARN, ExclusiveStartShardId: start})
		if err != nil {
			return nil, fmt.Errorf("describe stream: %w", err)
		}
		shards = append(shards, out.StreamDescription.Shards...)
		start = out.StreamDescription.LastEvaluatedShardId
		if start == nil {
			break
		}
	}
	var res []Shard
	for _, sh := range shards {
		id := aws.ToString(sh.ShardId)
		in := &dynamodbstreams.GetShardIteratorInput{StreamArn: &streamARN, ShardId: &id, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon}
		if seq, ok := after[id]; ok && seq != "" {
			in.ShardIteratorType = streamtypes.ShardIteratorTypeAfterSequenceNumber
			in.SequenceNumber = &seq
		}
		it, err := api.GetShardIterator(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("shard iterator %s: %w", id, err)
		}
		shard := Shard{ID: id}
		iter := it.ShardIterator
		for iter != nil {
			out, err := api.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(1000)})
			if err != nil {
				return nil, fmt.Errorf("get records %s: %w", id, err)
			}
			for _, r := range out.Records {
				shard.Records = append(shard.Records, processor.FromStream(r, streamARN))
			}
			if len(out.Records) == 0 {
				break
			}
			iter = out.NextShardIterator
		}
		res = append(res, shard)
	}
	return res, nil
}
