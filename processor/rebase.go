package processor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// This file is the rebase of one branch under simplification S
// (docs/exactly-once.md, "B as built (session 26): the argument"): B1 pin,
// B2 probe every key, B3 wait until the consumers have committed every
// probe of this rebase (probedBy#<id>), B4 bases = the probe images, B5
// the pinned write of the branch's reports and the reset of its applied
// item. It reads no stream.

// RebaseAPI is the part of the DynamoDB API the rebase uses.
type RebaseAPI interface {
	ReconcileAPI
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// RebaseOptions configures Rebase. Zero values take the defaults named.
type RebaseOptions struct {
	Tenant, Branch string
	// ID is the rebase's id (NewRebaseID when empty): a valid
	// table.ValidRebaseID.
	ID string
	// CoordinationTable holds the applied items and checkpoints
	// (table.CoordinationTableName of the table when empty).
	CoordinationTable string
	// StreamARN is the ledger table's stream, to find the checkpoints the
	// branch's open marks name ("" refuses a branch with open marks).
	StreamARN string
	// DropMalformedOpen removes, in B5, every open mark that names no
	// batch (not {label}~{shard}~{to}), as a stale one (S27-R2): no
	// consumer writes such a mark, so no group adds counts with it or
	// removes it, and B5 pins open as read. Without it such a mark refuses
	// the rebase, naming this option (ledgerctl --drop-malformed-open).
	DropMalformedOpen bool
	// Wait bounds B3 (default 15 minutes); Poll is its reading interval
	// (default 1 second).
	Wait, Poll time.Duration
	// Rounds bounds the rounds (B1 to B5) one call makes (default 5): a
	// round whose pin fails starts again at B1.
	Rounds int
	// Log, when set, is told each step.
	Log func(format string, args ...any)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// RebaseResult is what a rebase did.
type RebaseResult struct {
	ID                string
	Rounds            int
	Keys              int   // keys probed in the last round
	Probes            int64 // probes landed over every round
	Fenced            int   // old-layout heads fenced at B1
	Reports           int   // reports written at B5
	Sum, P4           int64
	Epoch             int64 // the epoch the last transaction set
	StaleOpen         []string
	Transactions      int
	RollupsUnproven   bool // a report's figures changed: the tenant's roll-ups are unproven
	RollupSharesMoved int
}

// ErrRebaseBusy is returned when every round's pin failed: the branch was
// written (or committed) during each.
var ErrRebaseBusy = errors.New("the branch was written or committed to during every round of the rebase: stop its writes and run it again (docs/runbook.md, \"Rebasing a branch\")")

// NewRebaseID returns a fresh rebase id ("rb-" and the time and 6 random
// bytes, in hex).
func NewRebaseID(now time.Time) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("rb-%x-%s", now.UTC().Unix(), hex.EncodeToString(b[:]))
}

// roundAgain is a round that must start again at B1: its pin failed.
type roundAgain struct{ why string }

func (r *roundAgain) Error() string { return r.why }

// Rebase rebases branch (o.Tenant, o.Branch) of tableName. On an error it
// abandons its own rebase (table.AbandonRebase) when it can, so that
// nothing is left set; the error says when it could not.
func Rebase(ctx context.Context, api RebaseAPI, tableName string, o RebaseOptions) (RebaseResult, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ID == "" {
		o.ID = NewRebaseID(o.Now())
	}
	if !table.ValidRebaseID(o.ID) {
		return RebaseResult{}, fmt.Errorf("rebase: %q is no rebase id (rb- and 1 to 40 of [0-9a-z-])", o.ID)
	}
	if o.Wait <= 0 {
		o.Wait = 15 * time.Minute
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Rounds <= 0 {
		o.Rounds = 5
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.CoordinationTable == "" {
		o.CoordinationTable = table.CoordinationTableName(tableName)
	}
	r := &rebase{api: api, table: tableName, coord: o.CoordinationTable, o: o,
		res: RebaseResult{ID: o.ID}, probeID: o.ID, probeIDs: []string{o.ID}}
	err := r.run(ctx)
	if err != nil && !r.done && r.res.Transactions > 0 {
		// Transactions of B5 landed in a round that then failed: reports
		// of the branch were rewritten, the tenant's roll-ups did not
		// follow (S26-B7).
		err = fmt.Errorf("%w; %d transactions of B5 landed before it stopped: reports of %s/%s were rewritten (each at its target) and tenant %s's roll-ups are unproven (reconcile, then the quiescent roll-up repair: docs/runbook.md, \"Repairing tenant roll-ups\")",
			err, r.res.Transactions, o.Tenant, o.Branch, o.Tenant)
	}
	if err != nil && !r.done {
		if _, aerr := r.update(context.WithoutCancel(ctx), table.AbandonRebase(r.coord, o.Tenant, o.Branch, o.ID)); aerr != nil &&
			!isConditionFailed(aerr) {
			err = fmt.Errorf("%w; and the rebase could not be abandoned (%v): run ledgerctl reconcile --rebase --abandon %s --tenant %s --branch %s",
				err, aerr, o.ID, o.Tenant, o.Branch)
		}
	}
	return r.res, err
}

type rebase struct {
	api          RebaseAPI
	table, coord string
	o            RebaseOptions
	res          RebaseResult
	done         bool // B5's last transaction landed
	// probeID is the id the probes of this round carry (o.ID, then o.ID-2,
	// -3, … after a probe whose outcome is unknown: S26-B1); probeIDs are
	// all those used; landed counts the probes landed under probeID.
	probeID  string
	probeIDs []string
	landed   int64
}

// errProbeUnknown is a probe that failed (a lost answer, a failed
// condition: the SDK's retry of a landed probe meets one) and whose key's
// re-read does not show it landed: it may have landed and been written
// over since. The consumers would count it under the probe id and the
// rebase would not, so B3's count could be met by it while the key's later
// probe is not committed (docs/exactly-once.md, review of step B, S26-B1):
// the round starts again under a new probe id.
var errProbeUnknown = errors.New("a probe's outcome is unknown")

func (r *rebase) run(ctx context.Context) error {
	for round := 1; round <= r.o.Rounds; round++ {
		r.res.Rounds = round
		err := r.round(ctx)
		var again *roundAgain
		if errors.As(err, &again) {
			r.o.Log("round %d: %s; again from B1", round, again.why)
			continue
		}
		return err
	}
	return fmt.Errorf("rebase %s of %s/%s: %w", r.o.ID, r.o.Tenant, r.o.Branch, ErrRebaseBusy)
}

// staleMark is an open mark whose batch is no longer pending.
type staleMark struct {
	mark string
	key  aggregates.Key
	to   string
}

func (r *rebase) round(ctx context.Context) error {
	o := r.o
	// B1: pin, and read the counts in the same call. A round after the
	// first pins on condition that the pin is still its own: an abandon
	// meanwhile stops the rebase (S26-B3).
	pin := table.RebasePin(r.coord, o.Tenant, o.Branch, o.ID)
	if r.res.Rounds > 1 {
		pin = table.RebaseRepin(r.coord, o.Tenant, o.Branch, o.ID)
	}
	out, err := r.update(ctx, pin)
	if isConditionFailed(err) {
		a, gerr := table.GetApplied(ctx, r.api, r.coord, o.Tenant, o.Branch)
		if gerr != nil {
			return gerr
		}
		r.done = true // not ours to abandon
		if r.res.Rounds > 1 {
			return fmt.Errorf("rebase %s of %s/%s was abandoned while it ran (rebasing is now %q): stopped before round %d (what it wrote before stays: probes, and the reports of a landed transaction of B5, each at its target)",
				o.ID, o.Tenant, o.Branch, a.Rebasing, r.res.Rounds)
		}
		return fmt.Errorf("rebase of %s/%s refused: rebase %s runs (if its process is gone: ledgerctl reconcile --rebase --abandon %s --tenant %s --branch %s)",
			o.Tenant, o.Branch, a.Rebasing, a.Rebasing, o.Tenant, o.Branch)
	}
	if err != nil {
		return fmt.Errorf("rebase B1 (pin): %w", err)
	}
	at, err := table.DecodeApplied(out.Attributes)
	if err != nil {
		return fmt.Errorf("rebase B1: %w", err)
	}
	losses, err := table.GetLosses(ctx, r.api, r.coord)
	if err != nil {
		return fmt.Errorf("rebase B1: %w", err)
	}
	stale, err := r.staleMarks(ctx, at.Open)
	if err != nil {
		return err
	}
	if err := r.fenceHeads(ctx); err != nil {
		return err
	}
	o.Log("B1: pinned %s (applied %d, probed %d, foreign %d, retired %d, epoch %d, open %d, losses %d); %d old-layout heads fenced",
		o.ID, at.Applied, at.Probed, at.Foreign, at.Retired, at.Epoch, len(at.Open), losses, r.res.Fenced)

	// B2: probe every key of the partition.
	var bases []map[string]ddbtypes.AttributeValue
	var stats ReconcileStats
	err = queryAll(ctx, r.api, r.table, aggregates.TransactionPK(o.Tenant, o.Branch), &stats, func(item map[string]ddbtypes.AttributeValue) error {
		img, err := r.probe(ctx, item)
		if img != nil {
			bases = append(bases, img)
		}
		return err
	}, nil)
	if errors.Is(err, errProbeUnknown) {
		// Whether that probe landed is unknown: no count of this probe id
		// can be trusted any more. A new probe id for the next round; the
		// probes of this one, landed or not, are then probes of another id
		// (point 1's check).
		next := fmt.Sprintf("%s-%d", o.ID, len(r.probeIDs)+1)
		if !table.ValidRebaseID(next) {
			return fmt.Errorf("rebase %s: %w and the id is too long for another probe id: run again", o.ID, err)
		}
		why := err.Error() + "; its probes are counted under a new id " + next
		r.probeID, r.landed = next, 0
		r.probeIDs = append(r.probeIDs, next)
		return &roundAgain{why}
	}
	if err != nil {
		return err
	}
	r.res.Keys = len(bases)
	o.Log("B2: %d keys probed (%d probes landed in all)", len(bases), r.res.Probes)

	// B3: wait until the consumers have committed every probe of this rebase.
	moved := func(a table.Applied) string {
		switch {
		case a.Applied != at.Applied || a.Foreign != at.Foreign:
			return fmt.Sprintf("records of the branch were committed (applied %d → %d, foreign %d → %d)", at.Applied, a.Applied, at.Foreign, a.Foreign)
		case a.Retired != at.Retired || a.Epoch != at.Epoch || a.Rebasing != o.ID || !slices.Equal(a.Open, at.Open):
			return "the applied item moved (retired, epoch, rebasing or open)"
		}
		return ""
	}
	deadline := o.Now().Add(o.Wait)
	var p4 int64
	for {
		a, err := table.GetApplied(ctx, r.api, r.coord, o.Tenant, o.Branch)
		if err != nil {
			return err
		}
		if why := moved(a); why != "" {
			return &roundAgain{why}
		}
		got := a.ProbedBy[r.probeID]
		if got > r.landed {
			return fmt.Errorf("rebase %s: %d probes of id %s committed, %d written: another process uses the same id", o.ID, got, r.probeID, r.landed)
		}
		if got == r.landed {
			// The probes of this rebase's earlier probe ids are records
			// of its keys before their probes of this round (a later one
			// fails its condition), counted in sum and p4 as any earlier
			// record: only other rebases' probes start the round again
			// (review of S26-B1's fix, S26-B1b).
			var ours int64
			for _, id := range r.probeIDs {
				ours += a.ProbedBy[id] - at.ProbedBy[id]
			}
			if a.Probed-at.Probed != ours {
				return &roundAgain{fmt.Sprintf("probes of another rebase were committed meanwhile (probed moved by %d, this rebase's by %d): is an abandoned rebase still running?",
					a.Probed-at.Probed, ours)}
			}
			p4 = a.Probed
			break
		}
		if o.Now().After(deadline) {
			return fmt.Errorf("rebase %s: %d of %d probes committed after %s; are the consumers running? (ledgerctl lag)", o.ID, got, r.landed, o.Wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.Poll):
		}
	}
	o.Log("B3: the %d probes of %s are committed; probed %d", r.landed, r.probeID, p4)

	// B4: bases are the probe images; the reports are read after B3.
	fold := aggregates.NewFold()
	var sum int64
	for _, img := range bases {
		c, _ := table.Changes(img)
		sum += c
		if tx, err := table.ParseTransaction(img); err == nil {
			fold.Add(tx, +1)
		}
	}
	// Heads created since B1 by code of protocol 3 (absent at B1, so not
	// fenced then) are fenced now, before the read, so that B5 writes
	// every head fenced.
	if err := r.fenceHeads(ctx); err != nil {
		return err
	}
	stored := table.ReportSet{}
	if err := queryAll(ctx, r.api, r.table, aggregates.ReportPK(o.Tenant, o.Branch), &stats, func(item map[string]ddbtypes.AttributeValue) error {
		_ = stored.Add(item) // a stray item is reconcile's to name
		return nil
	}, nil); err != nil {
		return err
	}
	stamp := o.Now().UTC().Format(time.RFC3339Nano)
	target := foldTargetOps(r.table, fold, stored, stamp)
	ops, written := target.ops, len(target.ops)
	if target.figures {
		r.res.RollupsUnproven = true
	}
	nops := 0
	for _, g := range ops {
		nops += len(g.first) + len(g.rest)
	}
	o.Log("B4: sum %d, p4 %d; %d reports to write (%d writes)", sum, p4, written, nops)

	// B5: the pinned writes, the reset in the last.
	const fixed = 2 // the applied item's step, the loss count
	if len(stale) > 100-fixed-1 {
		return fmt.Errorf("rebase %s: %d stale open marks on one branch: more than one transaction holds", o.ID, len(stale))
	}
	chunks := packReportOps(ops, 100-fixed)
	if len(chunks) == 0 || len(chunks[len(chunks)-1])+len(stale) > 100-fixed {
		chunks = append(chunks, nil)
	}
	pinned := table.RebasePinned{Tenant: o.Tenant, Branch: o.Branch, ID: o.ID, At: at, P4: p4}
	reset := &table.RebaseReset{Sum: sum, Now: o.Now().UTC().Format(time.RFC3339), ProbeIDs: r.probeIDs}
	for _, s := range stale {
		reset.Stale = append(reset.Stale, s.mark)
	}
	for j, chunk := range chunks {
		step := int64(j + 1)
		last := j == len(chunks)-1
		items := slices.Clone(chunk)
		if last {
			items = append(items, table.RebaseStep(r.coord, pinned, step, reset))
			tos := map[aggregates.Key][]string{}
			var keys []aggregates.Key
			for _, s := range stale {
				if s.to == "" {
					continue // a malformed mark (DropMalformedOpen): no checkpoint
				}
				if _, ok := tos[s.key]; !ok {
					keys = append(keys, s.key)
				}
				tos[s.key] = append(tos[s.key], s.to)
			}
			for _, k := range keys { // one check per checkpoint
				items = append(items, table.NotPending(r.coord, k, tos[k]...))
			}
		} else {
			items = append(items, table.RebaseStep(r.coord, pinned, step, nil))
		}
		items = append(items, table.LossesAsRead(r.coord, losses))
		_, err := r.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err != nil {
			// Landed after all (a lost answer)? The epoch says.
			a, gerr := table.GetApplied(context.WithoutCancel(ctx), r.api, r.coord, o.Tenant, o.Branch)
			// The last one also names this rebase (rebased): an abandon
			// moves the epoch as far and removes rebasing too (S26-B2).
			landed := gerr == nil && a.Epoch == at.Epoch+step && (last && a.Rebasing == "" && a.Rebased == o.ID || !last && a.Rebasing == o.ID)
			if !landed {
				var tce *ddbtypes.TransactionCanceledException
				if errors.As(err, &tce) {
					return &roundAgain{fmt.Sprintf("B5 transaction %d of %d cancelled (%s)", j+1, len(chunks), rebaseCancelCodes(tce))}
				}
				return fmt.Errorf("rebase B5 transaction %d of %d: %w", j+1, len(chunks), err)
			}
		}
		r.res.Transactions++
	}
	r.done = true
	r.res.Reports, r.res.Sum, r.res.P4, r.res.Epoch = written, sum, p4, at.Epoch+int64(len(chunks))
	for _, s := range stale {
		r.res.StaleOpen = append(r.res.StaleOpen, s.mark)
	}
	// Parked deltas with a roll-up share: each deleted with the put of its
	// share as a roll-up repair delta, as the repair does (R-a).
	for _, s := range target.shares {
		if err := passOnRollupShare(ctx, r.api, r.table, s.k, s.item, stamp); err != nil {
			return fmt.Errorf("rebase %s landed; passing on the roll-up share of parked delta %s: %w (reconcile --repair deletes it)", o.ID, keyOfItem(s.item), err)
		}
		r.res.RollupSharesMoved++
	}
	o.Log("B5: landed in %d transactions; applied %d, epoch %d", len(chunks), sum-p4, r.res.Epoch)
	return nil
}

// reportOps are one report's writes in B5: first (the report item, or
// the check that it is absent, and what changes a name's place: the
// entry items of names now inline, those moved out of a damaged map) go in
// one transaction; rest (the entry items, stale ones, parked deltas) in
// that one when they fit, else in the next ones.
type reportOps struct{ first, rest []ddbtypes.TransactWriteItem }

// packReportOps packs reports' writes into transactions of at most room
// writes, in order, never splitting a report that fits in one (S26-B5: a
// report whose item landed in one of B5's transactions and its entry
// items in a later one that never lands reads neither as before nor as
// rebased), and never splitting a report's first writes when they fit in
// one; a report larger than a transaction is split as the repair splits
// it, its first writes first.
func packReportOps(reports []reportOps, room int) [][]ddbtypes.TransactWriteItem {
	var chunks [][]ddbtypes.TransactWriteItem
	var cur []ddbtypes.TransactWriteItem
	flush := func() {
		if len(cur) > 0 {
			chunks, cur = append(chunks, cur), nil
		}
	}
	for _, g := range reports {
		n := len(g.first) + len(g.rest)
		switch {
		case len(cur)+n <= room:
		case n <= room || len(cur)+len(g.first) > room:
			flush()
		}
		for _, op := range append(slices.Clone(g.first), g.rest...) {
			if len(cur) == room {
				flush()
			}
			cur = append(cur, op)
		}
	}
	flush()
	return chunks
}

// targetWrites are the writes that make report d hold d.Expected: the
// report item (or the check that it is absent) and what changes a name's
// place in first, the entry items in rest; parked deltas are the caller's.
// fenceNew fences a head the writes create, as every head protocol 4
// writes (F): the rebase and the counted repair set it, the repair of
// protocol 3 keeps an absent head in the old layout.
func targetWrites(tableName string, d Difference, stamp string, fenceNew bool) reportOps {
	hasItem := d.stored != nil && d.stored.Item != nil
	var ops reportOps
	if !hasItem && d.Expected.IsZero() {
		// No report to write: only stale items to delete, while no report
		// item appears meanwhile.
		ops.first = append(ops.first, table.ReportAbsent(tableName, d.Report))
		if d.stored != nil {
			for _, e := range d.stored.Entries {
				ops.rest = append(ops.rest, ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{TableName: &tableName, Key: table.Key(keyOfItem(e))}})
			}
		}
		return ops
	}
	ri := table.EncodeRepair(d.Report, d.Expected, d.stored, stamp)
	if d.currency != "" {
		ri.Item[table.AttrCurrency] = table.S(d.currency)
	}
	if !hasItem && fenceNew {
		// No commit of protocol 3 can then update it.
		ri.Item[table.AttrTxCount] = ri.Item[table.AttrTransactionCount]
		ri.Item[table.AttrTransactionCount] = table.S(table.HeadFence)
	}
	ops.first = append(ops.first, table.RepairHead(tableName, ri.Item, hasItem, d.seen))
	// What changes a name's place goes with the report item: the entry
	// items of names now inline (at most 3 × 32), then the entry items of
	// names moved out of a damaged map.
	for _, k := range ri.Deletes {
		ops.first = append(ops.first, ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{TableName: &tableName, Key: table.Key(k)}})
	}
	for _, e := range ri.Moved {
		ops.first = append(ops.first, ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: &tableName, Item: e}})
	}
	for _, e := range ri.Entries {
		ops.rest = append(ops.rest, ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: &tableName, Item: e}})
	}
	return ops
}

