package prometheus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor/poller"
	ledgertable "github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// The scrape jobs of the test's Prometheus, and the value the dashboard's
// $job variable takes.
const (
	pollerJob = "ledger-poller"
	writerJob = "ledger-writer"
	jobRegex  = "ledger-.*"
)

// A Prometheus scraping a live poller and writer on DynamoDB Local, both
// doing real work (with a few faults injected in front of DynamoDB so that
// the error series exist): every query of infra/dashboards/ledger.json and
// every expression of rules.yaml must parse and return data, every rule
// must evaluate healthy, and both targets must be up. No query is exempt:
// the workload produces every series the dashboard and the rules use, and
// an alert's condition, empty in a healthy system, must evaluate while each
// of its operands (alertOperands) returns data.
func TestLivePrometheus_EveryDashboardQueryAndRuleExpressionReturnsData(t *testing.T) {
	promBin := requireTool(t, "prometheus")
	ctx := context.Background()
	table := ddbtest.NewTable(t, ddbtest.Client(t))

	pollerURL := startPoller(t, table)
	w := startWriter(t, table)
	prom := startPrometheus(t, promBin, map[string]string{pollerJob: pollerURL, writerJob: w.url})

	// Work: through the writer's API (with its error paths), and straight
	// into the table (invalid transactions the poller quarantines).
	w.workload(t)
	require.NoError(t, ledgertest.NewWorkload(15).Run(ctx, ddbtest.Client(t), table, 150))

	queries := append(dashboardQueries(t), ruleQueries(t)...)
	require.Greater(t, len(queries), 50)
	// Series appear with the scrapes after the work, rates need two of
	// them, recording rules an evaluation after that: poll, generously.
	eventually(t, 5*time.Minute, "queries without data", func() error {
		var missing []string
		for _, q := range queries {
			err := prom.evaluate(q.expr, q.mayBeEmpty)
			var bad *apiError
			if errors.As(err, &bad) && bad.Type == "bad_data" {
				t.Fatalf("%s: %s: %v", q.where, q.expr, err) // does not parse: no use waiting
			}
			if err != nil {
				missing = append(missing, fmt.Sprintf("%s: %s: %v", q.where, q.expr, err))
			}
		}
		if len(missing) > 0 {
			return errors.New(strings.Join(missing, "\n"))
		}
		return nil
	})
	eventually(t, 2*time.Minute, "rules not healthy", func() error { return prom.rulesHealthy(len(loadRules(t))) })
	eventually(t, 2*time.Minute, "targets not up", func() error { return prom.targetsUp(pollerJob, writerJob) })
	t.Logf("%d queries evaluated: each returned data", len(queries))
}

// query is one PromQL expression to evaluate, where it comes from, and
// whether it may return nothing (an alert's condition: it must still parse
// and evaluate).
type query struct {
	where, expr string
	mayBeEmpty  bool
}

// grafanaVars are the values of the dashboard's template variables (and
// Grafana's built-in ones) in this test.
var grafanaVars = map[string]string{
	"job": jobRegex, "__rate_interval": "1m", "__interval": "15s", "__range": "1h",
}

var grafanaVar = regexp.MustCompile(`\$\{?(\w+)\}?`)

// expandGrafana replaces Grafana's template variables in expr.
func expandGrafana(expr string) (string, error) {
	var unknown []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		name := grafanaVar.FindStringSubmatch(m)[1]
		if v, ok := grafanaVars[name]; ok {
			return v
		}
		unknown = append(unknown, name)
		return m
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown template variables %v in %s", unknown, expr)
	}
	return out, nil
}

func TestExpandGrafana(t *testing.T) {
	got, err := expandGrafana(`rate(x{job=~"$job"}[$__rate_interval]) / ${__range}`)
	require.NoError(t, err)
	assert.Equal(t, `rate(x{job=~"ledger-.*"}[1m]) / 1h`, got)
	_, err = expandGrafana(`x{tenant="$tenant"}`)
	assert.ErrorContains(t, err, "tenant")
}

