package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/handler"
)

// fakeProcessor records what the handler asks of it and answers with
// scripted results. It stands in for *processor.Processor where the
// handler's own decisions are under test; the tests of cmd/lambda run the
// real one against DynamoDB Local.
type fakeProcessor struct {
	mu      sync.Mutex
	calls   []fakeCall
	process func(recs []processor.Record) (processor.Result, error)
}

type fakeCall struct {
	guard string // "marker" or "shard:<arn>/<shard>"
	recs  []processor.Record
}

var nilProcessor *processor.Processor // guards only carry their key; nothing is read through it here

func (f *fakeProcessor) MarkerGuard() *processor.MarkerGuard { return nilProcessor.MarkerGuard() }
func (f *fakeProcessor) ShardGuard(arn, shard string) *processor.ShardGuard {
	return nilProcessor.ShardGuard(arn, shard)
}

func (f *fakeProcessor) Process(_ context.Context, g processor.Guard, recs []processor.Record) (processor.Result, error) {
	call := fakeCall{guard: "marker", recs: append([]processor.Record(nil), recs...)}
	if _, ok := g.(*processor.ShardGuard); ok {
		call.guard = "shard"
	}
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
	if f.process != nil {
		return f.process(recs)
	}
	return processor.Result{Committed: len(recs), Applied: len(recs)}, nil
}

func newHandler(t *testing.T, p handler.Processor, cfg handler.Config) *handler.Handler {
	t.Helper()
	h, err := handler.New(p, cfg)
	require.NoError(t, err)
	return h
}

func fixtureEvent(t *testing.T, name string) fixture {
	t.Helper()
	for _, f := range loadFixtures(t) {
		if f.name == name {
			return f
		}
	}
	t.Fatalf("no fixture %s", name)
	return fixture{}
}

func TestStandardResponse_NamesTheFirstRecordNotCommitted(t *testing.T) {
	recs := []processor.Record{{EventID: "a", SequenceNumber: "10"}, {EventID: "b", SequenceNumber: "20"}, {EventID: "c", SequenceNumber: "30"}}
	boom := errors.New("boom")
	tests := []struct {
		name     string
		res      processor.Result
		err      error
		failures []string
		wantErr  bool
	}{
		{"all committed", processor.Result{Committed: 3}, nil, []string{}, false},
		{"prefix committed, then an error", processor.Result{Committed: 2}, &processor.BatchError{Index: 2, Err: boom}, []string{"30"}, false},
		{"prefix committed, redelivery asked (alias marker)", processor.Result{Committed: 2}, nil, []string{"30"}, false},
		{"redelivery asked at the first record", processor.Result{Committed: 0}, nil, []string{"10"}, false},
		{"nothing committed, an error", processor.Result{Committed: 0}, &processor.BatchError{Index: 0, Err: boom}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := handler.StandardResponse(recs, tt.res, tt.err)
			if tt.wantErr {
				require.Error(t, err)
				assert.ErrorIs(t, err, boom)
				return
			}
			require.NoError(t, err)
			var ids []string
			for _, f := range resp.BatchItemFailures {
				ids = append(ids, f.ItemIdentifier)
			}
			if ids == nil {
				ids = []string{}
			}
			assert.Equal(t, tt.failures, ids)
			assert.NotNil(t, resp.BatchItemFailures, "an empty list, not null")
		})
	}
	t.Run("no sequence number to name", func(t *testing.T) {
		broken := []processor.Record{recs[0], {EventID: "x"}}
		_, err := handler.StandardResponse(broken, processor.Result{Committed: 1}, &processor.BatchError{Index: 1, Err: boom})
		assert.ErrorContains(t, err, "no sequence number")
	})
}

func TestInvoke_StandardCommitsUnderRunMarkers(t *testing.T) {
	f := fixtureEvent(t, "insert-basics")
	fp := &fakeProcessor{}
	var out bytes.Buffer
	reg := prometheus.NewRegistry()
	m := processor.NewMetrics(reg)
	emf, err := handler.NewEMF(reg, &out, "ledger", map[string]string{"FunctionName": "fn", "Mode": "standard"}, nil)
	require.NoError(t, err)
	h := newHandler(t, fp, handler.Config{Metrics: m, EMF: emf})
	resp, err := h.Invoke(context.Background(), f.raw)
	require.NoError(t, err)
	assert.JSONEq(t, `{"batchItemFailures":[]}`, string(resp))
	require.Len(t, fp.calls, 1)
	assert.Equal(t, "marker", fp.calls[0].guard)
	require.Len(t, fp.calls[0].recs, len(f.event.Records))
	for i, r := range f.event.Records {
		assert.Equal(t, processor.FromLambda(r), fp.calls[0].recs[i])
	}
	var line map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &line), out.String())
	assert.Equal(t, "ok", line["Outcome"])
	assert.Equal(t, float64(len(f.event.Records)), line["Records"])
	assert.Contains(t, line, "ledger_stream_iterator_age_seconds", "the records carry creation times")
}