// parkedShare is a parked delta that carries a roll-up share: deleted
// with the put of its share as a roll-up repair delta once the report's
// writes have landed (R-a, passOnRollupShare).
type parkedShare struct {
	k    aggregates.ReportKey
	item map[string]ddbtypes.AttributeValue
}

// foldTarget is what makes a branch's stored reports hold a fold.
type foldTarget struct {
	ops     []reportOps   // per report that differs, in key order; plain parked deltas deleted in rest
	shares  []parkedShare // parked deltas with a roll-up share, for after the ops
	figures bool          // some report's figures change: the tenant's roll-ups are unproven
}

// foldTargetOps are the writes of the rebase's B4 and the counted repair's
// R5: every report of fold or stored that differs, made to hold the fold,
// heads they create fenced.
func foldTargetOps(tableName string, fold *aggregates.Fold, stored table.ReportSet, stamp string) foldTarget {
	keys := map[aggregates.ReportKey]bool{}
	for _, k := range fold.Keys() {
		keys[k] = true
	}
	for k := range stored {
		keys[k] = true
	}
	var t foldTarget
	for _, k := range slices.SortedFunc(maps.Keys(keys), func(a, b aggregates.ReportKey) int { return strings.Compare(a.Key().SK, b.Key().SK) }) {
		d, ok := compareReport(k, fold.Report(k), stored[k])
		if !ok {
			continue
		}
		d.currency = fold.Currency(k)
		if sr := stored[k]; d.currency == "" && sr != nil && sr.Item != nil {
			d.currency, _ = table.String(sr.Item, table.AttrCurrency)
		}
		if d.Stored == nil || !sameReport(d.Stored, d.Expected) {
			t.figures = true
		}
		g := targetWrites(tableName, d, stamp, true)
		if d.stored != nil {
			for _, e := range d.stored.Parked {
				if _, ok := table.RollupShare(e); ok {
					t.shares = append(t.shares, parkedShare{k, e})
					continue
				}
				g.rest = append(g.rest, ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{TableName: &tableName, Key: table.Key(keyOfItem(e))}})
			}
		}
		t.ops = append(t.ops, g)
	}
	return t
}

