package main

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
)

// esm plays an event source mapping in front of the real function binary:
// it cuts the shard's records into batches and invokes the function
// through the fake Runtime API the way the ESM does under the settings of
// docs/exactly-once.md (assumption 4), and injects what the ESM and Lambda
// can do: retries from the same first record, resumption at the reported
// batch item failure, duplicate deliveries, restarts from an earlier
// position, a process killed mid-invocation and a fresh one getting the
// same batch again, and DynamoDB failing under the function.
type esm struct {
	t     *testing.T
	rng   *rand.Rand
	fn    *function
	api   *runtimeAPI
	proxy *faultProxy
	arn   string
	shard string
	stats map[string]int
	// killsOnly leaves DynamoDB's answers alone: chaos kills processes but
	// injects no failed or lost call (the conflict tests count failed
	// commits, which those would cause).
	killsOnly bool
	// calm switches chaos off: no kill, no fault (a test that waits for a
	// count in the function's EMF lines, which a killed process takes with
	// it).
	calm bool
	// timedKills is the percentage of invocations killed at a random
	// moment (5 when 0); kills at a DynamoDB call come on top.
	timedKills int
}

func batchSize(rng *rand.Rand) int {
	if rng.IntN(6) == 0 {
		return 1 + rng.IntN(200)
	}
	return 1 + rng.IntN(25)
}

// chaos picks, for one invocation, whether to kill the process (a delay ≥
// 0) and whether DynamoDB fails part way.
func (e *esm) chaos() time.Duration {
	if e.calm {
		return -1
	}
	timed := e.timedKills
	if timed == 0 {
		timed = 5
	}
	switch r := e.rng.IntN(100); {
	case r < timed:
		e.stats["kill_timed"]++
		return time.Duration(e.rng.IntN(30)) * time.Millisecond
	case r < timed+10:
		// Killed at a DynamoDB call: before it, or after DynamoDB applied
		// it and before the answer arrived.
		after := e.rng.IntN(2) == 0
		e.proxy.killAt(1+e.rng.IntN(8), after)
		if after {
			e.stats["kill_after_write"]++
		} else {
			e.stats["kill_before_call"]++
		}
	case r < timed+25 && !e.killsOnly:
		fault := []ledgertest.Fault{ledgertest.Drop, ledgertest.LoseAnswer, ledgertest.Throttle}[e.rng.IntN(3)]
		if e.rng.IntN(2) == 0 {
			e.proxy.failAfter(e.rng.IntN(8), "", fault)
		} else {
			// Commits fail after the first one or two: a batch of several
			// runs is then partly committed.
			e.proxy.failAfter(1+e.rng.IntN(2), "TransactWriteItems", fault)
		}
		e.stats["dynamodb_failing"]++
	}
	return -1
}

func (e *esm) call(payload []byte, killAfter time.Duration) answer {
	a := e.fn.invoke(e.api, payload, killAfter)
	e.proxy.heal()
	if os.Getenv("LEDGER_TEST_ESM_LOG") != "" {
		var ev events.DynamoDBEvent
		_ = json.Unmarshal(payload, &ev)
		first, last := "", ""
		if n := len(ev.Records); n > 0 {
			first, last = ev.Records[0].Change.SequenceNumber, ev.Records[n-1].Change.SequenceNumber
		}
		e.t.Logf("delivered req-%d: %d records %s..%s, kill after %v: ok=%v killed=%v %s",
			e.api.seq.Load(), len(ev.Records), first, last, killAfter, a.ok, a.killed, a.body)
	}
	return a
}

func (e *esm) standardEvent(recs []events.DynamoDBEventRecord) []byte {
	b, err := json.Marshal(events.DynamoDBEvent{Records: recs})
	require.NoError(e.t, err)
	return b
}

