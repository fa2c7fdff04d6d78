package writer_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/writer"
)

func TestIdempotency_SequentialRetriesReplayTheFirstAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	key := newKey()
	body := `{"type":"INCOME","amount":"10.00","category":"a"}`
	post := func(body string, headers ...string) reply {
		return e.send(req{method: "POST", path: e.base() + "/transactions", body: body, headers: append([]string{"Idempotency-Key", key}, headers...)})
	}
	first := post(body)
	require.Equal(t, http.StatusCreated, first.Status, "answer %s", first)
	assert.Empty(t, first.Header.Get("Idempotent-Replayed"))

	for i, b := range []string{body, "{\n  \"type\": \"INCOME\", \"amount\": \"10.00\", \"category\": \"a\"\n}"} {
		again := post(b)
		require.Equal(t, http.StatusCreated, again.Status, "retry %d: answer %s", i, again)
		assert.Equal(t, string(first.Body), string(again.Body), "retry %d", i)
		assert.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
		assert.Equal(t, first.Header.Get("ETag"), again.Header.Get("ETag"))
		assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	}
	assert.Equal(t, 1, e.countTransactions(e.tenant, e.branch))
	assert.Equal(t, 2.0, testutil.ToFloat64(e.metrics.IdempotentReplays))

	// The same key for another request: 422, nothing written.
	for name, rq := range map[string]req{
		"other body":   {method: "POST", path: e.base() + "/transactions", body: `{"type":"INCOME","amount":"10.01","category":"a"}`},
		"other branch": {method: "POST", path: "/v1/tenants/" + e.tenant + "/branches/south/transactions", body: body},
	} {
		rq.headers = []string{"Idempotency-Key", key}
		r := e.send(rq)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: answer %s", name, r)
		p := r.problem(t)
		assert.Equal(t, writer.ProblemIdempotencyKeyReused, p.Type)
		assert.Equal(t, "Idempotency-Key", p.Field)
	}
	assert.Equal(t, 1, e.countTransactions(e.tenant, e.branch))
	assert.Zero(t, e.countTransactions(e.tenant, "south"))

	// The record: its own entity type, the response, a 24-hour TTL.
	k := aggregates.IdempotencyKey(e.tenant, key)
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.table, ConsistentRead: ptr(true),
		Key: map[string]ddbAV{"PK": s(k.PK), "SK": s(k.SK)}})
	require.NoError(t, err)
	require.NotNil(t, out.Item)
	assert.Equal(t, s("IDEMPOTENCY"), out.Item["entityType"])
	assert.Equal(t, &ddbtypes.AttributeValueMemberN{Value: "201"}, out.Item["status"])
	exp, err := strconv.ParseInt(out.Item["expiresAt"].(*ddbtypes.AttributeValueMemberN).Value, 10, 64)
	require.NoError(t, err)
	assert.InDelta(t, time.Now().Add(24*time.Hour).Unix(), exp, 60)

	// The same key under another tenant is another key.
	other := newEnv(t, e.table)
	r := other.send(req{method: "POST", path: other.base() + "/transactions", body: body, headers: []string{"Idempotency-Key", key}})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	assert.Empty(t, r.Header.Get("Idempotent-Replayed"))
}

func TestIdempotency_PatchAndDeleteRetriesReplayInsteadOf412And404(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"1","category":"a"}`)
	path := e.base() + "/transactions/" + tx.ID

	key := newKey()
	patch := req{method: "PATCH", path: path, body: `{"amount":"2"}`, headers: []string{"If-Match", `"1"`, "Idempotency-Key", key}}
	first := e.send(patch)
	require.Equal(t, http.StatusOK, first.Status, "answer %s", first)
	again := e.send(patch)
	require.Equal(t, http.StatusOK, again.Status, "a retried PATCH replays, not 412: %s", again)
	assert.Equal(t, string(first.Body), string(again.Body))
	assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, `"2"`, again.Header.Get("ETag"))
	// Without the key, the same PATCH is stale.
	stale := e.send(req{method: "PATCH", path: path, body: `{"amount":"2"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusPreconditionFailed, stale.Status)
	// The same key with another If-Match is another request.
	r := e.send(req{method: "PATCH", path: path, body: `{"amount":"2"}`, headers: []string{"If-Match", `"2"`, "Idempotency-Key", key}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "answer %s", r)

	delKey := newKey()
	del := req{method: "DELETE", path: path, headers: []string{"Idempotency-Key", delKey}}
	r = e.send(del)
	require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
	r = e.send(del)
	require.Equal(t, http.StatusNoContent, r.Status, "a retried DELETE replays, not 404: %s", r)
	assert.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	r = e.send(req{method: "DELETE", path: path})
	require.Equal(t, http.StatusNotFound, r.Status)
}

