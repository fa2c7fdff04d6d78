package handler_test

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	ranges  []rangeCall
	commit  func(processor.ShardRange) (processor.Result, error)
}

type rangeCall struct {
	r     processor.ShardRange
	batch int
}

func (f *fakeProcessor) CommitShardRange(_ context.Context, _ processor.StreamReader, r processor.ShardRange, batch int) (processor.Result, error) {
	f.mu.Lock()
	f.ranges = append(f.ranges, rangeCall{r, batch})
	f.mu.Unlock()
	if f.commit != nil {
		return f.commit(r)
	}
	return processor.Result{Committed: 1}, nil
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
	_, err = newHandler(t, &fakeProcessor{}, handler.Config{Mode: handler.Tumbling, Streams: unreadStreams{}}).Invoke(context.Background(), []byte(`{"Records":[]}`))
	assert.ErrorContains(t, err, "TumblingWindowInSeconds")
}

const (
	testShard     = "shardId-0001"
	testStreamARN = "arn:aws:dynamodb:us-east-1:1:table/ledger/stream/x"
)

// windowEvent builds a tumbling-window event of recs.
func windowEvent(t *testing.T, recs []events.DynamoDBEventRecord, state map[string]string, final bool) []byte {
	t.Helper()
	ev := events.DynamoDBTimeWindowEvent{
		DynamoDBEvent: events.DynamoDBEvent{Records: recs},
		TimeWindowProperties: events.TimeWindowProperties{
			State: state, ShardID: testShard, EventSourceARN: testStreamARN,
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

// tumbling returns a tumbling-mode handler committing through fp; its
// Streams are never read, since fp stands in for CommitShardRange.
func tumbling(t *testing.T, fp *fakeProcessor, cfg handler.Config) *handler.Handler {
	t.Helper()
	cfg.Mode, cfg.Streams = handler.Tumbling, unreadStreams{}
	return newHandler(t, fp, cfg)
}

// unreadStreams satisfies processor.StreamReader for handlers whose
// processor is a fake: calling it is a test bug.
type unreadStreams struct{ processor.StreamReader }

// seqRange returns the lowest and highest sequence number of recs.
func seqRange(recs []events.DynamoDBEventRecord) (first, last string) {
	for _, r := range recs {
		s := r.Change.SequenceNumber
		if first == "" || processor.CompareSequence(s, first) < 0 {
			first = s
		}
		if last == "" || processor.CompareSequence(s, last) > 0 {
			last = s
		}
	}
	return first, last
}

func TestNew_TumblingNeedsStreams(t *testing.T) {
	_, err := handler.New(&fakeProcessor{}, handler.Config{Mode: handler.Tumbling})
	assert.ErrorContains(t, err, "Streams")
	_, err = handler.New(&fakeProcessor{}, handler.Config{Mode: handler.Tumbling, Streams: unreadStreams{}, BatchRecords: 99})
	assert.ErrorContains(t, err, "batch records 99")
}

// A window's invocations carry only where its records lie (lowest and
// highest sequence number, whatever the order they came in); the final
// invocation commits that range, read from the stream, once.
func TestInvoke_TumblingCarriesTheWindowsRangeUntilTheFinalInvoke(t *testing.T) {
	all := allFixtureRecords(t)
	fp := &fakeProcessor{}
	h := tumbling(t, fp, handler.Config{})
	var state map[string]string
	resp := invokeWindow(t, h, windowEvent(t, nil, state, false))
	assert.Empty(t, resp.State, "nothing delivered yet")
	shuffled := append([]events.DynamoDBEventRecord(nil), all...)
	slices.Reverse(shuffled)                 // out of order: the range is by sequence number
	cuts := []int{0, 7, 7, 30, 55, len(all)} // an empty batch included
	for i := 0; i+1 < len(cuts); i++ {
		state = invokeWindow(t, h, windowEvent(t, shuffled[cuts[i]:cuts[i+1]], state, false)).State
		assert.Empty(t, fp.ranges, "nothing is committed before the final invoke")
	}
	assert.Less(t, len(fmt.Sprint(state)), 1000, "the state holds no records: %v", state)
	resp = invokeWindow(t, h, windowEvent(t, nil, state, true))
	assert.Empty(t, resp.State, "the window is committed")
	first, last := seqRange(all)
	require.Len(t, fp.ranges, 1)
	assert.Equal(t, processor.ShardRange{StreamARN: testStreamARN, ShardID: testShard, First: first, Last: last}, fp.ranges[0].r)
	assert.Equal(t, handler.DefaultBatchRecords, fp.ranges[0].batch)
	assert.Empty(t, fp.calls, "no records handed over from the event")
}

func TestInvoke_TumblingCommitsEarlyAfterBatchRecords(t *testing.T) {
	all := allFixtureRecords(t)
	require.Greater(t, len(all), 50)
	fp := &fakeProcessor{}
	h := tumbling(t, fp, handler.Config{BatchRecords: handler.MinBatchRecords})
	var state map[string]string
	delivered := 0
	for delivered < handler.MinBatchRecords {
		n := min(len(all), handler.MinBatchRecords-delivered)
		state = invokeWindow(t, h, windowEvent(t, all[:n], state, false)).State
		delivered += n
	}
	require.Len(t, fp.ranges, 1, "an early commit once %d records came", handler.MinBatchRecords)
	_, last := seqRange(all)
	assert.Equal(t, last, fp.ranges[0].r.Last)
	assert.True(t, fp.ranges[0].r.Partial, "an early commit may not start a shard")
	assert.Equal(t, "0", state["ledger.records"], "counting starts over")
	resp := invokeWindow(t, h, windowEvent(t, all[:3], state, true))
	assert.Empty(t, resp.State)
	require.Len(t, fp.ranges, 2)
	assert.Equal(t, last, fp.ranges[1].r.Last, "the range is the window's, the checkpoint skips what is committed")
	assert.False(t, fp.ranges[1].r.Partial)
}

func TestInvoke_TumblingFailedCommits(t *testing.T) {
	all := allFixtureRecords(t)[:20]
	fp := &fakeProcessor{commit: func(processor.ShardRange) (processor.Result, error) {
		return processor.Result{Committed: 5}, errors.New("throttled")
	}}
	h := tumbling(t, fp, handler.Config{BatchRecords: handler.MinBatchRecords})
	state := invokeWindow(t, h, windowEvent(t, all[:10], nil, false)).State
	_, err := h.Invoke(context.Background(), windowEvent(t, all[10:], state, true))
	assert.ErrorContains(t, err, "throttled", "a failed final commit fails the invocation: the mapping retries it with the same state")

	// A failed early commit carries on: the final invocation commits.
	var st map[string]string
	for i := 0; i < handler.MinBatchRecords; i += 20 {
		st = invokeWindow(t, h, windowEvent(t, all, st, false)).State
	}
	assert.Len(t, fp.ranges, 2)
	assert.Equal(t, "100", st["ledger.records"])
}

func TestInvoke_TumblingRejectsAForeignState(t *testing.T) {
	h := tumbling(t, &fakeProcessor{}, handler.Config{})
	for _, st := range []map[string]string{
		{"1": "282"},
		{"ledger.v": "2", "ledger.stream": "other", "ledger.shard": testShard, "ledger.records": "1", "ledger.first": "1", "ledger.last": "2"},
		{"ledger.v": "2", "ledger.stream": testStreamARN, "ledger.shard": testShard, "ledger.records": "x", "ledger.first": "1", "ledger.last": "2"},
		{"ledger.v": "2", "ledger.stream": testStreamARN, "ledger.shard": testShard, "ledger.records": "1", "ledger.last": "2", "extra": "?"},
	} {
		_, err := h.Invoke(context.Background(), windowEvent(t, nil, st, true))
		assert.ErrorContains(t, err, "window state", "%v", st)
	}
}

// A state written by the version that carried records in chunks (met once
// after an upgrade mid-window) gives the window's range.
func TestInvoke_TumblingReadsAVersion1State(t *testing.T) {
	chunk := func(seqs ...string) string {
		var raw bytes.Buffer
		b64 := base64.NewEncoder(base64.StdEncoding, &raw)
		zw, err := flate.NewWriter(b64, flate.BestSpeed)
		require.NoError(t, err)
		recs := make([]map[string]string, len(seqs))
		for i, s := range seqs {
			recs[i] = map[string]string{"i": "e" + s, "s": s}
		}
		require.NoError(t, json.NewEncoder(zw).Encode(recs))
		require.NoError(t, zw.Close())
		require.NoError(t, b64.Close())
		return raw.String()
	}
	fp := &fakeProcessor{}
	h := tumbling(t, fp, handler.Config{})
	v1 := map[string]string{"ledger.v": "1", "ledger.stream": testStreamARN, "ledger.shard": testShard,
		"ledger.records": "4", "ledger.last": "400", "c0": chunk("300", "400"), "c1": chunk("200", "250")}
	resp := invokeWindow(t, h, windowEvent(t, nil, v1, true))
	assert.Empty(t, resp.State)
	require.Len(t, fp.ranges, 1)
	assert.Equal(t, "200", fp.ranges[0].r.First)
	assert.Equal(t, "400", fp.ranges[0].r.Last)
}
