package table

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file is the layout of the tenant budget, the distributed per-tenant
// limit of the writer (docs/design.md, "Tenant budget"). A tenant's budget
// is S token buckets, one item per shard (aggregates.BudgetKey) in the
// coordination table (no stream: a take is no record), each
// refilled at the tenant's rate divided by S. A bucket is kept as the
// generic cell rate algorithm keeps it: not a balance and a time, which a
// DynamoDB update expression could not refill (it has no multiplication),
// but one number, the time at which the bucket would be full again:
//
//	entityType  BUDGET
//	tat         N, microseconds since the Unix epoch ("theoretical arrival
//	            time"): taking n units moves it n×Interval later; the
//	            bucket holds (now + Tolerance − tat) / Interval units, at
//	            most Tolerance/Interval (the burst) when tat ≤ now
//	expiresAt   N, epoch seconds: TTL, a day after the last take, so the
//	            buckets of tenants gone quiet leave the table
//
// Taking is one conditional UpdateItem (TakeBudget): the condition is that
// the n units are there, so concurrent writers never take the same units
// twice, and no read comes first. Units may be charged beyond what is there
// (debt): tat then moves past now + Tolerance and the next take waits.

// Budget attributes.
const (
	attrBudgetTAT = "tat"
)

// BudgetAPI is the part of the DynamoDB API TakeBudget uses.
type BudgetAPI interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// BudgetBucket is one shard's bucket: Interval is the time one unit takes to
// come back (S / the tenant's rate), Tolerance how far ahead of now tat may
// be and still hold units (the shard's burst × Interval).
type BudgetBucket struct {
	Interval  time.Duration
	Tolerance time.Duration
}

// micros returns n units' interval in microseconds, rounded: the
// arithmetic of rates like 30 a second over 4 shards is not exact, and a
// microsecond either way is nothing to a bucket.
func (b BudgetBucket) micros(n float64) int64 {
	return int64(math.Round(n * float64(b.Interval) / float64(time.Microsecond)))
}

// Holds reports whether n units fit the bucket when it is full: a take of
// more can never be granted.
func (b BudgetBucket) Holds(n float64) bool {
	return b.Interval > 0 && b.micros(n) <= b.Tolerance.Microseconds()
}

// BudgetTake is what TakeBudget did.
type BudgetTake struct {
	// Granted reports whether the units were taken (and the debt charged).
	Granted bool
	// Wait is, when not Granted, how long until the units are there.
	Wait time.Duration
	// TAT is the bucket's tat as last seen (microseconds since the epoch),
	// the hint of the next take.
	TAT int64
	// Calls is the number of UpdateItem calls made (1, or 2 when the hint
	// was wrong), WriteUnits the write capacity they consumed as DynamoDB
	// reported it.
	Calls      int
	WriteUnits float64
}

// budgetTTL is how long an untouched bucket stays in the table: a day, far
// beyond any tolerance, so a bucket that expires was full.
const budgetTTL = 24 * time.Hour

// TakeBudget takes n units from the bucket under key at now, and charges
// debt units more whatever the bucket holds. n must fit the bucket
// (n×Interval ≤ Tolerance), or it can never be granted. hint is the
// bucket's tat as last seen (0: unknown); it chooses which of the two
// conditional updates is tried first (the bucket full: tat ≤ now; or
// filling: tat > now), and a wrong guess costs a second call, the
// condition failure returning the item (ReturnValuesOnConditionCheckFailure).
// Errors are DynamoDB's, wrapped with the key; a refusal is not an error.
func TakeBudget(ctx context.Context, api BudgetAPI, tableName string, key aggregates.Key, b BudgetBucket, now time.Time, n, debt float64, hint int64) (BudgetTake, error) {
	if b.Interval <= 0 || n <= 0 || debt < 0 {
		return BudgetTake{}, fmt.Errorf("take budget %s: interval %v, units %v, debt %v", key, b.Interval, n, debt)
	}
	needUs, costUs, tolUs := b.micros(n), b.micros(n+debt), b.Tolerance.Microseconds()
	if !b.Holds(n) {
		return BudgetTake{}, fmt.Errorf("take budget %s: %v units never fit a bucket of %v units", key, n, float64(b.Tolerance)/float64(b.Interval))
	}
	nowUs := now.UnixMicro()
	expires := now.Add(budgetTTL).Unix()
	var res BudgetTake
	full := hint <= nowUs
	for range 3 { // full → filling → full at most: tat moves only forward
		in := &dynamodb.UpdateItemInput{
			TableName:                           aws.String(tableName),
			Key:                                 Key(key),
			ReturnValues:                        types.ReturnValueUpdatedNew,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			ReturnConsumedCapacity:              types.ReturnConsumedCapacityTotal,
			ExpressionAttributeNames:            map[string]string{"#tat": attrBudgetTAT, "#et": AttrEntityType, "#exp": AttrExpiresAt},
		}
		if full {
			// tat ≤ now: the bucket is full; tat restarts from now.
			in.ConditionExpression = aws.String("attribute_not_exists(#tat) OR #tat <= :now")
			in.UpdateExpression = aws.String("SET #tat = :tat, #et = :et, #exp = :exp")
			in.ExpressionAttributeValues = map[string]types.AttributeValue{
				":now": Int(nowUs), ":tat": Int(nowUs + costUs), ":et": S(aggregates.EntityBudget), ":exp": Int(expires),
			}
		} else {
			// now < tat ≤ now + Tolerance − n×Interval: the n units are there.
			in.ConditionExpression = aws.String("#tat > :now AND #tat <= :limit")
			in.UpdateExpression = aws.String("SET #tat = #tat + :cost, #et = :et, #exp = :exp")
			in.ExpressionAttributeValues = map[string]types.AttributeValue{
				":now": Int(nowUs), ":limit": Int(nowUs + tolUs - needUs), ":cost": Int(costUs), ":et": S(aggregates.EntityBudget), ":exp": Int(expires),
			}
		}
		out, err := api.UpdateItem(ctx, in)
		res.Calls++
		var ccf *types.ConditionalCheckFailedException
		switch {
		case err == nil:
			if out.ConsumedCapacity != nil {
				res.WriteUnits += aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
			}
			res.Granted = true
			res.TAT, err = budgetTAT(out.Attributes)
			if err != nil {
				return res, fmt.Errorf("take budget %s: %w", key, err)
			}
			return res, nil
		case errors.As(err, &ccf):
			res.WriteUnits++ // a refused write consumes a write unit and reports none
			tat, perr := budgetTAT(ccf.Item)
			if perr != nil {
				return res, fmt.Errorf("take budget %s: %w", key, perr)
			}
			res.TAT = tat
			switch {
			case tat <= nowUs:
				full = true
			case tat <= nowUs+tolUs-needUs:
				full = false
			default:
				res.Wait = time.Duration(tat-(nowUs+tolUs-needUs)) * time.Microsecond
				return res, nil
			}
		default:
			return res, fmt.Errorf("take budget %s: %w", key, err)
		}
	}
	return res, fmt.Errorf("take budget %s: the bucket changed under three attempts", key)
}

// budgetTAT reads tat from a bucket item (0 when the item or attribute is
// missing: a full bucket).
func budgetTAT(item map[string]types.AttributeValue) (int64, error) {
	v, ok := item[attrBudgetTAT]
	if !ok {
		return 0, nil
	}
	nv, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("attribute %s is %T, want a number", attrBudgetTAT, v)
	}
	tat, err := strconv.ParseInt(nv.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("attribute %s: %w", attrBudgetTAT, err)
	}
	return tat, nil
}
