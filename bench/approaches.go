package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/ledger-dev/ledger/aggregates"
	ledgertable "github.com/ledger-dev/ledger/table"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
	"github.com/ledger-dev/ledger/processor/poller"
)

// Approach names one way of keeping the reports.
type Approach string

// The approaches of issue 6.
const (
	PerRecordSeed   Approach = "1 per record (seed 003)"
	PerRecordMarker Approach = "2 per record + idempotency marker"
	SyncTransaction Approach = "3 synchronous createWithReport"
	LedgerPoller    Approach = "4 ledger: poller"
	LedgerLambda    Approach = "4 ledger: Lambda handler"
	// LedgerTumbling is the Lambda handler in tumbling mode, fed by a
	// mapping with TumblingWindowInSeconds (Config.TumblingWindow).
	LedgerTumbling Approach = "4 ledger: Lambda handler (tumbling)"
)

// Approaches lists them in table order.
var Approaches = []Approach{PerRecordSeed, PerRecordMarker, SyncTransaction, LedgerPoller, LedgerLambda, LedgerTumbling}

func (a Approach) id() string {
	return map[Approach]string{PerRecordSeed: "perrecord", PerRecordMarker: "marker", SyncTransaction: "sync", LedgerPoller: "poller", LedgerLambda: "lambda", LedgerTumbling: "lambda-tumbling"}[a]
}

// perRecordBatch is the event source mapping batch size the per-record
// approaches run with (Lambda's default for DynamoDB streams; their writes
// do not depend on it).
const perRecordBatch = 100

// ApproachByID returns the approach whose short id (perrecord, marker,
// sync, poller, lambda, lambda-tumbling) is id.
func ApproachByID(id string) (Approach, bool) {
	for _, a := range Approaches {
		if a.id() == id {
			return a, true
		}
	}
	return "", false
}

// Ledger reports whether the approach is one of ledger's consumers.
func (a Approach) Ledger() bool {
	return a == LedgerPoller || a == LedgerLambda || a == LedgerTumbling
}

// batchless reports whether the approach's cost does not depend on the
// batch size (it is then run once per workload).
func (a Approach) batchless() bool { return !a.Ledger() }

// target is one DynamoDB Local table an approach runs against.
type target struct {
	db      *dynamodb.Client
	streams poller.Streams
	table   string
	window  time.Duration // the tumbling window (LedgerTumbling)
	// meter, if set, bills the consumer's writes: one that learned the
	// table's items (Meter.Learn) when an earlier run kept its reports.
	// Nil: a new meter.
	meter *Meter
}

