package processor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// A Guard records a consumer's position in one ordered sequence of stream
// records (a shard, or a Lambda event source mapping's delivery of one) and
// is part of every commit transaction, so that records committed once are
// recognised and skipped when delivered again. docs/exactly-once.md argues
// why each guard is exact and what it assumes.
//
// A Guard is used by one goroutine at a time. Get one from
// Processor.ShardGuard or Processor.MarkerGuard.
type Guard interface {
	// committed returns how many leading changes are done: committed by an
	// earlier delivery, or (MarkerGuard) without effect and so safe to skip,
	// which it marks unguarded. With redeliver set, the caller stops at n and
	// has the source redeliver from there (see MarkerGuard).
	committed(ctx context.Context, changes []change) (n int, redeliver bool, err error)
	// claim returns the transaction action that claims run as committed.
	claim(run []Record) ddbtypes.TransactWriteItem
	// claimed records that claim(run) committed.
	claimed(run []Record)
	// reset forgets cached state after the claim's condition failed.
	reset()
	// runID names the claim of run, uniquely per stream, for the deltas
	// its commit parks.
	runID(run []Record) string
	// commit commits changes, which start right after the committed ones,
	// and returns how many leading changes are done: in runs (commitRuns),
	// or as one batch when the guard batches (commitBatch).
	commit(ctx context.Context, changes []change, res *Result) (int, error)
	// settle finishes the guard's work once every change is done.
	settle(ctx context.Context) error
	// ordered reports whether the records must come in sequence order.
	ordered() bool
	// position describes the guard's state as last read or written, so
	// that progress made by another consumer is seen; "" when it has none.
	position() string
}

// ErrGap is returned (wrapped) by a ShardGuard whose checkpoint is behind the
// position the caller's records start from: records between the two were
// never handed to the processor, so nothing may be committed. The caller
// must reposition its iterator after the checkpoint.
var ErrGap = errors.New("records do not start at the checkpoint")

// ShardGuard is the offset-in-state guard of a shard whose id is known (the
// poller, the tumbling-window Lambda): the shard's checkpoint item, moved by a
// compare-and-set inside each commit transaction.
type ShardGuard struct {
	p         *Processor
	key       aggregates.Key
	stream    string
	shard     string
	loaded    bool
	prev      string // checkpoint as last read or written; "" for none
	origin    string // the records handed over start right after this sequence number
	hasOrigin bool
	// batches: commit each call's records as one batch (CommitBatches).
	batches bool
	// pending is the half-committed batch on the checkpoint item, as last
	// read or written.
	pending *pendingBatch
	// lost is the range (from, to] of the batch this guard abandoned (the
	// guard-alone abandon transaction: abandon), whose records handed over
	// are counted as abandoned, not duplicate, until every record handed
	// over is done (settle) or a commit lands; nil when none.
	lost    *lostRange
	trimmed bool // see Trimmed
	// trimAfter is the sequence number the trim was met after (Trimmed):
	// the records after it are lost; "" for a reader that had read nothing
	// of the shard (its start).
	trimAfter string
	// trimPos is the position (position()) an abandon after a trim was
	// tried on and failed: tried again only on the same state.
	trimPos string
	// trimPassed: the trim's decision found the checkpoint past the trim
	// point, moved there by another consumer's reads (no loss counted at
	// or after the trim point): the trim proved no loss after the
	// checkpoint (TrimPassed).
	trimPassed bool
	// lostAfter: the checkpoint's lostAfter as last read or written (the
	// trim point its last counted gap lies after); lostAt its lostAt.
	lostAfter, lostAt string
	// firstClaim is the last record of the first run this guard tried to
	// claim while opened without a checkpoint (origin ""): a checkpoint
	// found there afterwards is that claim, landed with its answer lost.
	firstClaim string
	// tombstoned: the checkpoint, as last read or written, is marked
	// legacyTombstone (every claim requires it: fenceLegacy).
	tombstoned bool
}

// pendingBatch is a batch (prev, to] whose groups before next are committed.
// digest identifies its plan (planDigest): a resumer whose plan differs
// (other code) must not commit a single group of it.
type pendingBatch struct {
	to     string
	next   int
	groups int
	plan   batchPlan
	digest string
}

// batchPlan holds the parameters a batch is planned with: at most items
// writes per group, at most entries breakdown entries per part, the
// planning rule's version, layout, and (layout 4) the number of roll-up
// lanes, K. Its string form carries the version and K, so that a batch
// left pending by a version that planned differently, or by a table with
// another K, is named as such instead of failing its digest.
type batchPlan struct{ items, entries, layout, lanes int }

// planLayout is the planning rule's version: 6 counts every record of a
// batch in its branch's applied item and puts one roll-up delta per
// (tenant, currency) per batch, the branch transitions staged in the
// coordination table (docs/exactly-once.md, "Plan layout 6"; plan6.go,
// commit6.go); 4 put the tenant roll-ups' delta items in every group and
// the deletes of the roll-up deltas a batch folds (docs/exactly-once.md,
// "Tenant roll-ups"); 3 places the batch's quarantine items in its groups
// (docs/exactly-once.md, "Quarantine items"); 2 counts a part as one write
// per entry besides its report item (the bounded report layout), its
// quarantine items put before its groups; plans without a version are 1
// (one write per part). A batch left pending by versions 2, 3 and 4 is
// finished as it was planned: uncounted, and for 2 and 3 without roll-up
// deltas (the roll-ups lack it: docs/runbook.md, "Upgrading").
const planLayout = plan6Layout

// quarantineLayout is the first planning rule whose groups carry the
// batch's quarantine items.
const quarantineLayout = 3

// rollupLayout is the first planning rule whose groups carry roll-up delta
// items and the deletes of folded ones.
const rollupLayout = 4

func (b batchPlan) String() string {
	s := strconv.Itoa(b.items) + "/" + strconv.Itoa(b.entries) + "/" + strconv.Itoa(b.layout)
	if b.layout >= rollupLayout {
		s += "/" + strconv.Itoa(b.lanes)
	}
	return s
}