// dashboardQueries returns every target of the Grafana dashboard, its
// variables expanded; the variables' own queries (label_values) are
// Grafana's, not PromQL, and are checked as their metric.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	b, err := os.ReadFile("../dashboards/ledger.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name, Type string
				Query      any
			}
		}
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	var out []query
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			expr, err := expandGrafana(tg.Expr)
			require.NoError(t, err, "panel %q", p.Title)
			out = append(out, query{where: "dashboard panel " + strconv.Quote(p.Title), expr: expr})
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		s, _ := v.Query.(string)
		m := labelValues.FindStringSubmatch(s)
		require.NotNil(t, m, "variable %s: query %v is not label_values(metric, label)", v.Name, v.Query)
		out = append(out, query{where: "dashboard variable " + v.Name, expr: fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
	}
	return out
}

// ruleQueries returns, for every rule of rules.yaml: a recording rule's
// expression and the series it records; an alert's expression (which must
// parse and evaluate, but is empty in a healthy system) and each operand of
// its condition, which must return data.
func ruleQueries(t *testing.T) []query {
	t.Helper()
	var out []query
	for _, r := range loadRules(t) {
		if r.Record != "" {
			out = append(out, query{where: "recording rule " + r.Record, expr: r.Expr}, query{where: "recorded series", expr: r.Record})
			continue
		}
		where := "alert " + r.Alert
		out = append(out, query{where: where, expr: r.Expr, mayBeEmpty: true})
		ops := alertOperands(r.Expr)
		require.NotEmpty(t, ops, "%s: no operand with a metric in %s", r.Alert, r.Expr)
		for _, op := range ops {
			out = append(out, query{where: where + " operand", expr: op})
		}
	}
	return out
}

var (
	setOp     = regexp.MustCompile(`^(and|or|unless)\b`)
	modifier  = regexp.MustCompile(`^(bool\b|(on|ignoring|group_left|group_right)\s*\([^)]*\))\s*`)
	onlyConst = regexp.MustCompile(`^[0-9.eE+\-*/()\s]*$`)
)

// alertOperands splits an alert's expression at its top-level comparison
// and set operators (outside parentheses, braces, brackets and strings),
// drops vector-matching modifiers and constants, and returns the operands
// that select series: `a > 0 and on (job) b == 0` gives a and b.
func alertOperands(expr string) []string {
	var parts []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
			continue
		case c == '"' || c == '\'' || c == '`':
			quote = c
			continue
		case c == '(' || c == '{' || c == '[':
			depth++
			continue
		case c == ')' || c == '}' || c == ']':
			depth--
			continue
		case depth > 0:
			continue
		}
		width := 0
		switch {
		case strings.HasPrefix(expr[i:], "==") || strings.HasPrefix(expr[i:], "!=") ||
			strings.HasPrefix(expr[i:], ">=") || strings.HasPrefix(expr[i:], "<="):
			width = 2
		case c == '>' || c == '<':
			width = 1
		case (i == 0 || !isIdent(expr[i-1])) && setOp.MatchString(expr[i:]):
			width = len(setOp.FindString(expr[i:]))
		}
		if width > 0 {
			parts = append(parts, expr[start:i])
			start = i + width
			i += width - 1
		}
	}
	parts = append(parts, expr[start:])
	var out []string
	for _, p := range parts {
		p = strings.TrimSpace(p)
		for m := modifier.FindString(p); m != ""; m = modifier.FindString(p) {
			p = strings.TrimSpace(p[len(m):])
		}
		if p != "" && !onlyConst.MatchString(p) {
			out = append(out, p)
		}
	}
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func TestAlertOperands(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`max by (job, shard) (x) > 300`, []string{`max by (job, shard) (x)`}},
		{`max(x) > 6 * 3600`, []string{`max(x)`}},
		{"sum by (job) (a)\n  < on (job)\nsum by (job) (max by (job, state) (b{state=~\"open|closed\"}))",
			[]string{`sum by (job) (a)`, `sum by (job) (max by (job, state) (b{state=~"open|closed"}))`}},
		{`sum(rate(a[10m])) > 0 and on (job) sum(rate(b[10m])) == 0`, []string{`sum(rate(a[10m]))`, `sum(rate(b[10m]))`}},
		{`a{code=~"5..",x!="<>"} >= bool 1 unless ignoring (code) b`, []string{`a{code=~"5..",x!="<>"}`, `b`}},
		{`sum(increase(ledger_or_and[5m])) > 0`, []string{`sum(increase(ledger_or_and[5m]))`}},
		{`ledger_x`, []string{`ledger_x`}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, alertOperands(tt.expr), tt.expr)
	}
}

