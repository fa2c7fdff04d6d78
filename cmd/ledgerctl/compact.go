package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ledger-dev/ledger/compact"
)

const compactHelp = `Retires the tombstones of deleted transactions (the writer's DELETE keeps a
tombstone: docs/design.md, "Transaction"): every tombstone deleted at least
--older-than ago is marked (a counted change), then hard-deleted in one
transaction with its branch's applied item in the coordination table, which
adds the key's change count to the branch's retired count
(docs/exactly-once.md, "The design: counted changes"). A tombstone whose records the stream may still hold is kept:
--older-than below the stream's retention (24h) is refused.

It scans the whole table (strongly consistent), while the writer and the
consumers run. It is safe to interrupt and to run again: a tombstone is
retired at most once, and one written since the scan read it, or of a
branch a rebase runs on, is kept for a later run. Exit 0 when the scan ends.`

func (e *environment) compact(ctx context.Context, args []string) int {
	fs := e.flags("compact", compactHelp)
	olderThan := fs.Duration("older-than", compact.DefaultOlderThan, "retire the tombstones deleted at least this long ago (at least the stream's retention, 24h)")
	parallel := fs.Int("parallel", compact.DefaultParallel, "branches whose tombstones are retired at once (a branch's own one at a time)")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	switch {
	case fs.NArg() > 0:
		return e.fail(fmt.Errorf("compact: unexpected argument %q", fs.Arg(0)))
	case *olderThan < compact.MinOlderThan:
		return e.fail(fmt.Errorf("compact: --older-than %s: %w", *olderThan, compact.ErrTooYoung))
	}
	c, err := e.dynamo(ctx)
	if err != nil {
		return e.fail(err)
	}
	m := e.meter("compact")
	start := time.Now()
	res, err := compact.Run(ctx, c, e.table, e.coordination, compact.Options{
		OlderThan: *olderThan,
		Parallel:  *parallel,
		Progress: func(r compact.Result) {
			m.Set(int64(r.Compacted), int64(r.Tombstones), fmt.Sprintf("%d items scanned, %d tombstones, %d retired", r.Scanned, r.Tombstones, r.Compacted))
		},
	})
	m.Stop()
	fmt.Fprintf(e.stdout, "%d items scanned, %d tombstones: %d retired (%d records added to retired counts), %d younger than %s, %d without a change count, %d changed since the scan, %d of a branch being rebased, %d refused as malformed (kept); %s\n",
		res.Scanned, res.Tombstones, res.Compacted, res.Retired, res.Young, *olderThan, res.Uncounted, res.Changed, res.Rebasing, res.Failed, time.Since(start).Round(time.Millisecond))
	if err != nil {
		return e.fail(err)
	}
	return exitOK
}