// batchPlan is the plan of a new batch: the configured limits, the current
// rule (layout 6, "m/e/6/32"); with roll-ups off (Config.NoRollups) its
// form without roll-ups ("m/e/6/0": counts, no roll-up delta, no staging,
// no fold).
func (p *Processor) batchPlan() batchPlan {
	b := batchPlan{items: p.cfg.MaxItemsPerRun, entries: p.cfg.MaxEntriesPerItem, layout: planLayout, lanes: aggregates.RollupLanes}
	if p.cfg.NoRollups {
		b.lanes = 0
	}
	if p.oldLayout {
		// Tests only: the rule before layout 6 (4, or 3 with roll-ups
		// off), to leave such a batch pending for this version to finish.
		b.layout = rollupLayout
		if p.cfg.NoRollups {
			b.layout = quarantineLayout
		}
	}
	return b
}

// errOldPlan is returned (wrapped) for a pending batch planned by a version
// of ledger with another planning rule.
var errOldPlan = errors.New("the pending batch was planned by another version of ledger: finish it with that version, or see docs/runbook.md, \"Upgrading\"")

func parseBatchPlan(s string) (batchPlan, error) {
	f := strings.Split(s, "/")
	// Versions 2, 3 and 4 planned as layout 4's code did, but for the
	// quarantine items (version 2: put before its groups) and the roll-up
	// deltas (2 and 3: none): such a batch is finished as it was planned
	// (commitBatch), uncounted. Version 6 is this version's: K is the
	// table's lanes (roll-ups on) or 0 (Config.NoRollups).
	lanes := 0
	switch {
	case len(f) == 3 && (f[2] == "2" || f[2] == "3"):
	case len(f) == 4 && f[2] == strconv.Itoa(rollupLayout):
		if f[3] != strconv.Itoa(aggregates.RollupLanes) {
			return batchPlan{}, fmt.Errorf("batch plan %q: planned with %s roll-up lanes, this table has %d: %w", s, f[3], aggregates.RollupLanes, errOldPlan)
		}
		lanes = aggregates.RollupLanes
	case len(f) == 4 && f[2] == strconv.Itoa(plan6Layout):
		if f[3] != strconv.Itoa(aggregates.RollupLanes) && f[3] != "0" {
			return batchPlan{}, fmt.Errorf("batch plan %q: planned with %s roll-up lanes, this table has %d: %w", s, f[3], aggregates.RollupLanes, errOldPlan)
		}
		lanes, _ = strconv.Atoi(f[3])
	case len(f) == 2 || len(f) == 3 || len(f) == 4:
		return batchPlan{}, fmt.Errorf("batch plan %q: %w", s, errOldPlan)
	default:
		return batchPlan{}, fmt.Errorf("malformed batch plan %q", s)
	}
	items, err1 := strconv.Atoi(f[0])
	entries, err2 := strconv.Atoi(f[1])
	layout, _ := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || items < 1 || items > 99 || entries < 1 {
		return batchPlan{}, fmt.Errorf("malformed batch plan %q", s)
	}
	return batchPlan{items: items, entries: entries, layout: layout, lanes: lanes}, nil
}

// ShardGuard returns the guard of one shard of a stream.
func (p *Processor) ShardGuard(streamARN, shardID string) *ShardGuard {
	return &ShardGuard{p: p, key: aggregates.CheckpointKey(streamARN, shardID), stream: streamARN, shard: shardID}
}

// CommitBatches makes the guard commit all the records a Process call hands
// it after the checkpoint as one batch: the fold of the whole batch, in as
// many transactions as its report items need, the checkpoint moving only
// with the last (docs/exactly-once.md, "Batch commits"). Until then the
// checkpoint item names the batch's last record, and Process refuses every
// call whose records do not reach it (ErrIncompleteBatch): only a caller
// that can read further, like the poller, may use it. A shard without a
// checkpoint first commits one run, up to its first record with an effect
// (which creates the checkpoint); the records after it are a batch.
func (g *ShardGuard) CommitBatches() { g.batches = true }

// Trimmed tells the guard that the records after sequence number after
// were trimmed from the stream before anyone read them
// (TrimmedDataAccessException met by a reader positioned after after: the
// checkpoint it opened after, or the last record its iterator returned;
// "" for a reader that had read nothing of the shard). Trimming takes a
// prefix of the shard, so no record up to the first readable one can be
// read again. The guard's next read of the checkpoint c decides
// (docs/exactly-once.md, "Trims, session 23"):
//
//   - c at or before after: nothing after c can be read, so c's state can
//     never move by reading: the guard-alone abandon transaction (abandon)
//     gives up a half-committed batch (the checkpoint moved to its last
//     record, counted as conflicts_total{reason="abandoned_batch"}) and
//     either way sets the checkpoint's lostAt and moves the loss item's
//     count, once per gap: a checkpoint whose gap is already counted
//     (lostAfter = after, no pending batch) is left as it is;
//   - c after after: another consumer moved on past the trim point, and
//     this trim proves nothing about the records after c. Nothing is
//     abandoned; unless the records handed over reach back to c (then
//     they are contiguous with it), the call fails with ErrGap and the
//     caller reopens after c, where a trim is met and counted as its own.
func (g *ShardGuard) Trimmed(after string) { g.trimmed, g.trimAfter = true, after }

// TrimPassed reports whether the trim given by Trimmed was decided as
// past: the checkpoint was after the trim point (another consumer's
// commit), so the trim proved nothing lost after it; a trim met after that
// checkpoint is another trim, met by a read after it. A checkpoint that
// carries a loss counted at or after the trim point (lostAfter: another
// consumer met a trim there and read on from the trim horizon, or
// abandoned its batch) got past it over lost records: not passed (review
// of session 24, S24-L1). A drain reports every trim it met but the
// passed ones (poller.DrainLossError).
func (g *ShardGuard) TrimPassed() bool { return g.trimPassed }

// ErrIncompleteBatch is returned (wrapped, in a *BatchError) when the
// checkpoint holds a half-committed batch whose last record is after the
// records handed over: the caller must read on and hand the same records
// with the ones after them.
var ErrIncompleteBatch = errors.New("records end before the pending batch's last record")

// batching reports whether the next commit is a batch.
func (g *ShardGuard) batching() bool { return g.batches && g.prev != "" }

