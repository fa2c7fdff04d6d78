package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

const rebaseHelp = `
Rebase (--repair --rebase --tenant T --branch B): makes one branch's reports
and its applied item follow its table again, when counting cannot prove it
(records lost to a trim, another writer's records, keys written before
protocol 4, an open mark of an abandoned batch; docs/exactly-once.md, "B as
built (session 26)"; runbook, "Rebasing a branch"). With the consumers
running: B1 pins the branch's applied item (rebasing = the rebase's id) and
fences its old-layout report heads; B2 probes every key of the branch (a
change of changes, probe and sig only, which no report sees); B3 waits until
the consumers have committed every probe of this rebase (at most --wait);
B4 folds the probed images; B5 writes the reports that differ and resets the
applied item, pinned on its counts, in transactions of up to 100 writes. A
round whose pin fails (a record of the branch committed meanwhile) starts
again at B1, at most --rounds times: stop the branch's writes if it never
settles. A rebase that stops on an error clears its own pin; one whose
process died leaves it, and --abandon ID clears it and releases its --hold (a rebase of that id still
running can then no longer land). --hold holds the branch's transaction
writes for the rebase (writeHold on its branch item: the writers answer 503
once their directory cache has seen it, --hold-wait) and releases them at the
end: for a branch never quiet for a round; liveness only, the pin keeps the
rebase exact whether or not every writer has seen the hold. Exit status: 0
rebased or abandoned, 2 refused or error.`

// rebaseBranch is reconcile --repair --rebase: one branch, or --abandon;
// hold > 0 holds the branch's writes (--hold) and waits that long first.
func (e *environment) rebaseBranch(ctx context.Context, tenant, branch, abandon, streamARN string, wait time.Duration, rounds int, hold time.Duration, dropMalformed bool) int {
	if tenant == "" || branch == "" {
		return e.fail(errors.New("reconcile --rebase: give --tenant and --branch (one branch at a time)"))
	}
	c, err := e.dynamo(ctx)
	if err != nil {
		return e.fail(err)
	}
	f, err := table.GetFlags(ctx, c, e.table)
	if err != nil {
		return e.fail(fmt.Errorf("reconcile --rebase: read the flags: %w", err))
	}
	if err := f.ProtocolAbove(table.Protocol); err != nil {
		return e.fail(fmt.Errorf("reconcile --rebase refused: %w: run the ledgerctl of the table's protocol", err))
	}
	if abandon != "" {
		// A hold of the same id (--hold) is released too: a ledgerctl that
		// died leaves it, and the branch's writes refused, until then
		// (review of step B, S26-B4).
		released, err := e.releaseHold(ctx, c, tenant, branch, abandon)
		if err != nil {
			return e.fail(fmt.Errorf("reconcile --rebase --abandon: release the hold %s of %s/%s: %w", abandon, tenant, branch, err))
		}
		if released {
			fmt.Fprintf(e.stdout, "writes of %s/%s released (hold %s)\n", tenant, branch, abandon)
		}
		if _, err := c.UpdateItem(ctx, table.AbandonRebase(e.coordination, tenant, branch, abandon)); err != nil {
			a, gerr := table.GetApplied(ctx, c, e.coordination, tenant, branch)
			if gerr == nil && a.Rebasing != abandon {
				if released {
					return exitOK // it died before its pin: the hold was all it left
				}
				return e.fail(fmt.Errorf("reconcile --rebase --abandon: no rebase %s of %s/%s runs (rebasing: %q) and no hold of that id: nothing written", abandon, tenant, branch, a.Rebasing))
			}
			return e.fail(fmt.Errorf("reconcile --rebase --abandon: %w", err))
		}
		fmt.Fprintf(e.stdout, "abandoned rebase %s of %s/%s: rebasing cleared, epoch moved (its probes may still land: they change no figure)\n", abandon, tenant, branch)
		return exitOK
	}
	// The rebase fences heads: protocol 4 in the flags first, as every
	// consumer says it before its first fence (review of session 25, S25-F3).
	if _, err := table.RaiseProtocol(ctx, c, e.table, table.Protocol); err != nil {
		return e.fail(fmt.Errorf("reconcile --rebase: %w: nothing written", err))
	}
	if streamARN == "" {
		if _, arn, err := e.streamOf(ctx, ""); err == nil {
			streamARN = arn // without it, only a branch with open marks is refused
		}
	}
	id := processor.NewRebaseID(time.Now())
	if hold > 0 {
		// The writers see the hold within their directory TTL: liveness
		// only, the rebase's pin keeps it exact either way.
		if _, err := c.UpdateItem(ctx, table.HoldBranch(e.table, tenant, branch, id)); err != nil {
			return e.fail(fmt.Errorf("reconcile --rebase --hold: hold the writes of %s/%s (no such branch, or another hold is set): %w", tenant, branch, err))
		}
		defer func() {
			_, err := c.UpdateItem(context.WithoutCancel(ctx), table.ReleaseBranch(e.table, tenant, branch, id))
			var ccf *types.ConditionalCheckFailedException
			if err != nil && !errors.As(err, &ccf) { // a failed condition: released already (a lost answer's retry)
				fmt.Fprintf(e.stderr, "ledgerctl: release the hold %s of %s/%s: %v (remove writeHold from the branch item by hand)\n", id, tenant, branch, err)
			} else {
				fmt.Fprintf(e.stdout, "writes of %s/%s released\n", tenant, branch)
			}
		}()
		fmt.Fprintf(e.stdout, "writes of %s/%s held (%s); waiting %s for the writers to see it\n", tenant, branch, id, hold)
		select {
		case <-ctx.Done():
			return e.fail(ctx.Err())
		case <-time.After(hold):
		}
	}
	res, err := processor.Rebase(ctx, c, e.table, processor.RebaseOptions{
		ID: id, Tenant: tenant, Branch: branch, CoordinationTable: e.coordination, StreamARN: streamARN,
		Wait: wait, Rounds: rounds, DropMalformedOpen: dropMalformed,
		Log: func(format string, args ...any) { fmt.Fprintf(e.stderr, "rebase: "+format+"\n", args...) },
	})
	if err != nil {
		return e.fail(fmt.Errorf("reconcile --rebase: %w", err))
	}
	fmt.Fprintf(e.stdout, "rebased %s/%s (rebase %s, %d round(s)): %d keys probed, %d reports written in %d transaction(s), %d old-layout heads fenced; applied %d (sum %d − probed %d), epoch %d\n",
		tenant, branch, res.ID, res.Rounds, res.Keys, res.Reports, res.Transactions, res.Fenced, res.Sum-res.P4, res.Sum, res.P4, res.Epoch)
	if len(res.StaleOpen) > 0 {
		fmt.Fprintf(e.stdout, "removed %d stale open marks: %v\n", len(res.StaleOpen), res.StaleOpen)
	}
	if res.RollupsUnproven {
		fmt.Fprintf(e.stdout, "the figures of %s/%s changed: tenant %s's roll-ups are unproven after the rebase (reconcile, then the quiescent roll-up repair: docs/runbook.md, \"Repairing tenant roll-ups\")\n", tenant, branch, tenant)
	}
	return exitOK
}

// releaseHold removes the write hold id from branch (tenant, branch):
// true when it was set, false when no hold of that id was (a failed
// condition).
func (e *environment) releaseHold(ctx context.Context, c interface {
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}, tenant, branch, id string) (bool, error) {
	_, err := c.UpdateItem(ctx, table.ReleaseBranch(e.table, tenant, branch, id))
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return false, nil
	}
	return err == nil, err
}