// probe is B2 for one key read as item: the probe image, or nil for a key
// gone.
func (r *rebase) probe(ctx context.Context, item map[string]ddbtypes.AttributeValue) (map[string]ddbtypes.AttributeValue, error) {
	k := table.KeyOf(item)
	reread := func() (map[string]ddbtypes.AttributeValue, error) {
		out, err := r.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &r.table, Key: table.Key(k), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, fmt.Errorf("rebase B2: read %s: %w", k, err)
		}
		return out.Item, nil
	}
	for range 5 {
		want, _ := table.Changes(table.ProbeImage(item, r.probeID))
		out, err := r.sendProbe(ctx, item)
		switch {
		case errors.Is(err, errProbeThrottled):
			return nil, err
		case err == nil:
			img := out.Attributes
			if !table.SigMatches(img) {
				// Another path wrote between the read and the probe,
				// keeping changes and sig: that record is foreign (the pin
				// will fail); probe again from what is there.
				item = img
				continue
			}
			r.res.Probes++
			r.landed++
			return img, nil
		case isConditionFailed(err):
		default:
			if ctx.Err() != nil {
				return nil, fmt.Errorf("rebase B2: probe %s: %w", k, err)
			}
		}
		// A write in between, or a lost answer: read again.
		now, rerr := reread()
		if rerr != nil {
			return nil, rerr
		}
		if c, _ := table.Changes(now); now != nil && table.ProbedBy(now, r.probeID) && c == want {
			// The probe landed and its answer was lost (the SDK's retry
			// of it, if any, then failed its condition): no one else
			// writes this id.
			r.res.Probes++
			r.landed++
			return now, nil
		}
		// Not landed (a send may still land later), or landed and written
		// over (or deleted) since: which is unknown (S26-B1). A key written
		// after B1 could only let this round land by that write being
		// claimed after B5; a key not written loses the round for
		// liveness only. The round starts again under a new probe id.
		return nil, fmt.Errorf("rebase B2: probe %s: %w (%v)", k, errProbeUnknown, err)
	}
	return nil, fmt.Errorf("rebase B2: key %s was written during each of 5 probes: the branch is busy (stop its writes and run again)", k)
}

