package writer_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
	"github.com/ledger-dev/ledger/writer/ddbconflict"
)

// Issue 13, part 1, seen through the AWS conflict emulation
// (writer/ddbconflict). Until the redesign every transaction create carried
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
// write of a create to a shared item: the loser reads the branch again
// rather than its cached status, finds the marker set and commits without
// naming the branch, while the winner is still in flight.
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
	assert.Equal(t, int64(1), cancelled, "one attempt found the branch held, the next did not name it")

	released.Do(func() { close(release) })
	r = <-done
	require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	assert.Equal(t, 2, e.countTransactions(e.tenant, "north"))
}
