package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ledger-dev/ledger/processor"
)

// openWindow is the tumbling window the mapping has invoked the function
// for and not yet closed, with the state the last invocation returned.
type openWindow struct {
	start time.Time
	state map[string]string
}

// windowStart is the start of the tumbling window of length secs that a
// record belongs to. AWS: "Lambda determines tumbling window boundaries
// based on the time when records were inserted into the stream. All
// records have an approximate timestamp available that Lambda uses in
// boundary determinations" (Lambda developer guide, "Implementing stateful
// DynamoDB stream processing in Lambda"); for a DynamoDB stream record that
// is its ApproximateCreationDateTime. The windows are taken as aligned to
// the Unix epoch (the guide does not say; AWS's example windows start on
// whole minutes). DynamoDB Local rounds ApproximateCreationDateTime down to
// the minute (AWS: to the second), so here a window shorter than a minute
// holds the records of a whole minute and has ended before most of them
// are read.
func windowStart(r processor.Record, secs int64) time.Time {
	return time.Unix(r.ApproximateCreation.Unix()/secs*secs, 0).UTC()
}

// runTumbling plays a mapping with TumblingWindowInSeconds = Window: it
// reads the shard in order with GetRecords pages of up to BatchSize records;
// every run of a page's records within one window is one invocation
// (events.DynamoDBTimeWindowEvent with the window's start and end, the
// shard's id, the stream's ARN and the state the window's previous
// invocation returned, empty for its first). A window's last invocation has
// isFinalInvokeForWindow set: the one whose records are followed, in the
// same page, by a record of a later window; or one without records when the
// window ended between pages (the next page starts in a later window, or,
// in live mode, the clock passed the window's end with no record of a later
// window read yet). In backlog mode the records are taken as old (their
// windows all ended): the invocation holding the record until is the final
// one of its window, as it would be for a backlog replayed after the fact.
// A record stamped earlier than the open window (clocks are approximate)
// counts in the open window.
//
// A failed invocation, or one whose answer carries no state (AWS counts it
// failed), is retried with the same records and state. With Duplicates,
// the last ⌈1%⌉ records of every run are invoked on their own (the final
// invocation when the run closes its window), twice: the first answer is
// lost, and the mapping retries the same payload.
func (e *ESM) runTumbling(ctx context.Context, fn Function, until string) error {
	secs := int64(e.Window / time.Second)
	if secs < 1 || e.Window%time.Second != 0 {
		return fmt.Errorf("esm: tumbling window %s: want whole seconds, at least one", e.Window)
	}
	iter, shard, err := shardIterator(ctx, e.Streams, e.StreamARN, "")
	if err != nil {
		return err
	}
	var open *openWindow
	for {
		recs, next, err := e.read(ctx, iter, until)
		if err != nil {
			return liveEnd(ctx, until, err)
		}
		now := time.Now()
		if len(recs) == 0 {
			if open != nil && !now.Before(open.start.Add(e.Window)) {
				if open, err = e.windowInvoke(ctx, fn, shard, open, open.start, nil, true); err != nil {
					return liveEnd(ctx, until, err)
				}
			}
			iter = next
			continue
		}
		reached := until != "" && processor.CompareSequence(recs[len(recs)-1].SequenceNumber, until) >= 0
		starts := make([]time.Time, len(recs))
		for i := range recs {
			starts[i] = windowStart(recs[i], secs)
			if i > 0 && starts[i].Before(starts[i-1]) {
				starts[i] = starts[i-1]
			}
			if open != nil && starts[i].Before(open.start) {
				starts[i] = open.start
			}
		}
		for i := 0; i < len(recs); {
			j := i + 1
			for j < len(recs) && starts[j].Equal(starts[i]) {
				j++
			}
			if open != nil && starts[i].After(open.start) {
				// The open window ended between pages.
				if open, err = e.windowInvoke(ctx, fn, shard, open, open.start, nil, true); err != nil {
					return liveEnd(ctx, until, err)
				}
			}
			final := j < len(recs) || reached || until == "" && !now.Before(starts[i].Add(e.Window))
			if open, err = e.windowInvoke(ctx, fn, shard, open, starts[i], recs[i:j], final); err != nil {
				return liveEnd(ctx, until, err)
			}
			i = j
		}
		if reached {
			return nil
		}
		iter = next
	}
}

// windowInvoke delivers run, records of the window starting at start, to
// fn (with Duplicates, its last ⌈1%⌉ records as an invocation of their
// own, delivered twice), the last invocation final when final is set. It
// returns the window left open: nil after a final invocation.
func (e *ESM) windowInvoke(ctx context.Context, fn Function, shard string, open *openWindow, start time.Time, run []processor.Record, final bool) (*openWindow, error) {
	if open == nil {
		open = &openWindow{start: start, state: map[string]string{}}
	}
	parts := [][]processor.Record{run}
	if e.Duplicates && len(run) > 0 {
		d := (len(run) + 99) / 100
		parts = [][]processor.Record{run[:len(run)-d], run[len(run)-d:]}
	}
	for k, part := range parts {
		if len(part) == 0 && len(run) > 0 {
			continue
		}
		last := k == len(parts)-1
		recs, err := lambdaRecords(part)
		if err != nil {
			return nil, err
		}
		payload, err := json.Marshal(events.DynamoDBTimeWindowEvent{
			DynamoDBEvent: events.DynamoDBEvent{Records: recs},
			TimeWindowProperties: events.TimeWindowProperties{
				Window:                 events.Window{Start: events.RFC3339EpochTime{Time: start}, End: events.RFC3339EpochTime{Time: start.Add(e.Window)}},
				State:                  open.state,
				ShardID:                shard,
				EventSourceARN:         e.StreamARN,
				IsFinalInvokeForWindow: final && last,
			},
		})
		if err != nil {
			return nil, err
		}
		if e.Duplicates && last && len(run) > 0 {
			// The first delivery's answer is lost; the mapping retries the
			// same payload.
			e.Invocations++
			e.Delivered += len(part)
			e.Redelivered += len(part)
			if _, err := fn.Invoke(ctx, payload); err != nil && ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
		var resp events.DynamoDBTimeWindowEventResponse
		err = e.call(ctx, fn, payload, part, func(out []byte) error {
			resp = events.DynamoDBTimeWindowEventResponse{}
			switch err := json.Unmarshal(out, &resp); {
			case err != nil:
				return err
			case resp.State == nil:
				return errors.New("a tumbling-window answer without a state (AWS counts it failed)")
			case len(resp.BatchItemFailures) > 0:
				return fmt.Errorf("a tumbling-window answer naming %d batch item failures (the bench's mapping retries the invocation)", len(resp.BatchItemFailures))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		open.state = resp.State
	}
	if final {
		e.Windows++
		return nil, nil
	}
	return open, nil
}
