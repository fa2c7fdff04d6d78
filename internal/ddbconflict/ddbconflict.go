// Package ddbconflict makes DynamoDB Local conflict like DynamoDB on AWS.
//
// What AWS documents (Amazon DynamoDB Developer Guide, "Amazon DynamoDB
// Transactions: How it works", sections "Transaction conflict handling in
// DynamoDB" and "Isolation levels for DynamoDB transactions",
// https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html;
// API Reference, TransactionCanceledException and CancellationReason):
//
//   - an item of a TransactWriteItems that is part of another ongoing
//     TransactWriteItems cancels the later one: TransactionCanceledException
//     whose CancellationReasons are ordered as the request's TransactItems,
//     TransactionConflict for the item found held and None for the others.
//     Every action names its item, a ConditionCheck as much as a Put, Update
//     or Delete, so a ConditionCheck holds its item and conflicts too;
//   - a PutItem, UpdateItem or DeleteItem of an item an ongoing
//     TransactWriteItems includes fails with TransactionConflictException;
//   - the AWS SDKs do not retry either (the Go SDK v2's retryer has neither
//     code among its retryable or throttle codes);
//   - GetItem, Query and Scan are read-committed with respect to
//     transactions: they return committed data beside an ongoing
//     transaction and are never refused, consistent or not;
//   - a transaction may span tables of one account and Region: an item is
//     its table and its key, so the ledger table's report item and the
//     coordination table's checkpoint item in one commit are two items, and
//     an item of one table never conflicts with the same key in another.
//
// DynamoDB Local runs transactions one after another and answers none of
// this, so code that serialises its writes through one item looks fine
// locally and turns into retries and conflicts on AWS.
//
// Transport sits in front of DynamoDB Local (an http.RoundTripper, for
// infra.WithTransportWrapper) and reproduces it: a TransactWriteItems
// holds the keys of its items (table and key, per KeyAttributes) from the
// moment it is sent until DynamoDB Local has answered plus Latency (AWS's
// transaction round trip, 10–20 ms is typical, which DynamoDB Local on
// loopback lacks); a transaction or single-item write that arrives while
// one of its keys is held is answered as AWS answers it (HTTP 400, the
// same __type, message and cancellation reasons) without reaching DynamoDB
// Local, so the SDK and the code above it see exactly what they would on
// AWS. A transaction DynamoDB Local refused (cancelled, invalid) releases
// its items as soon as the answer is back, without Latency's hold. A
// repeat of a held transaction's ClientRequestToken (an SDK retry after a
// timeout while the first is still in flight) is answered
// TransactionInProgressException, as AWS answers a token whose first
// request has not finished. One Transport is one AWS: every client of a
// test whose writes may meet shares it. Key spells an item as Hold sees
// it; Interferer holds random items in transactions of its own, standing
// for the other holders of a consumer's items on AWS.
//
// What it does not model: conflicts of TransactGetItems (nothing in ledger
// uses it) and of BatchWriteItem's puts and deletes (they pass unchecked: ledger's
// product code sends none, only the benchmarks' bulk loads do); a transaction that arrives while a
// single-item write of one of its items is in flight (AWS documents no
// conflict there; the two are applied one after the other); the time AWS
// takes before it cancels (a cancelled request is answered at once);
// throttling and the other transactional limits (sizes, item counts,
// which DynamoDB Local enforces itself).
package ddbconflict

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Transport emulates AWS's transaction conflicts in front of Next. The zero
// value (with Next set) holds transactions for no extra time; set Latency.
// It is safe for concurrent use.
type Transport struct {
	// Next is the transport to DynamoDB Local.
	Next http.RoundTripper
	// Latency is how long a transaction keeps its items after DynamoDB
	// Local has answered, before its answer is returned: the part of an
	// AWS round trip during which another request can find them held.
	Latency time.Duration
	// KeyAttributes names the key attributes of each table's items, to
	// find a Put's key in its item (the other actions name their Key).
	// Default: PK and SK for every table, which is the key schema of both
	// the ledger table and its coordination table.
	KeyAttributes func(table string) []string
	// Hold, when set, is called while a transaction holds its keys, after
	// DynamoDB Local committed it, in place of sleeping Latency: tests keep
	// a transaction in flight with it. keys are the transaction's, sorted,
	// each as Key spells it.
	Hold func(ctx context.Context, keys []string)
	// Released, when set, is called once a transaction that held keys
	// has freed them (after Hold or Latency), with the same keys: a
	// test that frees a hold learns when another request can take them.
	Released func(keys []string)
	// Off passes every request straight through when set (for measuring
	// with and without the emulation in one process).
	Off atomic.Bool

	mu     sync.Mutex
	held   map[string]bool
	tokens map[string]bool // ClientRequestTokens of the transactions in flight

	// Counters of what the emulation refused.
	cancelled atomic.Int64 // TransactWriteItems cancelled
	rejected  atomic.Int64 // single-item writes rejected
}

