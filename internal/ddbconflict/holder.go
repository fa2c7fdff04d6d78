package ddbconflict

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// AlwaysHolds is a transaction of ConditionChecks on keys of tableName whose
// condition always holds: it changes nothing, and while the Transport
// keeps it in flight its items are held (the Interferer's transactions,
// and the holders of the tests that count conflicts exactly).
func AlwaysHolds(tableName string, keys ...map[string]types.AttributeValue) []types.TransactWriteItem {
	items := make([]types.TransactWriteItem, len(keys))
	for i, k := range keys {
		items[i] = types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: aws.String(tableName), Key: k,
			ConditionExpression: aws.String("attribute_exists(PK) OR attribute_not_exists(PK)")}}
	}
	return items
}

// Holder keeps one transaction's items held until a consumer has been
// refused a given number of times, so that a test knows exactly how many
// conflicts the consumer met: Install it on the Transport, Arm it, send
// the holding transaction (AlwaysHolds) through the Transport, wait for
// Held, then run the consumer behind Counting. The refusal that reaches
// the count frees the items, and its answer reaches the consumer only
// once the Transport has let them go, so its next attempt goes through
// however late the holding goroutine is scheduled.
type Holder struct {
	op       string
	refusals int64

	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
	freed   chan struct{}
	once    sync.Once
	freedMu sync.Once
	seen    atomic.Int64
	keys    atomic.Pointer[string] // the holding transaction's keys, joined
}

// NewHolder returns a Holder released by the refusals-th answer refusing
// the consumer's op (an operation name: "UpdateItem",
// "TransactWriteItems").
func NewHolder(op string, refusals int64) *Holder {
	return &Holder{op: op, refusals: refusals, held: make(chan struct{}), release: make(chan struct{}),
		freed: make(chan struct{})}
}

// Install makes h the Transport's Hold and Released.
func (h *Holder) Install(t *Transport) {
	t.Hold = h.Hold
	t.Released = h.released
}

// Arm makes the next transaction the Transport sends the holder.
func (h *Holder) Arm() { h.armed.Store(true) }

// Hold is the Transport's Hold: the armed transaction closes Held and
// waits, holding its items, for the release (or its context's end).
func (h *Holder) Hold(ctx context.Context, keys []string) {
	if !h.armed.CompareAndSwap(true, false) {
		return
	}
	joined := strings.Join(keys, "\x00")
	h.keys.Store(&joined)
	close(h.held)
	select {
	case <-h.release:
	case <-ctx.Done():
	}
}

// released is the Transport's Released: the holding transaction's items
// are free once it frees its keys (other transactions' are ignored).
func (h *Holder) released(keys []string) {
	if held := h.keys.Load(); held != nil && *held == strings.Join(keys, "\x00") {
		h.freedMu.Do(func() { close(h.freed) })
	}
}

// Held is closed once the holder holds its items.
func (h *Holder) Held() <-chan struct{} { return h.held }

// Counting wraps the consumer's transport next (the Transport, or what
// stands in front of it): each refusal of op it answers with (a 400, the
// emulation's conflict) is counted, and the one that reaches the count
// releases the holder and is answered once its items are free.
func (h *Holder) Counting(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusBadRequest && strings.HasSuffix(req.Header.Get("X-Amz-Target"), "."+h.op) {
			if h.seen.Add(1) == h.refusals {
				h.once.Do(func() { close(h.release) })
				select { // the answer waits for the items to be free
				case <-h.freed:
				case <-req.Context().Done():
				}
			}
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
