package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/ledger-dev/ledger/processor"
)

// Mode selects how the handler guards its commits; it must match the event
// source mapping (see the package documentation).
type Mode string

// The modes.
const (
	// Standard handles events.DynamoDBEvent and commits every batch under
	// run markers (processor.MarkerGuard).
	Standard Mode = "standard"
	// Tumbling handles events.DynamoDBTimeWindowEvent, carries the window's
	// records in its state and commits them under the shard's checkpoint
	// (processor.ShardGuard).
	Tumbling Mode = "tumbling"
)

// Defaults of Config.
const (
	DefaultStateLimit     = 700_000
	MaxStateLimit         = 900_000
	DefaultDeadlineMargin = 2 * time.Second
)

// Config configures a Handler. Zero fields take the documented defaults.
type Config struct {
	// Mode is Standard (default) or Tumbling.
	Mode Mode
	// StateLimit bounds the window state, in bytes of its JSON, that a
	// tumbling-window invocation hands back; when the carried records would
	// exceed it they are committed at once (default DefaultStateLimit,
	// at most MaxStateLimit: the event source mapping ends a window whose
	// state exceeds 1 MB).
	StateLimit int
	// DeadlineMargin is how long before the invocation's deadline the
	// handler stops committing and reports what it committed (default
	// DefaultDeadlineMargin; at most half the remaining time is kept).
	DeadlineMargin time.Duration
	// Metrics, when set, receives the iterator age of each invocation's
	// records (ledger_stream_iterator_age_seconds).
	Metrics *processor.Metrics
	// EMF, when set, writes one Embedded Metric Format line after each
	// invocation.
	EMF *EMF
	// Logger receives warnings and errors (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Streams reads a tumbling window's records from the stream at commit time (poller.NewStreamsClient).
	Streams processor.StreamReader
	// BatchRecords bounds the records of one tumbling-window commit (0: the default).
	BatchRecords int
}

// Processor is what the handler needs of *processor.Processor.
type Processor interface {
	Process(ctx context.Context, g processor.Guard, recs []processor.Record) (processor.Result, error)
	MarkerGuard() *processor.MarkerGuard
	ShardGuard(streamARN, shardID string) *processor.ShardGuard
}

var (
	_ Processor      = (*processor.Processor)(nil)
	_ lambda.Handler = (*Handler)(nil)
)

// Handler is the Lambda function's handler: it decodes the raw event,
// commits its records exactly once through the processor and answers the
// event source mapping. It is safe for concurrent use, though the Lambda
// runtime invokes it one event at a time.
type Handler struct {
	p   Processor
	cfg Config
}