// SetOrigin declares that the records the caller will pass start right after
// sequence number seq (the iterator was opened AFTER_SEQUENCE_NUMBER seq), so
// the guard can refuse to commit over a gap (ErrGap).
//
// SetOrigin("") declares that the caller found no checkpoint and opened at
// the shard's start position (TRIM_HORIZON or LATEST): its records start
// wherever that was, which binds nobody else. Such a guard commits only as
// the shard's first committer; once another reader has created the
// checkpoint, the records between that checkpoint and this reader's start
// may be missing from its hands, so it refuses (ErrGap) and the caller
// reopens after the checkpoint: the first reader's origin is binding for
// the others (issue 12). After its own first commit the guard's records are
// contiguous from there, and that commit is its origin.
//
// Without an origin (no call) the caller promises its records start at the
// checkpoint, or that a gap is accepted (records trimmed).
func (g *ShardGuard) SetOrigin(seq string) { g.origin, g.hasOrigin = seq, true }

// Checkpoint returns the shard's committed position ("" when none),
// reading it from the table if the guard has not yet. A checkpoint that is
// a migration's copy not released yet is an error wrapping
// table.ErrCheckpointFenced (as is every Process call meeting one, which
// commits nothing): not this consumer's to claim yet; ask again later. A
// checkpoint fenced by another protocol (table.Checkpoint.Foreign) is an
// error wrapping table.ErrCheckpointProtocol, likewise: this version
// commits nothing on the shard.
func (g *ShardGuard) Checkpoint(ctx context.Context) (string, error) {
	if err := g.load(ctx); err != nil {
		return "", err
	}
	return g.prev, nil
}

func (g *ShardGuard) load(ctx context.Context) error {
	if g.loaded {
		return nil
	}
	item, err := g.p.getCheckpoint(ctx, g.key)
	if err != nil {
		return fmt.Errorf("read checkpoint %s: %w", g.key, err)
	}
	cp, err := table.DecodeCheckpoint(g.shard, item)
	if cp.Fenced {
		// A migration's copy not released yet: the checkpoint it was
		// copied from may still move, so nothing may be claimed from it
		// (docs/exactly-once.md, "Leases and the other writes outside the
		// commit", hole 5). Every claim's condition refuses it too; this
		// names it instead of a guard conflict, and the guard stays
		// unloaded so that the next call reads it again. (Its original is
		// still in the ledger table until the migration's tombstone: the
		// copy says more than the legacy check below would.)
		g.p.metrics.Conflicts.WithLabelValues(ConflictMigrationFence).Inc()
		return fmt.Errorf("shard %s: %w", g.shard, table.ErrCheckpointFenced)
	}
	if cp.Foreign() {
		// Fenced by another protocol than this version's (docs/exactly-once.md,
		// "F as built (session 25)"): every write of this version
		// conditions on the old layout or on fence = table.Protocol and
		// fails on it; this names it instead of "guard conflict without
		// progress", and the guard stays unloaded. This version's own
		// fence (protocol 4) is read as any checkpoint: Seq is its pos.
		// Counted at each read that finds it, as a roll-up delta of a newer
		// format is (review of session 25, S25-X2).
		g.p.metrics.Conflicts.WithLabelValues(ConflictNewerProtocol).Inc()
		return &table.CheckpointProtocolError{Shard: g.shard, Fence: cp.Fence}
	}
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", g.key, err)
	}
	// The shard's old key, at every load, mark or none: a checkpoint of
	// the layout before the coordination table there (the shard is new to
	// this version, or its checkpoint was copied back by a rollback under
	// a mark of before) refuses the shard, and a mark without its
	// tombstone (gone with the ledger table's TTL) is no mark: the fence
	// puts the tombstone again before the next claim (docs/exactly-once.md,
	// "A shard's legacy tombstone", review session 18, R18-1 and R18-2).
	stands, err := g.p.legacyTombstone(ctx, g.stream, g.shard)
	if err != nil {
		return err
	}
	g.prev = cp.Seq
	g.lostAfter, g.lostAt = cp.LostAfter, cp.LostAt
	g.tombstoned = cp.Tombstoned && stands
	g.pending, g.lost = nil, nil
	if cp.Pending != nil {
		pb, err := pendingOf(cp.Pending)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", g.key, err)
		}
		g.pending = pb
	}
	g.loaded = true
	return nil
}

// fenceLegacy makes sure, before the guard's commit transaction, that the
// checkpoint carries legacyTombstone, which every claim requires: when the
// checkpoint as last read lacks it, one TransactWriteItems
// (table.FenceLegacyCheckpoint) marks it and puts a tombstone at the
// shard's key in the ledger table, where a consumer of the version before
// the coordination table would otherwise claim the shard from nothing and
// apply its records a second time (docs/exactly-once.md, "A shard's legacy
// tombstone"). Once per shard's life: the mark stays with the checkpoint.
// A ledger table holding the shard's checkpoint is table.ErrLegacyStreamState,
// a migration's copy not released table.ErrCheckpointFenced: nothing is
// committed. A transaction conflict (another consumer's fence or claim in
// flight) and a throttle are retried like a commit's, at most MaxAttempts
// times. A fence that fails is the commit's failure, counted in
// ledger_commits_total{outcome="failed"} (a legacy checkpoint also as
// conflicts_total{reason="legacy_checkpoint"}), but for a fenced copy,
// which is a wait (conflicts_total{reason="migration_fence"}).
func (g *ShardGuard) fenceLegacy(ctx context.Context) error {
	if g.tombstoned {
		return nil
	}
	p := g.p
	in := table.FenceLegacyCheckpoint(p.cfg.Table, p.cfg.CoordinationTable, g.stream, g.shard, p.now())
	for attempt := 1; ; attempt++ {
		err := p.transactWrite(ctx, in)
		if err == nil {
			g.tombstoned = true
			return nil
		}
		if rae := (*raiseError)(nil); errors.As(err, &rae) && ctx.Err() == nil {
			// Nothing sent (beforeFence): the commit fails with it, by
			// its own name rather than the tombstone's.
			p.metrics.Commits.WithLabelValues("failed").Inc()
			return err
		}
		retry, class := false, classServer
		var tce *ddbtypes.TransactionCanceledException
		if errors.As(err, &tce) {
			// Every reason None is not retried here (the abandon's is).
			throttle, conflict, final := cancelReasons(tce)
			retry = (throttle || conflict) && !final
			if throttle {
				class = classThrottle
			}
		} else {
			class = classifyErr(err)
			retry = class != classPermanent && class != classCanceled
		}
		if class == classCanceled || ctx.Err() != nil {
			// The commit's context ended (commitTx): cancelled, not failed.
			return p.commitCancelled(err)
		}
		if !retry || attempt >= p.cfg.MaxAttempts {
			err = table.FenceError(g.stream, g.shard, err)
			if errors.Is(err, table.ErrCheckpointFenced) {
				// A wait, as when the guard's read finds the copy.
				p.metrics.Conflicts.WithLabelValues(ConflictMigrationFence).Inc()
				g.reset()
				return err
			}
			// The commit fails with its fence: counted as one (review
			// session 18, R18-3), and a legacy checkpoint by name.
			if errors.Is(err, table.ErrLegacyStreamState) {
				p.metrics.Conflicts.WithLabelValues(ConflictLegacyCheckpoint).Inc()
			}
			p.metrics.Commits.WithLabelValues("failed").Inc()
			return err
		}
		p.countRetry("TransactWriteItems", class)
		if err := sleep(ctx, p.backoff(attempt)); err != nil {
			return p.commitCancelled(err)
		}
	}
}

