package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ledger-dev/ledger/processor"
)

const replayHelp = `Pushes recorded DynamoDB stream events through the processor against the
table, exactly as the standard-mode Lambda does: each FILE (or every *.json
in a DIR, in name order) is one batch, decoded with processor.FromLambda and
committed by processor.Process under a run-marker guard (docs/exactly-once.md).
Replaying the same file twice applies nothing the second time: its records
count as duplicates.

A FILE holds a Lambda DynamoDB stream event, {"Records": [...]}: the
fixtures in fixtures/events, or what 'aws dynamodbstreams get-records'
prints (its ISO timestamps are accepted), which is how records named by a
dead-letter message are replayed (docs/runbook.md).

Use it on a table whose consumer is the standard-mode Lambda or none (a test
table): run markers are that consumer's guard; the poller and the
tumbling-window Lambda guard with shard checkpoints instead (assumption 8 of
docs/exactly-once.md).
Progress goes to stderr (a line in place on a terminal, else a line every
LEDGER_PROGRESS_EVERY, 5s); stdout has a line per file.
Refused, writing nothing, when the flags item names a higher protocol than
this version's (4): run the ledgerctl of the table's protocol (docs/runbook.md,
"Protocols").
Exit status: 0 every batch committed, 2 error (the batches before it stay
committed; replaying again is safe).`

func (e *environment) replay(ctx context.Context, args []string) int {
	fs := e.flags("replay FILE|DIR ...", replayHelp)
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitError
	}
	var files []string
	for _, arg := range fs.Args() {
		fi, err := os.Stat(arg)
		if err != nil {
			return e.fail(fmt.Errorf("replay: %w", err))
		}
		if !fi.IsDir() {
			files = append(files, arg)
			continue
		}
		matches, err := filepath.Glob(filepath.Join(arg, "*.json"))
		if err != nil {
			return e.fail(fmt.Errorf("replay: %w", err))
		}
		if len(matches) == 0 {
			return e.fail(fmt.Errorf("replay: no *.json in %s", arg))
		}
		sort.Strings(matches)
		files = append(files, matches...)
	}
	m := e.meter("replay")
	defer m.Stop()
	batches := make([][]processor.Record, len(files))
	var records int64
	for i, f := range files {
		m.Set(int64(i), int64(len(files)), fmt.Sprintf("reading %d/%d files", i, len(files)))
		recs, err := readEventFile(f)
		if err != nil {
			return e.fail(fmt.Errorf("replay: %w", err))
		}
		batches[i] = recs
		records += int64(len(recs))
	}

	c, err := e.dynamo(ctx)
	if err != nil {
		return e.fail(err)
	}
	// A replay commits as a standard-mode consumer of this version: under
	// a later protocol its commits would meet that protocol's fences
	// (docs/exactly-once.md, second review, F-a), so it is refused as
	// reconcile --repair is (review of session 25, S25-X3).
	if err := e.refuseAboveProtocol(ctx, c, "replay", ""); err != nil {
		return e.fail(err)
	}
	p, err := processor.New(c, processor.Config{Table: e.table, CoordinationTable: e.coordination}, nil)
	if err != nil {
		return e.fail(err)
	}
	// Its commits fence the report heads they update: protocol 4 in the
	// flags first, as every consumer says it at start (review of session
	// 25, S25-F3).
	if _, err := p.RaiseProtocol(ctx); err != nil {
		return e.fail(fmt.Errorf("replay: %w: nothing written", err))
	}
	var total processor.Result
	for i, recs := range batches {
		m.Set(int64(total.Committed), records, fmt.Sprintf("%d/%d files, %d/%d records", i, len(batches), total.Committed, records))
		res, err := p.Process(ctx, p.MarkerGuard(), recs)
		if err != nil {
			return e.fail(fmt.Errorf("replay %s: %d of %d records committed: %w", files[i], res.Committed, len(recs), err))
		}
		fmt.Fprintf(e.lines(m), "%s: %d records: %d applied, %d duplicates, %d quarantined, %d ignored; %d commits\n",
			files[i], len(recs), res.Applied, res.Duplicates, res.Quarantined, res.Ignored, res.Runs)
		total.Applied += res.Applied
		total.Duplicates += res.Duplicates
		total.Quarantined += res.Quarantined
		total.Ignored += res.Ignored
		total.Runs += res.Runs
		total.Committed += len(recs)
	}
	m.Stop()
	if len(batches) > 1 {
		fmt.Fprintf(e.stdout, "total: %d records in %d files: %d applied, %d duplicates, %d quarantined, %d ignored; %d commits\n",
			total.Committed, len(batches), total.Applied, total.Duplicates, total.Quarantined, total.Ignored, total.Runs)
	}
	return exitOK
}

// readEventFile reads one Lambda-shaped DynamoDB stream event and converts
// its records.
func readEventFile(path string) ([]processor.Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, err = epochTimestamps(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var ev events.DynamoDBEvent
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&ev); err != nil {
		return nil, fmt.Errorf("%s: not a DynamoDB stream event: %w", path, err)
	}
	if ev.Records == nil {
		return nil, fmt.Errorf("%s: no \"Records\" array: not a DynamoDB stream event", path)
	}
	recs := make([]processor.Record, len(ev.Records))
	for i, r := range ev.Records {
		recs[i] = processor.FromLambda(r)
	}
	return recs, nil
}

// epochTimestamps rewrites ISO 8601 ApproximateCreationDateTime values (as
// the AWS CLI prints them) to the epoch seconds of the Lambda event shape.
func epochTimestamps(b []byte) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	var recs []map[string]json.RawMessage
	if raw, ok := doc["Records"]; !ok || json.Unmarshal(raw, &recs) != nil {
		return b, nil // the decoder says what is wrong
	}
	changed := false
	for _, r := range recs {
		var ddb map[string]json.RawMessage
		if json.Unmarshal(r["dynamodb"], &ddb) != nil {
			continue
		}
		var s string
		if json.Unmarshal(ddb["ApproximateCreationDateTime"], &s) != nil {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, fmt.Errorf("ApproximateCreationDateTime %q: want epoch seconds or RFC 3339", s)
		}
		ddb["ApproximateCreationDateTime"] = json.RawMessage(fmt.Sprint(t.Unix()))
		r["dynamodb"], _ = json.Marshal(ddb)
		changed = true
	}
	if !changed {
		return b, nil
	}
	raw, err := json.Marshal(recs)
	if err != nil {
		return nil, errors.New("re-encode records")
	}
	doc["Records"] = raw
	return json.Marshal(doc)
}