// errProbeThrottled is a probe refused, not executed, probeSends times in
// a row: the rebase stops (and abandons itself), naming the throttling.
var errProbeThrottled = errors.New("was throttled")

// probeSends bounds the sends of one probe answered "not executed"
// (sendProbe); probePause is the first pause after one, doubled after each
// (at most probePauseMax).
const (
	probeSends    = 10
	probePause    = 50 * time.Millisecond
	probePauseMax = 5 * time.Second
)

// sendProbe sends B2's probe of item under the round's probe id, and sends
// it again, after a pause, while DynamoDB answers that it was not executed
// (classifyErr: throttled, or the key held by a transaction), at most
// probeSends times (review of S26-B1's fix, S26-B1a). Sending it again is
// what the SDK's own retry does: every send carries the same condition
// (changes and sig as read) and the same writes, so at most one lands, and
// one landed earlier (a lost answer among the SDK's retries) makes the
// next fail its condition, which the caller's re-read decides as any other
// failure. A probe still refused after that stops the rebase, naming the
// throttling (not the branch's writes).
func (r *rebase) sendProbe(ctx context.Context, item map[string]ddbtypes.AttributeValue) (*dynamodb.UpdateItemOutput, error) {
	pause := probePause
	for n := 1; ; n++ {
		out, err := r.api.UpdateItem(ctx, table.Probe(r.table, item, r.probeID))
		if c := classifyErr(err); err == nil || c != classThrottle && c != classConflict {
			return out, err
		}
		if n == probeSends {
			return nil, fmt.Errorf("rebase B2: probe %s %w %d times (the table's write capacity is short: raise it, or run again later): %w", table.KeyOf(item), errProbeThrottled, n, err)
		}
		if serr := sleep(ctx, pause/2+mrand.N(pause/2+1)); serr != nil {
			return nil, fmt.Errorf("rebase B2: probe %s: %w", table.KeyOf(item), err)
		}
		pause = min(2*pause, probePauseMax)
	}
}

