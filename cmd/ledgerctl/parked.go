package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ledger-dev/ledger/processor"
)

const parkedHelp = `Lists the report deltas the stream consumers parked: deltas of reports whose
item DynamoDB refused to update for good (an item damaged by another writer,
or past the size a report item keeps), with the report, the reason, the
records of the commit that parked it and the delta. Parked deltas are not in
the report's figures; 'ledgerctl reconcile --repair' rebuilds each such
report from the transactions and deletes its parked deltas
(docs/runbook.md, "Parked deltas"). Exit status: 0 none, 1 some listed,
2 error.`

func (e *environment) parked(ctx context.Context, args []string) int {
	fs := e.flags("parked", parkedHelp)
	asJSON := fs.Bool("json", false, "print JSON, one object per parked delta")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return e.fail(fmt.Errorf("parked: unexpected argument %q", fs.Arg(0)))
	}
	c, err := e.dynamo(ctx)
	if err != nil {
		return e.fail(err)
	}
	list, err := processor.ListParked(ctx, c, e.table)
	if err != nil {
		return e.fail(err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		for _, p := range list {
			if err := enc.Encode(map[string]any{
				"report": p.Report.String(), "reason": p.Reason, "detail": p.Detail,
				"recordsFrom": p.From, "recordsTo": p.To, "parkedAt": p.ParkedAt, "delta": p.Delta.String(),
			}); err != nil {
				return e.fail(err)
			}
		}
	} else {
		t := newTable("parked at", "report", "reason", "records", "delta")
		for _, p := range list {
			t.add(p.ParkedAt, p.Report.String(), p.Reason, p.From+"…"+p.To, p.Delta.String())
		}
		if len(list) > 0 {
			if err := t.write(e.stdout); err != nil {
				return e.fail(err)
			}
		}
		fmt.Fprintf(e.stdout, "%d parked deltas\n", len(list))
	}
	if len(list) > 0 {
		return exitDiff
	}
	return exitOK
}