// A refusal by the state a request read is the result its key keeps, as
// draft-ietf-httpapi-idempotency-key-header has it: the retry gets the
// same answer even after the state changed (here a suspension lifted),
// replayed; a new key executes again. A refusal before anything is read
// (400) leaves no record.
func TestIdempotency_ARefusalIsTheResultItsKeyReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	record := func(key string) map[string]ddbAV {
		k := aggregates.IdempotencyKey(e.tenant, key)
		out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.table, ConsistentRead: ptr(true),
			Key: map[string]ddbAV{"PK": s(k.PK), "SK": s(k.SK)}})
		require.NoError(t, err)
		return out.Item
	}
	tenant := "/v1/tenants/" + e.tenant
	r := e.asAdmin(req{method: "PATCH", path: tenant, body: `{"status":"suspended"}`, headers: []string{"If-Match", `"1"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	key := newKey()
	create := req{method: "POST", path: e.base() + "/transactions", body: `{"type":"INCOME","amount":"5","category":"sales"}`,
		headers: []string{"Idempotency-Key", key}}
	first := e.send(create)
	require.Equal(t, http.StatusConflict, first.Status, "answer %s", first)
	assert.Equal(t, writer.ProblemTenantSuspended, first.problem(t).Type)
	assert.NotNil(t, record(key), "the refusal is stored under its key")

	r = e.asAdmin(req{method: "PATCH", path: tenant, body: `{"status":"active"}`, headers: []string{"If-Match", `"2"`}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	again := e.send(create)
	require.Equal(t, http.StatusConflict, again.Status, "the retry gets the first answer, not a 201: %s", again)
	assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, string(first.Body), string(again.Body), "the same document, the first request's instance")
	assert.NotEqual(t, first.Header.Get("X-Request-Id"), again.Header.Get("X-Request-Id"))
	assert.Equal(t, 0, e.countTransactions(e.tenant, e.branch))
	other := create
	other.headers = []string{"Idempotency-Key", newKey()}
	require.Equal(t, http.StatusCreated, e.send(other).Status, "a new key executes again")

	// A delete of nothing: 404, kept and replayed.
	delKey := newKey()
	del := req{method: "DELETE", path: e.base() + "/transactions/01J1Z7ZZZZZZZZZZZZZZZZZZZZ", headers: []string{"Idempotency-Key", delKey}}
	r = e.send(del)
	require.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
	r = e.send(del)
	require.Equal(t, http.StatusNotFound, r.Status, "answer %s", r)
	assert.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, writer.ProblemNotFound, r.problem(t).Type)

	// A stale If-Match: 412 with the ETag, kept and replayed.
	tx := e.create(`{"type":"INCOME","amount":"5","category":"sales"}`)
	patchKey := newKey()
	patch := req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, body: `{"amount":"6"}`, headers: []string{"If-Match", `"7"`, "Idempotency-Key", patchKey}}
	r = e.send(patch)
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	r = e.send(patch)
	require.Equal(t, http.StatusPreconditionFailed, r.Status, "answer %s", r)
	assert.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, `"1"`, r.Header.Get("ETag"))
	assert.Equal(t, int64(1), *r.problem(t).CurrentVersion)

	// Refused before anything is read: no record; the key is still free.
	badKey := newKey()
	r = e.send(req{method: "POST", path: e.base() + "/transactions", body: `{"type":"INCOME","amount":"-5","category":"sales"}`,
		headers: []string{"Idempotency-Key", badKey}})
	require.Equal(t, http.StatusBadRequest, r.Status, "answer %s", r)
	assert.Nil(t, record(badKey))
	r = e.send(req{method: "POST", path: e.base() + "/transactions", body: `{"type":"INCOME","amount":"5","category":"sales"}`,
		headers: []string{"Idempotency-Key", badKey}})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
}

func TestIdempotency_50ConcurrentDuplicatesWriteOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	key := newKey()
	const n = 50
	replies := make([]reply, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i] = e.send(req{method: "POST", path: e.base() + "/transactions", body: `{"type":"EXPENSE","amount":"99.99","category":"a"}`,
				headers: []string{"Idempotency-Key", key}})
		}()
	}
	close(start)
	wg.Wait()

	var created, inFlight int
	var body string
	for _, r := range replies {
		switch r.Status {
		case http.StatusCreated:
			created++
			if body == "" {
				body = string(r.Body)
			}
			assert.Equal(t, body, string(r.Body), "every 201 is the same transaction")
		case http.StatusConflict:
			inFlight++
			assert.Equal(t, writer.ProblemRequestInProgress, r.problem(t).Type)
		default:
			t.Errorf("unexpected answer %s", r)
		}
	}
	t.Logf("%d created or replayed, %d in flight (409)", created, inFlight)
	assert.GreaterOrEqual(t, created, 1)
	assert.Equal(t, 1, e.countTransactions(e.tenant, e.branch), "exactly one transaction")
	assert.Equal(t, 1.0, testutil.ToFloat64(e.metrics.Writes.WithLabelValues("create")))
}

func TestPatch_ConcurrentSameVersionExactlyOneWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(`{"type":"INCOME","amount":"1","category":"a"}`)
	const n = 10
	replies := make([]reply, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			headers := []string{"If-Match", `"1"`}
			if i%2 == 0 { // half with idempotency keys: a transaction, not a single write
				headers = append(headers, "Idempotency-Key", newKey())
			}
			replies[i] = e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID,
				body: `{"amount":"` + strconv.Itoa(100+i) + `"}`, headers: headers})
		}()
	}
	close(start)
	wg.Wait()
	var winner *writer.Transaction
	for _, r := range replies {
		switch r.Status {
		case http.StatusOK:
			require.Nil(t, winner, "a second PATCH won: %s", r)
			w := r.transaction(t)
			winner = &w
		case http.StatusPreconditionFailed:
			p := r.problem(t)
			require.NotNil(t, p.CurrentVersion)
			assert.Equal(t, int64(2), *p.CurrentVersion)
		case http.StatusConflict:
			assert.Equal(t, writer.ProblemConcurrentModification, r.problem(t).Type)
		default:
			t.Errorf("unexpected answer %s", r)
		}
	}
	require.NotNil(t, winner, "one PATCH wins")
	r := e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID})
	assert.Equal(t, *winner, r.transaction(t))
	assert.Equal(t, int64(2), winner.Version)
}

// conflicting answers every TransactWriteItems as DynamoDB does when
// another transaction holds one of its items: cancelled, with
// TransactionConflict for the item at position at (-1: the last, which is
// the idempotency record) and None for the others.
type conflicting struct {
	next http.RoundTripper
	at   int
}

func (c conflicting) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".TransactWriteItems") {
		return c.next.RoundTrip(r)
	}
	var in struct{ TransactItems []json.RawMessage }
	err := json.NewDecoder(r.Body).Decode(&in)
	_ = r.Body.Close()
	if err != nil {
		return nil, err
	}
	at := c.at
	if at < 0 {
		at = len(in.TransactItems) - 1
	}
	var reasons, codes []string
	for i := range in.TransactItems {
		code := "None"
		if i == at {
			code = "TransactionConflict"
		}
		codes = append(codes, code)
		reasons = append(reasons, `{"Code":"`+code+`"}`)
	}
	body := `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException",` +
		`"message":"Transaction cancelled, please refer cancellation reasons for specific reasons [` + strings.Join(codes, ", ") + `]",` +
		`"CancellationReasons":[` + strings.Join(reasons, ",") + `]}`
	return &http.Response{
		StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r,
	}, nil
}

func TestIdempotency_DuplicateStillInFlightIs409AndWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	e.calls.Next = conflicting{next: e.calls.Next, at: -1}
	r := e.send(req{method: "POST", path: e.base() + "/transactions", body: `{"type":"INCOME","amount":"1","category":"a"}`,
		headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	p := r.problem(t)
	assert.Equal(t, writer.ProblemRequestInProgress, p.Type)
	assert.Equal(t, "Idempotency-Key", p.Field)
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	assert.Zero(t, e.countTransactions(e.tenant, e.branch))
	assert.Equal(t, 1.0, testutil.ToFloat64(e.metrics.IdempotencyRejections.WithLabelValues("in_flight")))
	assert.Positive(t, testutil.ToFloat64(e.metrics.TransactionConflicts))
}

func TestCreate_BranchKeptChangingIs409ConcurrentModificationNotInProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	e.calls.Next = conflicting{next: e.calls.Next, at: 1} // the branch's first-transaction marker: another transaction holds the branch
	r := e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemConcurrentModification, r.problem(t).Type, "no duplicate of this request is in flight")
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	assert.Zero(t, e.countTransactions(e.tenant, e.branch))
	assert.Zero(t, testutil.ToFloat64(e.metrics.IdempotencyRejections.WithLabelValues("in_flight")))
}

func TestIdempotency_LostAnswerThenRetryReplaysTheCommittedWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	var once sync.Once
	e.calls.Decide = func(op string) ledgertest.Fault {
		fault := ledgertest.Pass
		if op == "TransactWriteItems" {
			once.Do(func() { fault = ledgertest.LoseAnswer })
		}
		return fault
	}
	rq := req{method: "POST", path: e.base() + "/transactions", body: `{"type":"INCOME","amount":"7","category":"a"}`,
		headers: []string{"Idempotency-Key", newKey()}}
	first := e.send(rq)
	t.Logf("first answer: %s", first)
	// The SDK may retry the lost call itself (then the record is found and
	// replayed); otherwise the client sees a server error and retries.
	if first.Status != http.StatusCreated {
		assert.GreaterOrEqual(t, first.Status, 500, "answer %s", first)
	}
	again := e.send(rq)
	require.Equal(t, http.StatusCreated, again.Status, "answer %s", again)
	assert.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, 1, e.countTransactions(e.tenant, e.branch), "the write landed once")
}