// consumed is what one approach's run measured.
type consumed struct {
	took        time.Duration // until the source's last change was applied
	cost        Cost
	delivered   int // records handed to the consumer, duplicates included
	redelivered int // of them, duplicates injected
	baseline    int // approach 3: WCU the writer's own plain writes would cost
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// consume runs a stream approach over the table's backlog, whose last
// record is last, with 1% duplicate delivery, until the source is applied.
func consume(ctx context.Context, t target, arn, last string, a Approach, batch int, clock *lagClock) (consumed, error) {
	m := t.meter
	if m == nil {
		m = NewMeter(t.db)
	}
	var c consumed
	if a.Ledger() {
		// Its first write raises the flags' protocol: billed, on the
		// flags item's real size.
		if err := m.LearnItem(ctx, t.table, ledgertable.Key(aggregates.FlagsKey())); err != nil {
			return c, err
		}
	}
	start := time.Now()
	switch a {
	case PerRecordSeed, PerRecordMarker:
		h := &PerRecord{API: m, Table: t.table, Idempotent: a == PerRecordMarker}
		if clock != nil {
			h.Applied = clock.applied
		}
		esm := &ESM{Streams: t.streams, StreamARN: arn, BatchSize: batch, Duplicates: last != ""}
		if err := esm.Run(ctx, h, last); err != nil {
			return c, err
		}
		c.delivered, c.redelivered = esm.Delivered, esm.Redelivered
	case LedgerLambda, LedgerTumbling:
		proc, err := processor.New(commitHook{Meter: m, clock: clock}, processor.Config{Table: t.table}, nil)
		if err != nil {
			return c, err
		}
		cfg := handler.Config{Mode: handler.Standard}
		esm := &ESM{Streams: t.streams, StreamARN: arn, BatchSize: batch, Duplicates: last != ""}
		if a == LedgerTumbling {
			// The handler reads the window's records from the stream
			// when it commits; BatchRecords stays at its default.
			cfg = handler.Config{Mode: handler.Tumbling, Streams: t.streams}
			esm.Window = t.window
		}
		h, err := handler.New(proc, cfg)
		if err != nil {
			return c, err
		}
		if clock != nil {
			esm.Read = clock.read
		}
		if err := esm.Run(ctx, h, last); err != nil {
			return c, err
		}
		c.delivered, c.redelivered = esm.Delivered, esm.Redelivered
	case LedgerPoller:
		proc, err := processor.New(commitHook{Meter: m, clock: clock}, processor.Config{Table: t.table}, nil)
		if err != nil {
			return c, err
		}
		hook := newStreamHook(t.streams, arn, last, last != "", clock)
		p, err := poller.New(hook, m, proc, poller.Config{
			Table: t.table, StreamARN: arn, Owner: "bench", Drain: last != "", MaxRecords: min(batch, 1000), BatchRecords: batch, Logger: discard,
		}, nil)
		if err != nil {
			return c, err
		}
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		runErr := make(chan error, 1)
		go func() { runErr <- p.Run(pctx) }()
		if last == "" { // live: until ctx ends
			<-ctx.Done()
			cancel()
			return c, <-runErr
		}
		select {
		case <-hook.done:
		case err := <-runErr:
			if err == nil {
				err = errors.New("poller drained without reading the source's last record")
			}
			return c, err
		}
		c.took = hook.doneAt.Sub(start)
		cancel()
		if err := <-runErr; err != nil {
			return c, fmt.Errorf("poller: %w", err)
		}
		c.delivered, c.redelivered = hook.recordsN, hook.reread
		c.cost = m.Cost()
		return c, errors.Join(m.Err(), m.Check(ctx, t.table))
	default:
		return c, fmt.Errorf("approach %q is not a stream consumer", a)
	}
	c.took = time.Since(start)
	c.cost = m.Cost()
	if last == "" {
		return c, m.Err()
	}
	return c, errors.Join(m.Err(), m.Check(ctx, t.table))
}

// writeSynchronously runs approach 3 over ops: every change with its report
// updates in one transaction; one change in 100 (the first, the 101st, …) is
// sent twice (a client retrying a request whose answer it lost).
func writeSynchronously(ctx context.Context, t target, ops []Op) (consumed, error) {
	m := NewMeter(t.db)
	s := &Synchronous{API: m, Table: t.table}
	var c consumed
	start := time.Now()
	for i, op := range ops {
		var err error
		if i%100 == 0 {
			err = s.WriteTwice(ctx, op, time.Now())
			c.redelivered++
		} else {
			err = s.Write(ctx, op, time.Now())
		}
		if err != nil {
			return c, fmt.Errorf("synchronous write %d: %w", i, err)
		}
		var before, after int
		if op.Old != nil {
			before = ledgertable.ItemSize(stamped(op.Old, time.Now()))
		}
		if op.New != nil {
			after = ledgertable.ItemSize(stamped(op.New, time.Now()))
		}
		c.baseline += ledgertable.WriteUnits(before, after)
	}
	c.took = time.Since(start)
	c.delivered = len(ops) + c.redelivered
	c.cost = m.Cost()
	return c, errors.Join(m.Err(), m.Check(ctx, t.table))
}
