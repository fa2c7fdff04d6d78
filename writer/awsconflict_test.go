package writer_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ddbconflict"
	"github.com/ledger-dev/ledger/writer"
)

// Issue 13, part 1, seen through the AWS conflict emulation
// (internal/ddbconflict). Until the redesign every transaction create carried
// a ConditionCheck on its tenant's item and one on its branch's, so while
// one create of a tenant was in flight on AWS, a create in any other branch
// of the tenant (or the same branch) was cancelled with TransactionConflict,
// retried and answered 409 concurrent-modification. Now creates name only
// their own items (dircache.go): they proceed side by side.
func TestAWSConflicts_CreatesOfOneTenantDoNotSerialise(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	emu := &ddbconflict.Transport{Next: e.calls.Next}
	e.calls.Next = emu
	e.create(createBody) // north's first transaction sets its marker
	south := "/v1/tenants/" + e.tenant + "/branches/south/transactions"
	r := e.send(req{method: "POST", path: south, body: createBody, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)

	held, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) }) // before the server closes, even on failure
	emu.Hold = func(_ context.Context, keys []string) {
		if strings.Contains(strings.Join(keys, " "), "north") && first.CompareAndSwap(false, true) {
			close(held)
			<-release
		}
	}
	done := make(chan reply, 1)
	go func() {
		done <- e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}})
	}()
	<-held // a create in north is in flight

	// Creates in another branch of the tenant, and in the same branch,
	// commit meanwhile: they share no item with it.
	for _, path := range []string{south, e.base() + "/transactions"} {
		r = e.send(req{method: "POST", path: path, body: createBody, headers: []string{"Idempotency-Key", newKey()}})
		require.Equal(t, http.StatusCreated, r.Status, "%s while a create of the tenant is in flight: answer %s", path, r)
	}
	cancelled, rejected := emu.Stats()
	assert.Zero(t, cancelled+rejected, "no conflict")
	assert.Zero(t, testutil.ToFloat64(e.metrics.TransactionConflicts))

	released.Do(func() { close(release) })
	r = <-done
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	assert.Equal(t, 2, e.countTransactions(e.tenant, "south"))
	assert.Equal(t, 3, e.countTransactions(e.tenant, "north"))
}

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// The bound the redesign puts on suspension: the writer that commits it
// honours it at once; another honours it once its cached status is older
// than DirectoryTTL (5 s by default), never later.
func TestDirectoryCache_SuspensionHonouredWithinTheTTLOnEveryWriter(t *testing.T) {
	t.Parallel()
	table := sharedTable(t)
	a := newEnv(t, table)
	clock := &fakeClock{now: time.Now()}
	b := newEnv(t, table, func(c *writer.Config) { c.Now, c.DirectoryTTL = clock.Now, time.Minute })
	post := func(e *env) reply {
		return e.send(req{method: "POST", path: a.base() + "/transactions", body: createBody,
			headers: []string{"Idempotency-Key", newKey(), "Authorization", "Bearer " + a.token}})
	}
	require.Equal(t, http.StatusCreated, post(a).Status)
	require.Equal(t, http.StatusCreated, post(b).Status, "b caches a's tenant and branch as active")

	r := a.asAdmin(req{method: "PATCH", path: "/v1/tenants/" + a.tenant, body: `{"status":"suspended"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = post(a)
	require.Equal(t, http.StatusConflict, r.Status, "the writer that suspended: at once; answer %s", r)
	assert.Equal(t, writer.ProblemTenantSuspended, r.problem(t).Type)

	require.Equal(t, http.StatusCreated, post(b).Status, "another writer, within its TTL: still accepted")
	clock.Advance(time.Minute)
	r = post(b)
	require.Equal(t, http.StatusConflict, r.Status, "past its TTL: refused; answer %s", r)
	assert.Equal(t, writer.ProblemTenantSuspended, r.problem(t).Type)
	assert.Positive(t, testutil.ToFloat64(b.metrics.DirectoryCache.WithLabelValues("hit")))
	assert.Positive(t, testutil.ToFloat64(b.metrics.DirectoryCache.WithLabelValues("miss")))
}

// A create that committed, retried with its key after its tenant was
// suspended, still replays its answer (idempotency comes before the
// status, which the redesign checks before writing).
func TestDirectoryCache_RetryAfterSuspensionReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	key := newKey()
	first := e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", key}})
	require.Equal(t, http.StatusCreated, first.Status, "answer %s", first)
	r := e.asAdmin(req{method: "PATCH", path: "/v1/tenants/" + e.tenant, body: `{"status":"suspended"}`, headers: []string{"If-Match", "1"}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", key}})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	assert.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	assert.Equal(t, first.Body, r.Body)
	r = e.send(req{method: "POST", path: e.base() + "/transactions", body: `{"type":"INCOME","amount":"2","category":"a"}`, headers: []string{"Idempotency-Key", key}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "another request with the key: answer %s", r)
	r = e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusConflict, r.Status, "a new request: answer %s", r)
	assert.Equal(t, writer.ProblemTenantSuspended, r.problem(t).Type)
}

// A branch's first creates race to set its hasTransactions marker, the one
// write of a create to a shared item: the second reads the branch (a branch
// without the marker is never cached), finds the marker the first has
// committed and commits without naming the branch, while the first is
// still in flight: no conflict at all.
func TestAWSConflicts_FirstCreatesOfABranchDoNotEndIn409(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	emu := &ddbconflict.Transport{Next: e.calls.Next}
	e.calls.Next = emu
	var first atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	emu.Hold = func(_ context.Context, keys []string) {
		if strings.Contains(strings.Join(keys, " "), `"north"`) && first.CompareAndSwap(false, true) {
			close(held)
			<-release
		}
	}
	done := make(chan reply, 1)
	go func() {
		done <- e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}})
	}()
	<-held // the branch's first create, setting the marker, in flight

	r := e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	cancelled, _ := emu.Stats()
	assert.Zero(t, cancelled, "the second create did not name the branch")

	released.Do(func() { close(release) })
	r = <-done
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	assert.Equal(t, 2, e.countTransactions(e.tenant, "north"))
}

// A branch's first create can stay in flight, its marker not yet
// committed, for longer than a conflicting create's retries last (a slow
// round trip): the loser waits for the marker, reading the branch, instead
// of conflicting with the holder on every attempt and answering 409 when
// they run out (it did so, after 3 more reads of the branch, before
// awaitMarked).
func TestAWSConflicts_FirstCreateOfABranchInFlightLongerThanRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	gate := &gateTransport{next: e.calls.Next, release: make(chan struct{}), held: make(chan struct{})}
	emu := &ddbconflict.Transport{Next: gate}
	e.calls.Next = emu
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(gate.release) }) })

	done := make(chan reply, 1)
	go func() {
		done <- e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}})
	}()
	<-gate.held // the branch's first create holds the branch, not yet committed

	loser := make(chan reply, 1)
	go func() {
		loser <- e.send(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}})
	}()
	// Once the loser has been cancelled and read the branch 5 times more
	// (a retrying create reads it 3 times), the holder may commit.
	for cancelled, _ := emu.Stats(); cancelled == 0; cancelled, _ = emu.Stats() {
		time.Sleep(time.Millisecond)
	}
	misses := func() float64 { return testutil.ToFloat64(e.metrics.DirectoryCache.WithLabelValues("miss")) }
	reads := misses() // the branch, without its marker, is read on every lookup
	var r reply
wait:
	for {
		select {
		case r = <-loser:
			break wait
		default:
		}
		if misses() >= reads+5 {
			released.Do(func() { close(gate.release) })
			r = <-loser
			break
		}
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, http.StatusCreated, r.Status, "the loser, while the first create was in flight: answer %s", r)
	released.Do(func() { close(gate.release) })
	r = <-done
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	assert.Equal(t, 2, e.countTransactions(e.tenant, "north"))
}

// gateTransport holds the first TransactWriteItems naming the branch
// "north" before it reaches DynamoDB Local, until release is closed. It
// sits behind ddbconflict.Transport, which has buffered the request's body.
type gateTransport struct {
	next          http.RoundTripper
	held, release chan struct{}
	once          sync.Once
}

func (g *gateTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".TransactWriteItems") && req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(body)
		if err != nil {
			return nil, err
		}
		if bytes.Contains(b, []byte(`"north"`)) { // the branch item's sort key, a transaction's branch
			g.once.Do(func() {
				close(g.held)
				<-g.release
			})
		}
	}
	return g.next.RoundTrip(req)
}