// transactWrite sends a transaction (a commit's, or the guard alone's:
// its fence, its abandon), counted in the write metrics.
func (p *Processor) transactWrite(ctx context.Context, in *dynamodb.TransactWriteItemsInput) error {
	if err := p.beforeFence(ctx); err != nil {
		return err
	}
	p.metrics.WriteRequests.WithLabelValues("TransactWriteItems").Inc()
	out, err := p.api.TransactWriteItems(ctx, in)
	if err != nil {
		return err
	}
	for _, cc := range out.ConsumedCapacity {
		p.metrics.WriteUnits.WithLabelValues("TransactWriteItems").Add(aws.ToFloat64(cc.CapacityUnits))
	}
	return nil
}

// commitCancelled counts a commit given up because its context ended
// (ledger_commits_total{outcome="cancelled"}: not failed; its outcome is
// left to the next attempt's guard) and returns err.
func (p *Processor) commitCancelled(err error) error {
	p.metrics.Commits.WithLabelValues(CommitCancelled).Inc()
	return err
}

// updateItem sends an UpdateItem outside a commit (the checkpoint moved
// over records without effect, or over trimmed ones), retried as p.retry
// retries, each attempt counted in the write requests and the units it
// consumed in the write units. Its error is the last attempt's, unwrapped
// (a failed condition is ConditionalCheckFailedException).
func (p *Processor) updateItem(ctx context.Context, in *dynamodb.UpdateItemInput) error {
	if in.ReturnConsumedCapacity == "" {
		c := *in
		c.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
		in = &c
	}
	return p.retry(ctx, "UpdateItem", func(ctx context.Context) error {
		if err := p.beforeFence(ctx); err != nil {
			return err
		}
		p.metrics.WriteRequests.WithLabelValues("UpdateItem").Inc()
		out, err := p.api.UpdateItem(ctx, in)
		if err == nil && out.ConsumedCapacity != nil {
			p.metrics.WriteUnits.WithLabelValues("UpdateItem").Add(aws.ToFloat64(out.ConsumedCapacity.CapacityUnits))
		}
		return err
	})
}

// pendingOf reads a checkpoint's pending batch with its plan.
func pendingOf(b *table.PendingBatch) (*pendingBatch, error) {
	plan, err := parseBatchPlan(b.Plan)
	if err != nil {
		return nil, err
	}
	if err := b.Valid(); err != nil {
		return nil, err
	}
	return &pendingBatch{to: b.To, next: b.Next, groups: b.Groups, plan: plan, digest: b.Digest}, nil
}

func (g *ShardGuard) committed(ctx context.Context, changes []change) (int, bool, error) {
	if err := g.load(ctx); err != nil {
		return 0, false, err
	}
	if g.hasOrigin && g.origin != "" && (g.prev == "" || CompareSequence(g.prev, g.origin) < 0) {
		return 0, false, fmt.Errorf("shard %s: checkpoint %q, records start after %q: %w", g.shard, g.prev, g.origin, ErrGap)
	}
	if g.hasOrigin && g.origin == "" && g.prev != "" && g.prev == g.firstClaim {
		// Our own first claim, its answer lost: the records after it are
		// contiguous in our hands (and had another reader's claim ended at
		// the same record, going on after it is what a reopen would do).
		g.ownOrigin()
	}
	if g.hasOrigin && g.origin == "" && g.prev != "" {
		return 0, false, fmt.Errorf("shard %s: checkpoint %q made by another reader, records start where this reader opened without one: %w", g.shard, g.prev, ErrGap)
	}
	first := ""
	if len(changes) > 0 {
		first = changes[0].rec.SequenceNumber
	}
	if err := g.abandonTrimmed(ctx, first); err != nil {
		return 0, false, err
	}
	// Records up to the checkpoint are committed. Those of a batch this
	// guard abandoned are skipped as lost: the groups that landed hold some
	// of them, which are applied, and the plan that would say which can
	// never be made again. Losing them (reconcile --repair restores them)
	// is the only choice that never applies a delta twice (issue 12).
	n := 0
	if g.prev != "" {
		for n < len(changes) && CompareSequence(changes[n].rec.SequenceNumber, g.prev) <= 0 {
			if l := g.lost; l != nil && CompareSequence(changes[n].rec.SequenceNumber, l.from) > 0 && CompareSequence(changes[n].rec.SequenceNumber, l.to) <= 0 {
				changes[n].abandoned = true
			}
			n++
		}
	}
	return n, false, nil
}

