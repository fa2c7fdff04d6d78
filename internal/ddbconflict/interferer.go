package ddbconflict

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// InterfererAPI is what an Interferer calls: a client whose transport is
// the Transport the consumers under test share.
type InterfererAPI interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Interferer stands for the other transactions that hold a consumer's
// items on AWS: a take-over's stale committer claiming a checkpoint, a
// repair's rewrite of a report item, a commit of another shard sharing a
// report item after a heat split. It holds one item at a time, chosen at
// random (a table of Tables at random, then one of its items whose
// entityType is in EntityTypes), in a
// transaction of one ConditionCheck whose condition always holds: it
// changes nothing, and for the Transport's Latency the item is held, so a
// consumer's commit naming it is cancelled (TransactionConflict) and a
// single-item write of it refused (TransactionConflictException).
type Interferer struct {
	API         InterfererAPI
	Tables      []string
	EntityTypes []string
	// Pause is the wait between its transactions (default 5ms).
	Pause time.Duration
	Seed  uint64

	sent, cancelled int
	longest         time.Duration
}

// Stats returns the transactions it sent and how many of them were
// cancelled because a consumer's transaction held the item first.
func (f *Interferer) Stats() (sent, cancelled int) { return f.sent, f.cancelled }

// Longest returns the longest a transaction of its that was not cancelled
// took, send to answer: the longest it held an item (DynamoDB Local's
// answer plus the Transport's Latency), which a consumer's retry budget
// for TransactionConflict must outlast. Read it after Run returned.
func (f *Interferer) Longest() time.Duration { return f.longest }

// Run holds items until ctx ends, then returns nil; any other error (a
// failed Scan, a refusal other than a conflict) is returned at once.
func (f *Interferer) Run(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(f.Seed, 24))
	pause := f.Pause
	if pause <= 0 {
		pause = 5 * time.Millisecond
	}
	keys := make([][]map[string]types.AttributeValue, len(f.Tables)) // per table
	for n := 0; ; n++ {
		if n%50 == 0 { // learn the items as the consumers create them
			for i, tbl := range f.Tables {
				items, err := f.scan(ctx, tbl)
				if ctx.Err() != nil {
					return nil
				}
				if err != nil {
					return err
				}
				keys[i] = keys[i][:0]
				for _, it := range items {
					keys[i] = append(keys[i], map[string]types.AttributeValue{"PK": it["PK"], "SK": it["SK"]})
				}
			}
		}
		// A table at random, then one of its items: the few checkpoints
		// are held as often as the many report items.
		if i := rng.IntN(len(f.Tables)); len(keys[i]) > 0 {
			sent := time.Now()
			_, err := f.API.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
				TransactItems: AlwaysHolds(f.Tables[i], keys[i][rng.IntN(len(keys[i]))])})
			f.sent++
			var tce *types.TransactionCanceledException
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.As(err, &tce):
				f.cancelled++
			case err != nil:
				return fmt.Errorf("interferer: hold an item of %s: %w", f.Tables[i], err)
			default:
				f.longest = max(f.longest, time.Since(sent))
			}
		}
		t := time.NewTimer(time.Duration(rng.Int64N(int64(pause) + 1)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (f *Interferer) scan(ctx context.Context, tbl string) ([]map[string]types.AttributeValue, error) {
	names := map[string]string{"#e": "entityType"}
	values := map[string]types.AttributeValue{}
	filter := ""
	for i, et := range f.EntityTypes {
		v := fmt.Sprintf(":e%d", i)
		values[v] = &types.AttributeValueMemberS{Value: et}
		if filter != "" {
			filter += " OR "
		}
		filter += "#e = " + v
	}
	in := &dynamodb.ScanInput{TableName: aws.String(tbl), ProjectionExpression: aws.String("PK, SK")}
	if filter != "" {
		in.FilterExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = aws.String(filter), names, values
		in.ProjectionExpression = aws.String("PK, SK, #e")
	}
	var out []map[string]types.AttributeValue
	p := dynamodb.NewScanPaginator(f.API, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("interferer: scan %s: %w", tbl, err)
		}
		out = append(out, page.Items...)
	}
	return out, nil
}
