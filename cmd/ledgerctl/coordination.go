package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ledger-dev/ledger/table"
)

const coordinationMigrateHelp = `Moves the stream's checkpoints from the ledger table, where versions before
the coordination table kept them (under STREAM#{stream ARN}), to the
coordination table (LEDGER_COORDINATION_TABLE), and removes the stream's
old leases. Consumers of this version refuse to start on a stream while
the ledger table holds such items.

Stop every consumer first: scale the pollers to zero and disable the
Lambda's event source mapping. The move refuses while a lease is held and
unexpired, or when a checkpoint changes while it is moved (a consumer is
still running); it is idempotent: run it again after fixing that. Each
copy is fenced until its original is replaced by a tombstone: consumers
of this version wait on a shard whose copy is fenced, and commit from it
only once a run ends without error. The
coordination table must exist (the stack's CoordinationTable, or
'ledgerctl table create'). docs/runbook.md, "The coordination table".`

func (e *environment) coordinationMigrate(ctx context.Context, args []string) int {
	fs := e.flags("coordination migrate", coordinationMigrateHelp)
	streamARN := fs.String("stream-arn", "", "the stream `ARN` (default: the table's latest stream)")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return e.fail(fmt.Errorf("coordination migrate: unexpected argument %q", fs.Arg(0)))
	}
	if err := table.CheckCoordinationTable(e.table, e.coordination); err != nil {
		return e.fail(err)
	}
	c, arn, err := e.streamOf(ctx, *streamARN)
	if err != nil {
		return e.fail(err)
	}
	// The table must be there (the stack's, or `ledgerctl table create`'s):
	// one made here could clash with the one a stack update creates.
	if err := table.ValidateCoordinationTable(ctx, c, e.coordination); err != nil {
		return e.fail(err)
	}
	res, err := table.MigrateStreamState(ctx, c, e.table, e.coordination, arn, time.Now(), table.MigrateOptions{})
	if errors.Is(err, table.ErrConsumerRunning) {
		fmt.Fprintf(e.stderr, "ledgerctl: %v\n", err)
		return exitDiff
	}
	if err != nil {
		return e.fail(err)
	}
	fmt.Fprintf(e.stdout, "stream %s: moved %d checkpoints to %s, removed %d leases from %s", arn, res.Checkpoints, e.coordination, res.Leases, e.table)
	if res.Released > 0 {
		fmt.Fprintf(e.stdout, ", released %d copies an earlier run left fenced", res.Released)
	}
	fmt.Fprintln(e.stdout)
	return exitOK
}