func TestInvoke_StandardPartialCommitIsOneBatchItemFailure(t *testing.T) {
	f := fixtureEvent(t, "insert-basics")
	require.GreaterOrEqual(t, len(f.event.Records), 3)
	fp := &fakeProcessor{process: func(recs []processor.Record) (processor.Result, error) {
		return processor.Result{Committed: 2}, &processor.BatchError{Index: 2, EventID: recs[2].EventID, SequenceNumber: recs[2].SequenceNumber, Err: errors.New("throttled")}
	}}
	h := newHandler(t, fp, handler.Config{})
	resp, err := h.Invoke(context.Background(), f.raw)
	require.NoError(t, err)
	assert.JSONEq(t, fmt.Sprintf(`{"batchItemFailures":[{"itemIdentifier":%q}]}`, f.event.Records[2].Change.SequenceNumber), string(resp))
}

func TestInvoke_NothingCommittedFailsTheWholeBatch(t *testing.T) {
	f := fixtureEvent(t, "insert-basics")
	fp := &fakeProcessor{process: func(recs []processor.Record) (processor.Result, error) {
		return processor.Result{}, &processor.BatchError{Index: 0, Err: errors.New("table not found")}
	}}
	h := newHandler(t, fp, handler.Config{})
	_, err := h.Invoke(context.Background(), f.raw)
	assert.ErrorContains(t, err, "table not found")
}

func TestInvoke_PanicBecomesABatchErrorNamingIt(t *testing.T) {
	f := fixtureEvent(t, "insert-basics")
	fp := &fakeProcessor{process: func([]processor.Record) (processor.Result, error) { panic("nil map somewhere") }}
	var out bytes.Buffer
	reg := prometheus.NewRegistry()
	emf, err := handler.NewEMF(reg, &out, "ledger", map[string]string{"Mode": "standard"}, nil)
	require.NoError(t, err)
	h := newHandler(t, fp, handler.Config{EMF: emf})
	resp, err := h.Invoke(context.Background(), f.raw)
	assert.Nil(t, resp)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "panic")
	assert.Contains(t, err.Error(), "nil map somewhere")
	assert.Contains(t, out.String(), `"Outcome":"panic"`)
}

func TestInvoke_GarbageIsAnErrorAndBrokenRecordsGoToTheProcessor(t *testing.T) {
	fp := &fakeProcessor{}
	h := newHandler(t, fp, handler.Config{})
	_, err := h.Invoke(context.Background(), []byte(`{"Records": [ {"eventID"`))
	assert.ErrorContains(t, err, "not valid JSON")
	assert.Empty(t, fp.calls)

	payload := `{"Records":[` + strings.Replace(goodRecord, `"amount":{"N":"1.5"}`, `"amount":{}`, 1) + `]}`
	resp, err := h.Invoke(context.Background(), []byte(payload))
	require.NoError(t, err)
	assert.JSONEq(t, `{"batchItemFailures":[]}`, string(resp))
	require.Len(t, fp.calls, 1)
	assert.Error(t, fp.calls[0].recs[0].DecodeErr, "the processor gets the record to quarantine it")
}

func TestInvoke_ModeMismatchIsAClearError(t *testing.T) {
	window := `{"Records":[],"shardId":"s","eventSourceARN":"arn","state":{},"isFinalInvokeForWindow":false}`
	_, err := newHandler(t, &fakeProcessor{}, handler.Config{}).Invoke(context.Background(), []byte(window))
	assert.ErrorContains(t, err, "LEDGER_LAMBDA_MODE=tumbling")
	_, err = newHandler(t, &fakeProcessor{}, handler.Config{Mode: handler.Tumbling}).Invoke(context.Background(), []byte(`{"Records":[]}`))
	assert.ErrorContains(t, err, "TumblingWindowInSeconds")
}