// abandonTrimmed sends the guard-alone abandon transaction after a trim
// (Trimmed), on the checkpoint as loaded, when that checkpoint is at or
// before the trim point: nothing after it can be read again, so its state
// cannot move by reading. A pending batch's records are gone, so it can
// never be planned again: the checkpoint moves to its last record; what
// its groups committed stays, and reconcile --repair restores the rest as
// for any trimmed record. A gap already counted (the checkpoint's
// lostAfter at the trim point, no pending batch) is not counted again. A shard without a
// checkpoint has nothing to abandon. A checkpoint after the trim point is
// another consumer's: nothing is abandoned, and unless the records handed
// over, starting at first ("": none), reach back to it, the call fails
// with ErrGap (the caller reopens after it). Once, for the state read
// right after the trim: a later re-read never abandons the batch this
// guard started itself, nor one another consumer started since. An
// abandon that failed is tried again at the next call only on the same
// state; one overtaken by another consumer's move is decided again on the
// state it moved to.
func (g *ShardGuard) abandonTrimmed(ctx context.Context, first string) error {
	if !g.trimmed {
		return nil
	}
	for overtaken := 0; ; overtaken++ {
		switch {
		case g.prev == "":
			// Nothing committed: nothing after it can be known lost.
		case g.trimAfter == "" || CompareSequence(g.prev, g.trimAfter) > 0:
			// Past the trim point: not ours to abandon. Records handed
			// over from the checkpoint or before it are contiguous with it.
			// Passed only when the checkpoint got there by reading: one
			// whose counted loss (lostAfter) lies at or after the trim
			// point moved there over lost records (the owner counted
			// this gap and read on from the trim horizon, or abandoned
			// its batch there): the trim is not passed (review of
			// session 24, S24-L1).
			g.trimPassed = g.lostAfter == "" || g.trimAfter != "" && CompareSequence(g.lostAfter, g.trimAfter) < 0
			if first == "" || CompareSequence(first, g.prev) > 0 {
				return fmt.Errorf("shard %s: checkpoint %s is past the trim met after %q: %w", g.shard, g.prev, g.trimAfter, ErrGap)
			}
		case g.trimPos != "" && g.trimPos != g.position() && g.pending != nil:
			// A batch started since a failed abandon: its planner read its
			// records before the trim and holds them.
		case g.pending == nil && g.lostAfter == g.trimAfter && !(table.Checkpoint{LostAt: g.lostAt}).CountAged(g.p.now()):
			// The gap after this trim point is counted already (another
			// consumer, an earlier window, a retry of the mapping). A
			// count after the checkpoint at an earlier trim point is not
			// this gap's: this reader read on past it (review session 23,
			// S23-RT-1); nor is a count older than the stream's retention
			// (S23-RT-3: records written after it may be in this trim).
			g.p.cfg.Logger.Info("stream records were trimmed after a checkpoint whose gap is already counted: not counted again",
				"shard", g.shard, "checkpoint", g.prev, "trimmed_after", g.trimAfter)
		default:
			g.trimPos = g.position()
			landed, err := g.p.abandon(ctx, g)
			if err != nil {
				g.loaded = false
				return err
			}
			if !landed {
				// Another consumer moved the checkpoint: decide again on
				// its state (review session 22, "Noticed, left": a gap
				// after that state was never counted).
				if overtaken >= 3 {
					return fmt.Errorf("shard %s: the checkpoint moved under %d abandons after a trim", g.shard, overtaken+1)
				}
				g.loaded = false
				if err := g.load(ctx); err != nil {
					return err
				}
				continue
			}
		}
		g.trimmed, g.trimPos = false, ""
		return nil
	}
}

// AbandonTrimmed is Checkpoint for a caller about to move the checkpoint
// outside a commit (a reader at a closed shard's end marking it finished,
// or moving it over records without effect): if Trimmed was called and no
// Process call has sent the abandon transaction yet, it is sent first, so
// that a trim followed by no record at all (a closed shard whose every
// record after the checkpoint was trimmed) sets lostAt and moves the loss
// count as a trim followed by records does (issue 23's emulated trim
// test), or a tumbling window whose every record was trimmed
// (CommitShardRange's moveOver). It returns the checkpoint after the
// abandon.
func (g *ShardGuard) AbandonTrimmed(ctx context.Context) (string, error) {
	if err := g.load(ctx); err != nil {
		return "", err
	}
	if err := g.abandonTrimmed(ctx, ""); err != nil {
		return "", err
	}
	return g.prev, nil
}

// carryLoss moves the checkpoint over records known trimmed up to to
// (table.CarryLoss), once a trim's abandon has counted the gap after it
// (AbandonTrimmed first): the loss count does not move again. A
// checkpoint moved meanwhile is left to whoever moved it.
func (g *ShardGuard) carryLoss(ctx context.Context, to string) error {
	if !g.counted() || g.pending != nil || g.prev == "" || CompareSequence(to, g.prev) <= 0 {
		return nil
	}
	p := g.p
	in := table.CarryLoss(p.cfg.CoordinationTable, g.key, g.shard, g.prev, to, p.now())
	err := p.updateItem(ctx, in)
	var ccf *ddbtypes.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("move the checkpoint of shard %s over trimmed records: %w", g.shard, err)
	}
	if err == nil {
		p.cfg.Logger.Error("stream records were trimmed up to the end of the range: the checkpoint moves over them within the gap already counted",
			"shard", g.shard, "checkpoint", g.prev, "to", to)
	}
	g.reset()
	return nil
}