// New returns a handler committing through p. It fails on an invalid
// configuration.
func New(p Processor, cfg Config) (*Handler, error) {
	switch cfg.Mode {
	case "":
		cfg.Mode = Standard
	case Standard, Tumbling:
	default:
		return nil, fmt.Errorf("handler mode %q: want %q or %q", cfg.Mode, Standard, Tumbling)
	}
	if cfg.StateLimit == 0 {
		cfg.StateLimit = DefaultStateLimit
	}
	if cfg.StateLimit < 0 || cfg.StateLimit > MaxStateLimit {
		return nil, fmt.Errorf("handler state limit %d bytes: want 1 to %d", cfg.StateLimit, MaxStateLimit)
	}
	if cfg.DeadlineMargin == 0 {
		cfg.DeadlineMargin = DefaultDeadlineMargin
	}
	if cfg.DeadlineMargin < 0 {
		return nil, fmt.Errorf("handler deadline margin %s: must not be negative", cfg.DeadlineMargin)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Handler{p: p, cfg: cfg}, nil
}

// invocation is what one Invoke did, for the EMF line's properties.
type invocation struct {
	props map[string]any
}

func (inv *invocation) set(k string, v any) { inv.props[k] = v }

// Invoke implements lambda.Handler: payload is the raw event JSON (decoded
// once, by DecodeEvent), the result the response JSON. In Standard mode
// the response is an events.DynamoDBEventResponse, in Tumbling mode an
// events.DynamoDBTimeWindowEventResponse.
//
// The returned error fails the whole batch: the event source mapping
// retries it from its first record (with the same window state). It is
// returned only when nothing of the batch could be committed, or in
// Tumbling mode when the window's records could neither be committed nor
// carried; partial progress is reported as one batch item failure naming
// the first record not committed. A panic is recovered and returned as
// such an error. After every invocation one EMF line is written when
// Config.EMF is set.
func (h *Handler) Invoke(ctx context.Context, payload []byte) (out []byte, err error) {
	inv := &invocation{props: map[string]any{"Mode": string(h.cfg.Mode)}}
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		inv.set("RequestId", lc.AwsRequestID)
	}
	if h.cfg.Metrics != nil {
		h.cfg.Metrics.IteratorAge.Reset()
	}
	start := h.cfg.Now()
	defer func() {
		if r := recover(); r != nil {
			h.cfg.Logger.Error("panic while handling an event", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			out, err = nil, fmt.Errorf("ledger lambda: panic while handling the event: %v", r)
			inv.set("Outcome", "panic")
		}
		if err != nil {
			inv.set("Error", err.Error())
			if _, ok := inv.props["Outcome"]; !ok {
				inv.set("Outcome", "error")
			}
		}
		inv.set("DurationMs", h.cfg.Now().Sub(start).Milliseconds())
		h.emit(inv)
	}()
	var resp any
	switch h.cfg.Mode {
	case Tumbling:
		resp, err = h.tumbling(ctx, payload, inv)
	default:
		resp, err = h.standard(ctx, payload, inv)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}

func (h *Handler) emit(inv *invocation) {
	if h.cfg.EMF == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			h.cfg.Logger.Error("panic while writing metrics", "panic", fmt.Sprint(r))
		}
	}()
	if err := h.cfg.EMF.Emit(inv.props); err != nil {
		h.cfg.Logger.Warn("write metrics", "error", err)
	}
}

func (h *Handler) standard(ctx context.Context, payload []byte, inv *invocation) (events.DynamoDBEventResponse, error) {
	ev, err := DecodeEvent(payload)
	if err != nil {
		return events.DynamoDBEventResponse{}, fmt.Errorf("decode event: %w", err)
	}
	if ev.Window != nil {
		return events.DynamoDBEventResponse{}, errors.New("got a tumbling-window event in standard mode: set LEDGER_LAMBDA_MODE=tumbling, or remove TumblingWindowInSeconds from the event source mapping")
	}
	recs := ev.Records
	inv.set("Records", len(recs))
	h.logDecodeErrors(recs)
	h.observeAge(recs, "")
	if len(recs) == 0 {
		inv.set("Outcome", "ok")
		return StandardResponse(recs, processor.Result{}, nil)
	}
	pctx, cancel := h.processContext(ctx)
	defer cancel()
	res, perr := h.p.Process(pctx, h.p.MarkerGuard(), recs)
	inv.set("Committed", res.Committed)
	resp, err := StandardResponse(recs, res, perr)
	switch {
	case err != nil:
	case len(resp.BatchItemFailures) > 0:
		inv.set("Outcome", "partial")
		h.cfg.Logger.Warn("batch partly committed", "committed", res.Committed, "records", len(recs),
			"resumeAt", resp.BatchItemFailures[0].ItemIdentifier, "error", errString(perr))
	default:
		inv.set("Outcome", "ok")
		if perr != nil {
			h.cfg.Logger.Warn("batch committed with an error", "error", perr)
		}
	}
	return resp, err
}

