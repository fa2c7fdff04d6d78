package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// lambdaPool is N writer instances as Lambda runs them: each its own
// process state (its own Main: per-process buckets, grants, caches, metrics)
// serving one event at a time through apiGatewayHandler. A request waits for
// an idle instance, as API Gateway's invocations wait for concurrency.
type lambdaPool struct {
	logs  syncBuffer // every instance's log
	mains []*Main
	idle  chan func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
}

func newLambdaPool(t *testing.T, n int, env map[string]string) *lambdaPool {
	t.Helper()
	p := &lambdaPool{idle: make(chan func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), n)}
	for range n {
		m := NewMain(getenv(env), io.Discard, &p.logs)
		require.NoError(t, m.ParseFlags(nil))
		require.NoError(t, m.Run(context.Background()))
		t.Cleanup(func() { _ = m.Close() })
		p.mains = append(p.mains, m)
		p.idle <- apiGatewayHandler(m.svc.Handler())
	}
	return p
}

// invoke serves ev on the next idle instance.
func (p *lambdaPool) invoke(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	h := <-p.idle
	defer func() { p.idle <- h }()
	return h(ctx, ev)
}

// metric sums a counter over every instance's /metrics (the listener
// each Main also opens), for the series whose name and labels start with
// prefix.
func (p *lambdaPool) metric(t *testing.T, prefix string) float64 {
	t.Helper()
	var sum float64
	for _, m := range p.mains {
		resp, err := http.Get(m.URL() + "/metrics")
		require.NoError(t, err)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, prefix) {
				continue
			}
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			require.NoError(t, err, line)
			sum += v
		}
		resp.Body.Close()
	}
	return sum
}

// tenantLoad is what one tenant's client saw.
type tenantLoad struct {
	mu        sync.Mutex
	statuses  map[int]int
	latencies []time.Duration // of the answers that were not 429
	problems  []string        // unexpected answers, for the failure message
}

func (l *tenantLoad) record(resp events.APIGatewayV2HTTPResponse, err error, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.statuses[0]++
		l.problems = append(l.problems, err.Error())
		return
	}
	l.statuses[resp.StatusCode]++
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		var p writer.Problem
		if json.Unmarshal([]byte(resp.Body), &p) != nil || p.Type != writer.ProblemRateLimited || resp.Headers["Retry-After"] == "" {
			l.problems = append(l.problems, fmt.Sprintf("429 without a rate-limited problem and Retry-After: %v %s", resp.Headers, resp.Body))
		}
	case resp.StatusCode >= 300:
		l.problems = append(l.problems, fmt.Sprintf("%d %s", resp.StatusCode, resp.Body))
		l.latencies = append(l.latencies, took)
	default:
		l.latencies = append(l.latencies, took)
	}
}

