package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	ledgertable "github.com/ledger-dev/ledger/table"
)

// writeRateTable is the table DynamoDB Local's own item-write rate is
// measured on.
const writeRateTable = "bench-write-rate"

// writeRateBatch is how many updates one measured transaction holds: what
// ledger's commits hold at most (99 items and the guard's).
const writeRateBatch = 99

// WriteRate is one measurement of DynamoDB Local's own item-write rate:
// Workers goroutines writing additive updates of report-shaped items
// (ItemBytes bytes by DynamoDB's rules) for Took, each to its own
// writeRateBatch items, as UpdateItem requests or as TransactWriteItems
// of writeRateBatch updates.
type WriteRate struct {
	When       string // before or after the backlogs
	Op         string // UpdateItem or TransactWriteItems
	Workers    int
	Requests   int
	ItemWrites int
	ItemBytes  int
	Took       time.Duration
}

// PerSecond is item writes per second.
func (w WriteRate) PerSecond() float64 {
	if w.Took <= 0 {
		return 0
	}
	return float64(w.ItemWrites) / w.Took.Seconds()
}

// writeRateItem is worker w's i-th item: shaped like a report item (a
// branch's daily report with totals and a breakdown by category), about
// 500 bytes, near the p50 of workload b's report items).
func writeRateItem(w, i int) map[string]ddbtypes.AttributeValue {
	cats := map[string]ddbtypes.AttributeValue{}
	for c := range 20 {
		cats[fmt.Sprintf("category-%02d", c)] = &ddbtypes.AttributeValueMemberN{Value: "1250.75"}
	}
	return map[string]ddbtypes.AttributeValue{
		ledgertable.AttrPK: sAV(fmt.Sprintf("BRANCH#rate-%d#REPORTING", w)),
		ledgertable.AttrSK: sAV(fmt.Sprintf("DAILY#2024-01-%03d", i)),
		"entityType":       sAV("REPORT"),
		"income":           &ddbtypes.AttributeValueMemberN{Value: "0"},
		"expense":          &ddbtypes.AttributeValueMemberN{Value: "0"},
		"txCount":          &ddbtypes.AttributeValueMemberN{Value: "0"},
		"byCategory":       &ddbtypes.AttributeValueMemberM{Value: cats},
		"updatedAt":        sAV("2024-01-01T00:00:00Z"),
	}
}

// writeRateUpdate is the additive update of worker w's i-th item.
func writeRateUpdate(table string, w, i, n int) *ddbtypes.Update {
	return &ddbtypes.Update{
		TableName: &table,
		Key: map[string]ddbtypes.AttributeValue{
			ledgertable.AttrPK: sAV(fmt.Sprintf("BRANCH#rate-%d#REPORTING", w)),
			ledgertable.AttrSK: sAV(fmt.Sprintf("DAILY#2024-01-%03d", i)),
		},
		UpdateExpression:         aws.String("SET income = income + :v, txCount = txCount + :one, byCategory.#c = byCategory.#c + :v, updatedAt = :at"),
		ExpressionAttributeNames: map[string]string{"#c": fmt.Sprintf("category-%02d", n%20)},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":v":   &ddbtypes.AttributeValueMemberN{Value: "12.5"},
			":one": &ddbtypes.AttributeValueMemberN{Value: "1"},
			":at":  sAV(time.Now().UTC().Format(time.RFC3339Nano)),
		},
	}
}

// measureWriteRates measures DynamoDB Local's item-write rate on table: for
// each of UpdateItem and TransactWriteItems, with one worker and with
// workers, for d each.
func measureWriteRates(ctx context.Context, db *dynamodb.Client, table string, workers int, d time.Duration) ([]WriteRate, error) {
	var puts []ddbtypes.WriteRequest
	for w := range workers {
		for i := range writeRateBatch {
			puts = append(puts, ddbtypes.WriteRequest{PutRequest: &ddbtypes.PutRequest{Item: writeRateItem(w, i)}})
		}
	}
	for len(puts) > 0 {
		n := min(25, len(puts))
		out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddbtypes.WriteRequest{table: puts[:n]}})
		if err != nil {
			return nil, fmt.Errorf("write rate: seed items: %w", err)
		}
		puts = append(puts[n:], out.UnprocessedItems[table]...)
	}
	size := ledgertable.ItemSize(writeRateItem(0, 0))
	var out []WriteRate
	ops := []string{"UpdateItem", "TransactWriteItems"}
	for _, op := range ops {
		// Unmeasured: DynamoDB Local is a JVM, slower in its first seconds.
		if _, err := writeRate(ctx, db, table, op, workers, d/2); err != nil {
			return nil, err
		}
	}
	for _, op := range ops {
		for _, n := range []int{1, workers} {
			r, err := writeRate(ctx, db, table, op, n, d)
			if err != nil {
				return out, err
			}
			r.ItemBytes = size
			out = append(out, r)
		}
	}
	return out, nil
}

// writeRate runs one measurement: workers writing op for d.
func writeRate(ctx context.Context, db *dynamodb.Client, table, op string, workers int, d time.Duration) (WriteRate, error) {
	res := WriteRate{Op: op, Workers: workers}
	requests := make([]int, workers)
	errs := make([]error, workers)
	start := time.Now()
	stop := start.Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(stop) && errs[w] == nil; n++ {
				switch op {
				case "UpdateItem":
					u := writeRateUpdate(table, w, n%writeRateBatch, n)
					_, errs[w] = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: u.TableName, Key: u.Key,
						UpdateExpression: u.UpdateExpression, ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues})
				default:
					items := make([]ddbtypes.TransactWriteItem, writeRateBatch)
					for i := range items {
						items[i].Update = writeRateUpdate(table, w, i, n)
					}
					_, errs[w] = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
				}
				requests[w]++
			}
		}()
	}
	wg.Wait()
	res.Took = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("write rate, %s × %d workers: %w", op, workers, err)
	}
	for _, n := range requests {
		res.Requests += n
	}
	res.ItemWrites = res.Requests
	if op != "UpdateItem" {
		res.ItemWrites *= writeRateBatch
	}
	return res, nil
}

// bestWriteRate is the highest item-write rate measured for op (0: none).
func bestWriteRate(rates []WriteRate, op string) float64 {
	best := 0.0
	for _, r := range rates {
		if r.Op == op {
			best = max(best, r.PerSecond())
		}
	}
	return best
}

// itemWriteCeiling is DynamoDB Local's item-write ceiling for row's kind of
// writes: the best transactional rate when the row wrote transactions, else
// the best UpdateItem rate, of both measurements (before and after the
// backlogs: the machine's load moves in between).
func (res *Result) itemWriteCeiling(r Row) float64 {
	if r.Cost.Requests["TransactWriteItems"] > 0 {
		return bestWriteRate(res.WriteRates, "TransactWriteItems")
	}
	return bestWriteRate(res.WriteRates, "UpdateItem")
}

// ItemWriteRate is item writes per second end to end.
func (r Row) ItemWriteRate() float64 {
	if r.Took <= 0 {
		return 0
	}
	return float64(r.Cost.ItemWrites) / r.Took.Seconds()
}