// standard delivers recs[from:] to a standard-mode function, as the
// mapping does: batches from its position; after a function error the
// same first record again, in a batch of the same or another length
// (shorter ones end inside committed runs: the alias path); after a batch
// item failure from the record it names; after a kill the same batch to a
// new process; now and then the batch just answered delivered a second
// time, an earlier batch delivered again, and the mapping falling back to
// an earlier batch start (an older checkpoint), across batches that
// committed nothing.
func (e *esm) standard(recs []events.DynamoDBEventRecord, from int) {
	pos := from
	size := batchSize(e.rng)
	var starts []int
	var last []byte
	for steps := 0; pos < len(recs); steps++ {
		require.Less(e.t, steps, 5000, "delivery does not progress")
		switch r := e.rng.IntN(100); {
		case r < 3 && last != nil:
			// The batch just answered, delivered again; the mapping ignores
			// this answer.
			e.call(last, -1)
			e.stats["duplicate_delivery"]++
		case r < 6 && len(starts) > 0:
			// An earlier batch delivered again.
			s := starts[e.rng.IntN(len(starts))]
			e.call(e.standardEvent(recs[s:min(s+batchSize(e.rng), len(recs))]), -1)
			e.stats["duplicate_delivery"]++
		case r < 10 && len(starts) > 0:
			// The mapping lost its checkpoints and resumes from an earlier
			// batch start.
			pos = starts[e.rng.IntN(len(starts))]
			e.stats["restart_earlier"]++
		}
		starts = append(starts, pos)
		batch := recs[pos:min(pos+size, len(recs))]
		payload := e.standardEvent(batch)
		last = payload
		a := e.call(payload, e.chaos())
		for a.killed {
			// Lambda runs the retry of the same batch in a new process.
			e.stats["redelivered_after_kill"]++
			a = e.call(payload, -1)
		}
		size = batchSize(e.rng)
		if !a.ok {
			e.stats["batch_error"]++
			if e.rng.IntN(2) == 0 {
				size = len(batch)
			}
			continue // retried from the same first record
		}
		var resp events.DynamoDBEventResponse
		require.NoError(e.t, json.Unmarshal(a.body, &resp), "%s", a.body)
		if len(resp.BatchItemFailures) == 0 {
			pos += len(batch)
			continue
		}
		require.Len(e.t, resp.BatchItemFailures, 1, "one failure: the first record not committed")
		i := slices.IndexFunc(batch, func(r events.DynamoDBEventRecord) bool {
			return r.Change.SequenceNumber == resp.BatchItemFailures[0].ItemIdentifier
		})
		require.GreaterOrEqual(e.t, i, 0, "the failure names a record of the batch: %s", a.body)
		e.stats["partial_failure"]++
		pos += i
	}
}

func (e *esm) windowEvent(recs []events.DynamoDBEventRecord, state map[string]string, start time.Time, final bool) []byte {
	if recs == nil {
		recs = []events.DynamoDBEventRecord{}
	}
	if state == nil {
		state = map[string]string{}
	}
	b, err := json.Marshal(events.DynamoDBTimeWindowEvent{
		DynamoDBEvent: events.DynamoDBEvent{Records: recs},
		TimeWindowProperties: events.TimeWindowProperties{
			Window: events.Window{Start: events.RFC3339EpochTime{Time: start}, End: events.RFC3339EpochTime{Time: start.Add(time.Minute)}},
			State:  state, ShardID: e.shard, EventSourceARN: e.arn, IsFinalInvokeForWindow: final,
		},
	})
	require.NoError(e.t, err)
	return b
}

// tumbling delivers recs[from:] to a tumbling-window function: windows of
// one to five batches, the state of each answer passed to the next
// invocation, a final invocation (sometimes without records) that must
// leave an empty state. Failed and killed invocations are retried with the
// same records and state; sometimes a window is started over with a fresh
// state (the mapping lost it), and sometimes an earlier invocation is
// delivered again.
func (e *esm) tumbling(recs []events.DynamoDBEventRecord, from int) {
	pos := from
	var past [][]byte
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for windows := 0; pos < len(recs); windows++ {
		require.Less(e.t, windows, 2000, "delivery does not progress")
		start = start.Add(time.Minute)
		if len(past) > 0 && e.rng.IntN(100) < 5 {
			e.call(past[e.rng.IntN(len(past))], -1)
			e.stats["duplicate_delivery"]++
		}
		batches := 1 + e.rng.IntN(5)
		state := map[string]string{}
		wpos := pos
		restarted := false
		for b := 0; b < batches; b++ {
			final := b == batches-1
			size := batchSize(e.rng)
			if final && e.rng.IntN(4) == 0 {
				size = 0 // the final invocation often comes without records
			}
			end := min(wpos+size, len(recs))
			if end == len(recs) {
				final = true
			}
			payload := e.windowEvent(recs[wpos:end], state, start, final)
			past = append(past, payload)
			a := e.call(payload, e.chaos())
			for tries := 0; !a.ok; tries++ {
				require.Less(e.t, tries, 20, "invocation keeps failing: %s", a.body)
				if a.killed {
					e.stats["redelivered_after_kill"]++
				} else {
					e.stats["batch_error"]++
				}
				a = e.call(payload, -1) // the same records and state
			}
			var resp events.DynamoDBTimeWindowEventResponse
			require.NoError(e.t, json.Unmarshal(a.body, &resp), "%s", a.body)
			require.NotNil(e.t, resp.State, "a tumbling answer carries a state: %s", a.body)
			require.Empty(e.t, resp.BatchItemFailures)
			state = resp.State
			wpos = end
			if final {
				require.Empty(e.t, state, "the final invocation commits the window")
				e.stats["window"]++
				break
			}
			if e.rng.IntN(100) < 4 {
				// The mapping loses the window's state and starts it over
				// from its first record.
				restarted = true
				e.stats["window_restarted"]++
				break
			}
		}
		if !restarted {
			pos = wpos
		}
	}
}
