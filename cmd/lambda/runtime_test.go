package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
)

// buildBinary compiles cmd/lambda into dir, as it is deployed.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bootstrap")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// runtimeAPI is a small implementation of the Lambda Runtime API
// (2018-06-01) for one function process at a time: it hands out queued
// invocations on GET .../invocation/next and collects the answers posted
// to .../invocation/{id}/response and .../error, and init errors.
type runtimeAPI struct {
	srv      *httptest.Server
	queue    chan *invocation
	closing  chan struct{}
	mu       sync.Mutex
	byID     map[string]*invocation
	seq      atomic.Int64
	initErrs chan initError
	// timeout is the invocation's deadline from when it is handed out.
	timeout time.Duration
	// gen counts function processes started (newProcess). Each connection
	// remembers the generation it was accepted in (the process that made
	// it), and an invocation is handed out only on a connection of the
	// current process: a killed process's GET .../next, still pending in
	// the server until it notices the connection is gone, must not take
	// the next invocation, which Lambda would never give a dead
	// environment. (It did, on a busy machine: the invocation was lost and
	// the harness reported "no answer" after 60 s, the flaky
	// TumblingMode_WindowsWithStateAndKillsReconcile of issue 12.)
	gen atomic.Int64
	// pendingNext counts GET .../next requests waiting for an invocation.
	pendingNext atomic.Int64
	// controlPlane answers the function's ListEventSourceMappings
	// (AWS_ENDPOINT_URL_LAMBDA): a safe standard-mode mapping unless the
	// test sets others.
	controlPlane *fakeControlPlane
}

type connGenKey struct{}

// newProcess marks the start of a new function process: connections made
// before it are the dead process's.
func (api *runtimeAPI) newProcess() { api.gen.Add(1) }

type invocation struct {
	id       string
	payload  []byte
	done     chan struct{} // closed once answered
	once     sync.Once
	canceled atomic.Bool // abandoned (its process was killed): never hand it out
	// The answer.
	ok      bool
	body    []byte
	errType string
}

type initError struct {
	header  string // Lambda-Runtime-Function-Error-Type
	message string
	errType string
}

// answerError is the body of .../invocation/{id}/error.
type answerError struct {
	ErrorMessage string `json:"errorMessage"`
	ErrorType    string `json:"errorType"`
}

func newRuntimeAPI(t *testing.T) *runtimeAPI {
	api := &runtimeAPI{
		queue: make(chan *invocation, 16), closing: make(chan struct{}), byID: map[string]*invocation{},
		initErrs: make(chan initError, 16), timeout: 30 * time.Second,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", api.next)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", func(w http.ResponseWriter, r *http.Request) {
		api.answer(w, r, true)
	})
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", func(w http.ResponseWriter, r *http.Request) {
		api.answer(w, r, false)
	})
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var e answerError
		_ = json.Unmarshal(body, &e)
		api.initErrs <- initError{header: r.Header.Get("Lambda-Runtime-Function-Error-Type"), message: e.ErrorMessage, errType: e.ErrorType}
		w.WriteHeader(http.StatusAccepted)
	})
	api.srv = httptest.NewUnstartedServer(mux)
	api.srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connGenKey{}, api.gen.Load())
	}
	api.srv.Start()
	api.controlPlane = newFakeControlPlane(t, safeMapping("esm-1", "standard"))
	t.Cleanup(func() {
		close(api.closing)
		api.srv.Close()
	})
	return api
}

// addr is the value of AWS_LAMBDA_RUNTIME_API.
func (api *runtimeAPI) addr() string { return api.srv.Listener.Addr().String() }

func (api *runtimeAPI) next(w http.ResponseWriter, r *http.Request) {
	gen, _ := r.Context().Value(connGenKey{}).(int64)
	api.pendingNext.Add(1)
	defer api.pendingNext.Add(-1)
	for {
		select {
		case inv := <-api.queue:
			if inv.canceled.Load() {
				continue
			}
			if gen != api.gen.Load() {
				// A dead process's request: the invocation goes back for the
				// live one (at most one is pending at a time).
				api.queue <- inv
				return
			}
			api.mu.Lock()
			api.byID[inv.id] = inv
			api.mu.Unlock()
			h := w.Header()
			h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
			h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(api.timeout).UnixMilli(), 10))
			h.Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:ledger-test")
			h.Set("Lambda-Runtime-Trace-Id", "Root=1-5bef4de7-ad49b0e87f6ef6c87fc2e700;Parent=9a9197af755a6419;Sampled=1")
			h.Set("Content-Type", "application/json")
			_, _ = w.Write(inv.payload)
			return
		case <-r.Context().Done():
			return
		case <-api.closing:
			return
		}
	}
}

