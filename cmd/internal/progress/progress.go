// Package progress shows how far the long work of ledger's command-line
// tools has come (ledgerctl reconcile, replay, run's wait for the poller;
// ledgerbench): on stderr only, a line redrawn in place on a terminal, plain
// periodic lines otherwise.
package progress

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// Meter shows how far a long command (reconcile, replay, bench,
// run's wait for the poller) has come, on stderr only: stdout keeps the
// command's result, so that --json stays JSON. When stderr is a terminal it
// is one line redrawn in place (mpb), from a second into the work on;
// otherwise a plain line whenever nothing was printed for
// LEDGER_PROGRESS_EVERY (5s), so quick work prints none.
type Meter interface {
	// Set says how far the work is: done of total units (total 0: not
	// known yet) and what is going on now.
	Set(done, total int64, status string)
	// Write prints whole lines of the command's own log on stderr without
	// breaking the progress line.
	io.Writer
	// Stop ends the display (the terminal line is removed); call it once,
	// when the work is over.
	Stop()
}

// Defaults of the progress display.
const (
	progressEveryDefault = 5 * time.Second // plain lines: at most one per interval
	progressBarAfter     = time.Second     // terminal: no line for quicker work
)

// New returns the progress display of the work called name, on stderr.
// getenv's LEDGER_PROGRESS_EVERY sets the plain lines' interval: a
// duration, 0 for a line on every step, "off" for none.
func New(name string, stderr io.Writer, getenv func(string) string) Meter {
	every := progressEveryDefault
	switch v := strings.TrimSpace(getenv("LEDGER_PROGRESS_EVERY")); v {
	case "":
	case "off":
		return &lineMeter{w: stderr, off: true}
	default:
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			fmt.Fprintf(stderr, "LEDGER_PROGRESS_EVERY %q: want a duration (e.g. 5s), 0 or off; using %s\n", v, every)
			break
		}
		every = d
	}
	if IsTerminal(stderr) {
		return newBarMeter(stderr, name, progressBarAfter)
	}
	return &lineMeter{w: stderr, name: name, every: every, start: time.Now(), last: time.Now()}
}

// Lines is where a command prints its result lines while m runs: stdout,
// unless stdout is a terminal showing m's line in place, where they are
// printed above it (on stderr, the same screen) so that neither breaks the
// other.
func Lines(m Meter, stdout io.Writer) io.Writer {
	if _, ok := m.(*barMeter); ok && IsTerminal(stdout) {
		return m
	}
	return stdout
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// lineMeter prints a plain line whenever nothing was printed for every.
type lineMeter struct {
	mu    sync.Mutex
	w     io.Writer
	name  string
	every time.Duration
	start time.Time
	last  time.Time // of the last line printed, progress or log
	off   bool      // print only the log
}

func (m *lineMeter) Set(done, total int64, status string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if m.off || now.Sub(m.last) < m.every {
		return
	}
	m.last = now
	fmt.Fprintf(m.w, "%s: %s%s (%s)\n", m.name, status, fraction(done, total), now.Sub(m.start).Round(time.Second))
}

func (m *lineMeter) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = time.Now()
	return m.w.Write(p)
}

func (m *lineMeter) Stop() {}

// fraction is ", 40%" of a known total, or nothing.
func fraction(done, total int64) string {
	if total <= 0 {
		return ""
	}
	return ", " + strconv.FormatInt(min(100, done*100/total), 10) + "%"
}

// barMeter is a progress bar on a terminal: name, bar, status, elapsed
// time. The mpb container is made on the first Set after the delay, so that
// quick work shows nothing; until then, and after Stop, Write goes straight
// to w.
type barMeter struct {
	mu      sync.Mutex // guards what follows status
	w       io.Writer
	name    string
	start   time.Time
	after   time.Duration
	opts    []mpb.ContainerOption
	status  atomic.Pointer[string] // read by mpb's goroutine while set may hold mu
	p       *mpb.Progress
	bar     *mpb.Bar
	total   int64
	stopped bool
}

func newBarMeter(w io.Writer, name string, after time.Duration, opts ...mpb.ContainerOption) *barMeter {
	return &barMeter{w: w, name: name, start: time.Now(), after: after, opts: opts}
}

func (m *barMeter) Set(done, total int64, status string) {
	m.status.Store(&status)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bar == nil {
		if m.stopped || time.Since(m.start) < m.after {
			return
		}
		m.p = mpb.New(append([]mpb.ContainerOption{mpb.WithOutput(m.w), mpb.WithWidth(30)}, m.opts...)...)
		m.bar = m.p.AddBar(0, mpb.BarRemoveOnComplete(),
			mpb.PrependDecorators(decor.Name(m.name+" ")),
			mpb.AppendDecorators(
				decor.Any(func(decor.Statistics) string { return " " + *m.status.Load() + "  " }),
				decor.NewElapsed(decor.ET_STYLE_MMSS, m.start, decor.WCSyncSpaceR)))
	}
	if total > 0 && total != m.total {
		m.total = total
		m.bar.SetTotal(total, false)
	}
	m.bar.SetCurrent(done)
}

func (m *barMeter) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p == nil {
		return m.w.Write(p)
	}
	return m.p.Write(p) // printed above the bar at its next refresh
}

func (m *barMeter) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	if m.bar == nil {
		return
	}
	m.bar.SetTotal(-1, true) // complete: removed from the screen
	m.p.Wait()
	m.p, m.bar = nil, nil
}
