package writer

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// A change and how it commits.
//
// A change is what a mutation writes: its actions (Put, Update, Delete or
// ConditionCheck), each with its condition, committed atomically in one
// TransactWriteItems together with the idempotency record (a lone Put,
// Update or Delete without a record is one conditional write). Each action
// carries its own explanation of a failed condition (onFail), so what a
// cancellation means never depends on where the action stands in the
// transaction: change.explain, the one place a cancellation reason's
// position is read, maps it back to the action that failed.

// onFail explains a failed condition of one action from old, the item as
// DynamoDB returned it (nil when it was absent or not returned): a problem
// to answer, or retry to prepare the change again, or an error (the table
// breaks an invariant, or it could not be read).
type onFail func(ctx context.Context, old map[string]ddbtypes.AttributeValue) (p *Problem, retry bool, err error)

// action is one item of a change and what its condition failing means
// (onFail nil: the action has no condition).
type action struct {
	item   ddbtypes.TransactWriteItem
	onFail onFail
}

// change is what a mutation writes (see above).
type change struct {
	op      string // the metric label: create, update, delete, tenant_create, …
	actions []action
}

// newChange is a change, labelled op, of actions.
func newChange(op string, actions ...action) *change {
	return &change{op: op, actions: actions}
}

// add appends actions to ch.
func (ch *change) add(actions ...action) *change {
	ch.actions = append(ch.actions, actions...)
	return ch
}

// items are ch's items in commit order.
func (ch *change) items() []ddbtypes.TransactWriteItem {
	items := make([]ddbtypes.TransactWriteItem, len(ch.actions))
	for i, a := range ch.actions {
		items[i] = a.item
	}
	return items
}

// explain answers a failed condition of ch: the explanation of the action
// whose condition failed. An action without one (an unconditional item) or
// a position outside ch is an error: DynamoDB reported what cannot be.
func (ch *change) explain(ctx context.Context, f failure) (*Problem, bool, error) {
	if f.index < 0 || f.index >= len(ch.actions) {
		return nil, false, fmt.Errorf("%s: a condition failed at item %d of %d", ch.op, f.index, len(ch.actions))
	}
	if a := ch.actions[f.index]; a.onFail != nil {
		return a.onFail(ctx, f.old)
	}
	return nil, false, fmt.Errorf("%s: item %d has no condition, yet its condition failed", ch.op, f.index)
}

// refuse explains a failed condition with p.
func refuse(p *Problem) onFail {
	return func(context.Context, map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
		return p, false, nil
	}
}

// prepareAgain explains a failed condition as a change of what the request
// read (or a colliding new id): the mutation prepares the change again.
func prepareAgain(context.Context, map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
	return nil, true, nil
}

// broken explains a failed condition that the table's invariants rule out:
// an error, format and args saying which.
func broken(format string, args ...any) onFail {
	err := fmt.Errorf(format, args...)
	return func(context.Context, map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
		return nil, false, err
	}
}

// failure is a change whose condition failed: the position of the first
// item whose condition failed, and that item as it was when DynamoDB
// returned it (nil when it was absent or not returned). For a conflict,
// onRecord says that the idempotency record was among the items another
// transaction held: a duplicate of the request is committing.
type failure struct {
	index    int
	old      map[string]ddbtypes.AttributeValue
	onRecord bool
}

type outcome int

const (
	committed       outcome = iota
	conditionFailed         // the change's condition failed
	keyTaken                // a live record with the idempotency key exists
	conflicted              // a concurrent transaction on the same items
)

