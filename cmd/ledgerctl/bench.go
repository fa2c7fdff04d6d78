package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/ledger-dev/ledger/processor/bench"
)

const benchHelp = `Runs issue 6's benchmark and prints its tables as markdown on stdout
(progress on stderr): the project's consumer (the poller, and the Lambda
handler fed the same batches) next to the approaches users would otherwise
pick (per-record updates as seed 003 writes them, the same with Powertools-
style idempotency markers, and seed 003's synchronous createWithReport), on
workloads a-d, at batch sizes 100 and 1,000: write requests and write units
per 1,000 changes (AWS billing rules, cross-checked against DynamoDB
Local's ConsumedCapacity), end-to-end throughput against the raw stream
drain rate, exactness under 1% duplicate delivery (reconcile), lag at a
steady rate, CPU-only decoding and folding, and the poller binary's peak
memory draining a 1,000,000-record backlog.

It starts its own DynamoDB Local instances (infra/ddblocal; run 'make deps'
once) and ignores LEDGER_TABLE and AWS_ENDPOINT_URL. BENCHMARKS.md explains
the numbers. A full run takes over an hour on 2 cores; -quick runs every
measurement on small workloads in well under a minute (CI smoke).`

func (e *environment) bench(ctx context.Context, args []string) int {
	fs := e.flags("bench", benchHelp)
	quick := fs.Bool("quick", false, "small workloads, no memory backlog: under a minute")
	out := fs.String("o", "", "also write the markdown to `FILE`")
	poller := fs.String("poller", "", "a built cmd/poller `BINARY` for the memory measurement (default: go build one)")
	backlog := fs.Int("backlog", -1, "`RECORDS` in the memory measurement's backlog (default 1,000,000 in a full run; 0 skips it)")
	only := fs.String("only", "", "measure only these approaches' backlogs: `LIST` of perrecord, marker, sync, poller, lambda")
	skip := fs.String("skip", "", "leave out these measurements: `LIST` of lag, cpu")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return e.fail(fmt.Errorf("bench: unexpected argument %q", fs.Arg(0)))
	}
	cfg := bench.Full()
	if *quick {
		cfg = bench.Quick()
	}
	if *backlog >= 0 {
		cfg.Backlog = *backlog
	}
	if *only != "" {
		for _, id := range strings.Split(*only, ",") {
			a, ok := bench.ApproachByID(strings.TrimSpace(id))
			if !ok {
				return e.fail(fmt.Errorf("bench: -only: unknown approach %q (perrecord, marker, sync, poller, lambda)", id))
			}
			cfg.Only = append(cfg.Only, a)
		}
	}
	for _, m := range strings.Split(*skip, ",") {
		switch strings.TrimSpace(m) {
		case "":
		case "lag":
			cfg.SkipLag = true
		case "cpu":
			cfg.SkipCPU = true
		default:
			return e.fail(fmt.Errorf("bench: -skip: unknown measurement %q (lag, cpu)", m))
		}
	}
	cfg.PollerBinary = *poller
	cfg.Command = strings.Join(append([]string{"ledgerctl", "bench"}, args...), " ")
	m := e.meter("bench")
	cfg.Log = &benchLog{m: m}
	res, err := bench.Run(ctx, cfg)
	m.stop()
	if res != nil {
		// Print what was measured, even when a later measurement failed.
		md := res.String()
		fmt.Fprint(e.stdout, md)
		if *out != "" {
			if werr := os.WriteFile(*out, []byte(md), 0o644); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err != nil {
		return e.fail(err)
	}
	return exitOK
}

// benchLog passes the bench's log lines to the progress meter (above its
// line on a terminal, as they are otherwise) and moves it along the
// "[i/n]" of each measurement's first line.
type benchLog struct {
	mu          sync.Mutex
	m           progressMeter
	done, total int64
	status      string
}

func (l *benchLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.m.Write(p) // first: a plain meter then prints no line of its own
	if _, msg, ok := strings.Cut(strings.TrimRight(string(p), "\n"), " bench: "); ok && !strings.HasPrefix(msg, " ") {
		var i, total int64
		if _, serr := fmt.Sscanf(msg, "[%d/%d]", &i, &total); serr == nil {
			l.done, l.total = i-1, total
		}
		l.status = msg
	}
	l.m.set(l.done, l.total, l.status)
	return n, err
}