// Stats returns how many transactions were cancelled and how many
// single-item writes rejected because an item was held.
func (t *Transport) Stats() (transactionsCancelled, writesRejected int64) {
	return t.cancelled.Load(), t.rejected.Load()
}

// The request shapes read: only table names and keys.
type (
	attrs       map[string]json.RawMessage
	tableAndKey struct {
		TableName string `json:"TableName"`
		Key       attrs  `json:"Key"`
		Item      attrs  `json:"Item"`
	}
	transactItem struct {
		Put            *tableAndKey `json:"Put"`
		Update         *tableAndKey `json:"Update"`
		Delete         *tableAndKey `json:"Delete"`
		ConditionCheck *tableAndKey `json:"ConditionCheck"`
	}
	transactWrite struct {
		TransactItems      []transactItem `json:"TransactItems"`
		ClientRequestToken string         `json:"ClientRequestToken"`
	}
)

// Key spells the item of table whose key attributes are the strings of key
// (attribute name to value) as Hold receives it, for tests to pick the
// transaction they hold.
func Key(table string, key map[string]string) string {
	a := attrs{}
	for n, v := range key {
		b, _ := json.Marshal(map[string]string{"S": v})
		a[n] = b
	}
	var t Transport
	return t.keyOf(&tableAndKey{TableName: table, Key: a})
}

