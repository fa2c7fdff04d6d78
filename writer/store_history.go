package writer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// The audit trail of transactions, in one place: the history entry item,
// its codec and the action that writes it.
//
// Every write of a transaction by the writer (create, change, delete) puts
// one history entry in the same TransactWriteItems as the transaction
// write, on condition that no entry of that version exists
// (attribute_not_exists): both land or neither does, so there is never a
// version of a transaction without its entry, nor an entry of a write that
// did not happen, whatever retries, replays, concurrent changes or crashes
// do. Under aggregates.HistoryKey (TENANT#{t}#BRANCH#{b}#HISTORY /
// {txnId}#{version, 19 digits}) an entry holds
//
//	entityType   TRANSACTION_HISTORY
//	id           S, the transaction's id
//	version      N, the version the write made: 1 for created, n+1 for a
//	             change of version n, and for the delete of version n
//	operation    S, created, changed or deleted
//	transaction  S, the transaction as the API showed it at that version
//	             (JSON); for deleted, as it was when deleted (version n)
//	subject      S, the writing token's sub claim ("" when it had none)
//	admin        BOOL, whether the token was admin-scoped
//	receivedAt   S, RFC 3339, the server's clock when the request arrived
//	requestId    S, the request's X-Request-Id (requestid.go)
//
// Entries are never changed nor deleted by the writer, have no expiresAt,
// and stay when the transaction is deleted: a transaction's history is
// kept as long as the table (docs/api.md, "History of a transaction").
// Their partition is neither a transaction's nor a report's, so the stream
// consumers ignore their records (processor.classify) and reconcile never
// reads them.

// Attribute names of the history entry besides the keys, entityType, id
// and version.
const (
	attrOperation   = "operation"
	attrHistoryBody = "transaction"
	attrSubject     = "subject"
	attrAdmin       = "admin"
	attrReceivedAt  = "receivedAt"
	attrRequestID   = "requestId"
)

// The operations of history entries.
const (
	OperationCreated = "created"
	OperationChanged = "changed"
	OperationDeleted = "deleted"
)

// MaxSubjectLength bounds the sub claim of a token that writes
// transactions: it is stored in every history entry the token writes.
const MaxSubjectLength = 256

// HistoryEntry is one entry of a transaction's history as the API shows it.
type HistoryEntry struct {
	Version     int64       `json:"version"`
	Operation   string      `json:"operation"`
	Transaction Transaction `json:"transaction"`
	Subject     string      `json:"subject"`
	Admin       bool        `json:"admin"`
	ReceivedAt  string      `json:"receivedAt"`
	RequestID   string      `json:"requestId"`
}

// author is who wrote a version and when the request arrived: what every
// history entry of the request records.
type author struct {
	subject    string
	admin      bool
	receivedAt string
	requestID  string
}

// authorOf is the author of r, a request behind authenticate, or the 403
// when its token's sub claim is too long to record.
func authorOf(r *http.Request) (author, *Problem) {
	c := claimsOf(r)
	if len(c.Subject) > MaxSubjectLength {
		return author{}, problem(http.StatusForbidden, ProblemForbidden,
			fmt.Sprintf("the token's sub claim has %d bytes; the audit trail records it with every transaction write, and takes at most %d", len(c.Subject), MaxSubjectLength))
	}
	return author{subject: c.Subject, admin: c.Admin(), receivedAt: receivedAtOf(r).UTC().Format(time.RFC3339Nano), requestID: requestIDOf(r)}, nil
}

type receivedAtKey struct{}

// withReceivedAt records now, the server's clock as the request arrives,
// in r's context (receivedAtOf).
func withReceivedAt(r *http.Request, now time.Time) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), receivedAtKey{}, now))
}

// receivedAtOf is the time withReceivedAt recorded (the zero time when
// none).
func receivedAtOf(r *http.Request) time.Time {
	t, _ := r.Context().Value(receivedAtKey{}).(time.Time)
	return t
}

// historyItem encodes the entry of t at version under operation, by a.
func historyItem(t Transaction, version int64, operation string, a author) (map[string]ddbtypes.AttributeValue, error) {
	body, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("history entry of %s: %w", t.ID, err)
	}
	item := keyAV(aggregates.HistoryKey(t.Tenant, t.Branch, t.ID, version))
	item[attrEntityType] = strAV(aggregates.EntityTransactionHistory)
	item[attrID] = strAV(t.ID)
	item[attrVersion] = intAV(version)
	item[attrOperation] = strAV(operation)
	item[attrHistoryBody] = strAV(string(body))
	item[attrSubject] = strAV(a.subject)
	item[attrAdmin] = &ddbtypes.AttributeValueMemberBOOL{Value: a.admin}
	item[attrReceivedAt] = strAV(a.receivedAt)
	item[attrRequestID] = strAV(a.requestID)
	return item, nil
}

