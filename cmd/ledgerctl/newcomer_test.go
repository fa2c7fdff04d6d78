package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// TestNewcomer_MakeRunFromACleanClone does what the README tells a
// newcomer: clone the repository into an empty directory and run `make
// run`. It waits for the printed reports, checks them against the table and
// the reconcile oracle, presses Ctrl-C (SIGINT to the process group, as a
// terminal does) and checks that every process it started is gone, java
// included. Then it runs `make run` again in the same clone: the data is
// kept, the sample is not posted twice, the reports are the same.
//
// It tests what is committed (a clone of HEAD), not uncommitted changes.
func TestNewcomer_MakeRunFromACleanClone(t *testing.T) {
	if testing.Short() {
		t.Skip("clones the repository and runs the whole stack")
	}
	for _, tool := range []string{"git", "make", "go", "java", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not on PATH", tool)
			}
			t.Skipf("%s not on PATH", tool)
		}
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git checkout")
	}
	clone := filepath.Join(t.TempDir(), "ledger")
	out, err := exec.Command("git", "clone", "--quiet", "--no-hardlinks", root, clone).CombinedOutput()
	require.NoError(t, err, "git clone: %s", out)

	// The default DynamoDB Local port taken: the run must pick another.
	// (When another process holds it already, for instance another test
	// run on the same machine, it may free it at any time: then the run
	// may or may not find it taken.)
	took := false
	if ln, err := net.Listen("tcp", ":8000"); err == nil {
		defer ln.Close()
		took = true
	}

	first := startMakeRun(t, clone)
	defer first.kill()
	text := first.waitFor(t, runReady, 4*time.Minute)
	if took {
		assert.Contains(t, text, "! port 8000 is taken")
	}
	assert.Contains(t, text, "sample posted")
	printed := parseReportTable(t, text)
	require.Len(t, printed, len(sampleBranches)*len(sampleMonths), text)
	// The chain's roll-ups after the branches' reports, per currency (or
	// none yet, while the consumers have not folded them).
	assert.Contains(t, text, "Monthly roll-ups of tenant "+sampleTenant)
	assert.Contains(t, text, "Fiscal-year roll-ups of tenant "+sampleTenant)
	endpoint := regexp.MustCompile(`(?m)^\s+DynamoDB Local\s+(http://\S+)`).FindStringSubmatch(text)
	require.NotNil(t, endpoint, text)

	// The printed figures are the stored reports, and the stored reports are
	// the fold of the transactions (reconcile finds nothing).
	ctx := context.Background()
	cfg, err := infra.LocalConfig(ctx, endpoint[1])
	require.NoError(t, err)
	db := dynamodb.NewFromConfig(cfg)
	diffs, stats, err := processor.Reconcile(ctx, db, table.DefaultTableName, processor.Scope{})
	require.NoError(t, err)
	assert.Empty(t, diffs)
	_, final := sampleWorkload()
	assert.Equal(t, final, stats.Transactions)
	stored := map[string]string{}
	for _, b := range sampleBranches {
		reps, err := readReports(ctx, db, table.DefaultTableName, sampleTenant, b, aggregates.Monthly, "", "")
		require.NoError(t, err)
		for _, r := range reps {
			tt := r.Report.Totals
			stored[b+" "+r.Key.Period.Value] = fmt.Sprintf("%s %s %s %d", money(tt.Income), money(tt.Expense), money(tt.Income.Sub(tt.Expense)), tt.Count)
		}
	}
	assert.Equal(t, stored, printed)

	// Ctrl-C: everything goes, java included.
	first.interrupt(t)
	text = first.wait(t, time.Minute)
	assert.Contains(t, text, "stopping DynamoDB Local")
	assertNoProcessUnder(t, clone)

	// Again, in the same clone: the data is kept and nothing posted twice.
	second := startMakeRun(t, clone, "RUN_FLAGS=--once")
	defer second.kill()
	text = second.wait(t, 4*time.Minute)
	require.NoError(t, second.err, text)
	assert.Contains(t, text, "table ledger found")
	assert.Contains(t, text, "sample already present")
	assert.Equal(t, printed, parseReportTable(t, text))
	assertNoProcessUnder(t, clone)
}

