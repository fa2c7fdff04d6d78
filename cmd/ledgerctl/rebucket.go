package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ledger-dev/ledger/rebucket"
)

const rebucketHelp = `Moves the history of a tenant's branches (--tenant T, every branch) or of one
branch (--tenant T --branch B) into their current business calendar and the
tenant's current period types: every transaction whose stamp (business date
and report periods) is not what the calendar now gives it is stamped again,
with a conditional write of the transaction item. The consumers fold that
change like any other: its amount leaves its old periods and enters its new
ones, exactly once. Run it after changing a branch's calendar or a tenant's
reportPeriods, while the writer and the consumers run.

It first waits until --settle has passed since the last calendar change, so
that every writer stamps new transactions in the new calendar (at least the
writers' --directory-ttl). It is safe to interrupt and to run again: a second
run writes nothing. Exit 0 when every transaction is in its calendar.`

func (e *environment) rebucket(ctx context.Context, args []string) int {
	fs := e.flags("rebucket", rebucketHelp)
	tenant := fs.String("tenant", "", "tenant id (required)")
	branch := fs.String("branch", "", "branch id (default: every branch of the tenant)")
	settle := fs.Duration("settle", rebucket.DefaultSettle, "wait this long after a calendar change before reading (at least the writers' --directory-ttl)")
	parallel := fs.Int("parallel", 8, "transactions restamped at once (1–64)")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	switch {
	case fs.NArg() > 0:
		return e.fail(fmt.Errorf("rebucket: unexpected argument %q", fs.Arg(0)))
	case *tenant == "":
		return e.fail(errors.New("rebucket: --tenant is required"))
	case *parallel < 1 || *parallel > 64:
		return e.fail(errors.New("rebucket: --parallel must be from 1 to 64"))
	case *settle < 0:
		return e.fail(errors.New("rebucket: --settle must not be negative"))
	}
	c, err := e.dynamo(ctx)
	if err != nil {
		return e.fail(err)
	}
	if *settle == 0 {
		*settle = -1 // no wait
	}
	m := e.meter("rebucket")
	start := time.Now()
	res, err := rebucket.Run(ctx, c, e.table, *tenant, *branch, rebucket.Options{
		Settle: *settle, Parallel: *parallel,
		Progress: func(p rebucket.Progress) {
			status := fmt.Sprintf("branch %s (%d/%d): %d transactions read, %d restamped", p.Branch, p.Done, p.Branches, p.Read, p.Moved)
			if p.Waiting > 0 {
				status = fmt.Sprintf("branch %s: waiting %s for the writers to stamp in the new calendar", p.Branch, p.Waiting.Round(time.Second))
			}
			m.Set(int64(p.Done), int64(p.Branches), status)
		},
	})
	m.Stop()
	elapsed := time.Since(start)
	fmt.Fprintf(e.stdout, "%d branches, %d transactions: %d restamped, %d already in their calendar, %d invalid (left alone), %d without periods in their calendar (left alone), %d read again after a concurrent change; %.0f write units, %s\n",
		res.Branches, res.Transactions, res.Moved, res.Current, res.Invalid, res.Unplaceable, res.Retried, res.WriteUnits, elapsed.Round(time.Millisecond))
	if err != nil {
		return e.fail(err)
	}
	return exitOK
}