// decodeHistory reads a stored history entry as the API shows it. A body
// that is not the JSON of a transaction is an error: only the writer
// writes entries.
func decodeHistory(item map[string]ddbtypes.AttributeValue) (HistoryEntry, error) {
	var e HistoryEntry
	e.Version, _ = intAttr(item, attrVersion)
	e.Operation, _ = stringAttr(item, attrOperation)
	e.Subject, _ = stringAttr(item, attrSubject)
	if b, ok := item[attrAdmin].(*ddbtypes.AttributeValueMemberBOOL); ok {
		e.Admin = b.Value
	}
	e.ReceivedAt, _ = stringAttr(item, attrReceivedAt)
	e.RequestID, _ = stringAttr(item, attrRequestID)
	body, _ := stringAttr(item, attrHistoryBody)
	if err := json.Unmarshal([]byte(body), &e.Transaction); err != nil {
		sk, _ := stringAttr(item, attrSK)
		return HistoryEntry{}, fmt.Errorf("history entry %s: its transaction is not JSON: %w", sk, err)
	}
	return e, nil
}

// historyPut is the action putting the entry of t at version under
// operation, by a, where no entry of that version is. txn is the
// transaction's key and txnFail the explanation of the transaction
// action's failed condition in the same change: a taken entry is explained
// from the transaction as it is now (historyTaken).
func (s *Server) historyPut(t Transaction, version int64, operation string, a author, txn aggregates.Key, txnFail onFail) (action, error) {
	item, err := historyItem(t, version, operation, a)
	if err != nil {
		return action{}, err
	}
	return action{
		item: ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{
			TableName: &s.cfg.Table, Item: item,
			ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
			ExpressionAttributeNames: map[string]string{"#pk": attrPK},
		}},
		onFail: s.historyTaken(txn, version, txnFail),
	}, nil
}

// historyTaken explains a failed condition of a history entry's put: an
// entry of version exists. When the transaction at txn changed or went
// since the request read it (the version is another's now), its own
// explanation txnFail answers, read afresh (DynamoDB need not report every
// failed condition of a cancelled transaction, so the entry's may be the
// one reported). When it did not, the table holds an entry of a version the
// transaction has not reached: written by another path than the writer
// (a transaction restored after its delete was recorded), which is an
// error, not a version to overwrite.
func (s *Server) historyTaken(txn aggregates.Key, version int64, txnFail onFail) onFail {
	return func(ctx context.Context, _ map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
		item, err := s.getItem(ctx, txn)
		if err != nil {
			return nil, false, err
		}
		item = live(item) // a tombstone is no transaction
		current, _ := intAttr(item, attrVersion)
		if item == nil || version == 1 || current != version-1 {
			return txnFail(ctx, item)
		}
		return nil, false, fmt.Errorf("history of %s: an entry of version %d exists while the transaction is at version %d (written by another path than the writer?)", txn, version, current)
	}
}

// HistoryPage is a page of a transaction's history: up to limit entries in
// version order and, when there may be more, the cursor to the next page.
type HistoryPage struct {
	Items      []HistoryEntry `json:"items"`
	NextCursor string         `json:"nextCursor,omitempty"`
}

// historyListing names a transaction's history listing in its cursors.
func historyListing(id string) string { return "history:" + id }

// transactionHistory serves GET …/transactions/{id}/history: the entries
// of the transaction's history in version order, strongly consistent,
// paged with a signed cursor (limit and cursor as the other listings). A
// transaction with no entries is 404 when it does not exist either (a
// transaction written before the audit trail, or by another path, has an
// empty history until its next write).
func (s *Server) transactionHistory(w http.ResponseWriter, r *http.Request) {
	tenant, branch, id, k, p := transactionPath(r)
	q := r.URL.Query()
	if p == nil {
		p = singleParams(q, map[string]bool{"limit": true, "cursor": true})
	}
	var limit int
	if p == nil {
		limit, p = listLimit(q.Get("limit"))
	}
	var start string
	if p == nil {
		start, p = s.cursorSK(q.Get("cursor"), tenant, branch, historyListing(id))
	}
	if p != nil {
		p.write(w)
		return
	}
	pk := aggregates.HistoryPK(tenant, branch)
	in := &dynamodb.QueryInput{
		TableName: &s.cfg.Table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :prefix)"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#sk": attrSK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": strAV(pk), ":prefix": strAV(aggregates.HistoryPrefix(id))},
		Limit:                     aws.Int32(int32(limit + 1)),
	}
	if start != "" {
		in.ExclusiveStartKey = keyAV(aggregates.Key{PK: pk, SK: start})
	}
	ctx := r.Context()
	read, more, err := s.queryUpTo(ctx, in, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(read) == 0 && start == "" {
		item, err := s.getItem(ctx, k)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if live(item) == nil {
			notFoundOf("transaction").write(w)
			return
		}
	}
	page := HistoryPage{Items: make([]HistoryEntry, 0, len(read))}
	for _, item := range read {
		e, err := decodeHistory(item)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		page.Items = append(page.Items, e)
	}
	if more {
		sk, _ := stringAttr(read[len(read)-1], attrSK)
		page.NextCursor = s.cursors.encode(cursor{Tenant: tenant, Branch: branch, Query: historyListing(id), SK: sk})
	}
	writeJSON(w, http.StatusOK, page)
}
