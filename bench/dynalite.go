package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// dynalite is a running dynalite (infra/dynalite): a DynamoDB
// implementation in Node.js that keeps its tables in LevelDB on disk and
// serves Query and Scan a page at a time, so that a table of millions of
// items costs it disk, not memory. It has no streams and no transactions:
// the reconcile curve needs neither (a read-only reconcile does not read
// the stream).
type dynalite struct {
	Endpoint string
	cmd      *exec.Cmd
	log      *bytes.Buffer
	done     chan struct{}
	peak     int64
}

// startDynalite starts the dynalite installed under dir (npm ci --prefix
// dir: node_modules/dynalite) on a free port, storing its data in dataDir,
// and waits until it accepts connections.
func startDynalite(ctx context.Context, dir, dataDir string) (*dynalite, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("dynalite needs node: %w", err)
	}
	cli := filepath.Join(dir, "node_modules", "dynalite", "cli.js")
	if _, err := os.Stat(cli); err != nil {
		return nil, fmt.Errorf("dynalite is not installed (npm ci --prefix %s, or make bench-reconcile): %w", dir, err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	d := &dynalite{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port), log: &bytes.Buffer{}, done: make(chan struct{})}
	// Tables are ACTIVE at once: nothing here waits on a simulated
	// CREATING state.
	d.cmd = exec.Command(node, cli, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--path", dataDir, "--createTableMs", "0")
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	dieWithParent(d.cmd)
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start dynalite: %w", err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			_ = c.Close()
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("dynalite exited at start: %s", tail(d.log.String(), 2000))
		case <-ctx.Done():
			_ = d.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = d.Stop()
			return nil, errors.New("dynalite did not accept connections within 30s: " + tail(d.log.String(), 2000))
		}
	}
}

// Stop ends dynalite (an interrupt, then SIGKILL after 10 s), first
// reading its peak resident set size (PeakRSS).
func (d *dynalite) Stop() error {
	select {
	case <-d.done:
		return nil
	default:
	}
	d.peak = vmHWM(d.cmd.Process.Pid)
	_ = d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	return nil
}

// PeakRSS is dynalite's peak resident set size in bytes, read by Stop
// (0 when unknown). It is the high-water mark of its own memory (VmHWM),
// not ru_maxrss, which holds the bench's (see gnuTime).
func (d *dynalite) PeakRSS() int64 { return d.peak }

// vmHWM is the VmHWM of process pid's /proc status in bytes (0 when it
// cannot be read: not Linux, or the process has exited).
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kib << 10
		}
	}
	return 0
}