func (api *runtimeAPI) answer(w http.ResponseWriter, r *http.Request, ok bool) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		// The process died while posting its answer (a kill mid-request):
		// Lambda has no answer then; the invocation stays pending and the
		// harness sees the process die.
		http.Error(w, "incomplete answer", http.StatusBadRequest)
		return
	}
	api.mu.Lock()
	inv := api.byID[r.PathValue("id")]
	delete(api.byID, r.PathValue("id"))
	api.mu.Unlock()
	if inv == nil {
		http.Error(w, "unknown invocation", http.StatusBadRequest)
		return
	}
	inv.once.Do(func() {
		inv.ok, inv.body, inv.errType = ok, body, r.Header.Get("Lambda-Runtime-Function-Error-Type")
		close(inv.done)
	})
	w.WriteHeader(http.StatusAccepted)
}

// enqueue makes payload the next invocation.
func (api *runtimeAPI) enqueue(payload []byte) *invocation {
	inv := &invocation{id: fmt.Sprintf("req-%d", api.seq.Add(1)), payload: payload, done: make(chan struct{})}
	api.queue <- inv
	return inv
}

// function runs the built binary as Lambda would: one process at a time,
// restarted after it is killed. Its stdout must hold only EMF lines; they
// are kept, parsed.
type function struct {
	t   *testing.T
	bin string
	env []string
	api *runtimeAPI

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	killing bool
	starts  int
	emf     []map[string]any
	stderr  bytes.Buffer
}

func newFunction(t *testing.T, bin string, api *runtimeAPI, env []string) *function {
	f := &function{t: t, bin: bin, env: env, api: api}
	t.Cleanup(f.stop)
	return f
}

// lineWriter hands complete lines to fn.
type lineWriter struct {
	mu  sync.Mutex
	buf []byte
	fn  func([]byte)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.fn(append([]byte(nil), w.buf[:i]...))
		w.buf = w.buf[i+1:]
	}
}

func (f *function) start() {
	f.t.Helper()
	cmd := exec.Command(f.bin)
	cmd.Env = f.env
	cmd.Stdout = &lineWriter{fn: func(line []byte) {
		var doc map[string]any
		if err := json.Unmarshal(line, &doc); err != nil || doc["_aws"] == nil {
			f.t.Errorf("stdout line is not an EMF document: %s", line)
			return
		}
		f.mu.Lock()
		f.emf = append(f.emf, doc)
		f.mu.Unlock()
	}}
	cmd.Stderr = &lineWriter{fn: func(line []byte) {
		f.mu.Lock()
		f.stderr.Write(line)
		f.stderr.WriteByte('\n')
		f.mu.Unlock()
	}}
	f.api.newProcess()
	require.NoError(f.t, cmd.Start())
	exited := make(chan struct{})
	f.mu.Lock()
	f.cmd, f.exited, f.killing = cmd, exited, false
	f.starts++
	f.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.mu.Lock()
		killed := f.killing
		f.mu.Unlock()
		if !killed {
			f.t.Errorf("the function exited on its own (%v); stderr:\n%s", err, f.logs())
		}
		close(exited)
	}()
}

// kill sends SIGKILL and waits for the process to be gone.
func (f *function) kill() {
	f.mu.Lock()
	cmd, exited := f.cmd, f.exited
	f.killing = true
	f.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

func (f *function) stop() {
	f.kill()
	if strings.Contains(f.logs(), "panic") {
		f.t.Errorf("the function logged a panic:\n%s", f.logs())
	}
}

func (f *function) logs() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stderr.String()
}

// waitEMF waits until more than n EMF lines arrived (stdout is read
// asynchronously) and returns them all.
func (f *function) waitEMF(n int) []map[string]any {
	f.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if lines := f.emfLines(); len(lines) > n {
			return lines
		}
	}
	f.t.Fatalf("no EMF line after %d", n)
	return nil
}

func (f *function) emfLines() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.emf...)
}

// answer is what the event source mapping saw of one invocation.
type answer struct {
	ok     bool   // a response (else a function error)
	body   []byte // the response, or the error document
	killed bool   // the process died before answering
}

// invoke delivers payload to the function and waits for its answer. With
// killAfter ≥ 0 the process is killed that long after the delivery unless
// it answered first (the fault proxy may kill it too). A killed process is
// restarted, as Lambda starts a new execution environment for the retry.
func (f *function) invoke(api *runtimeAPI, payload []byte, killAfter time.Duration) answer {
	f.t.Helper()
	inv := api.enqueue(payload)
	f.mu.Lock()
	exited := f.exited
	f.mu.Unlock()
	var kill <-chan time.Time
	if killAfter >= 0 {
		kill = time.After(killAfter)
	}
	select {
	case <-inv.done:
		return answer{ok: inv.ok, body: inv.body}
	case <-kill:
		f.kill()
	case <-exited:
		f.mu.Lock()
		killed := f.killing
		f.mu.Unlock()
		if !killed {
			inv.canceled.Store(true)
			f.t.Fatalf("function died during an invocation; stderr:\n%s", f.logs())
		}
	case <-time.After(2 * api.timeout):
		f.t.Fatalf("no answer to invocation %s; stderr:\n%s", inv.id, f.logs())
	}
	inv.canceled.Store(true)
	f.start()
	select {
	case <-inv.done: // answered just before it died
		return answer{ok: inv.ok, body: inv.body}
	default:
		return answer{killed: true}
	}
}

