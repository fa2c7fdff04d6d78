package writer

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// The changes of a transaction item (its codec is transactionItem and
// decodeTransaction, items.go).

// transactionCreate puts item, a new transaction of branch, where no item
// is; with mark, it also sets the branch's hasTransactions marker
// (branchMark), on condition that the branch still has currency, the one
// item was stamped with. Only an id collision fails the put's condition:
// the mutation prepares a new id.
func (s *Server) transactionCreate(item map[string]ddbtypes.AttributeValue, tenant, branch, currency string, mark bool) *change {
	ch := newChange("create", action{item: s.putNew(item), onFail: prepareAgain})
	if mark {
		ch.add(s.branchMark(tenant, branch, currency))
	}
	return ch
}

// transactionReplace puts next over the transaction at k, on condition
// that it exists at version expected.
func (s *Server) transactionReplace(k aggregates.Key, next map[string]ddbtypes.AttributeValue, expected int64) *change {
	return newChange("update", action{
		item: ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{
			TableName: &s.cfg.Table, Item: next,
			ConditionExpression:       aws.String("attribute_exists(#pk) AND #v = :expected"),
			ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#v": attrVersion},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":expected": intAV(expected)},
		}},
		onFail: s.staleOrGone(k, "transaction"),
	})
}

// transactionDelete deletes the transaction at k, on condition that it
// exists and, when expected > 0, is at that version.
func (s *Server) transactionDelete(k aggregates.Key, expected int64) *change {
	del := &ddbtypes.Delete{
		TableName: &s.cfg.Table, Key: keyAV(k),
		ConditionExpression:      aws.String("attribute_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": attrPK},
	}
	if expected > 0 {
		del.ConditionExpression = aws.String("attribute_exists(#pk) AND #v = :expected")
		del.ExpressionAttributeNames["#v"] = attrVersion
		del.ExpressionAttributeValues = map[string]ddbtypes.AttributeValue{":expected": intAV(expected)}
	}
	return newChange("delete", action{item: ddbtypes.TransactWriteItem{Delete: del}, onFail: s.staleOrGone(k, "transaction")})
}