// commit writes ch, with the idempotency record idem when not nil, in one
// TransactWriteItems (a single conditional write when ch is one Put, Update
// or Delete and there is no record). It tells a failed condition of the
// change (which item, and the item as it was when DynamoDB returns it) from
// a taken idempotency key and from a conflict with a concurrent
// transaction.
func (s *Server) commit(ctx context.Context, ch *change, idem *ddbtypes.Put) (outcome, failure, error) {
	allOld := ddbtypes.ReturnValuesOnConditionCheckFailureAllOld
	if idem == nil && len(ch.actions) == 1 && ch.actions[0].item.ConditionCheck == nil {
		return s.commitOne(ctx, ch)
	}
	items := make([]ddbtypes.TransactWriteItem, 0, len(ch.actions)+1)
	for _, it := range ch.items() {
		switch {
		case it.Put != nil:
			it.Put.ReturnValuesOnConditionCheckFailure = allOld
		case it.Update != nil:
			it.Update.ReturnValuesOnConditionCheckFailure = allOld
		case it.Delete != nil:
			it.Delete.ReturnValuesOnConditionCheckFailure = allOld
		case it.ConditionCheck != nil:
			it.ConditionCheck.ReturnValuesOnConditionCheckFailure = allOld
		}
		items = append(items, it)
	}
	if idem != nil {
		items = append(items, ddbtypes.TransactWriteItem{Put: idem})
	}
	_, err := s.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	var tce *ddbtypes.TransactionCanceledException
	if !errors.As(err, &tce) {
		if err != nil {
			return 0, failure{}, s.dynamoError("TransactWriteItems", err)
		}
		return committed, failure{}, nil
	}
	code := func(i int) string {
		if i < len(tce.CancellationReasons) {
			return aws.ToString(tce.CancellationReasons[i].Code)
		}
		return ""
	}
	if idem != nil && code(len(ch.actions)) == "ConditionalCheckFailed" {
		s.metrics.ConditionalCheckFailures.WithLabelValues("idempotency").Inc()
		return keyTaken, failure{}, nil
	}
	for i := range ch.actions {
		if code(i) == "ConditionalCheckFailed" {
			s.metrics.ConditionalCheckFailures.WithLabelValues(ch.op).Inc()
			return conditionFailed, failure{index: i, old: tce.CancellationReasons[i].Item}, nil
		}
	}
	for i := range items {
		switch code(i) {
		case "TransactionConflict":
			s.metrics.TransactionConflicts.Inc()
			return conflicted, failure{onRecord: idem != nil && code(len(ch.actions)) == "TransactionConflict"}, nil
		case "ThrottlingError", "ProvisionedThroughputExceeded":
			s.metrics.DynamoDBErrors.WithLabelValues("TransactWriteItems", "throttle").Inc()
			return 0, failure{}, &backendError{op: "TransactWriteItems", class: "throttle", err: err}
		}
	}
	return 0, failure{}, s.dynamoError("TransactWriteItems", err)
}

// commitOne writes the single item of ch with PutItem, UpdateItem or
// DeleteItem.
func (s *Server) commitOne(ctx context.Context, ch *change) (outcome, failure, error) {
	allOld := ddbtypes.ReturnValuesOnConditionCheckFailureAllOld
	var err error
	var op string
	switch it := ch.actions[0].item; {
	case it.Put != nil:
		op = "PutItem"
		_, err = s.api.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: it.Put.TableName, Item: it.Put.Item, ConditionExpression: it.Put.ConditionExpression,
			ExpressionAttributeNames: it.Put.ExpressionAttributeNames, ExpressionAttributeValues: it.Put.ExpressionAttributeValues,
			ReturnValuesOnConditionCheckFailure: allOld,
		})
	case it.Update != nil:
		op = "UpdateItem"
		_, err = s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: it.Update.TableName, Key: it.Update.Key, UpdateExpression: it.Update.UpdateExpression,
			ConditionExpression:      it.Update.ConditionExpression,
			ExpressionAttributeNames: it.Update.ExpressionAttributeNames, ExpressionAttributeValues: it.Update.ExpressionAttributeValues,
			ReturnValuesOnConditionCheckFailure: allOld,
		})
	default:
		op = "DeleteItem"
		_, err = s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: it.Delete.TableName, Key: it.Delete.Key, ConditionExpression: it.Delete.ConditionExpression,
			ExpressionAttributeNames: it.Delete.ExpressionAttributeNames, ExpressionAttributeValues: it.Delete.ExpressionAttributeValues,
			ReturnValuesOnConditionCheckFailure: allOld,
		})
	}
	var ccf *ddbtypes.ConditionalCheckFailedException
	var tc *ddbtypes.TransactionConflictException
	switch {
	case errors.As(err, &ccf):
		s.metrics.ConditionalCheckFailures.WithLabelValues(ch.op).Inc()
		return conditionFailed, failure{old: ccf.Item}, nil
	case errors.As(err, &tc):
		s.metrics.TransactionConflicts.Inc()
		return conflicted, failure{}, nil
	case err != nil:
		return 0, failure{}, s.dynamoError(op, err)
	}
	return committed, failure{}, nil
}