func (t *Transport) keyOf(tk *tableAndKey) string {
	if tk == nil {
		return ""
	}
	key := tk.Key
	if key == nil { // a Put names its key in its item
		names := []string{"PK", "SK"}
		if t.KeyAttributes != nil {
			names = t.KeyAttributes(tk.TableName)
		}
		key = attrs{}
		for _, n := range names {
			if v, ok := tk.Item[n]; ok {
				key[n] = v
			}
		}
	}
	names := make([]string, 0, len(key))
	for n := range key {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(tk.TableName)
	for _, n := range names {
		var v any
		_ = json.Unmarshal(key[n], &v)
		canon, _ := json.Marshal(v) // map keys sorted: one spelling per value
		fmt.Fprintf(&b, "\x00%s=%s", n, canon)
	}
	return b.String()
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	target := req.Header.Get("X-Amz-Target")
	op := target[strings.LastIndexByte(target, '.')+1:]
	switch op {
	case "TransactWriteItems", "PutItem", "UpdateItem", "DeleteItem":
	default:
		return t.Next.RoundTrip(req)
	}
	if t.Off.Load() || req.Body == nil {
		return t.Next.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }

	if op != "TransactWriteItems" {
		var one tableAndKey
		if json.Unmarshal(body, &one) != nil {
			return t.Next.RoundTrip(req) // DynamoDB Local answers what it cannot parse
		}
		t.mu.Lock()
		busy := t.held[t.keyOf(&one)]
		t.mu.Unlock()
		if busy {
			t.rejected.Add(1)
			return answer(req, `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException",`+
				`"message":"Transaction is ongoing for the item"}`), nil
		}
		return t.Next.RoundTrip(req)
	}

	var tx transactWrite
	if json.Unmarshal(body, &tx) != nil {
		return t.Next.RoundTrip(req)
	}
	keys := make([]string, len(tx.TransactItems))
	for i, it := range tx.TransactItems {
		for _, tk := range []*tableAndKey{it.Put, it.Update, it.Delete, it.ConditionCheck} {
			if tk != nil {
				keys[i] = t.keyOf(tk)
			}
		}
	}
	t.mu.Lock()
	if t.held == nil {
		t.held, t.tokens = map[string]bool{}, map[string]bool{}
	}
	if tx.ClientRequestToken != "" && t.tokens[tx.ClientRequestToken] {
		t.mu.Unlock()
		return answer(req, `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionInProgressException",`+
			`"Message":"Transaction with the same ClientRequestToken is in progress"}`), nil
	}
	codes := make([]string, len(keys))
	conflict := false
	for i, k := range keys {
		codes[i] = "None"
		if k != "" && t.held[k] {
			codes[i], conflict = "TransactionConflict", true
		}
	}
	var mine []string
	if !conflict {
		for _, k := range keys {
			if k != "" && !t.held[k] { // a key named twice is DynamoDB Local's ValidationException
				t.held[k] = true
				mine = append(mine, k)
			}
		}
		if tx.ClientRequestToken != "" {
			t.tokens[tx.ClientRequestToken] = true
		}
	}
	t.mu.Unlock()
	if conflict {
		t.cancelled.Add(1)
		return answer(req, cancellation(codes)), nil
	}
	var releaseOnce sync.Once
	release := func() {
		releaseOnce.Do(func() {
			t.mu.Lock()
			for _, k := range mine {
				delete(t.held, k)
			}
			delete(t.tokens, tx.ClientRequestToken)
			t.mu.Unlock()
			if t.Released != nil {
				sorted := append([]string(nil), mine...)
				sort.Strings(sorted)
				t.Released(sorted)
			}
		})
	}
	defer release()
	resp, err := t.Next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	// Read the answer before releasing the items, so they stay held for
	// the whole exchange.
	out, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	if resp.StatusCode != http.StatusOK {
		// Refused (cancelled, invalid): AWS releases the items when it
		// cancels; the answer is returned at once.
		return resp, nil
	}
	switch {
	case t.Hold != nil:
		sorted := append([]string(nil), mine...)
		sort.Strings(sorted)
		t.Hold(req.Context(), sorted)
	case t.Latency > 0:
		timer := time.NewTimer(t.Latency)
		select {
		case <-timer.C:
		case <-req.Context().Done():
			timer.Stop()
		}
	}
	return resp, nil
}

// cancellation is AWS's TransactionCanceledException body for the reason
// codes of a transaction's items.
func cancellation(codes []string) string {
	type reason struct {
		Code    string `json:"Code"`
		Message string `json:"Message,omitempty"`
	}
	reasons := make([]reason, len(codes))
	for i, c := range codes {
		reasons[i].Code = c
		if c == "TransactionConflict" {
			reasons[i].Message = "Transaction is ongoing for the item"
		}
	}
	b, _ := json.Marshal(struct {
		Type                string   `json:"__type"`
		Message             string   `json:"Message"`
		CancellationReasons []reason `json:"CancellationReasons"`
	}{
		Type:                "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
		Message:             "Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(codes, ", ") + "]",
		CancellationReasons: reasons,
	})
	return string(b)
}

// answer is a DynamoDB error response (HTTP 400, JSON 1.0) with body.
func answer(req *http.Request, body string) *http.Response {
	return &http.Response{
		StatusCode: http.StatusBadRequest, Status: "400 Bad Request",
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":     []string{"application/x-amz-json-1.0"},
			"X-Amzn-Requestid": []string{fmt.Sprintf("ddbconflict-%d", time.Now().UnixNano())},
		},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
