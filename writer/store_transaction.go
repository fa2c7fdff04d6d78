package writer

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// The changes of a transaction item (its codec is transactionItem and
// decodeTransaction, items.go). Each writes the history entry of the
// version it makes in the same transaction (store_history.go), after the
// transaction's own action.
//
// Each also counts itself (docs/exactly-once.md, "The design: counted
// changes", W): a create puts changes = 1, every later write puts
// changes = read + 1 on condition that changes is still the count read,
// with the sig of what it writes (table.Count), and drops probe. A write
// of the writer therefore always changes the item and always makes
// exactly one stream record. A changes mismatch at the version read is a
// ledgerctl rebucket (which moves changes, not version) in between: the
// change is prepared again, never a 412.

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
	table.Count(item, 1)
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
// transaction at k, read as item, on condition that it exists at version
// expected (0: stored without a version, on condition that it still has
// none) with the change count read, with the history entry of t's
// version (changed, by a). next gets the count read plus one and its sig
// (table.Count).
func (s *Server) transactionReplace(k aggregates.Key, item, next map[string]ddbtypes.AttributeValue, t Transaction, expected int64, a author) (*change, error) {
	stale := s.staleOrGone(k, "transaction")
	hist, err := s.historyPut(t, t.Version, OperationChanged, a, k, stale)
	if err != nil {
		return nil, err
	}
	cond, names, values := countCondition(item)
	table.Count(next, readChanges(item)+1)
	names["#pk"], names["#v"] = attrPK, attrVersion
	// A transaction stored without a version (expected 0) is conditioned
	// on having none, as transactionDelete does: no item holds version 0.
	version := "attribute_not_exists(#v)"
	if expected != 0 {
		version = "#v = :expected"
		values[":expected"] = intAV(expected)
	}
	return newChange("update", action{
		item: ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{
			TableName: &s.cfg.Table, Item: next,
			ConditionExpression:       aws.String("attribute_exists(#pk) AND " + version + " AND " + cond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
		}},
		onFail: s.recountOr(k, expected, stale),
	}, hist), nil
}

// readChanges is the change count of item as read (0 for an item written
// before counting, or by another path: its next write is its change 1).
func readChanges(item map[string]ddbtypes.AttributeValue) int64 {
	c, _ := table.Changes(item)
	return c
}

// countCondition is the condition that the change count of the item at
// the key is still item's (absent when item has none), with its names
// and values (fresh maps: the caller adds its own). A count stored in a
// form that is not an integer (another path's write: a string, a
// fraction) is conditioned on as stored, so that the write lands and
// counts itself 1 (readChanges), as on an item without one: conditioned
// on its absence, the write would fail, read the same version again and
// go round for ever (the adversarial review of session 16).
func countCondition(item map[string]ddbtypes.AttributeValue) (string, map[string]string, map[string]ddbtypes.AttributeValue) {
	names := map[string]string{"#changes": table.AttrChanges}
	if c, ok := table.Changes(item); ok {
		return "#changes = :changes", names, map[string]ddbtypes.AttributeValue{":changes": intAV(c)}
	}
	if raw, ok := item[table.AttrChanges]; ok {
		return "#changes = :changes", names, map[string]ddbtypes.AttributeValue{":changes": raw}
	}
	return "attribute_not_exists(#changes)", names, map[string]ddbtypes.AttributeValue{}
}

// recountOr explains a failed condition of a write conditioned on version
// read and the change count read: a transaction still at version read
// (a ledgerctl rebucket moved its count, not its version) is prepared
// again; anything else is explained by otherwise.
func (s *Server) recountOr(k aggregates.Key, read int64, otherwise onFail) onFail {
	return func(ctx context.Context, old map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
		item, err := s.current(ctx, k, old)
		if err != nil {
			return nil, false, err
		}
		if item != nil {
			if v, _ := intAttr(item, attrVersion); v == read {
				return nil, true, nil
			}
		}
		return otherwise(ctx, item)
	}
}