func (l *tenantLoad) count(pred func(status int) bool) int {
	n := 0
	for s, c := range l.statuses {
		if pred(s) {
			n += c
		}
	}
	return n
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// TestFairness_AnAbusiveTenantIsLimitedAcrossInstancesAndTheOtherIsNot is
// the two-tenant load test of issue 26: LEDGER_LOAD_INSTANCES (default 6)
// writer instances behind the Lambda adapter share a table with the tenant
// budget on (LEDGER_LOAD_BUDGET units a second per tenant, default 30,
// bursts of twice that). An abusive tenant sends from LEDGER_LOAD_ABUSERS
// (default 4; 0 for the good tenant alone) clients, each as fast as it is
// answered (at most 100 requests a second each, so as not to burn a shared
// machine's cores on 429s), three listings of up to 200 transactions (its
// branch holds 150) for every transaction it creates; a well-behaved
// tenant sends a transaction and a read of it every 500ms (about half its
// budget). It runs LEDGER_LOAD_DURATION (default 10s), longer if the
// abusive tenant has not been refused ten times by then; the instances
// take the other LEDGER_TENANT_BUDGET_* settings from the environment.
//
// Asserted, by count only (nothing timed): the abusive tenant gets 429s,
// each a rate-limited problem with Retry-After, and no other error; it is
// admitted no more requests than its budget allows over the run (each
// request costs at least one unit); the other tenant gets no error and no
// 429. The good tenant's latency (p50, p99), the counts and the limiter's
// cost per request in write units are logged (docs/api.md, "Load"):
//
//	go test ./cmd/writer -run TestFairness -v
func TestFairness_AnAbusiveTenantIsLimitedAcrossInstancesAndTheOtherIsNot(t *testing.T) {
	instances := envInt(t, "LEDGER_LOAD_INSTANCES", 6)
	require.Positive(t, instances, "LEDGER_LOAD_INSTANCES")
	abusers := envInt(t, "LEDGER_LOAD_ABUSERS", 4)
	budget := envInt(t, "LEDGER_LOAD_BUDGET", 30)
	require.Positive(t, budget, "LEDGER_LOAD_BUDGET")
	duration, err := time.ParseDuration(cmpOr(os.Getenv("LEDGER_LOAD_DURATION"), "10s"))
	require.NoError(t, err, "LEDGER_LOAD_DURATION")

	env := localEnv(t)
	env["LEDGER_TENANT_BUDGET"] = strconv.Itoa(budget)
	// DynamoDB Local on a busy machine can be slower than the default
	// timeout, upon which the limiter fails open: not what is measured here.
	env["LEDGER_TENANT_BUDGET_TIMEOUT"] = "10s"
	for _, kv := range os.Environ() { // the other settings, to compare them
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "LEDGER_TENANT_BUDGET_") {
			env[k] = v
		}
	}
	pool := newLambdaPool(t, instances, env)
	ctx := context.Background()

	admin, err := writer.NewToken([]byte(secret), writer.TokenOptions{Admin: true})
	require.NoError(t, err)
	seq := time.Now().UnixNano() % 1e9
	abuser, good := fmt.Sprintf("abuser%d", seq), fmt.Sprintf("good%d", seq)
	for i, tenant := range []string{abuser, good} {
		postAdmin(t, pool.mains[0].URL()+"/v1/tenants", admin, `{"id":"`+tenant+`","name":"`+tenant+`"}`)
		postAdmin(t, pool.mains[0].URL()+"/v1/tenants/"+tenant+"/branches", admin, fmt.Sprintf(`{"id":"north","name":"North","document":"L%d%d"}`, seq, i))
	}
	tokens := map[string]string{}
	for _, tenant := range []string{abuser, good} {
		tokens[tenant], err = writer.NewToken([]byte(secret), writer.TokenOptions{Tenant: tenant})
		require.NoError(t, err)
	}
	var keys atomic.Int64
	post := func(tenant string) events.APIGatewayV2HTTPRequest {
		return apiEvent("POST", "/v1/tenants/"+tenant+"/branches/north/transactions", "", map[string]string{
			"authorization": "Bearer " + tokens[tenant], "content-type": "application/json",
			"idempotency-key": fmt.Sprintf("load-%d-%d", seq, keys.Add(1)),
		}, `{"type":"INCOME","amount":"10.50","category":"sales","createdAt":"2026-01-31T12:00:00Z"}`)
	}
	get := func(tenant, path, query string) events.APIGatewayV2HTTPRequest {
		return apiEvent("GET", "/v1/tenants/"+tenant+"/branches/north/transactions"+path, query, map[string]string{"authorization": "Bearer " + tokens[tenant]}, "")
	}
	// The abusive tenant's branch holds 150 transactions (written with an
	// admin token, which is not limited), so that its listings of 200 read
	// them all: about 6 read units each, what a heavy reader costs.
	for i := range 150 {
		postAdmin(t, pool.mains[0].URL()+"/v1/tenants/"+abuser+"/branches/north/transactions", admin,
			fmt.Sprintf(`{"type":"EXPENSE","amount":"%d.25","category":"seed","createdAt":"2026-01-31T12:00:00Z"}`, i+1))
	}

	// Warm instances, as a steady load keeps them: each has read the flags
	// and the good tenant's directory once (cold starts are not the point).
	for range instances {
		resp, err := pool.invoke(ctx, get(good, "", ""))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, resp.Body)
	}

	loads := map[string]*tenantLoad{abuser: {statuses: map[int]int{}}, good: {statuses: map[int]int{}}}
	// The run lasts the duration, and on a machine too slow for the abusive
	// tenant to exceed its budget by then, until it has been refused ten
	// times (or a minute more has passed): counts, not time, decide.
	deadline, limit := time.Now().Add(duration), time.Now().Add(duration+time.Minute)
	running := func() bool {
		now := time.Now()
		if now.After(limit) {
			return false
		}
		if now.Before(deadline) {
			return true
		}
		if abusers == 0 {
			return false
		}
		a := loads[abuser]
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.statuses[http.StatusTooManyRequests] < 10
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range abusers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pace := time.NewTicker(10 * time.Millisecond)
			defer pace.Stop()
			for i := 0; running(); i++ {
				ev := get(abuser, "", "limit=200")
				if i%4 == 0 {
					ev = post(abuser)
				}
				t0 := time.Now()
				resp, err := pool.invoke(ctx, ev)
				loads[abuser].record(resp, err, time.Since(t0))
				<-pace.C
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		pace := time.NewTicker(500 * time.Millisecond)
		defer pace.Stop()
		for running() {
			t0 := time.Now()
			resp, err := pool.invoke(ctx, post(good))
			loads[good].record(resp, err, time.Since(t0))
			if err == nil && resp.StatusCode == http.StatusCreated {
				var tx writer.Transaction
				if json.Unmarshal([]byte(resp.Body), &tx) == nil {
					t0 = time.Now()
					resp, err = pool.invoke(ctx, get(good, "/"+tx.ID, ""))
					loads[good].record(resp, err, time.Since(t0))
				}
			}
			<-pace.C
		}
	}()
	wg.Wait()
	elapsed := time.Since(start)

	a, g := loads[abuser], loads[good]
	ok := func(s int) bool { return s >= 200 && s < 300 }
	limited := func(s int) bool { return s == http.StatusTooManyRequests }
	slices.Sort(g.latencies)
	decisions := pool.metric(t, "ledger_writer_tenant_budget_requests_total")
	units := pool.metric(t, "ledger_writer_tenant_budget_write_units_total")
	calls := pool.metric(t, "ledger_writer_tenant_budget_calls_total")
	refused := pool.metric(t, `ledger_writer_tenant_budget_calls_total{outcome="refused"}`)
	admitted := pool.metric(t, `ledger_writer_tenant_budget_requests_total{outcome="allowed"}`) +
		pool.metric(t, `ledger_writer_tenant_budget_requests_total{outcome="fail_open"}`)
	t.Logf("%d instances, %s, budget %d units/s per tenant (bursts of %d); fail open %v",
		instances, elapsed.Round(time.Millisecond), budget, 2*budget, pool.metric(t, `ledger_writer_tenant_budget_requests_total{outcome="fail_open"}`))
	t.Logf("abusive tenant: %d requests, %d admitted, %d answered 429 (%v)", a.count(func(int) bool { return true }), a.count(ok), a.count(limited), a.statuses)
	t.Logf("good tenant:    %d requests, %d admitted, %d answered 429, %d errors; latency p50 %s, p99 %s, max %s",
		g.count(func(int) bool { return true }), g.count(ok), g.count(limited), len(g.problems),
		percentile(g.latencies, .50).Round(100*time.Microsecond), percentile(g.latencies, .99).Round(100*time.Microsecond), percentile(g.latencies, 1).Round(100*time.Microsecond))
	t.Logf("charged units: %.0f request, %.1f read, %.1f write",
		pool.metric(t, `ledger_writer_tenant_budget_charged_units_total{kind="request"}`),
		pool.metric(t, `ledger_writer_tenant_budget_charged_units_total{kind="read"}`),
		pool.metric(t, `ledger_writer_tenant_budget_charged_units_total{kind="write"}`))
	t.Logf("limiter: %v UpdateItem calls (%v refused), %.0f write units for %v decisions (%v admitted, warm-up included): %.3f write units a request, %.3f an admitted request",
		calls, refused, units, decisions, admitted, units/max(decisions, 1), units/max(admitted, 1))

	for _, line := range strings.Split(pool.logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Log(line)
		}
	}
	assert.Empty(t, a.problems, "the abusive tenant gets 2xx or 429 rate-limited only")
	if abusers > 0 { // 0: the good tenant alone, for comparison
		assert.Positive(t, a.count(limited), "the abusive tenant is limited")
	}
	// Each admitted request takes at least a unit of a grant, and no more
	// units are granted than the budget refills over the run plus the burst
	// (with, for slack, one more grant per instance: a grant is at most a
	// shard's burst).
	grant := min(float64(writer.DefaultBudgetMaxGrant), float64(2*budget)/writer.DefaultBudgetShards)
	most := float64(budget)*elapsed.Seconds() + float64(2*budget) + float64(instances)*grant
	assert.LessOrEqual(t, float64(a.count(ok)), most, "admitted requests of the abusive tenant")
	// In units (requests and capacity), both tenants together spent no more
	// than their two budgets allow, give or take a grant and the debt of a
	// last request (a listing of 150 items: under 10 units) per instance
	// and tenant: what the abusive tenant read was charged.
	spent := pool.metric(t, "ledger_writer_tenant_budget_charged_units_total")
	assert.LessOrEqual(t, spent, 2*most+float64(2*instances*10), "units charged to both tenants")
	assert.Empty(t, g.problems, "the good tenant gets no error")
	assert.Zero(t, g.count(limited), "the good tenant is never limited")
	assert.Positive(t, g.count(ok))
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	require.GreaterOrEqual(t, n, 0, name)
	return n
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
