package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// This file is the counted repair of one branch under simplification S
// (docs/exactly-once.md, "R as built (session 26): the argument"): R0 pin
// (the applied item and the loss count), R1 fence and read the reports,
// R2 stream the transactions into one fold and one count, R4 require
// A = W, R5 the fold is the target, R6 the pinned writes, chunked. It
// reads no stream, and its memory is flat in the branch's transactions.

// ErrNotProven wraps every refusal of the counted repair: the branch is
// left alone, named, nothing written.
var ErrNotProven = errors.New("left alone")

// CountedRepairOptions configures CountedRepair. Zero values take the
// defaults named.
type CountedRepairOptions struct {
	Tenant, Branch string
	// ID is the repair's id ("rp-…" from the clock and random bytes when
	// empty); R6 sets it on the applied item (table.AttrRepaired).
	ID string
	// CoordinationTable holds the applied items (table.CoordinationTableName
	// of the table when empty).
	CoordinationTable string
	// StreamARN is the ledger table's stream, to tell an open mark whose
	// batch is still pending from a stale one (its batch abandoned: only a
	// rebase removes it, S26-R2). Empty: the refusal names both.
	StreamARN string
	// Rounds bounds the rounds (R0 to R6) one call makes (default 3): a
	// round whose pin fails starts again at R0.
	Rounds int
	// Log, when set, is told each step.
	Log func(format string, args ...any)
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	// hook, in tests, is called at each step's end ("R0", "R1", "R2",
	// "R5": before R6's first transaction).
	hook func(step string)
}

// CountedRepairResult is what a counted repair did.
type CountedRepairResult struct {
	ID           string
	Rounds       int
	A, W         int64 // the counts of the last round: A = W proved it
	Transactions int   // of R6, landed (over every round)
	Reports      int   // reports written in the last round
	Fenced       int   // old-layout heads fenced at R1
	Epoch        int64 // the epoch the last transaction set (0: none written)
	// RollupsUnproven: a report's figures changed, or may have (a
	// transaction that changes figures was sent, whatever its outcome:
	// S26-R3), its tenant's roll-ups did not follow (docs/exactly-once.md,
	// "R as built", Roll-ups). Set on an error too.
	RollupsUnproven   bool
	RollupSharesMoved int
}

// ErrRepairBusy is returned (wrapped with ErrNotProven) when every round's
// pin failed.
var ErrRepairBusy = errors.New("the branch was committed to during every round of the repair: run again once its consumers have caught up, or hold its writes (docs/runbook.md, \"A reconcile difference\")")

// NewRepairID returns a fresh counted repair id ("rp-" and the time and 6
// random bytes, in hex).
func NewRepairID(now time.Time) string {
	return "rp-" + strings.TrimPrefix(NewRebaseID(now), "rb-")
}

