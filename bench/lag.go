package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor/poller"
)

// LagRow is one approach's write → commit lag at the steady rate.
type LagRow struct {
	Approach Approach
	Written  int // changes written
	Expected int // of them, changes whose record changes a report and carries updatedAt
	Samples  int
	P50, P99 float64 // seconds
	// Sustained is false when the approach had not committed every change
	// 30 s after the last write (plus the window, for the tumbling Lambda:
	// it commits a window when the window closes).
	Sustained bool
	// Window is the tumbling Lambda's window (0 for the other approaches).
	Window time.Duration
}

func lagTable(a Approach) string { return "lag-" + a.id() }

// withEffect counts the changes whose stream record changes a report and
// carries a write time (inserts and effective modifies).
func withEffect(ops []Op) int {
	n := 0
	for _, op := range ops {
		if op.Kind == OpDelete {
			continue
		}
		if op.Kind == OpInsert {
			n++
			continue
		}
		f := aggregates.NewFold()
		f.AddChange(txOf(op.Old), txOf(op.New))
		if len(f.Keys()) > 0 {
			n++
		}
	}
	return n
}

// lagRate is the configured steady rate, or half the slowest approach's
// backlog throughput on workload b.
func (r *runner) lagRate() int {
	if r.cfg.LagRate > 0 {
		return r.cfg.LagRate
	}
	slowest := 0.0
	for _, row := range r.res.Rows {
		if row.Workload == "b" && (slowest == 0 || row.Throughput() < slowest) {
			slowest = row.Throughput()
		}
	}
	return min(50, max(2, int(slowest/2)))
}

// lag feeds every approach, on its own table, with workload b's changes at
// a steady rate for LagSeconds and measures write → commit.
func (r *runner) lag(ctx context.Context) error {
	rate := r.lagRate()
	r.res.LagRate = rate
	ops := WorkloadB.Generate(rate*r.cfg.LagSeconds, r.cfg.Seed+1)
	tables := make([]string, len(Approaches))
	for i, a := range Approaches {
		tables[i] = lagTable(a)
	}
	db, streams, stop, err := r.instance(ctx, tables...)
	if err != nil {
		return err
	}
	defer stop()
	for _, a := range Approaches {
		r.logf("lag: %s at %d changes/s for %ds", a, rate, r.cfg.LagSeconds)
		row, err := r.lagOne(ctx, target{db: db, streams: streams, table: lagTable(a), window: r.window()}, a, ops, rate)
		if err != nil {
			return fmt.Errorf("lag of %s: %w", a, err)
		}
		r.logf("    p50 %.3fs p99 %.3fs (%d of %d)", row.P50, row.P99, row.Samples, row.Expected)
		r.res.Lag = append(r.res.Lag, row)
	}
	return nil
}

func (r *runner) lagOne(ctx context.Context, t target, a Approach, ops []Op, rate int) (LagRow, error) {
	row := LagRow{Approach: a, Written: len(ops), Expected: withEffect(ops)}
	clock := newLagClock()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	if a == SyncTransaction {
		s := &Synchronous{API: NewMeter(t.db), Table: t.table}
		for _, op := range ops {
			<-tick.C
			start := time.Now()
			if err := s.Write(ctx, op, start); err != nil {
				return row, err
			}
			if op.Kind != OpDelete {
				clock.sample(time.Since(start))
			}
		}
		row.Samples, row.P50, row.P99 = clock.percentiles()
		row.Expected, row.Sustained = row.Samples, true
		return row, nil
	}
	arn, err := poller.ResolveStream(ctx, t.db, t.table)
	if err != nil {
		return row, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	batch := perRecordBatch
	if a == LedgerPoller {
		batch = 1000
	}
	go func() {
		_, err := consume(cctx, t, arn, "", a, batch, clock)
		done <- err
	}()
	// Let the consumer reach the (empty) stream's end first.
	time.Sleep(time.Second)
	for _, op := range ops {
		select {
		case <-tick.C:
		case err := <-done:
			return row, fmt.Errorf("consumer stopped: %w", err)
		}
		if err := Put(ctx, t.db, t.table, op, time.Now()); err != nil {
			return row, err
		}
	}
	if a == LedgerTumbling {
		row.Window = t.window
	}
	deadline := time.Now().Add(30*time.Second + row.Window)
	for {
		n, _, _ := clock.percentiles()
		if n >= row.Expected {
			row.Sustained = true
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return row, err
	}
	row.Samples, row.P50, row.P99 = clock.percentiles()
	return row, nil
}
