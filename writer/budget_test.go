package writer_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// frozen is a clock that does not move: a budget's buckets never refill
// during the test, however slow the machine is.
func frozen() time.Time { return time.Unix(1_900_000_000, 0) }

// hourlyBudget is a budget of 30 units that comes back at a unit an hour:
// nothing refills within a test.
func hourlyBudget(c *writer.Config) {
	c.Now = frozen
	c.TenantBudget = writer.BudgetConfig{Rate: 1.0 / 3600, Burst: 30, Shards: 1, MaxGrant: 8, Timeout: patient}
}

// patient is the limiter's timeout in tests: DynamoDB Local on a busy
// machine can take longer than the default, and the limiter would fail open.
const patient = time.Minute

func charged(m *writer.Metrics) float64 {
	return testutil.ToFloat64(m.TenantBudgetCharged.WithLabelValues("request")) +
		testutil.ToFloat64(m.TenantBudgetCharged.WithLabelValues("read")) +
		testutil.ToFloat64(m.TenantBudgetCharged.WithLabelValues("write"))
}

func TestTenantBudget_ChargesTheCapacityRequestsConsume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), func(c *writer.Config) {
		c.Now = frozen
		c.TenantBudget = writer.BudgetConfig{Rate: 1000, Timeout: patient}
	})
	e.create(createBody)
	write := testutil.ToFloat64(e.metrics.TenantBudgetCharged.WithLabelValues("write"))
	assert.GreaterOrEqual(t, write, 2.0, "a transaction and its idempotency record, written in one TransactWriteItems")
	r := e.send(req{method: "GET", path: e.base() + "/transactions"})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	assert.Positive(t, testutil.ToFloat64(e.metrics.TenantBudgetCharged.WithLabelValues("read")), "the listing's Query")
	assert.Equal(t, 2.0, testutil.ToFloat64(e.metrics.TenantBudgetCharged.WithLabelValues("request")))
	assert.Equal(t, 2.0, testutil.ToFloat64(e.metrics.TenantBudget.WithLabelValues("allowed")))
}

func TestTenantBudget_RefusesATenantThatSpentItWithRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), hourlyBudget)
	// 40 transactions (written with an admin token: not limited), so that a
	// listing reads several units.
	for range 40 {
		r := e.asAdmin(req{method: "POST", path: e.base() + "/transactions", body: createBody, headers: []string{"Idempotency-Key", newKey()}})
		require.Equal(t, http.StatusCreated, r.Status, "answer %s", r)
	}
	var admitted int
	var last reply
	for range 100 {
		last = e.send(req{method: "GET", path: e.base() + "/transactions"})
		if last.Status != http.StatusOK {
			break
		}
		admitted++
	}
	require.Equal(t, http.StatusTooManyRequests, last.Status, "answer %s after %d admitted", last, admitted)
	assert.Equal(t, writer.ProblemRateLimited, last.problem(t).Type)
	secs, err := strconv.Atoi(last.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", last.Header.Get("Retry-After"))
	assert.Greater(t, secs, 60, "units come back at one an hour")

	// What was admitted cost the budget (30 units), give or take the last
	// request's debt and what was left too small for the next grant.
	spent := charged(e.metrics)
	assert.LessOrEqual(t, spent, 30.0+4, "admitted requests cost %v units", spent)
	assert.GreaterOrEqual(t, spent, 30.0-8, "admitted requests cost %v units", spent)
	assert.Less(t, admitted, 30, "each listing costs a request unit and its read units")
	// The read units were taken from the table's bucket, not only counted:
	// its tat is as far ahead of now as the units taken (one bucket, units
	// of an hour), short of the debt still held by the process.
	// The bucket is in the coordination table (no stream), not the ledger
	// table.
	assert.Nil(t, e.getItem(aggregates.BudgetKey(e.tenant, 0)), "a bucket in the ledger table")
	out, err := e.ddb.GetItem(t.Context(), &dynamodb.GetItemInput{
		TableName: ptr(table.CoordinationTableName(e.table)), Key: table.Key(aggregates.BudgetKey(e.tenant, 0)), ConsistentRead: ptr(true),
	})
	require.NoError(t, err)
	item := out.Item
	require.NotNil(t, item, "the tenant's bucket")
	tat, err := strconv.ParseInt(item["tat"].(*ddbtypes.AttributeValueMemberN).Value, 10, 64)
	require.NoError(t, err)
	taken := float64(tat-frozen().UnixMicro()) / float64(time.Hour.Microseconds())
	assert.LessOrEqual(t, taken, 30.0, "units taken from the bucket")
	assert.GreaterOrEqual(t, taken, spent-8-4, "units taken from the bucket of the %v charged", spent)

	// Refused again without asking the table: the process knows the wait.
	calls := e.calls.Calls("UpdateItem")
	r := e.send(req{method: "GET", path: e.base() + "/transactions"})
	require.Equal(t, http.StatusTooManyRequests, r.Status, "answer %s", r)
	assert.Equal(t, calls, e.calls.Calls("UpdateItem"), "a blocked tenant costs no call")

	// Another tenant has a budget of its own, and admins are not limited.
	other := e.newTenant()
	r = e.send(req{method: "GET", path: "/v1/tenants/" + other + "/accounts", headers: []string{"Authorization", "Bearer " + e.tokenFor(other)}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	r = e.send(req{method: "GET", path: e.base() + "/transactions", headers: []string{"Authorization", "Bearer " + e.adminToken()}})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
}

// Two writer processes (Lambda instances) share one tenant's budget: the
// per-process bucket alone would let each admit the whole burst.
func TestTenantBudget_HoldsAcrossWriterProcesses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), hourlyBudget)
	auth, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(testSecret)})
	require.NoError(t, err)
	cfg := writer.Config{Table: e.table, Auth: auth, CursorKey: cursorKey, RequestTimeout: time.Minute}
	hourlyBudget(&cfg)
	metrics := writer.NewMetrics(nil)
	second, err := writer.New(ddbtest.Client(t), cfg, metrics)
	require.NoError(t, err)

	admitted := map[string]int{}
	for i := range 100 {
		var status int
		if i%2 == 0 {
			status = e.send(req{method: "GET", path: e.base() + "/transactions"}).Status
			if status == http.StatusOK {
				admitted["first"]++
			}
		} else {
			rec := httptest.NewRecorder()
			hr := httptest.NewRequest("GET", e.base()+"/transactions", nil)
			hr.Header.Set("Authorization", "Bearer "+e.token)
			second.ServeHTTP(rec, hr)
			status = rec.Code
			if status == http.StatusOK {
				admitted["second"]++
			}
		}
		require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, status)
	}
	assert.Positive(t, admitted["first"])
	assert.Positive(t, admitted["second"])
	spent := charged(e.metrics) + charged(metrics)
	assert.LessOrEqual(t, spent, 30.0+2*4, "two processes admitted %v units of a budget of 30 (%v)", spent, admitted)
}