// startPoller runs a poller on table in this process, serving its metrics
// (the processor's and its own, as cmd/poller does) on a local port. Its
// first commit attempts are throttled: the throttle and retry series exist.
func startPoller(t *testing.T, table string) string {
	t.Helper()
	var commits atomic.Int64
	faults := &ledgertest.FaultTransport{Decide: func(op string) ledgertest.Fault {
		// More than the SDK's own attempts (3), so the processor sees
		// throttles and retries them itself.
		if op == "TransactWriteItems" && commits.Add(1) <= 6 {
			return ledgertest.Throttle
		}
		return ledgertest.Pass
	}}
	cfg := ddbtest.Config(t, infra.WithTransportWrapper(func(next http.RoundTripper) http.RoundTripper {
		faults.Next = next
		return faults
	}))
	ctx, cancel := context.WithCancel(context.Background())
	// Wired as cmd/poller and ledgerctl run wire it.
	svc, err := poller.NewService(ctx, cfg, poller.Config{
		Table: table, Owner: "live-prometheus-test", LeaseDuration: 10 * time.Second,
		IdleBackoff: 200 * time.Millisecond, CheckpointInterval: time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	p := svc.Poller
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("poller: %v", err)
		}
	})
	return srv.URL
}

// liveWriter is the writer's HTTP API on a local port, with faults that can
// be switched on in front of its DynamoDB client.
type liveWriter struct {
	url           string
	table         string
	db            *dynamodb.Client
	admin, tenant string // tokens
	burst         string // a token for the tenant the rate limit refuses
	throttleTx    atomic.Bool
	dropGetItem   atomic.Bool
	client        *http.Client
	keys          atomic.Int64 // Idempotency-Keys of POSTs that name none
}

const (
	liveTenant  = "acme"
	burstTenant = "bursty"
)

func startWriter(t *testing.T, table string) *liveWriter {
	t.Helper()
	w := &liveWriter{table: table, db: ddbtest.Client(t), client: &http.Client{Timeout: time.Minute}}
	faults := &ledgertest.FaultTransport{Decide: func(op string) ledgertest.Fault {
		switch {
		case op == "TransactWriteItems" && w.throttleTx.Load():
			return ledgertest.Throttle
		case op == "GetItem" && w.dropGetItem.Load():
			return ledgertest.Drop
		}
		return ledgertest.Pass
	}}
	db := ddbtest.Client(t, infra.WithTransportWrapper(func(next http.RoundTripper) http.RoundTripper {
		faults.Next = next
		return faults
	}))
	secret := []byte("live-prometheus-test-secret-0123456789abcdef")
	auth, err := writer.NewAuthenticator(writer.AuthConfig{Secret: secret})
	require.NoError(t, err)
	reg := writer.NewRegistry()
	srv, err := writer.New(db, writer.Config{
		Table: table, Auth: auth, CursorKey: secret, Gatherer: reg, FlagsTTL: 100 * time.Millisecond,
		// Room for the workload's tenant (fewer than 100 requests); the
		// other tenant sends more, faster than 5 a second.
		TenantRate: 5, TenantBurst: 100,
		// The tenant budget on, with room for everything the workload sends:
		// its metrics are on the dashboard.
		TenantBudget: writer.BudgetConfig{Rate: 1000, Timeout: time.Minute},
	}, writer.NewMetrics(reg))
	require.NoError(t, err)
	// Served as cmd/writer and ledgerctl run serve it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	svc := writer.Serve(context.Background(), srv, ln, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = svc.Close(0, 10*time.Second) })
	w.url = "http://" + ln.Addr().String()
	token := func(o writer.TokenOptions) string {
		o.TTL = time.Hour
		s, err := writer.NewToken(secret, o)
		require.NoError(t, err)
		return s
	}
	w.admin = token(writer.TokenOptions{Admin: true})
	w.tenant = token(writer.TokenOptions{Tenant: liveTenant})
	w.burst = token(writer.TokenOptions{Tenant: burstTenant})
	return w
}