// abandonStart is the trim's abandon on a shard without a checkpoint whose
// records up to to were trimmed (a tumbling window whose first record, to,
// was trimmed when it opened there: CommitShardRange): the guard-alone
// abandon transaction that creates the checkpoint at to, with lostAt and
// lostAfter = to, moving the loss count once (docs/exactly-once.md,
// "Trims, session 24", T24-1, and its review, S24-T1). A checkpoint found
// (read after the trim, or created by another consumer meanwhile: the
// transaction fails its condition and the re-read shows it) is left as it
// is, nothing counted: the caller decides on it. A lost answer is
// recognised by lostAt (AbandonCheckpoint). It returns the checkpoint as
// it then stands.
func (g *ShardGuard) abandonStart(ctx context.Context, to string) (string, error) {
	if err := g.load(ctx); err != nil {
		return "", err
	}
	if g.prev != "" {
		return g.prev, nil
	}
	p := g.p
	a := table.Abandon{Shard: g.shard, Now: p.now(), To: to}
	landed, err := p.AbandonCheckpoint(ctx, g.key, a)
	if err != nil {
		return "", fmt.Errorf("shard %s: abandon after a trim: %w", g.shard, err)
	}
	if !landed {
		g.reset()
		return g.Checkpoint(ctx)
	}
	p.cfg.Logger.Error("stream records were trimmed before they were read, on a shard without a checkpoint: lost; the checkpoint is created at the first of them with lostAt set and the loss count moved, and the records after it are read from the trim horizon; run `ledgerctl reconcile --repair` to restore the reports",
		"shard", g.shard, "to", to)
	g.prev, g.pending, g.lostAfter, g.lostAt = to, nil, a.LostAfter(), a.Now.Format(time.RFC3339Nano)
	g.trimmed, g.trimPos = false, ""
	return g.prev, nil
}

// counted reports whether the checkpoint, as last read or written, carries
// the count of the gap after it (table.Checkpoint.Counted).
func (g *ShardGuard) counted() bool {
	return g.pending == nil && table.Checkpoint{Seq: g.prev, LostAfter: g.lostAfter}.Counted()
}

// lostRange is the records (from, to] of a batch a guard abandoned.
type lostRange struct{ from, to string }

// abandon sends the guard-alone abandon transaction (table.AbandonTx) for
// the checkpoint as last read: with a pending batch, the checkpoint moves
// to the batch's last record (its records after the landed groups are
// lost), without one it stays; either way lostAt is set and the loss
// item's count moves (docs/exactly-once.md, "Plan layout 6", the failure
// table's trim rows; L-a). A lost answer's retry fails its condition and
// a consistent re-read recognises it (counted as a duplicate, as a group's
// lost answer is). A checkpoint another consumer moved meanwhile is theirs:
// it abandons nothing and reports false (the caller decides again on the
// state it re-reads). A transaction conflict, a
// throttle or a server error is retried like a commit's, at most
// MaxAttempts times.
func (p *Processor) abandon(ctx context.Context, g *ShardGuard) (bool, error) {
	a := table.Abandon{Shard: g.shard, Prev: g.prev, Now: p.now(), After: g.trimAfter}
	if b := g.pending; b != nil {
		a.Pending = &table.PendingBatch{To: b.to, Next: b.next, Groups: b.groups}
	}
	landed, err := p.AbandonCheckpoint(ctx, g.key, a)
	switch {
	case err != nil:
		return false, fmt.Errorf("shard %s: abandon after a trim: %w", g.shard, err)
	case !landed:
		// Another consumer moved the checkpoint: its state, not ours.
		return false, nil
	}
	if a.Pending != nil {
		g.lost = &lostRange{from: g.prev, to: a.Pending.To}
		g.p.metrics.Conflicts.WithLabelValues(ConflictAbandonedBatch).Inc()
	}
	p.cfg.Logger.Error("stream records were trimmed before they were read: lost; the checkpoint's lostAt is set and the loss count moved; run `ledgerctl reconcile --repair` to restore the reports",
		"shard", g.shard, "checkpoint", g.prev, "to", a.Target(), "pending", a.Pending != nil)
	g.prev, g.pending, g.lostAfter, g.lostAt = a.Target(), nil, a.LostAfter(), a.Now.Format(time.RFC3339Nano)
	return true, nil
}

// AbandonCheckpoint sends the guard-alone abandon transaction
// (table.AbandonTx) for the checkpoint at key as read in a, and reports
// whether it landed: false when a consistent re-read shows the checkpoint
// moved by someone else (nothing abandoned). A lost answer is recognised by
// the re-read (table.AbandonLanded): the loss count moves once. The
// consumers' trim path (ShardGuard) and `ledgerctl` use it.
func (p *Processor) AbandonCheckpoint(ctx context.Context, key aggregates.Key, a table.Abandon) (bool, error) {
	in := table.AbandonTx(p.cfg.CoordinationTable, key, a)
	for attempt := 1; ; attempt++ {
		err := p.transactWrite(ctx, in)
		if err == nil {
			return true, nil
		}
		if rae := (*raiseError)(nil); ctx.Err() != nil || errors.As(err, &rae) {
			// Ended, or nothing sent (beforeFence): no outcome to read.
			return false, err
		}
		item, rerr := p.getCheckpoint(ctx, key)
		if rerr != nil {
			return false, fmt.Errorf("%w (the checkpoint's re-read failed too: %w)", err, rerr)
		}
		cp, _ := table.DecodeCheckpoint(a.Shard, item)
		switch {
		case table.AbandonLanded(cp, a):
			p.metrics.Conflicts.WithLabelValues(ConflictDuplicate).Inc()
			return true, nil
		case !table.AbandonStands(cp, a):
			return false, nil
		case cp.Fenced:
			return false, fmt.Errorf("shard %s: %w", a.Shard, table.ErrCheckpointFenced)
		case cp.Foreign():
			return false, &table.CheckpointProtocolError{Shard: a.Shard, Fence: cp.Fence}
		}
		class := classifyErr(err)
		var tce *ddbtypes.TransactionCanceledException
		if errors.As(err, &tce) {
			class = classServer
			switch throttle, _, final := cancelReasons(tce); {
			case final:
				class = classPermanent
			case throttle:
				class = classThrottle
			}
		}
		if class == classPermanent || class == classCanceled || attempt >= p.cfg.MaxAttempts {
			return false, err
		}
		p.countRetry("TransactWriteItems", class)
		if err := sleep(ctx, p.backoff(attempt)); err != nil {
			return false, err
		}
	}
}

// commit commits in one batch while batching (CommitBatches), else in runs.
func (g *ShardGuard) commit(ctx context.Context, changes []change, res *Result) (int, error) {
	if g.batching() {
		return g.p.commitBatch(ctx, g, changes, res)
	}
	if g.batches {
		// A batching guard without a checkpoint: only the shard's first
		// run is cut as a run (it creates the checkpoint); the records
		// after it commit as a batch in Process's next turn.
		changes = changes[:firstRunEnd(changes)]
	}
	return g.p.commitRuns(ctx, g, changes, res)
}