// The limiter's own UpdateItem failing does not take the writer down: the
// request is admitted (fail open), counted, and the process does not ask
// again until the grant it assumed expires.
func TestTenantBudget_FailsOpenForOneGrantWhenItsCallFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), func(c *writer.Config) {
		c.Now = frozen
		c.TenantBudget = writer.BudgetConfig{Rate: 1.0 / 3600, Burst: 30, Shards: 1, MaxGrant: 8}
	})
	e.calls.Decide = func(op string) ledgertest.Fault {
		if op == "UpdateItem" { // a listing writes nothing: only the limiter calls UpdateItem
			return ledgertest.Throttle
		}
		return ledgertest.Pass
	}
	for i := range 2 {
		r := e.send(req{method: "GET", path: e.base() + "/transactions"})
		require.Equal(t, http.StatusOK, r.Status, "request %d: answer %s", i+1, r)
	}
	assert.Equal(t, 1.0, testutil.ToFloat64(e.metrics.TenantBudgetCalls.WithLabelValues("error")))
	assert.Equal(t, 1.0, testutil.ToFloat64(e.metrics.TenantBudget.WithLabelValues("fail_open")))
	assert.Equal(t, 1.0, testutil.ToFloat64(e.metrics.TenantBudget.WithLabelValues("allowed")), "the second from the assumed grant")
}

func TestTenantBudget_RefusesABurstSmallerThanItsShardsAndTheLedgerTable(t *testing.T) {
	auth, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(testSecret)})
	require.NoError(t, err)
	_, err = writer.New(nil, writer.Config{Table: "t", Auth: auth, CursorKey: cursorKey,
		TenantBudget: writer.BudgetConfig{Rate: 1, Burst: 2, Shards: 4}}, nil)
	assert.ErrorContains(t, err, "less than one unit a shard")
	_, err = writer.New(nil, writer.Config{Table: "t", Auth: auth, CursorKey: cursorKey, BudgetTable: "t",
		TenantBudget: writer.BudgetConfig{Rate: 10}}, nil)
	assert.ErrorContains(t, err, "is the ledger table")
}

// Grants land on shards at random: a tenant whose grant meets a spent shard
// while the other has units is not refused (it asks the other shard).
func TestTenantBudget_ASpentShardDoesNotRefuseWhileAnotherHasUnits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t), func(c *writer.Config) {
		c.Now = frozen
		c.TenantBudget = writer.BudgetConfig{Rate: 1.0 / 3600, Burst: 30, Shards: 2, MaxGrant: 2, Timeout: patient}
	})
	for range 100 {
		r := e.send(req{method: "GET", path: e.base() + "/transactions"})
		if r.Status == http.StatusTooManyRequests {
			break
		}
		require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	}
	// Two shards of 15 units; at most a grant (2 units) left unspent in each.
	spent := charged(e.metrics)
	assert.GreaterOrEqual(t, spent, 30.0-2*2, "admitted requests cost %v units of 30", spent)
	assert.LessOrEqual(t, spent, 30.0+4, "admitted requests cost %v units of 30", spent)
}