// transactionDelete deletes the transaction at k, item as read (t decoded)
// at version read (0: stored without a version), on condition that it is
// still at that version with the change count read, with the history
// entry of the delete (version read+1, deleted, t as it was, by a). named
// says whether the client's If-Match named the version: then a change
// since the read is the 412, else the request reads again (a transaction
// gone meanwhile is the 404 either way; a count moved at the version read
// is a rebucket in between: prepared again).
//
// The delete leaves a tombstone (exactly-once.md, "The design: counted
// changes", W): one UpdateItem that removes the transaction's fields
// (table.TombstoneRemoves) and sets deletedAt, updatedAt, version read+1
// (as a string: tombstone) and changes + 1 with the tombstone's sig. Its stream record is a MODIFY
// whose new image is absent to the consumers (aggregates.ErrDeleted); the
// key stays, so the id is never reused, until ledgerctl compact retires it.
//
// Without tomb (the flag table.FlagTombstones off: a table older
// consumers may still read), the delete is a DeleteItem on the version
// read, as before tombstones.
func (s *Server) transactionDelete(k aggregates.Key, item map[string]ddbtypes.AttributeValue, t Transaction, read int64, named, tomb bool, a author) (*change, error) {
	explain := s.staleOrGone(k, "transaction")
	if !named {
		explain = s.goneOrAgain(k, "transaction")
	}
	hist, err := s.historyPut(t, read+1, OperationDeleted, a, k, explain)
	if err != nil {
		return nil, err
	}
	if !tomb {
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
		return newChange("delete", action{item: ddbtypes.TransactWriteItem{Delete: del}, onFail: explain}, hist), nil
	}
	return newChange("delete", action{item: ddbtypes.TransactWriteItem{Update: s.tombstone(k, item, read)}, onFail: s.recountOr(k, read, explain)}, hist), nil
}

// tombstone is the update that makes the transaction at k, item as read
// at version read, its tombstone (transactionDelete).
func (s *Server) tombstone(k aggregates.Key, item map[string]ddbtypes.AttributeValue, read int64) *ddbtypes.Update {
	now := s.cfg.Now().UTC().Format(time.RFC3339Nano)
	tomb := maps.Clone(item)
	for _, name := range table.TombstoneRemoves {
		delete(tomb, name)
	}
	tomb[table.AttrDeletedAt] = strAV(now)
	tomb[attrUpdatedAt] = strAV(now)
	// The version as a string: a fence against a writer of a version
	// before tombstones (one still serving, or rolled back to), which reads
	// a tombstone as a transaction with its fields missing. It reads this
	// version as none (0), so its PATCH (on condition version = :expected)
	// and its DELETE (on condition that there is no version) both fail
	// their conditions: it can neither bring the deleted transaction back
	// with a counted, digest-matching write nor hard-delete the tombstone
	// (the adversarial review of session 16, D16-1). Nothing of this
	// version reads a tombstone's version (live).
	tomb[attrVersion] = strAV(strconv.FormatInt(read+1, 10))
	table.Count(tomb, readChanges(item)+1)

	cond, names, values := countCondition(item)
	cond = "attribute_exists(#pk) AND attribute_not_exists(#del) AND " + cond
	if read == 0 {
		cond += " AND attribute_not_exists(#v)"
	} else {
		cond += " AND #v = :read"
		values[":read"] = intAV(read)
	}
	names["#pk"], names["#v"], names["#del"], names["#u"], names["#sig"] = attrPK, attrVersion, table.AttrDeletedAt, attrUpdatedAt, table.AttrSig
	values[":del"], values[":u"], values[":next"] = tomb[table.AttrDeletedAt], tomb[attrUpdatedAt], tomb[attrVersion]
	values[":changes1"], values[":sig"] = tomb[table.AttrChanges], tomb[table.AttrSig]
	removes := make([]string, len(table.TombstoneRemoves))
	for i, name := range table.TombstoneRemoves {
		removes[i] = fmt.Sprintf("#r%d", i)
		names[removes[i]] = name
	}
	return &ddbtypes.Update{
		TableName: &s.cfg.Table, Key: keyAV(k),
		UpdateExpression: aws.String("SET #del = :del, #u = :u, #v = :next, #changes = :changes1, #sig = :sig REMOVE " +
			strings.Join(removes, ", ")),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
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