// staleMarks reads the checkpoint each open mark names: a mark whose batch
// is still pending refuses the rebase; the others are stale, removed by B5.
func (r *rebase) staleMarks(ctx context.Context, open []string) ([]staleMark, error) {
	var out []staleMark
	// A mark that names no batch first, whatever the others (S27-R2).
	for _, m := range open {
		if !table.WellFormedOpenMark(m) && !r.o.DropMalformedOpen {
			return nil, fmt.Errorf("rebase refused: open mark %q of %s/%s names no batch ({label}~{shard}~{to}): no consumer writes such a mark (a foreign write, or a bug), so no batch will ever remove it; rebase with --drop-malformed-open to remove it under the pin (docs/runbook.md, \"Rebasing a branch\")", m, r.o.Tenant, r.o.Branch)
		}
	}
	for _, m := range open {
		if !table.WellFormedOpenMark(m) { // DropMalformedOpen (checked above)
			out = append(out, staleMark{mark: m}) // no checkpoint to check: it names none
			continue
		}
		parts := strings.Split(m, "~")
		if r.o.StreamARN == "" {
			return nil, fmt.Errorf("rebase refused: %s/%s has open marks (%s) and the table's stream is not known", r.o.Tenant, r.o.Branch, strings.Join(open, ", "))
		}
		arn := r.o.StreamARN
		if i := strings.LastIndex(arn, "/"); i >= 0 {
			arn = arn[:i+1] + parts[0]
		}
		key := aggregates.CheckpointKey(arn, parts[1])
		got, err := r.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &r.coord, Key: table.Key(key), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, fmt.Errorf("rebase B1: read the checkpoint of open mark %s: %w", m, err)
		}
		cp, _ := table.DecodeCheckpoint(parts[1], got.Item)
		if cp.Pending != nil && cp.Pending.To == parts[2] {
			return nil, fmt.Errorf("rebase refused: a batch of %s/%s is half-committed (open mark %s: shard %s, batch through %s): let its consumer finish it, or abandon it (ledgerctl abandon-batch), then rebase",
				r.o.Tenant, r.o.Branch, m, parts[1], parts[2])
		}
		out = append(out, staleMark{mark: m, key: key, to: parts[2]})
	}
	return out, nil
}