// call sends one request and returns its status and body. A POST without
// an Idempotency-Key in header gets a fresh one.
func (w *liveWriter) call(t *testing.T, token, method, path string, header map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, w.url+path, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if method == http.MethodPost {
		req.Header.Set("Idempotency-Key", fmt.Sprintf("live-request-%d", w.keys.Add(1)))
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := w.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// want sends a request and requires one of the statuses.
func (w *liveWriter) want(t *testing.T, statuses []int, token, method, path string, header map[string]string, body string) {
	t.Helper()
	code, answer := w.call(t, token, method, path, header, body)
	require.Contains(t, statuses, code, "%s %s: %s", method, path, answer)
}

// workload drives the writer through its ordinary and its error paths:
// directory and transactions, an idempotent replay and a reused key, a
// stale If-Match, a taken id, refused credentials, a rate-limited burst,
// writes refused by the flags (disabled, and unreadable), and DynamoDB
// throttling the writer (5xx).
func (w *liveWriter) workload(t *testing.T) {
	t.Helper()
	ok, created := []int{http.StatusOK}, []int{http.StatusCreated}
	branches := "/v1/tenants/" + liveTenant + "/branches"
	for _, tenant := range []string{liveTenant, burstTenant} {
		w.want(t, created, w.admin, "POST", "/v1/tenants", nil, fmt.Sprintf(`{"id":%q,"name":"Test"}`, tenant))
	}
	w.want(t, []int{http.StatusConflict}, w.admin, "POST", "/v1/tenants", nil, `{"id":"acme","name":"Again"}`)
	for i, b := range []string{"north", "south"} {
		w.want(t, created, w.admin, "POST", branches, nil, fmt.Sprintf(`{"id":%q,"name":"Store","document":"LIVE-%d"}`, b, i))
	}
	tx := func(i int) string {
		return fmt.Sprintf(`{"type":"EXPENSE","amount":"%d.25","category":"food","createdAt":"2026-0%d-1%dT10:00:00Z"}`, 10+i, 1+i%6, i%10)
	}
	var first string
	for i := range 40 {
		b := []string{"north", "south"}[i%2]
		req, err := http.NewRequest("POST", w.url+branches+"/"+b+"/transactions", strings.NewReader(tx(i)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+w.tenant)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "live-"+strconv.Itoa(i))
		resp, err := w.client.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		if i == 0 {
			first = resp.Header.Get("Location")
		}
	}
	u, err := url.Parse(first)
	require.NoError(t, err, "Location %q", first)
	firstPath := u.Path
	require.NotEmpty(t, firstPath, "Location %q", first)
	// Replayed, then reused with another body (422).
	w.want(t, created, w.tenant, "POST", branches+"/north/transactions", map[string]string{"Idempotency-Key": "live-0"}, tx(0))
	w.want(t, []int{http.StatusUnprocessableEntity}, w.tenant, "POST", branches+"/north/transactions", map[string]string{"Idempotency-Key": "live-0"}, tx(1))
	// A change, then one on the version it replaced (412).
	w.want(t, ok, w.tenant, "PATCH", firstPath, map[string]string{"If-Match": `"1"`}, `{"amount":"99.00"}`)
	w.want(t, []int{http.StatusPreconditionFailed}, w.tenant, "PATCH", firstPath, map[string]string{"If-Match": `"1"`}, `{"amount":"98.00"}`)
	w.want(t, ok, w.tenant, "GET", branches+"/north/reports?period=MONTHLY&from=2026-01&to=2026-06", nil, "")
	// Credentials: none, and another tenant's.
	w.want(t, []int{http.StatusUnauthorized}, "", "GET", branches, nil, "")
	w.want(t, []int{http.StatusForbidden}, w.burst, "GET", branches, nil, "")
	// The other tenant sends faster than its rate until it is limited (429).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, answer := w.call(t, w.burst, "GET", "/v1/tenants/"+burstTenant+"/branches", nil, "")
		if code == http.StatusTooManyRequests {
			break
		}
		require.Equal(t, http.StatusOK, code, answer)
		require.True(t, time.Now().Before(deadline), "no request was rate limited")
	}

	// Writes disabled by the flags (503 writes-disabled) and enabled again.
	setWrites := func(on bool) {
		f, err := ledgertable.GetFlags(context.Background(), w.db, w.table)
		require.NoError(t, err)
		_, err = ledgertable.SetFlags(context.Background(), w.db, w.table, map[string]bool{"writesEnabled": on}, f.Version, time.Now())
		require.NoError(t, err)
	}
	refusedUntil := func(name string, want int, key string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			code, answer := w.call(t, w.tenant, "POST", branches+"/south/transactions", map[string]string{"Idempotency-Key": key}, tx(41))
			if code == want {
				return
			}
			require.True(t, time.Now().Before(deadline), "%s: last answer %d %s; want %d", name, code, answer, want)
			time.Sleep(200 * time.Millisecond)
		}
	}
	setWrites(false)
	refusedUntil("writes disabled", http.StatusServiceUnavailable, "live-disabled")
	setWrites(true)
	refusedUntil("writes enabled again", http.StatusCreated, "live-enabled")
	// The flags item unreadable: refused (flags_unavailable), fail closed.
	w.dropGetItem.Store(true)
	refusedUntil("flags unreadable", http.StatusServiceUnavailable, "live-flags")
	w.dropGetItem.Store(false)
	refusedUntil("flags readable again", http.StatusCreated, "live-flags-back")
	// DynamoDB throttling every transaction of the writer: 5xx.
	w.throttleTx.Store(true)
	code, answer := w.call(t, w.tenant, "POST", branches+"/south/transactions", map[string]string{"Idempotency-Key": "live-throttled"}, tx(42))
	w.throttleTx.Store(false)
	require.Equal(t, http.StatusServiceUnavailable, code, "a transaction DynamoDB throttles: %s", answer)
	require.Contains(t, answer, "#unavailable", "a transaction DynamoDB throttles")
}

