package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

const abandonHelp = `Gives up the half-committed batch on one shard's checkpoint, for a batch that
cannot finish (docs/runbook.md, "A stuck shard", step 4): the guard-alone
abandon transaction the consumers send after a trim moves the checkpoint to
the batch's last record (pendingTo), sets lostAt and adds 1 to the loss count
(the coordination table's LOSSES item), on condition of the pending state read.

Without --to it reads and prints the pending batch and writes nothing (exit 1);
with --to SEQ and --next K equal to the printed pendingTo and pendingNext it
abandons that batch, and only if the checkpoint still holds it with no group
landed since the print (a batch that moved is not stuck). The batch's records after its landed groups
are lost to the reports until a repair (ledgerctl reconcile --repair).
Exit status: 0 abandoned, 1 printed only, 2 error (no pending batch, --to or
--next differs, the checkpoint moved meanwhile, ...).`

func (e *environment) abandonBatch(ctx context.Context, args []string) int {
	fs := e.flags("abandon-batch", abandonHelp)
	streamARN := fs.String("stream-arn", "", "the stream `ARN` (default: the table's latest stream)")
	shard := fs.String("shard", "", "the shard `ID` whose pending batch to abandon (required)")
	to := fs.String("to", "", "abandon only the batch ending at this `SEQUENCE` (the pendingTo printed by a run without it)")
	next := fs.Int("next", -1, "with --to: abandon only if the batch's next group is still this `K` (the pendingNext printed by a run without --to)")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return e.fail(fmt.Errorf("abandon-batch: unexpected argument %q", fs.Arg(0)))
	}
	if *shard == "" {
		return e.fail(errors.New("abandon-batch: --shard is required"))
	}
	if *to != "" && *next < 0 {
		return e.fail(errors.New("abandon-batch: --to needs --next (the pendingNext printed by a run without --to): nothing written"))
	}
	c, arn, err := e.streamOf(ctx, *streamARN)
	if err != nil {
		return e.fail(err)
	}
	key := aggregates.CheckpointKey(arn, *shard)
	out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.coordination), Key: table.Key(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return e.fail(fmt.Errorf("abandon-batch: read the checkpoint of %s: %w", *shard, err))
	}
	if out.Item == nil {
		return e.fail(fmt.Errorf("abandon-batch: stream %s has no checkpoint of shard %s in %s", arn, *shard, e.coordination))
	}
	cp, err := table.DecodeCheckpoint(*shard, out.Item)
	if cp.Foreign() {
		// Fenced by another protocol: this version's abandon conditions on
		// the old layout or on its own fence and would fail on it; say why
		// instead (docs/exactly-once.md, review of session 25, S25-X7).
		return e.fail(fmt.Errorf("abandon-batch: %w", &table.CheckpointProtocolError{Shard: *shard, Fence: cp.Fence}))
	}
	if cp.Pending == nil {
		return e.fail(fmt.Errorf("abandon-batch: shard %s has no pending batch (checkpoint %s): nothing to abandon", *shard, orDash(cp.Seq)))
	}
	fmt.Fprintf(e.stdout, "stream %s\nshard %s: checkpoint %s, pending batch through %s: groups 0..%d of %d landed, plan %q, digest %q\n",
		arn, *shard, orDash(cp.Seq), cp.Pending.To, cp.Pending.Next-1, cp.Pending.Groups, cp.Pending.Plan, cp.Pending.Digest)
	if err != nil {
		fmt.Fprintf(e.stdout, "the pending batch is malformed: %v\n", err)
	}
	if cp.Fenced {
		return e.fail(fmt.Errorf("abandon-batch: shard %s: %w", *shard, table.ErrCheckpointFenced))
	}
	if *to == "" {
		fmt.Fprintf(e.stdout, "nothing written; to abandon this batch run again with --to %s --next %d\n", cp.Pending.To, cp.Pending.Next)
		return exitDiff
	}
	if *to != cp.Pending.To {
		return e.fail(fmt.Errorf("abandon-batch: --to %s, but the pending batch ends at %s: nothing written", *to, cp.Pending.To))
	}
	if *next != cp.Pending.Next {
		// Groups landed since the print: the batch is moving, not stuck
		// (review session 22, S22-AB-2).
		return e.fail(fmt.Errorf("abandon-batch: --next %d, but the pending batch's next group is %d: it moved since it was printed (a consumer is finishing it): nothing written", *next, cp.Pending.Next))
	}
	p, err := processor.New(c, processor.Config{Table: e.table, CoordinationTable: e.coordination}, nil)
	if err != nil {
		return e.fail(err)
	}
	// The abandon leaves the checkpoint fenced: protocol 4 in the flags
	// first, as every consumer says it at start (review of session 25,
	// S25-F3).
	if _, err := p.RaiseProtocol(ctx); err != nil {
		return e.fail(fmt.Errorf("abandon-batch: %w: nothing written", err))
	}
	a := table.Abandon{Shard: *shard, Prev: cp.Seq, Pending: cp.Pending, Now: time.Now().UTC()}
	landed, err := p.AbandonCheckpoint(ctx, key, a)
	if err != nil {
		return e.fail(fmt.Errorf("abandon-batch: %w", err))
	}
	if !landed {
		return e.fail(fmt.Errorf("abandon-batch: the checkpoint of %s moved since it was read (a consumer finished or changed the batch): nothing abandoned; run again to see its state", *shard))
	}
	losses, err := table.GetLosses(ctx, c, e.coordination)
	if err != nil {
		fmt.Fprintf(e.stderr, "ledgerctl: %v\n", err)
	}
	fmt.Fprintf(e.stdout, "abandoned: checkpoint moved to %s with lostAt %s; loss count %d\n", a.Target(), a.Now.Format(time.RFC3339Nano), losses)
	fmt.Fprintf(e.stdout, "the batch's records after its landed groups (after group %d of %d, through %s) are lost to the reports until a repair: run `ledgerctl reconcile`, then `ledgerctl reconcile --repair` (docs/runbook.md, \"A reconcile difference\")\n",
		cp.Pending.Next-1, cp.Pending.Groups, cp.Pending.To)
	return exitOK
}