// StandardResponse turns a Process outcome for recs into the answer to the
// event source mapping:
//   - everything committed: no batch item failures (an empty list);
//   - a prefix committed (Committed > 0 with an error, or the processor's
//     request to redeliver from a record, with or without one): exactly one
//     failure, the sequence number of recs[Committed], from which the event
//     source mapping resumes;
//   - nothing committed and an error: the error, which fails the whole
//     batch (retried from its first record).
//
// A partial commit is never answered with an empty list, which would
// acknowledge the records not committed.
func StandardResponse(recs []processor.Record, res processor.Result, err error) (events.DynamoDBEventResponse, error) {
	resp := events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{}}
	if res.Committed >= len(recs) {
		return resp, nil
	}
	if res.Committed <= 0 && err != nil {
		return events.DynamoDBEventResponse{}, fmt.Errorf("no record of the batch committed: %w", err)
	}
	first := recs[max(res.Committed, 0)]
	if first.SequenceNumber == "" {
		// Naming it is impossible; a whole-batch retry from the first
		// record is always safe (docs/exactly-once.md, L1).
		return events.DynamoDBEventResponse{}, fmt.Errorf("records before %d committed, but record %s has no sequence number to resume from: %w",
			res.Committed, first.EventID, orRedeliver(err))
	}
	resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: first.SequenceNumber})
	return resp, nil
}

func orRedeliver(err error) error {
	if err != nil {
		return err
	}
	return errors.New("redelivery requested")
}

func (h *Handler) tumbling(ctx context.Context, payload []byte, inv *invocation) (events.DynamoDBTimeWindowEventResponse, error) {
	resp := events.DynamoDBTimeWindowEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{}}
	ev, err := DecodeEvent(payload)
	if err != nil {
		return resp, fmt.Errorf("decode event: %w", err)
	}
	w := ev.Window
	if w == nil || w.ShardID == "" || w.EventSourceARN == "" {
		return resp, errors.New("got an event without shardId and eventSourceARN in tumbling mode: set TumblingWindowInSeconds on the event source mapping, or LEDGER_LAMBDA_MODE=standard")
	}
	inv.set("Records", len(ev.Records))
	inv.set("ShardId", w.ShardID)
	inv.set("FinalInvoke", w.Final)
	if w.TerminatedEarly {
		inv.set("WindowTerminatedEarly", true)
	}
	h.logDecodeErrors(ev.Records)
	h.observeAge(ev.Records, w.ShardID)

	st, err := parseState(w.State, w.EventSourceARN, w.ShardID)
	if err != nil {
		return resp, err
	}
	if st.committed != "" {
		// An early commit of this window moved the checkpoint to
		// st.committed. A record at or below it arriving now was either in
		// that commit (a repeat) or, delivered out of order, missing from it:
		// then the checkpoint drops it, and only reconcile --repair restores
		// it (docs/exactly-once.md, "Tumbling windows out of order").
		late := 0
		for i := range ev.Records {
			if s := ev.Records[i].SequenceNumber; s != "" && processor.CompareSequence(s, st.committed) <= 0 {
				late++
			}
		}
		if late > 0 {
			inv.set("LateRecords", late)
			h.cfg.Logger.Warn("records at or below this window's early commit arrived after it: repeats, or records delivered out of order that the checkpoint now drops; run ledgerctl reconcile",
				"shard", w.ShardID, "earlyCommit", st.committed, "records", late)
		}
	}
	before := st // the state as received; add only appends
	if err := st.add(ev.Records); err != nil {
		return resp, fmt.Errorf("carry records in the window state: %w", err)
	}
	final := w.Final || w.TerminatedEarly
	if !final && st.size() <= h.cfg.StateLimit {
		inv.set("Outcome", "carried")
		inv.set("HeldRecords", st.count)
		inv.set("StateBytes", st.size())
		resp.State = st.state()
		return resp, nil
	}
	// Commit what the window holds: the records carried so far and this
	// invocation's.
	held, err := before.records()
	if err != nil {
		return resp, err
	}
	held = inOrder(append(held, ev.Records...))
	if len(held) == 0 {
		inv.set("Outcome", "committed")
		resp.State = map[string]string{}
		return resp, nil
	}
	pctx, cancel := h.processContext(ctx)
	defer cancel()
	res, perr := h.p.Process(pctx, h.p.ShardGuard(w.EventSourceARN, w.ShardID), held)
	inv.set("Committed", res.Committed)
	if perr == nil && res.Committed >= len(held) {
		inv.set("Outcome", "committed")
		inv.set("HeldRecords", 0)
		resp.State = map[string]string{}
		if !final {
			// An early commit: remember where it moved the checkpoint.
			left := windowState{stream: w.EventSourceARN, shard: w.ShardID, committed: held[len(held)-1].SequenceNumber}
			if before.committed != "" && processor.CompareSequence(before.committed, left.committed) > 0 {
				left.committed = before.committed
			}
			resp.State = left.state()
		}
		return resp, nil
	}
	rest := held[max(res.Committed, 0):]
	if !final {
		// Keep what is left for a later invocation of the window if it
		// fits; the checkpoint drops whatever did land meanwhile.
		left := windowState{stream: w.EventSourceARN, shard: w.ShardID, committed: before.committed}
		if err := left.add(rest); err == nil && left.size() <= h.cfg.StateLimit {
			h.cfg.Logger.Warn("early commit of the window failed; records carried on", "committed", res.Committed,
				"carried", len(rest), "error", errString(perr))
			inv.set("Outcome", "carried")
			inv.set("HeldRecords", left.count)
			inv.set("StateBytes", left.size())
			resp.State = left.state()
			return resp, nil
		}
	}
	if perr == nil {
		perr = fmt.Errorf("%d of %d records committed", res.Committed, len(held))
	}
	return resp, fmt.Errorf("commit window of shard %s (%d records, %d committed): %w", w.ShardID, len(held), res.Committed, perr)
}