// CountedRepair repairs branch (o.Tenant, o.Branch) of tableName exactly,
// or refuses by name (an error wrapping ErrNotProven) writing no figure.
// A branch without fencedAt is refused: rebase it first.
func CountedRepair(ctx context.Context, api RebaseAPI, tableName string, o CountedRepairOptions) (CountedRepairResult, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ID == "" {
		o.ID = NewRepairID(o.Now())
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.hook == nil {
		o.hook = func(string) {}
	}
	if o.CoordinationTable == "" {
		o.CoordinationTable = table.CoordinationTableName(tableName)
	}
	r := &countedRepair{api: api, table: tableName, coord: o.CoordinationTable, o: o, res: CountedRepairResult{ID: o.ID}}
	for round := 1; round <= o.Rounds; round++ {
		r.res.Rounds = round
		err := r.round(ctx)
		var again *roundAgain
		if errors.As(err, &again) {
			o.Log("round %d: %s; again from R0", round, again.why)
			continue
		}
		return r.res, err
	}
	return r.res, fmt.Errorf("counted repair of %s/%s: %w: %w", o.Tenant, o.Branch, ErrNotProven, ErrRepairBusy)
}

type countedRepair struct {
	api          RebaseAPI
	table, coord string
	o            CountedRepairOptions
	res          CountedRepairResult
}

func (r *countedRepair) refuse(format string, args ...any) error {
	return fmt.Errorf("counted repair of %s/%s: %w: %s", r.o.Tenant, r.o.Branch, ErrNotProven, fmt.Sprintf(format, args...))
}

func (r *countedRepair) round(ctx context.Context) error {
	o := r.o
	// R0: pin.
	at, err := table.GetApplied(ctx, r.api, r.coord, o.Tenant, o.Branch)
	if err != nil {
		return fmt.Errorf("counted repair R0: %w", err)
	}
	losses, err := table.GetLosses(ctx, r.api, r.coord)
	if err != nil {
		return fmt.Errorf("counted repair R0: %w", err)
	}
	switch {
	case at.FencedAt == "":
		return r.refuse("not rebased since the fence (no fencedAt): rebase it first (ledgerctl reconcile --repair --rebase --tenant %s --branch %s; docs/runbook.md, \"Rebasing a branch\")", o.Tenant, o.Branch)
	case at.Foreign != at.ForeignAck:
		return r.refuse("%d foreign records committed since the last rebase (foreign %d, foreignAck %d): a write by another path than the writer; rebase (docs/runbook.md, \"Rebasing a branch\")", at.Foreign-at.ForeignAck, at.Foreign, at.ForeignAck)
	case at.Rebasing != "":
		return r.refuse("rebase %s runs: let it end (or --abandon it), then repair", at.Rebasing)
	case len(at.Open) > 0:
		return r.refuseOpen(ctx, at.Open)
	}
	a := at.Applied + at.Probed
	o.hook("R0")

	// R1: fence the old-layout heads, then read the reports.
	fenced, err := fenceBranchHeads(ctx, r.api, r.table, o.Tenant, o.Branch)
	r.res.Fenced += fenced
	if err != nil {
		return fmt.Errorf("counted repair R1: %w", err)
	}
	var stats ReconcileStats
	stored := table.ReportSet{}
	if err := queryAll(ctx, r.api, r.table, aggregates.ReportPK(o.Tenant, o.Branch), &stats, func(item map[string]ddbtypes.AttributeValue) error {
		_ = stored.Add(item) // a stray item is reconcile's to name (and Repair's to delete)
		return nil
	}, nil); err != nil {
		return fmt.Errorf("counted repair R1: %w", err)
	}
	o.hook("R1")

	// R2: the transactions, streamed into one fold and one sum.
	fold := aggregates.NewFold()
	var sum int64
	var foreign error
	if err := queryAll(ctx, r.api, r.table, aggregates.TransactionPK(o.Tenant, o.Branch), &stats, func(item map[string]ddbtypes.AttributeValue) error {
		c, ok := table.Changes(item)
		if !ok || !table.SigMatches(item) {
			foreign = r.refuse("foreign write in the table: key %s (no count, or a sig that does not match what it holds); rebase (docs/runbook.md, \"Rebasing a branch\")", table.KeyOf(item))
			return foreign
		}
		sum += c
		if tx, err := table.ParseTransaction(item); err == nil {
			fold.Add(tx, +1)
		}
		return nil
	}, nil); err != nil {
		if foreign != nil {
			return foreign
		}
		return fmt.Errorf("counted repair R2: %w", err)
	}
	after, err := table.GetApplied(ctx, r.api, r.coord, o.Tenant, o.Branch)
	if err != nil {
		return fmt.Errorf("counted repair R2: %w", err)
	}
	at.Retired = after.Retired
	w := sum + after.Retired
	r.res.A, r.res.W = a, w
	o.hook("R2")

	// R4: the proof.
	switch {
	case a < w:
		return r.refuse("%d changes of the branch written and not yet committed (applied %d, written %d): its consumers are behind (run again; ledgerctl lag), or records were lost to a trim (rebase)", w-a, a, w)
	case a > w:
		return r.refuse("%d more records committed than written (applied %d, written %d): a hard delete, or a lowered count, by another path than the writer; rebase (docs/runbook.md, \"Rebasing a branch\")", a-w, a, w)
	}

	// R5: the target is the fold.
	stamp := o.Now().UTC().Format(time.RFC3339Nano)
	target := foldTargetOps(r.table, fold, stored, stamp)
	ops, rollups := target.ops, target.figures
	o.Log("R0-R5: A = W = %d; %d reports to write", a, len(ops))
	r.res.Reports = len(ops)
	if len(ops) == 0 {
		return nil
	}
	o.hook("R5")

	// R6: the pinned writes.
	const fixed = 2 // the applied item's step, the loss count
	chunks := packReportOps(ops, 100-fixed)
	for j, chunk := range chunks {
		step := int64(j + 1)
		// Each transaction sets its own token (S26-R1): the id alone is
		// left there by this repair's transaction before, and an abandon
		// moves the epoch as far without touching it. The token names the
		// epoch it sets (S27-R3): each epoch value is set by one write
		// only, so no other write, whatever its id, leaves this token.
		token := fmt.Sprintf("%s/%d/%d/e%d", o.ID, r.res.Rounds, step, at.Epoch+step)
		pin := table.RepairPinned{Tenant: o.Tenant, Branch: o.Branch, ID: token, At: at}
		items := append(slices.Clone(chunk), table.CountedRepairStep(r.coord, pin, step), table.LossesAsRead(r.coord, losses))
		// Sent: it may land whatever answer comes back (a lost answer, a
		// late landing after the re-read), so the roll-ups are named
		// unproven from here on (S26-R3).
		r.res.RollupsUnproven = r.res.RollupsUnproven || rollups
		_, err := r.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err != nil {
			// Landed after all (a lost answer)? The epoch and this
			// transaction's token say: no other transaction sets it.
			now, gerr := table.GetApplied(context.WithoutCancel(ctx), r.api, r.coord, o.Tenant, o.Branch)
			if gerr != nil || now.Epoch != at.Epoch+step || now.Repaired != token {
				var tce *ddbtypes.TransactionCanceledException
				if errors.As(err, &tce) || gerr == nil {
					return &roundAgain{fmt.Sprintf("R6 transaction %d of %d did not land (%v)", j+1, len(chunks), err)}
				}
				return fmt.Errorf("counted repair R6 transaction %d of %d: %w", j+1, len(chunks), err)
			}
		}
		r.res.Transactions++
		r.res.Epoch = at.Epoch + step
	}
	for _, s := range target.shares {
		if err := passOnRollupShare(ctx, r.api, r.table, s.k, s.item, stamp); err != nil {
			return fmt.Errorf("counted repair of %s/%s landed; passing on the roll-up share of parked delta %s: %w (run it again)", o.Tenant, o.Branch, keyOfItem(s.item), err)
		}
		r.res.RollupSharesMoved++
	}
	o.Log("R6: landed in %d transactions; epoch %d", len(chunks), r.res.Epoch)
	return nil
}

// refuseOpen is R0's refusal of a branch with open marks (S26-R2): a mark
// whose batch is still pending (its checkpoint's pending batch ends where
// the mark says) is a batch half-committed, which its consumer finishes or
// an abandon ends; a mark whose batch is no longer pending (abandoned:
// abandon-batch, a trim) stays on the applied item until a rebase removes
// it (B5), so that abandoning it again, or waiting, never lets the
// counted repair run: it names the rebase.
func (r *countedRepair) refuseOpen(ctx context.Context, open []string) error {
	marks := strings.Join(open, ", ")
	for _, m := range open {
		if !table.WellFormedOpenMark(m) {
			return r.refuse("open mark %q names no batch ({label}~{shard}~{to}): no consumer writes such a mark (a foreign write, or a bug), so no batch will ever remove it; rebase with --drop-malformed-open, which removes it under the pin (docs/runbook.md, \"Rebasing a branch\")", m)
		}
	}
	if r.o.StreamARN == "" {
		return r.refuse("a batch is half-committed (open marks %s): let its consumer finish it, or abandon it (ledgerctl abandon-batch); a mark whose batch was abandoned stays until a rebase removes it: then rebase (docs/runbook.md, \"Rebasing a branch\")", marks)
	}
	var stale []string
	for _, m := range open {
		parts := strings.Split(m, "~")
		arn := r.o.StreamARN
		if i := strings.LastIndex(arn, "/"); i >= 0 {
			arn = arn[:i+1] + parts[0]
		}
		got, err := r.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &r.coord, Key: table.Key(aggregates.CheckpointKey(arn, parts[1])), ConsistentRead: aws.Bool(true)})
		if err != nil && ctx.Err() == nil {
			// The read only chooses the refusal's words: refuse this
			// branch, and let the run go on to the others (session 27).
			return r.refuse("open marks %s (a batch half-committed, or abandoned): the checkpoint of %s could not be read to tell which (%v); run again", marks, parts[1], err)
		}
		if err != nil {
			return fmt.Errorf("counted repair R0: read the checkpoint of open mark %s: %w", m, err)
		}
		if cp, _ := table.DecodeCheckpoint(parts[1], got.Item); cp.Pending != nil && cp.Pending.To == parts[2] {
			return r.refuse("a batch is half-committed (open mark %s: shard %s, batch through %s): let its consumer finish it, or abandon it (ledgerctl abandon-batch), then repair", m, parts[1], parts[2])
		}
		stale = append(stale, m)
	}
	// A batch's last transaction removes its mark with its pending state:
	// a mark no longer there was a batch finished between R0 and its
	// checkpoint's read, not abandoned (session 27). Only a mark still
	// there after its checkpoint showed no pending batch is stale.
	now, err := table.GetApplied(ctx, r.api, r.coord, r.o.Tenant, r.o.Branch)
	if err != nil && ctx.Err() == nil {
		return r.refuse("open marks %s of batches no longer pending, or finished during the check: the applied item could not be read again to tell which (%v); run again", strings.Join(stale, ", "), err)
	}
	if err != nil {
		return fmt.Errorf("counted repair R0: read the open marks again: %w", err)
	}
	stale = slices.DeleteFunc(stale, func(m string) bool { return !slices.Contains(now.Open, m) })
	if len(stale) == 0 {
		return &roundAgain{fmt.Sprintf("the batches of open marks %s finished during the check", marks)}
	}
	return r.refuse("open marks %s of batches no longer pending (abandoned): only a rebase removes them; rebase (docs/runbook.md, \"Rebasing a branch\")", strings.Join(stale, ", "))
}

// fenceBranchHeads fences every old-layout head of a branch
// (table.FenceHead: no figure moves) and returns how many it fenced.
func fenceBranchHeads(ctx context.Context, api RebaseAPI, tableName, tenant, branch string) (int, error) {
	var stats ReconcileStats
	var heads []aggregates.Key
	err := queryAll(ctx, api, tableName, aggregates.ReportPK(tenant, branch), &stats, func(item map[string]ddbtypes.AttributeValue) error {
		if _, ok := item[table.AttrTransactionCount].(*ddbtypes.AttributeValueMemberN); ok {
			heads = append(heads, table.KeyOf(item))
		}
		return nil
	}, nil)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range heads {
		_, err := api.UpdateItem(ctx, table.FenceHead(tableName, k))
		switch {
		case isConditionFailed(err): // fenced (or changed) meanwhile
		case err != nil:
			return n, fmt.Errorf("fence head %s: %w", k, err)
		default:
			n++
		}
	}
	return n, nil
}