// makeRun is a `make run` started in its own process group.
type makeRun struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	line chan string
	done chan struct{}
	err  error
}

func startMakeRun(t *testing.T, dir string, args ...string) *makeRun {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory", "run"}, args...)...)
	cmd.Dir = dir
	// A newcomer's environment: nothing of ours that points anywhere.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "LEDGER_") && !strings.HasPrefix(kv, "MAKEFLAGS=") && !strings.HasPrefix(kv, "MFLAGS=") && !strings.HasPrefix(kv, "MAKELEVEL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	m := &makeRun{cmd: cmd, line: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			m.mu.Lock()
			m.out.WriteString(sc.Text() + "\n")
			m.mu.Unlock()
			select {
			case m.line <- sc.Text():
			default:
			}
		}
		m.err = cmd.Wait()
		close(m.done)
	}()
	return m
}

func (m *makeRun) text() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out.String()
}

// waitFor returns the output so far once a line contains want.
func (m *makeRun) waitFor(t *testing.T, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-m.line:
			if strings.Contains(l, want) {
				time.Sleep(200 * time.Millisecond) // the rest of the block
				return m.text()
			}
		case <-m.done:
			t.Fatalf("make run exited (%v) before printing %q:\n%s", m.err, want, m.text())
		case <-deadline:
			t.Fatalf("no %q within %s:\n%s", want, timeout, m.text())
		}
	}
}

func (m *makeRun) interrupt(t *testing.T) {
	t.Helper()
	require.NoError(t, syscall.Kill(-m.cmd.Process.Pid, syscall.SIGINT))
}

// wait waits for make to exit and returns its output.
func (m *makeRun) wait(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case <-m.done:
	case <-time.After(timeout):
		t.Fatalf("make run still running after %s:\n%s", timeout, m.text())
	}
	// Interrupted make exits by the signal or with status 2; both are fine.
	var ee *exec.ExitError
	if m.err != nil && !errors.As(m.err, &ee) {
		t.Fatalf("make run: %v", m.err)
	}
	return m.text()
}

// kill ends whatever is left of the process group (after a failure).
func (m *makeRun) kill() { _ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL) }

// parseReportTable reads the monthly report table 'ledgerctl run' prints:
// "branch period" → "income expense net count".
func parseReportTable(t *testing.T, text string) map[string]string {
	t.Helper()
	_, after, ok := strings.Cut(text, "Monthly reports of tenant "+sampleTenant)
	require.True(t, ok, text)
	rows := map[string]string{}
	for _, l := range strings.Split(after, "\n")[1:] {
		f := strings.Fields(l)
		switch {
		case len(f) == 0 && len(rows) > 0:
			return rows
		case len(f) == 7 && f[0] == sampleTenant:
			rows[f[1]+" "+f[2]] = strings.Join(f[3:], " ")
		}
	}
	return rows
}

// assertNoProcessUnder fails for every process whose working directory or
// command line is inside dir: make, go run, ledgerctl, npm, java.
func assertNoProcessUnder(t *testing.T, dir string) {
	t.Helper()
	var left []string
	for attempt := 0; attempt < 20; attempt++ {
		left = left[:0]
		procs, _ := filepath.Glob("/proc/[0-9]*")
		for _, p := range procs {
			cwd, _ := os.Readlink(filepath.Join(p, "cwd"))
			cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
			cl := strings.ReplaceAll(string(cmdline), "\x00", " ")
			if strings.HasPrefix(cwd, dir) || strings.Contains(cl, dir) {
				left = append(left, filepath.Base(p)+": "+cl)
			}
		}
		if len(left) == 0 {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Errorf("processes left behind after Ctrl-C:\n%s", strings.Join(left, "\n"))
}
