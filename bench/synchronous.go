package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
)

// Synchronous is seed 003's createWithReport (approach 3): no stream; the
// writer puts the transaction and updates its three reports in one
// TransactWriteItems. The reports' update is the seed's, totals and count
// with if_not_exists; a modify or a delete (which the seed does not show) is
// the same transaction with the delta new − old, guarded by the version the
// writer read (optimistic locking, as seed 004 does), so a retried request
// fails its condition instead of counting twice.
//
// It keeps totals and counts only: a breakdown entry cannot be initialised
// and incremented by one update, and a transaction cannot touch the same
// item twice, so seed 003's two-step breakdown update has no place in it.
type Synchronous struct {
	API   WriteAPI
	Table string
}

// ErrAlreadyApplied is returned by Write when the write's condition shows it
// was applied before (a retried request).
var ErrAlreadyApplied = errors.New("already applied")

// Write applies one change with its report updates; updatedAt is stamped
// now. A retried change (its condition fails) returns ErrAlreadyApplied.
func (s *Synchronous) Write(ctx context.Context, op Op, now time.Time) error {
	in, err := s.request(ctx, op, now)
	if err != nil {
		return err
	}
	return s.send(ctx, in)
}

// WriteTwice writes op, then sends the same request again as a client that
// lost the first answer would (a new request, so DynamoDB's idempotency
// token does not apply): the second must fail its condition.
func (s *Synchronous) WriteTwice(ctx context.Context, op Op, now time.Time) error {
	in, err := s.request(ctx, op, now)
	if err != nil {
		return err
	}
	if err := s.send(ctx, in); err != nil {
		return err
	}
	if err := s.send(ctx, in); !errors.Is(err, ErrAlreadyApplied) {
		return fmt.Errorf("retried write of %s: got %v; want its condition to fail", op.Key, err)
	}
	return nil
}

func (s *Synchronous) send(ctx context.Context, in *dynamodb.TransactWriteItemsInput) error {
	cp := *in
	cp.ClientRequestToken = nil
	_, err := s.API.TransactWriteItems(ctx, &cp)
	var tce *ddbtypes.TransactionCanceledException
	if errors.As(err, &tce) && len(tce.CancellationReasons) > 0 && aws.ToString(tce.CancellationReasons[0].Code) == "ConditionalCheckFailed" {
		return ErrAlreadyApplied
	}
	return err
}

func (s *Synchronous) request(ctx context.Context, op Op, now time.Time) (*dynamodb.TransactWriteItemsInput, error) {
	key := map[string]ddbtypes.AttributeValue{"PK": sAV(op.Key.PK), "SK": sAV(op.Key.SK)}
	var items []ddbtypes.TransactWriteItem
	var old map[string]ddbtypes.AttributeValue
	if op.Kind != OpInsert {
		// The writer reads the item it changes (its version and old figures).
		out, err := s.API.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.Table, Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", op.Key, err)
		}
		if out.Item == nil {
			return nil, fmt.Errorf("read %s: no such transaction", op.Key)
		}
		old = out.Item
	}
	switch op.Kind {
	case OpInsert:
		items = append(items, ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{
			TableName: &s.Table, Item: stamped(op.New, now), ConditionExpression: aws.String("attribute_not_exists(PK)"),
		}})
	case OpModify:
		items = append(items, ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{
			TableName: &s.Table, Item: stamped(op.New, now),
			ConditionExpression:       aws.String("#version = :version"),
			ExpressionAttributeNames:  map[string]string{"#version": "version"},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":version": old["version"]},
		}})
	case OpDelete:
		items = append(items, ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{
			TableName: &s.Table, Key: key,
			ConditionExpression:       aws.String("#version = :version"),
			ExpressionAttributeNames:  map[string]string{"#version": "version"},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":version": old["version"]},
		}})
	}
	f := aggregates.NewFold()
	f.AddChange(txOf(old), txOf(op.New))
	for _, k := range f.Keys() {
		if f.Report(k).Totals.IsZero() {
			continue // only a breakdown changed, which this approach does not keep
		}
		inc, exp, cnt := totalsValues(f.Report(k).Totals)
		items = append(items, ddbtypes.TransactWriteItem{Update: &ddbtypes.Update{
			TableName: &s.Table, Key: reportKeyAV(k),
			UpdateExpression: aws.String("SET #totalIncome = if_not_exists(#totalIncome, :zero) + :incomeAmount, " +
				"#totalExpense = if_not_exists(#totalExpense, :zero) + :expenseAmount, " +
				"#transactionCount = if_not_exists(#transactionCount, :zero) + :one"),
			ExpressionAttributeNames: map[string]string{"#totalIncome": "totalIncome", "#totalExpense": "totalExpense", "#transactionCount": "transactionCount"},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
				":zero": nAV("0"), ":incomeAmount": inc, ":expenseAmount": exp, ":one": cnt,
			},
		}})
	}
	return &dynamodb.TransactWriteItemsInput{TransactItems: items}, nil
}

// stamped returns item with updatedAt set to now.
func stamped(item map[string]ddbtypes.AttributeValue, now time.Time) map[string]ddbtypes.AttributeValue {
	out := make(map[string]ddbtypes.AttributeValue, len(item)+1)
	for k, v := range item {
		out[k] = v
	}
	out["updatedAt"] = sAV(now.UTC().Format(time.RFC3339Nano))
	return out
}

// txOf returns the valid transaction an item holds (nil for none or an
// invalid one), by the processor's own validation.
func txOf(item map[string]ddbtypes.AttributeValue) *aggregates.Transaction {
	if item == nil {
		return nil
	}
	key := map[string]ddbtypes.AttributeValue{"PK": item["PK"], "SK": item["SK"]}
	_, tx := processor.Transactions(processor.Record{EventName: "INSERT", SequenceNumber: "1", Keys: key, NewImage: item})
	return tx
}