// settle: every record handed over is done; those of an abandoned batch
// handed over again count as duplicates.
func (g *ShardGuard) settle(context.Context) error {
	g.lost = nil
	return nil
}

// ordered: the checkpoint drops a prefix by sequence number, so a record
// after a higher one would be dropped with it.
func (g *ShardGuard) ordered() bool { return true }

// Pending reports whether the checkpoint, as last read or written, holds a
// half-committed batch (which a drain must not leave behind).
func (g *ShardGuard) Pending() bool { return g.pending != nil }

// position describes the checkpoint as last read or written, pending batch
// included.
func (g *ShardGuard) position() string {
	if g.pending == nil {
		return g.prev
	}
	return g.prev + " " + g.pending.to + " " + strconv.Itoa(g.pending.next)
}

// claimGroup returns the guard action of group k of the n groups of the
// batch (prev, to] planned with plan, whose digest is digest (the table in
// docs/exactly-once.md, "Batch commits"). Only called while batching, so
// prev is set.
func (g *ShardGuard) claimGroup(k, n int, to string, plan batchPlan, digest string) ddbtypes.TransactWriteItem {
	c := table.GroupClaim{Shard: g.shard, K: k, N: n, Prev: g.prev, To: to, Plan: plan.String(), Digest: digest, Now: g.p.now()}
	return table.ClaimGroup(g.p.cfg.CoordinationTable, g.key, c)
}

// claimedGroup records that claimGroup(k, n, to, plan, digest) committed.
func (g *ShardGuard) claimedGroup(k, n int, to string, plan batchPlan, digest string) {
	g.lost = nil
	if k == n-1 {
		g.prev, g.pending = to, nil
		g.ownOrigin()
	} else {
		g.pending = &pendingBatch{to: to, next: k + 1, groups: n, plan: plan, digest: digest}
	}
	g.loaded = true
}

func (g *ShardGuard) claim(run []Record) ddbtypes.TransactWriteItem {
	if g.hasOrigin && g.origin == "" && g.prev == "" {
		g.firstClaim = lastSequence(run)
	}
	// Never over a half-committed batch (a poller's, on the checkpoint the
	// tumbling-window Lambda shares): only its own last group moves it.
	return table.ClaimRun(g.p.cfg.CoordinationTable, g.key, g.shard, g.prev, lastSequence(run), g.p.now())
}

func (g *ShardGuard) claimed(run []Record) {
	g.lost = nil
	g.prev = lastSequence(run)
	g.loaded = true
	g.ownOrigin()
}

// ownOrigin: after a commit of its own, the guard's records are contiguous
// from its checkpoint, whatever it was opened at.
func (g *ShardGuard) ownOrigin() {
	if g.hasOrigin && g.origin == "" {
		g.origin = g.prev
	}
}

func (g *ShardGuard) reset() { g.loaded = false }

func (g *ShardGuard) runID(run []Record) string { return g.shard + "~" + lastSequence(run) }

// MarkerGuard is the guard of the standard-mode Lambda, whose events carry no
// shard id: a run marker item keyed by each run's first record, holding the
// run's last sequence number, put with attribute_not_exists.
type MarkerGuard struct{ p *Processor }

// MarkerGuard returns the run-marker guard. It holds no state; one can serve
// every invocation.
func (p *Processor) MarkerGuard() *MarkerGuard { return &MarkerGuard{p: p} }

// committed follows the chain of run markers from the first record. A
// marker keyed by a record says that every record up to the marker's last
// sequence number is committed; records without effect (not transactions,
// invalid images, repeats) need no marker, because processing them again
// changes nothing, so the walk steps over them (marking them unguarded) and
// looks up the markers of every record up to the next one with an effect in
// one BatchGetItem. The first record that needs a claim (an effect, or a
// quarantine item: change.guarded, whose item is written with its run's
// claim) and has no marker before the next record with an effect starts
// what is new; records before a marker found are stepped over, their
// quarantine items put again idempotently (an earlier version's runs began
// after them). (A batch acknowledged without effect leaves no marker, so a
// redelivery from an earlier start must walk through it to the runs after
// it.)
//
// When a marker reaches past the batch's end (an event source mapping that
// redelivered a shorter batch), it writes an alias marker at the batch's
// last record pointing to the same end and asks for redelivery from that
// record, so that the next batch starts where the chain can be followed
// instead of inside a committed run.
func (g *MarkerGuard) committed(ctx context.Context, changes []change) (int, bool, error) {
	n := 0
	for n < len(changes) {
		// Candidates: n through the first change with an effect on the
		// reports, at most 100 (BatchGetItem's limit). Records that only
		// need a quarantine item are looked through too: a version before
		// plan 3 put their items alone and keyed its run's marker by the
		// first record with an effect after them, so a redelivery from
		// such a record must find that marker rather than claim the run
		// again.
		j := n
		for j+1 < len(changes) && j-n+1 < 100 && !changes[j].effective() {
			j++
		}
		found, last, err := g.firstMarker(ctx, changes[n:j+1])
		if err != nil {
			return n, false, err
		}
		if found < 0 {
			// No marker: the first record that needs a claim (an effect or
			// a quarantine item) starts what is new.
			for k := n; k <= j; k++ {
				if changes[k].guarded() || changes[k].counted() {
					return k, false, nil
				}
				changes[k].unguarded = true
			}
			n = j + 1
			continue
		}
		for k := n; k < n+found; k++ {
			changes[k].unguarded = true
		}
		n += found
		start := n
		for n < len(changes) && CompareSequence(changes[n].rec.SequenceNumber, last) <= 0 {
			n++
		}
		if n == start {
			return n, false, fmt.Errorf("run marker of %s ends at %s, before its own record %s",
				changes[n].rec.EventID, last, changes[n].rec.SequenceNumber)
		}
		if n == len(changes) && CompareSequence(changes[n-1].rec.SequenceNumber, last) < 0 {
			g.p.metrics.Conflicts.WithLabelValues(ConflictShortRedelivery).Inc()
			tail := changes[n-1].rec
			if err := g.p.putMarker(ctx, recordID(tail), last, 0); err != nil {
				// No alias: the batch's last record lies inside the
				// committed run and has no marker, so a redelivery from it
				// would apply the run's tail again. Name the run's first
				// record instead, whose marker the walk follows (issue 12).
				return start, false, fmt.Errorf("write alias marker at %s: %w", recordID(tail), err)
			}
			return n - 1, true, nil
		}
	}
	return n, false, nil
}

