// Package ddbconflict makes DynamoDB Local conflict like DynamoDB on AWS.
//
// On AWS, two TransactWriteItems that name the same item — as a Put,
// Update, Delete or ConditionCheck — cannot both be in flight: the one that
// finds the item held by the other is cancelled (TransactionCanceledException,
// reason TransactionConflict for that item, None for the others), and a
// PutItem, UpdateItem or DeleteItem of an item held by a transaction fails
// with TransactionConflictException. DynamoDB Local runs transactions one
// after another and never answers either, so code that serialises all its
// writes through one item looks fine locally and turns into retries and
// conflicts on AWS.
//
// Transport sits in front of DynamoDB Local (an http.RoundTripper, for
// infra.WithTransportWrapper) and reproduces this: a TransactWriteItems
// holds the keys of its items from the moment it is sent until DynamoDB
// Local has answered plus Latency (AWS's transaction round trip, 10–20 ms
// is typical, which DynamoDB Local on loopback lacks); a transaction or
// single-item write that arrives while one of its keys is held is answered
// as AWS answers it (HTTP 400, the same __type, message and cancellation
// reasons) without reaching DynamoDB Local, so the SDK and the code above
// it see exactly what they would on AWS. Reads are never refused: on AWS
// GetItem and Query read committed data beside ongoing transactions.
//
// What it does not model: conflicts of TransactGetItems, transactions that
// hold items beyond a failed condition check (AWS releases them as soon as
// it cancels, so does Transport), and AWS's other transactional limits
// (sizes, item counts), which DynamoDB Local enforces itself.
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
	// KeyAttributes names the key attributes of a table's items (default:
	// PK and SK, the ledger table's), to find a Put's key in its item.
	KeyAttributes func(table string) []string
	// Hold, when set, is called while a transaction holds its keys, after
	// DynamoDB Local answered it, in place of sleeping Latency: tests keep
	// a transaction in flight with it. keys are the transaction's, sorted.
	Hold func(ctx context.Context, keys []string)
	// Off passes every request straight through when set (for measuring
	// with and without the emulation in one process).
	Off atomic.Bool

	mu   sync.Mutex
	held map[string]bool

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
		TransactItems []transactItem `json:"TransactItems"`
	}
)

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
		t.held = map[string]bool{}
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
	}
	t.mu.Unlock()
	if conflict {
		t.cancelled.Add(1)
		return answer(req, cancellation(codes)), nil
	}
	defer func() {
		t.mu.Lock()
		for _, k := range mine {
			delete(t.held, k)
		}
		t.mu.Unlock()
	}()
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
