package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
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
	// Tumbling handles events.DynamoDBTimeWindowEvent, carries where the
	// window's records lie in its state and commits them, read from the
	// stream, as batches under the shard's checkpoint
	// (processor.CommitShardRange).
	Tumbling Mode = "tumbling"
)

// Defaults of Config.
const (
	DefaultBatchRecords   = 10_000
	MinBatchRecords       = 100
	MaxBatchRecords       = 100_000
	DefaultDeadlineMargin = 2 * time.Second
)

// Config configures a Handler. Zero fields take the documented defaults.
type Config struct {
	// Mode is Standard (default) or Tumbling.
	Mode Mode
	// Streams reads the stream: required in Tumbling mode, whose commits
	// read the window's records from it (a client from
	// poller.NewStreamsClient).
	Streams processor.StreamReader
	// BatchRecords is, in Tumbling mode, how many records one commit batch
	// holds at most, and how many a window may deliver before it is
	// committed early (default DefaultBatchRecords, MinBatchRecords to
	// MaxBatchRecords).
	BatchRecords int
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
}

// Processor is what the handler needs of *processor.Processor.
type Processor interface {
	Process(ctx context.Context, g processor.Guard, recs []processor.Record) (processor.Result, error)
	MarkerGuard() *processor.MarkerGuard
	CommitShardRange(ctx context.Context, streams processor.StreamReader, r processor.ShardRange, batchRecords int) (processor.Result, error)
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
	if cfg.BatchRecords == 0 {
		cfg.BatchRecords = DefaultBatchRecords
	}
	if cfg.BatchRecords < MinBatchRecords || cfg.BatchRecords > MaxBatchRecords {
		return nil, fmt.Errorf("handler batch records %d: want %d to %d", cfg.BatchRecords, MinBatchRecords, MaxBatchRecords)
	}
	if cfg.Mode == Tumbling && cfg.Streams == nil {
		return nil, errors.New("handler in tumbling mode: a Streams client is needed (it reads the window's records from the stream)")
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
	st.see(ev.Records)
	final := w.Final || w.TerminatedEarly
	if st.last == "" || !final && st.count < h.cfg.BatchRecords {
		// Nothing delivered yet, or not the window's end and not enough to
		// commit early: carry where the records lie.
		inv.set("Outcome", "carried")
		inv.set("HeldRecords", st.count)
		resp.State = st.state()
		return resp, nil
	}
	// Commit the window: its records through the highest delivered, read
	// from the stream after the checkpoint.
	pctx, cancel := h.processContext(ctx)
	defer cancel()
	res, err := h.p.CommitShardRange(pctx, h.cfg.Streams,
		processor.ShardRange{StreamARN: w.EventSourceARN, ShardID: w.ShardID, First: st.first, Last: st.last, Partial: !final}, h.cfg.BatchRecords)
	inv.set("Committed", res.Committed)
	if err != nil {
		if !final {
			// An early commit: the window's final invocation commits again
			// from wherever the checkpoint got to.
			h.cfg.Logger.Warn("early commit of the window failed; the final invocation commits it", "shard", w.ShardID,
				"through", st.last, "committed", res.Committed, "error", err.Error())
			inv.set("Outcome", "carried")
			inv.set("HeldRecords", st.count)
			resp.State = st.state()
			return resp, nil
		}
		return resp, fmt.Errorf("commit window of shard %s through %s (%d records committed): %w", w.ShardID, st.last, res.Committed, err)
	}
	inv.set("Outcome", "committed")
	inv.set("HeldRecords", 0)
	if final {
		resp.State = map[string]string{}
	} else {
		st.count = 0
		resp.State = st.state()
	}
	return resp, nil
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