// inOrder sorts a window's records by sequence number and drops repeats
// (same eventID, the first kept). A window's records need not arrive in
// order: AWS documents that records a tumbling window processes more than
// once "might be processed out of order", and the checkpoint guard drops
// a prefix by sequence number, so the records it gets must be sorted
// (docs/exactly-once.md, "Tumbling windows out of order").
func inOrder(recs []processor.Record) []processor.Record {
	seen := make(map[string]bool, len(recs))
	out := recs[:0]
	for _, r := range recs {
		if r.EventID != "" {
			if seen[r.EventID] {
				continue
			}
			seen[r.EventID] = true
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b processor.Record) int {
		return processor.CompareSequence(a.SequenceNumber, b.SequenceNumber)
	})
	return out
}

// processContext bounds a commit by the invocation's deadline less the
// margin, so that the handler can answer with what it committed instead of
// being cut off.
func (h *Handler) processContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := min(h.cfg.DeadlineMargin, time.Until(deadline)/2)
	return context.WithDeadline(ctx, deadline.Add(-margin))
}

// observeAge sets the iterator age: how old the newest record is now.
func (h *Handler) observeAge(recs []processor.Record, shard string) {
	if h.cfg.Metrics == nil {
		return
	}
	var newest time.Time
	for i := range recs {
		if t := recs[i].ApproximateCreation; t.After(newest) {
			newest = t
		}
	}
	if !newest.IsZero() {
		h.cfg.Metrics.IteratorAge.WithLabelValues(shard).Set(h.cfg.Now().Sub(newest).Seconds())
	}
}

func (h *Handler) logDecodeErrors(recs []processor.Record) {
	for i := range recs {
		if r := &recs[i]; r.DecodeErr != nil {
			h.cfg.Logger.Warn("record could not be decoded", "eventID", r.EventID, "sequenceNumber", r.SequenceNumber,
				"transaction", isTransaction(r), "error", r.DecodeErr)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