// firstMarker reads the run markers of changes' records (consistent reads)
// and returns the index of the first record that has one and that marker's
// last sequence number; -1 when none has.
func (g *MarkerGuard) firstMarker(ctx context.Context, changes []change) (int, string, error) {
	keys := make([]aggregates.Key, len(changes))
	for i := range changes {
		keys[i] = aggregates.RunMarkerKey(recordID(changes[i].rec))
	}
	items, err := g.p.batchGet(ctx, keys, table.AttrSequenceNumber)
	if err != nil {
		return -1, "", fmt.Errorf("read run markers: %w", err)
	}
	for i, k := range keys {
		item, ok := items[k]
		if !ok {
			continue
		}
		last, ok := table.RunMarkerEnd(item)
		if !ok {
			return -1, "", fmt.Errorf("run marker %s has no %s", k, table.AttrSequenceNumber)
		}
		return i, last, nil
	}
	return -1, "", nil
}

// claim claims run by its marker under its first record, which also names
// the run's first sequence number and its last record: the commit puts
// the end-keyed copy from it (withRunEnd).
func (g *MarkerGuard) claim(run []Record) ddbtypes.TransactWriteItem {
	first, last := run[0], run[0]
	for _, r := range run[1:] {
		if CompareSequence(r.SequenceNumber, first.SequenceNumber) < 0 {
			first = r
		}
		if CompareSequence(r.SequenceNumber, last.SequenceNumber) > 0 {
			last = r
		}
	}
	m := table.RunClaimMarker(recordID(&run[0]), first.SequenceNumber, recordID(&last), last.SequenceNumber, len(run), g.p.now(), g.p.cfg.MarkerTTL)
	m[table.AttrCounted] = &ddbtypes.AttributeValueMemberBOOL{Value: true} // its commit counts (countsApplied)
	return table.ClaimRunMarker(g.p.cfg.Table, m)
}

// claimExtra is how many items a guard's claim adds to a run's
// transaction besides the claim itself: the run planner plans that many
// fewer writes. A MarkerGuard's run also puts its end-keyed marker
// (docs/exactly-once.md, "The design: counted changes", P).
func claimExtra(g Guard) int {
	if _, ok := g.(*MarkerGuard); ok {
		return 1
	}
	return 0
}

// countsApplied reports whether g's runs count what they claim into the
// applied items of the branches whose transaction partitions their
// records belong to (docs/exactly-once.md, "The design: counted changes",
// A): the standard-mode run (Guard 2), and the runs of a batching shard
// guard (the poller's and the tumbling window's: its first run, which
// creates the checkpoint, SR-15), whose batches count under plan layout 6.
// A shard guard that commits runs only (tests) counts nothing.
func countsApplied(g Guard) bool {
	switch g := g.(type) {
	case *MarkerGuard:
		return true
	case *ShardGuard:
		return g.batches
	}
	return false
}

// transactLimit is the most items one TransactWriteItems takes.
const transactLimit = 100

// withRunEnd appends to a run's transaction items, whose first is its
// claim, the run's end-keyed marker when the claim is a run marker that
// names its end (RunClaimMarker), owned by the guard (a failed Put of it
// is the guard's failure). A run that would then exceed a transaction is
// errRunOverflow: the planner planned claimExtra fewer writes, so only a
// run of one record too large to cut meets it.
func (p *Processor) withRunEnd(items []ddbtypes.TransactWriteItem, owner []int) ([]ddbtypes.TransactWriteItem, []int, error) {
	if len(items) == 0 || items[0].Put == nil {
		return items, owner, nil
	}
	end, ok := table.RunEndMarker(items[0].Put.Item)
	if !ok {
		return items, owner, nil
	}
	if len(items)+1 > transactLimit {
		return items, owner, fmt.Errorf("%d writes, the claim and the run's end marker: %w", len(items)-1, errRunOverflow)
	}
	return append(items, table.PutRunEndMarker(p.cfg.Table, end)), append(owner, ownerGuard), nil
}

func (g *MarkerGuard) claimed([]Record) {}

func (g *MarkerGuard) commit(ctx context.Context, changes []change, res *Result) (int, error) {
	return g.p.commitRuns(ctx, g, changes, res)
}

func (g *MarkerGuard) settle(context.Context) error { return nil }
func (g *MarkerGuard) ordered() bool                { return false }
func (g *MarkerGuard) position() string             { return "" }

func (g *MarkerGuard) runID(run []Record) string { return "run~" + recordID(&run[0]) }
func (g *MarkerGuard) reset()                    {}

func (p *Processor) markerItem(eventID, lastSeq string, count int) map[string]ddbtypes.AttributeValue {
	return table.RunMarkerItem(eventID, lastSeq, count, p.now(), p.cfg.MarkerTTL)
}

// putMarker writes an alias marker (count 0) outside a commit; it claims no
// records, it only points at the end of a committed run, so writing it twice
// is harmless.
func (p *Processor) putMarker(ctx context.Context, eventID, lastSeq string, count int) error {
	in := &dynamodb.PutItemInput{TableName: &p.cfg.Table, Item: p.markerItem(eventID, lastSeq, count)}
	return p.retry(ctx, "PutItem", func(ctx context.Context) error {
		p.metrics.WriteRequests.WithLabelValues("PutItem").Inc()
		_, err := p.api.PutItem(ctx, in)
		return err
	})
}

var (
	_ Guard = (*ShardGuard)(nil)
	_ Guard = (*MarkerGuard)(nil)
)

// lastSequence returns the highest sequence number of run (a batch may
// repeat an earlier record at its end).
func lastSequence(run []Record) string {
	last := run[0].SequenceNumber
	for _, r := range run[1:] {
		if CompareSequence(r.SequenceNumber, last) > 0 {
			last = r.SequenceNumber
		}
	}
	return last
}
