package writer

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// The changes of a transaction item (its codec is transactionItem and
// decodeTransaction, items.go). Each writes the history entry of the
// version it makes in the same transaction (store_history.go), after the
// transaction's own action.

// transactionCreate puts t, a new transaction stored under k, where no
// item is, with its history entry (version 1, created, by a); with mark,
// it also sets the branch's hasTransactions marker (branchMark), on
// condition that the branch still has the currency t was stamped with. Only an
// id collision fails the put's condition (or the entry's: the id of a
// deleted transaction): the mutation prepares a new id.
func (s *Server) transactionCreate(k aggregates.Key, t Transaction, a author, mark bool) (*change, error) {
	item, err := transactionItem(k, t)
	if err != nil {
		return nil, fmt.Errorf("create transaction: %w", err)
	}
	hist, err := s.historyPut(t, t.Version, OperationCreated, a, k, prepareAgain)
	if err != nil {
		return nil, err
	}
	ch := newChange("create", action{item: s.putNew(item), onFail: prepareAgain}, hist)
	if mark {
		ch.add(s.branchMark(t.Tenant, t.Branch, t.Currency))
	}
	return ch, nil
}

// transactionReplace puts next, the transaction t encoded, over the
// transaction at k, on condition that it exists at version expected, with
// the history entry of t's version (changed, by a).
func (s *Server) transactionReplace(k aggregates.Key, next map[string]ddbtypes.AttributeValue, t Transaction, expected int64, a author) (*change, error) {
	stale := s.staleOrGone(k, "transaction")
	hist, err := s.historyPut(t, t.Version, OperationChanged, a, k, stale)
	if err != nil {
		return nil, err
	}
	return newChange("update", action{
		item: ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{
			TableName: &s.cfg.Table, Item: next,
			ConditionExpression:       aws.String("attribute_exists(#pk) AND #v = :expected"),
			ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#v": attrVersion},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":expected": intAV(expected)},
		}},
		onFail: stale,
	}, hist), nil
}

// transactionDelete deletes the transaction at k, t as read at version
// read (0: stored without a version), on condition that it is still at
// that version, with the history entry of the delete (version read+1,
// deleted, t as it was, by a). named says whether the client's If-Match
// named the version: then a change since the read is the 412, else the
// request reads again (a transaction gone meanwhile is the 404 either way).
func (s *Server) transactionDelete(k aggregates.Key, t Transaction, read int64, named bool, a author) (*change, error) {
	del := &ddbtypes.Delete{
		TableName: &s.cfg.Table, Key: keyAV(k),
		ConditionExpression:       aws.String("attribute_exists(#pk) AND #v = :read"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#v": attrVersion},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":read": intAV(read)},
	}
	if read == 0 {
		del.ConditionExpression = aws.String("attribute_exists(#pk) AND attribute_not_exists(#v)")
		del.ExpressionAttributeValues = nil
	}
	explain := s.staleOrGone(k, "transaction")
	if !named {
		explain = s.goneOrAgain(k, "transaction")
	}
	hist, err := s.historyPut(t, read+1, OperationDeleted, a, k, explain)
	if err != nil {
		return nil, err
	}
	return newChange("delete", action{item: ddbtypes.TransactWriteItem{Delete: del}, onFail: explain}, hist), nil
}

// goneOrAgain explains a failed version condition on the item at k that
// the client did not name a version of: 404 naming what when it is gone,
// else it changed since the request read it: read again.
func (s *Server) goneOrAgain(k aggregates.Key, what string) onFail {
	return func(ctx context.Context, old map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
		item, err := s.current(ctx, k, old)
		if err != nil {
			return nil, false, err
		}
		if item == nil {
			return notFoundOf(what), false, nil
		}
		return nil, true, nil
	}
}