// livePrometheus is a Prometheus server run by the test.
type livePrometheus struct {
	base string
	http *http.Client
}

// startPrometheus runs Debian's prometheus with a temporary TSDB, scraping
// targets (job → base URL) every second and evaluating rules.yaml every
// second, on a free port (picked, then tried: another process may take it
// in between).
func startPrometheus(t *testing.T, bin string, targets map[string]string) *livePrometheus {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs("rules.yaml")
	require.NoError(t, err)
	var cfg bytes.Buffer
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %q\nscrape_configs:\n", rules)
	jobs := make([]string, 0, len(targets))
	for j := range targets {
		jobs = append(jobs, j)
	}
	sort.Strings(jobs)
	for _, j := range jobs {
		u, err := url.Parse(targets[j])
		require.NoError(t, err)
		fmt.Fprintf(&cfg, "  - job_name: %q\n    static_configs:\n      - targets: [%q]\n", j, u.Host)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfgPath, cfg.Bytes(), 0o644))
	promtoolCheck(t, cfgPath)

	for attempt := 1; ; attempt++ {
		port := freePort(t)
		logPath := filepath.Join(dir, fmt.Sprintf("prometheus-%d.log", attempt))
		logFile, err := os.Create(logPath)
		require.NoError(t, err)
		logs := func() string { b, _ := os.ReadFile(logPath); return string(b) }
		cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data-%d", attempt)),
			"--web.listen-address=127.0.0.1:"+strconv.Itoa(port), "--log.level=warn")
		cmd.Stdout, cmd.Stderr = logFile, logFile
		require.NoError(t, cmd.Start())
		require.NoError(t, logFile.Close()) // the child has its own descriptor
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		p := &livePrometheus{base: "http://127.0.0.1:" + strconv.Itoa(port), http: &http.Client{Timeout: 30 * time.Second}}
		if p.waitReady(exited, 2*time.Minute) {
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
				if t.Failed() {
					t.Logf("prometheus log:\n%s", logs())
				}
			})
			return p
		}
		_ = cmd.Process.Kill()
		<-exited
		if attempt == 3 || !strings.Contains(logs(), "address already in use") {
			t.Fatalf("prometheus did not become ready on port %d:\n%s", port, logs())
		}
	}
}