// fenceHeads fences every old-layout head of the branch (table.FenceHead:
// no figure moves), so that no commit of protocol 3 or before changes its
// reports after B1.
func (r *rebase) fenceHeads(ctx context.Context) error {
	var stats ReconcileStats
	var heads []aggregates.Key
	err := queryAll(ctx, r.api, r.table, aggregates.ReportPK(r.o.Tenant, r.o.Branch), &stats, func(item map[string]ddbtypes.AttributeValue) error {
		if _, ok := item[table.AttrTransactionCount].(*ddbtypes.AttributeValueMemberN); ok {
			heads = append(heads, table.KeyOf(item))
		}
		return nil
	}, nil)
	if err != nil {
		return fmt.Errorf("rebase B1: %w", err)
	}
	for _, k := range heads {
		_, err := r.update(ctx, table.FenceHead(r.table, k))
		switch {
		case isConditionFailed(err): // fenced (or changed) meanwhile
		case err != nil:
			return fmt.Errorf("rebase: fence head %s: %w", k, err)
		default:
			r.res.Fenced++
		}
	}
	return nil
}

// update sends an UpdateItem whose retry is safe (its condition accepts
// what the first attempt leaves, or its failure says so: the pin, a head
// fence, an abandon), up to 3 times on an error that is no answer of
// DynamoDB's (a lost answer, a timeout).
func (r *rebase) update(ctx context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
	var err error
	for range 3 {
		var out *dynamodb.UpdateItemOutput
		out, err = r.api.UpdateItem(ctx, in)
		var apiErr smithy.APIError
		if err == nil || errors.As(err, &apiErr) || ctx.Err() != nil {
			return out, err
		}
	}
	return nil, err
}

func isConditionFailed(err error) bool {
	var ccf *ddbtypes.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

func rebaseCancelCodes(tce *ddbtypes.TransactionCanceledException) string {
	var out []string
	for i, r := range tce.CancellationReasons {
		if c := aws.ToString(r.Code); c != "" && c != "None" {
			out = append(out, fmt.Sprintf("action %d: %s", i, c))
		}
	}
	return strings.Join(out, ", ")
}