// windowEvent builds a tumbling-window event of recs.
func windowEvent(t *testing.T, recs []events.DynamoDBEventRecord, state map[string]string, final bool) []byte {
	t.Helper()
	ev := events.DynamoDBTimeWindowEvent{
		DynamoDBEvent: events.DynamoDBEvent{Records: recs},
		TimeWindowProperties: events.TimeWindowProperties{
			State: state, ShardID: "shardId-0001", EventSourceARN: "arn:aws:dynamodb:us-east-1:1:table/ledger/stream/x",
			IsFinalInvokeForWindow: final,
			Window: events.Window{Start: events.RFC3339EpochTime{Time: time.Unix(1700000000, 0)},
				End: events.RFC3339EpochTime{Time: time.Unix(1700000060, 0)}},
		},
	}
	if ev.Records == nil {
		ev.Records = []events.DynamoDBEventRecord{}
	}
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	return b
}

func invokeWindow(t *testing.T, h *handler.Handler, payload []byte) events.DynamoDBTimeWindowEventResponse {
	t.Helper()
	out, err := h.Invoke(context.Background(), payload)
	require.NoError(t, err)
	var resp events.DynamoDBTimeWindowEventResponse
	require.NoError(t, json.Unmarshal(out, &resp))
	require.NotNil(t, resp.State, "a tumbling response must carry a state: %s", out)
	assert.NotNil(t, resp.BatchItemFailures, "an empty list, not null: %s", out)
	return resp
}

// allFixtureRecords returns the records of every fixture, in one list.
func allFixtureRecords(t testing.TB) []events.DynamoDBEventRecord {
	var all []events.DynamoDBEventRecord
	for _, f := range loadFixtures(t) {
		all = append(all, f.event.Records...)
	}
	return all
}

// checkCarried compares what the processor got at the commit with what the
// event carried: transaction records exactly (state round trip), other
// records by identity (they travel as keys only, when they travel in the
// state). Each record is handed over, once per commit (repeats by eventID
// dropped; an early commit and a later one may both get a record the
// window delivered twice: the checkpoint drops it), and each commit's
// records in sequence order (issue 12: a window's
// records may arrive out of order).
func checkCarried(t *testing.T, want []events.DynamoDBEventRecord, calls ...fakeCall) {
	t.Helper()
	byID := map[string]processor.Record{}
	for _, r := range want {
		if _, ok := byID[r.EventID]; !ok {
			byID[r.EventID] = processor.FromLambda(r)
		}
	}
	n := 0
	handed := map[string]bool{}
	for _, c := range calls {
		inCall := map[string]bool{}
		for i, g := range c.recs {
			n++
			if i > 0 {
				assert.LessOrEqual(t, processor.CompareSequence(c.recs[i-1].SequenceNumber, g.SequenceNumber), 0, "records in sequence order")
			}
			assert.False(t, inCall[g.EventID], "record %s handed over twice in one commit", g.EventID)
			inCall[g.EventID], handed[g.EventID] = true, true
			w, ok := byID[g.EventID]
			if !assert.True(t, ok, "record %s never carried", g.EventID) {
				continue
			}
			if isTxnKey(w) {
				assert.Equal(t, w, g, "record %s", g.EventID)
				continue
			}
			assert.Equal(t, []string{w.EventID, w.EventName, w.SequenceNumber}, []string{g.EventID, g.EventName, g.SequenceNumber})
			assert.Equal(t, w.Keys, g.Keys)
		}
	}
	for id := range byID {
		assert.True(t, handed[id], "record %s never handed over", id)
	}
	assert.Positive(t, n)
}

// isTxnKey is the processor's first test: keys absent, or a transaction's.
func isTxnKey(r processor.Record) bool {
	if r.Keys == nil {
		return true
	}
	pk, ok := r.Keys["PK"].(*ddbtypes.AttributeValueMemberS)
	return ok && aggregates.IsTransactionKey(pk.Value)
}