// promtoolCheck checks the generated configuration when promtool is there.
func promtoolCheck(t *testing.T, cfgPath string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		return
	}
	out, err := exec.Command(promtool, "check", "config", cfgPath).CombinedOutput()
	require.NoError(t, err, "promtool check config:\n%s", out)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// waitReady polls /-/ready until it answers 200, the process exits, or the
// timeout passes.
func (p *livePrometheus) waitReady(exited <-chan struct{}, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if resp, err := p.http.Get(p.base + "/-/ready"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

// api answers GET /api/v1/<path> into data.
func (p *livePrometheus) api(path string, params url.Values, data any) error {
	resp, err := p.http.Get(p.base + "/api/v1/" + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status, Error, ErrorType string
		Data                     json.RawMessage
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("HTTP %d: %w", resp.StatusCode, err)
	}
	if body.Status != "success" {
		return &apiError{Type: body.ErrorType, Msg: body.Error}
	}
	return json.Unmarshal(body.Data, data)
}

// apiError is an error answer of the API: Type bad_data is a query that
// does not parse.
type apiError struct{ Type, Msg string }

func (e *apiError) Error() string { return e.Type + ": " + e.Msg }

// evaluate evaluates expr now: nil when it parses and evaluates, and
// returns at least one sample unless mayBeEmpty.
func (p *livePrometheus) evaluate(expr string, mayBeEmpty bool) error {
	var data struct {
		ResultType string
		Result     json.RawMessage
	}
	if err := p.api("query", url.Values{"query": {expr}}, &data); err != nil {
		return err
	}
	if data.ResultType == "scalar" || data.ResultType == "string" {
		return nil
	}
	var result []json.RawMessage
	if err := json.Unmarshal(data.Result, &result); err != nil {
		return err
	}
	if len(result) == 0 && !mayBeEmpty {
		return errors.New("no data")
	}
	return nil
}

// eventually calls check until it returns nil, every second; after timeout
// it fails the test with what and check's last error.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after %s:\n%v", what, timeout, err)
		}
		time.Sleep(time.Second)
	}
}

// rulesHealthy is nil when Prometheus has loaded want rules and evaluated
// each without error.
func (p *livePrometheus) rulesHealthy(want int) error {
	var data struct {
		Groups []struct {
			Name  string
			Rules []struct{ Name, Health, LastError string }
		}
	}
	if err := p.api("rules", nil, &data); err != nil {
		return err
	}
	var errs []error
	n := 0
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				errs = append(errs, fmt.Errorf("%s/%s: health %s %s", g.Name, r.Name, r.Health, r.LastError))
			}
		}
	}
	if n != want {
		errs = append(errs, fmt.Errorf("%d rules loaded; want %d", n, want))
	}
	return errors.Join(errs...)
}

// targetsUp is nil when the last scrape of every target succeeded and each
// of jobs has one.
func (p *livePrometheus) targetsUp(jobs ...string) error {
	var data struct {
		ActiveTargets []struct {
			Labels    map[string]string
			Health    string
			LastError string
		}
	}
	if err := p.api("targets", nil, &data); err != nil {
		return err
	}
	var errs []error
	up := map[string]bool{}
	for _, tg := range data.ActiveTargets {
		if tg.Health != "up" {
			errs = append(errs, fmt.Errorf("%v: %s %s", tg.Labels, tg.Health, tg.LastError))
		}
		up[tg.Labels["job"]] = tg.Health == "up"
	}
	for _, j := range jobs {
		if !up[j] {
			errs = append(errs, fmt.Errorf("job %s not up", j))
		}
	}
	return errors.Join(errs...)
}