// faultProxy stands between the function and DynamoDB Local: a reverse
// proxy whose transport (ledgertest.FaultTransport) starts failing
// every request once a budget of passed requests is spent.
type faultProxy struct {
	srv    *httptest.Server
	ft     *ledgertest.FaultTransport
	mu     sync.Mutex
	budget int    // requests to pass before failing; < 0: never fail
	op     string // when set, only requests of this operation count and fail
	fault  ledgertest.Fault
	failed int
	// killIn > 0 kills the function at its killIn-th request from now,
	// before forwarding it or, with killAfterWrite, once DynamoDB applied
	// it and before the answer reaches the function.
	killIn         int
	killAfterWrite bool
	kill           func()
}

// killSwitch is the proxy's outer transport: it kills the function at a
// chosen request.
type killSwitch struct {
	p    *faultProxy
	next http.RoundTripper
}

func (k killSwitch) RoundTrip(req *http.Request) (*http.Response, error) {
	p := k.p
	p.mu.Lock()
	fire, after := false, p.killAfterWrite
	if p.killIn > 0 {
		p.killIn--
		fire = p.killIn == 0
	}
	kill := p.kill
	p.mu.Unlock()
	if fire && !after {
		kill()
		return nil, errors.New("function killed")
	}
	resp, err := k.next.RoundTrip(req)
	if fire {
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		kill()
		return nil, errors.New("function killed")
	}
	return resp, err
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	u, err := url.Parse(target)
	require.NoError(t, err)
	p := &faultProxy{budget: -1}
	p.ft = &ledgertest.FaultTransport{Next: http.DefaultTransport, Decide: p.decide}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = killSwitch{p: p, next: p.ft}
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	}
	p.srv = httptest.NewServer(rp)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *faultProxy) decide(op string) ledgertest.Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.budget < 0, p.op != "" && op != p.op:
		return ledgertest.Pass
	case p.budget > 0:
		p.budget--
		return ledgertest.Pass
	}
	p.failed++
	return p.fault
}

// failAfter makes every request of op (any operation when op is "") after
// the next n fail with fault.
func (p *faultProxy) failAfter(n int, op string, fault ledgertest.Fault) {
	p.mu.Lock()
	p.budget, p.op, p.fault = n, op, fault
	p.mu.Unlock()
}

// killAt kills the function at its n-th request from now (n ≥ 1).
func (p *faultProxy) killAt(n int, afterWrite bool) {
	p.mu.Lock()
	p.killIn, p.killAfterWrite = n, afterWrite
	p.mu.Unlock()
}

func (p *faultProxy) heal() {
	p.mu.Lock()
	p.budget, p.killIn = -1, 0
	p.mu.Unlock()
}

// The harness's own regression test (issue 12, the flaky
// TumblingMode_WindowsWithStateAndKillsReconcile): a process killed while
// its GET .../invocation/next was pending left that request in the server
// until the server noticed the closed connection; on a busy machine the
// next invocation went to it and was lost ("no answer" after 60 s, while
// the function never saw it). Here the dead process's request is held
// open on purpose: the invocation must go to the live process.
func TestRuntimeAPI_NeverHandsAnInvocationToADeadProcess(t *testing.T) {
	api := newRuntimeAPI(t)
	url := "http://" + api.addr() + "/2018-06-01/runtime/invocation/next"
	get := func(c *http.Client, got chan<- string) {
		resp, err := c.Get(url)
		if err != nil {
			got <- ""
			return
		}
		defer resp.Body.Close()
		got <- resp.Header.Get("Lambda-Runtime-Aws-Request-Id")
	}
	api.newProcess()
	dead := &http.Client{Transport: &http.Transport{Proxy: nil}}
	deadGot := make(chan string, 1)
	go get(dead, deadGot)
	// Wait until the dead process's request is pending in the server.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the first request never arrived")
		if n := api.pendingNext.Load(); n == 1 {
			break
		}
	}
	api.newProcess() // killed and restarted: the next connection is the live process's
	live := &http.Client{Transport: &http.Transport{Proxy: nil}}
	liveGot := make(chan string, 1)
	go get(live, liveGot)
	for deadline := time.Now().Add(20 * time.Second); api.pendingNext.Load() < 2; time.Sleep(5 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the second request never arrived")
	}
	inv := api.enqueue([]byte(`{}`))
	timeout := time.After(20 * time.Second)
	for {
		select {
		case id := <-liveGot:
			assert.Equal(t, inv.id, id)
			return
		case id := <-deadGot:
			// Its connection may end without an answer (an error, id ""):
			// what must never happen is an invocation handed to it.
			require.Empty(t, id, "invocation %q handed to the dead process's request", id)
			deadGot = nil
		case <-timeout:
			t.Fatal("the invocation was handed to nobody")
		}
	}
}