func TestInvoke_TumblingCarriesRecordsInTheStateUntilTheFinalInvoke(t *testing.T) {
	all := allFixtureRecords(t)
	fp := &fakeProcessor{}
	h := newHandler(t, fp, handler.Config{Mode: handler.Tumbling})
	var state map[string]string
	cuts := []int{0, 7, 7, 30, 55, len(all)} // an empty batch included
	for i := 0; i+1 < len(cuts); i++ {
		resp := invokeWindow(t, h, windowEvent(t, all[cuts[i]:cuts[i+1]], state, false))
		state = resp.State
		assert.Empty(t, fp.calls, "nothing is committed before the final invoke")
	}
	assert.NotEmpty(t, state)
	resp := invokeWindow(t, h, windowEvent(t, nil, state, true))
	assert.Empty(t, resp.State, "the window's records are committed")
	require.Len(t, fp.calls, 1)
	assert.Equal(t, "shard", fp.calls[0].guard)
	checkCarried(t, all, fp.calls[0])
	stubs := 0
	for _, r := range fp.calls[0].recs {
		if !isTxnKey(r) {
			assert.Nil(t, r.OldImage, "records that are not transactions travel as keys only")
			assert.Nil(t, r.NewImage, "records that are not transactions travel as keys only")
			stubs++
		}
	}
	assert.NotZero(t, stubs)
}

func TestInvoke_TumblingCommitsEarlyWhenTheStateWouldExceedItsLimit(t *testing.T) {
	all := allFixtureRecords(t)
	fp := &fakeProcessor{}
	h := newHandler(t, fp, handler.Config{Mode: handler.Tumbling, StateLimit: 3000})
	var state map[string]string
	for i := 0; i < len(all); i += 10 {
		resp := invokeWindow(t, h, windowEvent(t, all[i:min(i+10, len(all))], state, false))
		state = resp.State
		size, err := json.Marshal(state)
		require.NoError(t, err)
		assert.LessOrEqual(t, len(size), 3000)
	}
	resp := invokeWindow(t, h, windowEvent(t, nil, state, true))
	assert.Empty(t, resp.State)
	require.Greater(t, len(fp.calls), 2, "early commits")
	checkCarried(t, all, fp.calls...)
}

func TestInvoke_TumblingFailedFinalCommitFailsTheInvocation(t *testing.T) {
	all := allFixtureRecords(t)[:20]
	fp := &fakeProcessor{process: func(recs []processor.Record) (processor.Result, error) {
		return processor.Result{Committed: 5}, &processor.BatchError{Index: 5, Err: errors.New("throttled")}
	}}
	h := newHandler(t, fp, handler.Config{Mode: handler.Tumbling})
	state := invokeWindow(t, h, windowEvent(t, all[:10], nil, false)).State
	_, err := h.Invoke(context.Background(), windowEvent(t, all[10:], state, true))
	assert.ErrorContains(t, err, "throttled")

	// A non-final early commit that fails keeps what is left, when it fits.
	h = newHandler(t, fp, handler.Config{Mode: handler.Tumbling, StateLimit: 4000})
	var st map[string]string
	for i := 0; i < 20; i += 5 {
		st = invokeWindow(t, h, windowEvent(t, all[i:i+5], st, false)).State
	}
	assert.NotEmpty(t, st)
}

func TestInvoke_TumblingRejectsAForeignState(t *testing.T) {
	h := newHandler(t, &fakeProcessor{}, handler.Config{Mode: handler.Tumbling})
	_, err := h.Invoke(context.Background(), windowEvent(t, nil, map[string]string{"1": "282"}, true))
	assert.ErrorContains(t, err, "window state")
}

// Issue 12, defect 3: after an early commit, the window's state remembers
// the checkpoint it moved to; a record at or below it arriving later (a
// repeat, or a record delivered out of order that the checkpoint now drops)
// is reported, not silently taken for a duplicate.
func TestInvoke_TumblingReportsRecordsArrivingBelowAnEarlyCommit(t *testing.T) {
	all := allFixtureRecords(t)[:40]
	fp := &fakeProcessor{}
	var logs bytes.Buffer
	h := newHandler(t, fp, handler.Config{Mode: handler.Tumbling, StateLimit: 3000,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	var state map[string]string
	for i := 0; i < len(all) && len(fp.calls) == 0; i += 10 {
		state = invokeWindow(t, h, windowEvent(t, all[i:i+10], state, false)).State
	}
	require.NotEmpty(t, fp.calls, "an early commit")
	require.NotEmpty(t, state, "the state remembers the early commit")
	assert.NotContains(t, logs.String(), "arrived after it")
	late := fp.calls[0].recs[0] // the lowest record of the early commit
	var ev events.DynamoDBEventRecord
	for _, r := range all {
		if r.EventID == late.EventID {
			ev = r
		}
	}
	invokeWindow(t, h, windowEvent(t, []events.DynamoDBEventRecord{ev}, state, false))
	assert.Contains(t, logs.String(), "arrived after it")
}