func TestThrottledWriteIs503AndItsRetrySucceedsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	var mu sync.Mutex
	throttle := true
	e.calls.Decide = func(op string) ledgertest.Fault {
		mu.Lock()
		defer mu.Unlock()
		if throttle && op == "TransactWriteItems" {
			return ledgertest.Throttle
		}
		return ledgertest.Pass
	}
	rq := req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}}
	r := e.send(rq)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemUnavailable, r.problem(t).Type)
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	assert.Zero(t, e.countTransactions(e.tenant, e.branch))
	assert.Positive(t, testutil.ToFloat64(e.metrics.DynamoDBErrors.WithLabelValues("TransactWriteItems", "throttle")))

	mu.Lock()
	throttle = false
	mu.Unlock()
	r = e.send(rq)
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	assert.Empty(t, r.Header.Get("Idempotent-Replayed"), "nothing was written the first time")
	assert.Equal(t, 1, e.countTransactions(e.tenant, e.branch))
}

// conflictingPut answers every PutItem and TransactWriteItems as DynamoDB
// does when another transaction holds the (first) item.
type conflictingPut struct{ next http.RoundTripper }

func (c conflictingPut) RoundTrip(r *http.Request) (*http.Response, error) {
	target := r.Header.Get("X-Amz-Target")
	body := `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"Transaction is ongoing for the item"}`
	switch {
	case strings.HasSuffix(target, ".TransactWriteItems"):
		body = `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException",` +
			`"message":"Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict, None, None]",` +
			`"CancellationReasons":[{"Code":"TransactionConflict","Message":"Transaction is ongoing for the item"},{"Code":"None"},{"Code":"None"}]}`
	case !strings.HasSuffix(target, ".PutItem"):
		return c.next.RoundTrip(r)
	}
	_ = r.Body.Close()
	return &http.Response{
		StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r,
	}, nil
}

func TestPatch_ItemKeptChangingIs409ConcurrentModification(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tx := e.create(createBody)
	e.calls.Next = conflictingPut{next: e.calls.Next}
	r := e.send(req{method: "PATCH", path: e.base() + "/transactions/" + tx.ID, body: `{"amount":"2"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusConflict, r.Status, "answer %s", r)
	assert.Equal(t, writer.ProblemConcurrentModification, r.problem(t).Type)
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	r = e.send(req{method: "GET", path: e.base() + "/transactions/" + tx.ID})
	assert.Equal(t, tx, r.transaction(t), "unchanged")
}
