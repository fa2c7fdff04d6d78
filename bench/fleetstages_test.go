package bench

import (
	"testing"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A slow steady-state record is put in the class that explains it, from
// the reads of its shard and the iterators opened on it.
func TestTraceTail_ClassifiesByItsShardsReads(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	call := func(sent, answered float64) readCall { return readCall{sent: at(sent), answered: at(answered)} }
	// Written at 10 s; first read at 15 s.
	sample := func(commit float64) lagSample {
		return lagSample{wrote: at(10), read: at(15), committed: at(15 + commit), shard: "s"}
	}
	tests := []struct {
		name   string
		commit float64
		calls  []readCall
		opens  []time.Time
		class  string
		gap    float64
		reads  int
	}{
		{"commit the larger part", 6, []readCall{call(9.5, 9.6), call(14.9, 15)}, nil, "commit", 5.3, 0},
		{"read past", 1, []readCall{call(9.5, 9.6), call(11.5, 11.6), call(14.9, 15)}, nil, "unseen", 3.3, 1},
		{"a read just after the write is not read past", 1, []readCall{call(9.5, 9.6), call(10.2, 10.3), call(14.9, 15)}, nil, "gap", 4.6, 1},
		{"reopened: the read that returned it is not read past", 1, []readCall{call(9.5, 9.6), call(14.9, 15)}, []time.Time{at(14.8)}, "reopened", 5.3, 0},
		{"an open before the write is not a reopening", 1, []readCall{call(9.5, 9.6), call(14.9, 15)}, []time.Time{at(9)}, "gap", 5.3, 0},
		{"a pause", 1, []readCall{call(8, 8.1), call(9.5, 9.6), call(14.9, 15), call(15.5, 15.6)}, nil, "gap", 5.3, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := traceTail(sample(tc.commit), t0, tc.calls, tc.opens)
			assert.Equal(t, tc.class, got.Class)
			assert.InDelta(t, tc.gap, got.ReaderGap, 1e-9, "the longest pause between reads")
			assert.Equal(t, tc.reads, got.ReadsBetween, "reads that answered without it")
			assert.Equal(t, 1, got.ReadsBefore, "the read answered in the second before the write")
			assert.InDelta(t, 10.0, got.At, 1e-9)
		})
	}
}

// The lag clock's expected count leaves out a modify that moves no report
// (a category put back as it was): it is committed with no write time
// the clock could see, and counted "uncommitted" in every fleet run
// before.
func TestOpRecord_AModifyThatMovesNoReportHasNoEffect(t *testing.T) {
	ops := WorkloadSpec{Name: "f", Branches: 4, Days: 30}.Generate(1, 1)
	require.Len(t, ops, 1)
	ins := ops[0]
	assert.True(t, changesAReport(opRecord(ins)), "an insert")
	same := make(map[string]ddbtypes.AttributeValue, len(ins.New))
	for k, v := range ins.New {
		same[k] = v
	}
	same["version"] = nAV("2")
	assert.False(t, changesAReport(opRecord(Op{Kind: OpModify, Key: ins.Key, Old: ins.New, New: same})), "a modify that changes no reported field")
	moved := make(map[string]ddbtypes.AttributeValue, len(same))
	for k, v := range same {
		moved[k] = v
	}
	moved["amount"] = nAV("123456.78")
	assert.True(t, changesAReport(opRecord(Op{Kind: OpModify, Key: ins.Key, Old: ins.New, New: moved})), "a modify of the amount")
}

// Every change of one item goes through one writer, so the stream shows
// them in the order generated (the expected count judges a modify by the
// old image the workload gave it); the items of a workload spread over
// every writer.
func TestWriterOf_OneItemOneWriterAndTheItemsSpread(t *testing.T) {
	ops := WorkloadSpec{Name: "f", Branches: 400, Days: 30, ModifyShare: 0.3, DeleteShare: 0.1}.Generate(4000, 28)
	writer := map[string]int{}
	used := map[int]int{}
	for _, op := range ops {
		w := writerOf(op.Key, 8)
		require.True(t, w >= 0 && w < 8, "writer %d of 8", w)
		if prev, seen := writer[op.Key.String()]; seen {
			require.Equal(t, prev, w, "the changes of %s through two writers", op.Key)
		}
		writer[op.Key.String()] = w
		used[w]++
	}
	require.Len(t, used, 8, "the items reach every writer")
	for w, n := range used {
		assert.Greater(t, n, len(ops)/16, "writer %d takes %d of %d changes", w, n, len(ops))
	}
}

// The caught-up state starts at the later of the steady state's start and
// the end of the start's walk (the last shard closed at the start that a
// reader got to the end of), and there is none while such a shard's end
// was never got.
func TestStageFigures_CaughtUpStartsWhenTheStartsWalkIsOver(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// leased at 0 s: steady from 20 s (steadySettle). Records written at
	// 25 s (lag 30 s: behind the walk) and at 50 s (lag 1 s).
	samples := []lagSample{
		{wrote: at(25), read: at(54), committed: at(55), shardRead: at(1), shard: "open"},
		{wrote: at(50), read: at(50.5), committed: at(51), shardRead: at(1), shard: "open"},
	}
	for _, tc := range []struct {
		name      string
		ended     map[string]time.Time
		closed    []string
		walkedAt  float64
		caughtN   int
		caughtP99 float64
	}{
		{"walk over after the steady state's start", map[string]time.Time{"h1": at(10), "h2": at(40)}, []string{"h1", "h2"}, 40, 1, 1},
		{"walk over before the steady state's start", map[string]time.Time{"h1": at(5)}, []string{"h1"}, 5, 2, 30},
		{"no history: caught up is the steady state", nil, nil, 0, 2, 30},
		{"a closed shard's end never got", map[string]time.Time{"h1": at(10)}, []string{"h1", "h2"}, -1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newFleetLag()
			l.stages = samples
			for k, v := range tc.ended {
				l.ended[k] = v
			}
			st := l.stageFigures(t0, 0, map[string]string{}, tc.closed)
			assert.Equal(t, 20.0, st.SteadyFrom)
			assert.Equal(t, 2, st.SteadyN)
			assert.InDelta(t, tc.walkedAt, st.WalkedAt, 1e-9)
			assert.Equal(t, tc.caughtN, st.CaughtUpN)
			assert.InDelta(t, tc.caughtP99, st.CaughtUpP99, 1e-9)
		})
	}
}
