package processor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// This file is the commit protocol: one TransactWriteItems per run, holding
// the guard's claim, one conditional, additive update per report item and
// the quarantine items of the invalid records it claims.
// docs/exactly-once.md explains why it is exact.

// errGuardTaken means a run's guard condition failed: some or all of its
// records were committed by an earlier delivery (or a lost answer).
var errGuardTaken = errors.New("guard already claimed")

// errRunOverflow is returned by commitTx for a run that needs more writes
// than it was planned with: the report shapes it was planned on went stale.
var errRunOverflow = errors.New("the run needs more writes than planned: report shapes changed")

// withoutRollups returns a copy of cs whose roll-up delta records are not
// folded: the caller's changes keep theirs for a plan read again after a
// claim lost to another committer, which may fold them (review of
// session 21, S21-P6-2).
func withoutRollups(cs []change) []change {
	out := slices.Clone(cs)
	for i := range out {
		out[i].rollup = nil
	}
	return out
}

// commitRuns plans changes into runs and commits them in order, each run
// planned right before its commit on the report shapes as then known (the
// shapes a commit reads anyway, kept by the shape cache), so that a run
// holds as many records as fit one transaction; a run whose shapes went
// stale meanwhile is planned again without them. It returns how many
// leading changes are done.
func (p *Processor) commitRuns(ctx context.Context, g Guard, changes []change, res *Result) (int, error) {
	if p.cfg.NoRollups {
		// Roll-ups off: a roll-up delta record is not folded (as in a
		// batch planned without roll-ups), and the runs put no delta.
		changes = withoutRollups(changes)
	}
	all := reportKeys(changes)
	done, blind := 0, false
	for done < len(changes) {
		var known knownShape
		if !blind {
			shapes, err := p.shapes.get(ctx, p, all)
			if err != nil {
				return done, err
			}
			known = func(k aggregates.ReportKey) *table.ReportShape {
				if s := shapes[k.Key()]; s != nil {
					sh := s.reportShape()
					return &sh
				}
				return nil
			}
		}
		counts := countsApplied(g)
		_, marker := g.(*MarkerGuard)
		extra := claimExtra(g)
		if counts && marker && !changes[done].guarded() {
			extra++ // room for the claim under the key a version before counting would use (oldKeyOf)
		}
		r := planRun(changes[done:], p.cfg.MaxItemsPerRun-extra, p.cfg.MaxEntriesPerItem, known, counts)
		keys := r.fold.Keys()
		var applied []table.AppliedCount
		if counts {
			applied = appliedCounts(r.changes)
		}
		// A run with a change that has an effect is claimed even when its
		// deltas cancel out (an insert and a remove of one item, a modify of
		// no aggregated field): the marker walk must find it; so is a run
		// with an invalid record, whose quarantine item the claim writes,
		// and (a guard that counts) a run with a record of a transaction
		// partition, which its branch's applied item counts. Only a run
		// without any (ignored records, repeats) commits nothing, as
		// processing it again changes nothing.
		if len(keys) > 0 || anyGuarded(r.changes) || len(applied) > 0 {
			recs := r.records()
			// One part per report: planRun keeps a report within
			// MaxEntriesPerItem entries, but a run of one roll-up delta
			// record may hold up to table.MaxRollupDeltaPeriodEntries of a
			// partial (a record is never cut), one update all the same.
			var parts []part
			for _, k := range keys {
				parts = append(parts, partsOf(r.fold, k, max(p.cfg.MaxEntriesPerItem, table.MaxRollupDeltaPeriodEntries))...)
			}
			id := g.runID(recs)
			ref := commitRef{id: id, rollupClaim: id, rollups: !p.cfg.NoRollups, from: recs[0].SequenceNumber, to: lastSequence(recs), applied: applied}
			if counts && marker {
				ref.oldKey = oldKeyOf(r.changes)
			}
			if len(r.changes) > 1 {
				ref.maxWrites = p.cfg.MaxItemsPerRun // a run of one record cannot be cut further
			}
			err := p.commitTx(ctx, g, func() ddbtypes.TransactWriteItem { return g.claim(recs) }, func() { g.claimed(recs) }, parts, r.quarantine(), foldingChanges(r.changes), ref)
			if errors.Is(err, errRunOverflow) && !blind {
				blind = true // plan this run again, counting every new entry as an entry item
				continue
			}
			if err != nil {
				return done, fmt.Errorf("commit run of %d records: %w", len(recs), err)
			}
			res.Runs++
		}
		p.account(r.changes, len(keys) > 0, res)
		done += len(r.changes)
		blind = false
	}
	return done, nil
}

// reportKeys returns the distinct report keys changes touch.
func reportKeys(changes []change) []aggregates.ReportKey {
	seen := map[aggregates.ReportKey]bool{}
	var out []aggregates.ReportKey
	for i := range changes {
		changes[i].eachEntry(func(k aggregates.ReportKey, _ string, e *entryID) {
			if e == nil && !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		})
	}
	return out
}

// commitBatch commits changes, which start right after the checkpoint, as
// one batch (docs/exactly-once.md, "Batch commits"): the checkpoint's
// pending batch first when there is one, else all of changes. It returns how
// many leading changes are done.
func (p *Processor) commitBatch(ctx context.Context, g *ShardGuard, changes []change, res *Result) (int, error) {
	plan := p.batchPlan()
	end, next := len(changes), 0
	pb := g.pending
	if pb != nil {
		if last := maxSequence(changes); CompareSequence(last, pb.to) < 0 {
			return 0, fmt.Errorf("shard %s: the pending batch ends at %s, the records at %s: %w", g.shard, pb.to, last, ErrIncompleteBatch)
		}
		end = -1
		for i := range changes {
			if !changes[i].dup && CompareSequence(changes[i].rec.SequenceNumber, pb.to) == 0 {
				end = i + 1
				break
			}
		}
		if end < 0 {
			return 0, fmt.Errorf("shard %s: the pending batch's last record %s is not among the records", g.shard, pb.to)
		}
		plan, next = pb.plan, pb.next
	}
	batch := changes[:end]
	to := maxSequence(batch)
	if plan.layout == plan6Layout {
		if err := p.commitBatch6(ctx, g, batch, to, plan, next, res); err != nil {
			return 0, err
		}
		return end, nil
	}
	// A batch of layout 2, 3 or 4 (left pending by an earlier version) is
	// finished as it was planned, uncounted (docs/exactly-once.md, "The
	// previous layout's pending batch": its count groups are not built).
	if plan.layout < quarantineLayout {
		// A batch planned before quarantine items rode in its groups:
		// finished as planned, its items put first (idempotent puts).
		if err := p.putQuarantine(ctx, batch); err != nil {
			return 0, err
		}
	}
	if plan.layout < rollupLayout {
		// A batch planned before roll-ups is finished as planned: its
		// roll-up delta records (put by newer consumers of a mixed fleet)
		// were not folded into its groups, and are not now (ignored).
		batch = withoutRollups(batch)
	}
	fold := aggregates.NewFold()
	for i := range batch {
		batch[i].addTo(fold)
	}
	var folds []*change
	if plan.layout >= rollupLayout {
		folds = foldingChanges(batch)
	}
	groups := planGroups(fold, needingQuarantine(batch), folds, plan)
	reportsChanged := len(fold.Keys()) > 0
	if len(groups) == 0 && anyGuarded(batch) {
		// Claimed all the same, like a run (see commitRuns).
		groups = []group{{}}
	}
	n := len(groups)
	// A group's roll-up claim is its claim id without the plan digest
	// (which covers the delta items, so cannot also name them): the lane
	// and the delta keys are a pure function of the shard, the batch's
	// end and the group.
	rollupClaim := func(k int) string { return g.shard + "~" + to + "~g" + strconv.Itoa(k) }
	digest := planDigest(to, plan, groups, rollupClaim)
	if pb != nil && (n != pb.groups || digest != pb.digest) {
		return 0, fmt.Errorf("shard %s: the pending batch through %s was planned as %d groups (plan %s), now %d (plan %s): changed code mid-batch? See docs/runbook.md",
			g.shard, pb.to, pb.groups, pb.digest, n, digest)
	}
	for k := next; k < n; k++ {
		err := p.commitTx(ctx, g,
			func() ddbtypes.TransactWriteItem { return g.claimGroup(k, n, to, plan, digest) },
			func() { g.claimedGroup(k, n, to, plan, digest) }, groups[k].parts, groups[k].quarantine, groups[k].folds,
			commitRef{id: g.shard + "~" + to + "~" + digest + "~g" + strconv.Itoa(k), rollupClaim: rollupClaim(k), rollups: plan.layout >= rollupLayout,
				from: batch[0].rec.SequenceNumber, to: to})
		if err != nil {
			return 0, fmt.Errorf("commit group %d of %d of the batch through %s: %w", k+1, n, to, err)
		}
		res.Runs++
	}
	p.account(batch, reportsChanged, res)
	return end, nil
}

// maxSequence is the highest sequence number of changes (lastSequence
// without copying the records).
func maxSequence(changes []change) string {
	last := changes[0].rec.SequenceNumber
	for i := range changes[1:] {
		if s := changes[i+1].rec.SequenceNumber; CompareSequence(s, last) > 0 {
			last = s
		}
	}
	return last
}

func records(changes []change) []Record {
	out := make([]Record, len(changes))
	for i := range changes {
		out[i] = *changes[i].rec
	}
	return out
}

// account counts committed changes by outcome and observes the lag of the
// applied ones when reports changed.
func (p *Processor) account(changes []change, reportsChanged bool, res *Result) {
	now := p.now()
	for i := range changes {
		c := &changes[i]
		switch {
		case c.dup:
			res.Duplicates++
			p.metrics.Records.WithLabelValues(eventLabel(c.rec.EventName), OutcomeDuplicate).Inc()
		case c.rollup != nil:
			res.Rollups++
			p.metrics.Records.WithLabelValues(eventLabel(c.rec.EventName), OutcomeRollup).Inc()
		case c.lane && c.invalid != nil:
			res.Quarantined++
			p.metrics.Records.WithLabelValues(eventLabel(c.rec.EventName), OutcomeQuarantined).Inc()
		case !c.isTxn:
			res.Ignored++
			p.metrics.Records.WithLabelValues(eventLabel(c.rec.EventName), OutcomeIgnored).Inc()
		case c.invalid != nil:
			res.Quarantined++
			p.metrics.Records.WithLabelValues(eventLabel(c.rec.EventName), OutcomeQuarantined).Inc()
		default:
			res.Applied++
			p.metrics.Records.WithLabelValues(eventLabel(c.rec.EventName), OutcomeApplied).Inc()
			if t := writeTime(c); !t.IsZero() && reportsChanged {
				p.metrics.Lag.Observe(now.Sub(t).Seconds())
			}
		}
	}
}

func anyGuarded(changes []change) bool {
	for i := range changes {
		if changes[i].guarded() {
			return true
		}
	}
	return false
}

// writeTime is when the change was written: the writer's own updatedAt in the
// new image (precise), else the stream's ApproximateCreationDateTime.
func writeTime(c *change) time.Time {
	if c.rec.NewImage != nil {
		if s, ok := table.String(c.rec.NewImage, table.AttrUpdatedAt); ok {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				return t
			}
		}
	}
	return c.rec.ApproximateCreation
}

// commitRef names a commit for the parked deltas it may write: id is
// unique per guard claim (so a report's delta is parked at most once per
// claim), from and to the sequence numbers of the records it covers.
type commitRef struct {
	id, from, to string
	// rollups says the commit puts the roll-up deltas of its branch-report
	// parts (not a batch planned before roll-ups); rollupClaim is the
	// claim id that names them (and their lane): id without a plan digest.
	rollups     bool
	rollupClaim string
	// maxWrites, when set, is the most writes the transaction was planned
	// with besides its claim (a run's): more returns errRunOverflow.
	maxWrites int
	// applied holds the updates of the applied items of the branches
	// whose transaction partitions the commit claims records of
	// (table.CountApplied; a standard-mode run's: countsApplied).
	applied []table.AppliedCount
	// oldKey, when set, is the id of the record a version before counted
	// changes would have keyed this run's marker by (oldKeyOf): the
	// commit claims the marker under it too, on the same condition.
	oldKey string
	// g6, for a group of a plan-layout-6 batch, carries its applied
	// actions, staging writes, delta puts and staging deletes (commit6.go)
	// in place of layout 4's per-group roll-up deltas.
	g6 *commit6
}

// counts are the applied counts the commit carries (ref.applied, or a
// layout-6 group's).
func (r commitRef) counts() []table.AppliedCount {
	if r.g6 == nil {
		return r.applied
	}
	_, counts := r.g6.appliedWrites("")
	return append(append([]table.AppliedCount(nil), r.applied...), counts...)
}

// oldKeyOf is the record a version before counted changes (step A) would
// key a run of changes by when the run's first record needs no claim of
// its own there: that version's walk stepped over records that change no
// report and keyed the run by the first that needs a claim (an effect or
// a quarantine item). "" when the run's first record is that record, or
// when no record of the run is. Claiming both keys makes a run of the
// version before on the same records, committed at the same time,
// refuse this one or be refused (docs/exactly-once.md, "Review
// (adversarial, session 18): step A as built", hole 1).
func oldKeyOf(changes []change) string {
	if len(changes) == 0 || changes[0].guarded() {
		return ""
	}
	for i := range changes {
		if changes[i].guarded() {
			return recordID(changes[i].rec)
		}
	}
	return ""
}

// foreign is how many foreign records the commit counts.
func (r commitRef) foreign() int64 {
	var n int64
	for _, c := range r.counts() {
		n += c.Foreign
	}
	return n
}

// commitTx commits one transaction: the guard action claim() returns, the
// writes of every part and the quarantine items of quarantine's records,
// retrying what is retryable; claimed runs once it landed. It returns
// errGuardTaken when the guard's condition failed: what it claims is
// (partly) committed already.
//
// A quarantine item that exists already (its condition failed: the record
// is quarantined) is dropped from the transaction, and one DynamoDB refuses
// is sent truncated, each at no attempt's cost, so neither blocks the
// commit (docs/exactly-once.md, "Quarantine items").
//
// A part whose report item DynamoDB refuses for good (an item too large to
// grow, a figure or map of the wrong type) is parked instead: the same
// transaction writes its delta as a parked item (ref names it) in place of
// its updates, so the rest of the transaction, and the shard, go on; the
// guard makes the parked delta as exactly-once as an applied one
// (docs/exactly-once.md, "Parked deltas").
func (p *Processor) commitTx(ctx context.Context, g Guard, claim func() ddbtypes.TransactWriteItem, claimed func(), parts []part, quarantine []*change, folds []*change, ref commitRef) error {
	if sg, ok := g.(*ShardGuard); ok {
		// Every claim requires the shard's legacy tombstone (table.ClaimRun).
		if err := sg.fenceLegacy(ctx); err != nil {
			return err
		}
	}
	keys := make([]aggregates.ReportKey, len(parts))
	for i, pt := range parts {
		keys[i] = pt.key
	}
	parked := map[int]parking{}
	qs := p.quarantineWrites(quarantine, p.now())
	// sent holds the shape each part's update was sent on when its
	// condition failed; a re-read that finds the same shape parks the part
	// (a condition that fails on an unchanged item will fail for ever).
	sent := map[int]*shape{}
	// rechecked marks the parts whose condition failed once on an item a
	// re-read found unchanged: they are sent once more on a fresh read
	// before they are parked, an attempt that costs no attempt (at most one
	// per part): two parts were parked so right after a lease hand-over
	// stopped a reader mid-commit (load 30), likeliest DynamoDB Local
	// failing a condition on an abandoned transaction's write it then
	// rolled back (AWS cancels one of two such as a TransactionConflict).
	rechecked := map[int]bool{}
	// reread holds the reports whose part's condition failed in the last
	// attempt: the next attempt reads them from the table, not from the
	// shape cache, which another consumer of this Processor may have
	// refilled with a shape read before the item changed (review of
	// session 18, hole S18-P1): sent is compared with a read, never with
	// a cached shape.
	var reread map[aggregates.Key]bool
	// gone marks the folds whose delta item is not there (its delete's
	// condition failed): the delete is dropped from the transaction.
	gone := map[int]bool{}
	sentClaims := map[string]bool{}
	var claimKey aggregates.Key
	var lastErr error
	for attempt := 1; attempt <= p.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if err := sleep(ctx, p.backoff(attempt-1)); err != nil {
				return p.commitCancelled(err)
			}
		}
		shapes, err := p.shapes.getFresh(ctx, p, keys, reread)
		if err != nil {
			if ctx.Err() != nil {
				return p.commitCancelled(err)
			}
			return err
		}
		reread = nil
		recheck := false
		if ref.rollups {
			recheck = p.parkUnconditionable(parts, shapes, parked, sent, rechecked)
		}
		items := make([]ddbtypes.TransactWriteItem, 1, len(parts)+len(qs)+len(folds)+1) // the claim first, set below
		owner := []int{ownerGuard}                                                      // the part (or other item) each item writes for
		now := p.now().Format(time.RFC3339Nano)
		writes := make([]reportWrites, len(parts))
		transitions := make([]int64, len(parts))
		for i, pt := range parts {
			if pk, ok := parked[i]; ok {
				items = append(items, ddbtypes.TransactWriteItem{Put: p.parkedPut(pt, ref, pk, now)})
				owner = append(owner, i)
				transitions[i] = parkedPart
				continue
			}
			sh := shapes[pt.key.Key()]
			var opts table.UpdateOptions
			switch {
			case pt.key.IsRollup():
				opts.Branches = pt.branches
			case ref.rollups && pt.first:
				opts.Currency = pt.currency
				if pt.delta.Count != 0 {
					// Only a part that moves the count can move the
					// branch count: it alone needs the count as read.
					opts.CheckCount = true
					transitions[i] = aggregates.BranchTransition(sh.count, pt.delta.Count)
				}
			}
			w, err := p.reportWrites(pt.key, pt.delta, sh, now, opts)
			if err != nil {
				return err
			}
			writes[i] = w
			for _, u := range w.updates {
				items = append(items, ddbtypes.TransactWriteItem{Update: u})
				owner = append(owner, i)
			}
		}
		var deltas []aggregates.Key
		if ref.g6 != nil {
			items, owner, deltas = ref.g6.rollupWrites(p, parts, transitions, items, owner, deltas, p.now())
		} else if ref.rollups {
			rf := rollupFold(parts, func(i int) int64 { return transitions[i] })
			lane := aggregates.RollupLane(ref.rollupClaim)
			for _, rg := range rf.Groups() {
				for _, item := range table.RollupDeltaItems(rg.Tenant, lane, ref.rollupClaim, rg.Currency, rf.Periods(rg), now) {
					items = append(items, ddbtypes.TransactWriteItem{Put: table.PutRollupDelta(p.cfg.Table, item)})
					owner = append(owner, deltaOwner(len(deltas)))
					deltas = append(deltas, table.KeyOf(item))
				}
			}
		}
		for i, c := range folds {
			if !gone[i] {
				items = append(items, ddbtypes.TransactWriteItem{Delete: table.DeleteRollupDelta(p.cfg.Table, c.rollup.Key)})
				owner = append(owner, foldOwner(i))
			}
		}
		for i, q := range qs {
			if !q.exists {
				items = append(items, q.put(p.cfg.Table))
				owner = append(owner, quarantineOwner(i))
			}
		}
		for i, c := range ref.applied {
			items = append(items, table.CountApplied(p.cfg.CoordinationTable, c))
			owner = append(owner, appliedOwner(i))
		}
		if ref.g6 != nil {
			ws, _ := ref.g6.appliedWrites(p.cfg.CoordinationTable)
			for i, w := range ws {
				items = append(items, w)
				owner = append(owner, appliedOwner(len(ref.applied)+i))
			}
		}
		if ref.maxWrites > 0 && len(items)-1 > ref.maxWrites {
			return fmt.Errorf("%d writes, planned for at most %d: %w", len(items)-1, ref.maxWrites, errRunOverflow)
		}
		if len(items) > maxTransactItems {
			return fmt.Errorf("%d writes and the claim, more than a transaction takes (%d): the plan reserved too little room", len(items)-1, maxTransactItems)
		}
		items[0] = claim()
		if put := items[0].Put; put != nil {
			// The claims sent, by their updatedAt: a lost answer's landed
			// claim is recognised by it (countLandedForeign).
			at, _ := table.String(put.Item, table.AttrUpdatedAt)
			sentClaims[at], claimKey = true, table.KeyOf(put.Item)
		}
		if items, owner, err = p.withRunEnd(items, owner); err != nil {
			return err
		}
		if ref.oldKey != "" && items[0].Put != nil {
			if len(items)+1 > transactLimit {
				return fmt.Errorf("%d writes, the claim, the run's end marker and its claim under the older key: %w", len(items)-1, errRunOverflow)
			}
			items, owner = append(items, table.ClaimRunMarker(p.cfg.Table, table.RekeyRunMarker(items[0].Put.Item, ref.oldKey))), append(owner, ownerGuard)
		}
		err = p.transactWrite(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems:          items,
			ReturnConsumedCapacity: ddbtypes.ReturnConsumedCapacityTotal,
		})
		if err == nil {
			claimed()
			if ref.rollups || len(folds) > 0 {
				costOfRollups(items, owner, parts, writes, shapes, folds, now).count(p.metrics, p.cfg.Logger, p.cfg.RollupCostLogUnits)
			}
			p.countParked(parts, parked, ref)
			p.countQuarantined(qs)
			p.metrics.ForeignRecords.Add(float64(ref.foreign()))
			for i, pt := range parts {
				if _, ok := parked[i]; !ok {
					cur := ""
					if ref.rollups && pt.first && !pt.key.IsRollup() {
						cur = pt.currency
					}
					var d int64
					if pt.first {
						d = pt.delta.Count
					}
					p.shapes.applied(pt.key.Key(), shapes[pt.key.Key()], writes[i].inline, d, cur, now)
				}
			}
			p.metrics.Commits.WithLabelValues("committed").Inc()
			return nil
		}
		lastErr = err
		var tce *ddbtypes.TransactionCanceledException
		if errors.As(err, &tce) {
			before := len(parked) + quarantineFixes(qs) + len(gone) + ref.g6.goneCount()
			if err := p.rollupCancelled(owner, deltas, folds, gone, tce); err != nil {
				return err
			}
			if ref.g6 != nil {
				if _, err := ref.g6.cancelled(ctx, p, g, owner, tce); err != nil {
					return err
				}
			}
			failed := map[int]bool{}
			retry, err := p.cancelled(g, keys, owner, parked, qs, failed, tce)
			if errors.Is(err, errGuardTaken) {
				// An earlier attempt of this commit landed and its answer
				// was lost (or another consumer committed the same
				// records): count the parked deltas and quarantine items
				// that exist.
				if len(parked) > 0 {
					p.countLandedParks(ctx, parts, parked, ref)
				}
				if len(qs) > 0 {
					p.countLandedQuarantine(ctx, qs)
				}
				if ref.foreign() > 0 {
					p.countLandedForeign(ctx, claimKey, sentClaims, ref.foreign())
				}
			}
			if err != nil {
				return err
			}
			reread = make(map[aggregates.Key]bool, len(failed))
			for i := range failed {
				sent[i] = shapes[keys[i].Key()]
				reread[keys[i].Key()] = true
			}
			if retry && len(parked)+quarantineFixes(qs)+len(gone)+ref.g6.goneCount() > before {
				attempt-- // a part to park, a quarantine item or delete dropped or truncated: no failed attempt, send the rest now
				continue
			}
			if retry {
				if recheck {
					attempt-- // a recheck of an unchanged item: no failed attempt
				}
				continue
			}
		}
		if isValidation(err) {
			// DynamoDB Local (and AWS for some refusals) names no item:
			// find the parts whose items a retry cannot fix by reading them.
			found, ierr := p.refusedParts(ctx, parts, shapes, parked)
			if ierr != nil {
				return ierr
			}
			if !found {
				// No report part refused: a quarantine item, then, sent
				// again truncated (once).
				for _, q := range qs {
					found = !q.exists && q.truncate() || found
				}
			}
			if !found {
				// Or an applied item whose count is no number: named.
				if aerr := p.refusedApplied(ctx, ref.counts()); aerr != nil {
					p.metrics.Commits.WithLabelValues("failed").Inc()
					return fmt.Errorf("commit refused: %w (%v)", aerr, err)
				}
			}
			if found {
				attempt-- // the refusal is not a failed attempt: the next try parks or truncates
				continue
			}
		}
		class := classifyErr(err)
		if class == classCanceled || ctx.Err() != nil {
			// The commit's context ended during the call (a poller's lease
			// lost or expired, its shutdown's grace over; a Lambda's
			// deadline): given up, its outcome unknown, for the next
			// attempt's guard to tell. Not a failed commit: whatever it
			// was doing when its context ended, it counts once as
			// cancelled.
			return p.commitCancelled(err)
		}
		if class == classPermanent {
			p.metrics.Commits.WithLabelValues("failed").Inc()
			return err
		}
		// Outcome unknown (the write may have landed): retry; the guard in the
		// next attempt tells whether it did.
		p.countRetry("TransactWriteItems", class)
	}
	p.metrics.Commits.WithLabelValues("failed").Inc()
	return fmt.Errorf("%d attempts: %w", p.cfg.MaxAttempts, lastErr)
}

// maxTransactItems is DynamoDB's bound on the actions of one
// TransactWriteItems.
const maxTransactItems = 100

// parkUnconditionable parks, before they are sent, the branch-report parts
// no roll-up condition can ever pass on (docs/exactly-once.md, "Tenant
// roll-ups", review holes 2 and 10): a part 0 whose report's count is no
// integer (ParkedMalformed) or whose report is in another currency
// (ParkedRefused), and a part whose condition failed on the shape it reads
// now (sent, compared once with the read of the table made right after
// the failure: nothing changed, so it would fail again) (ParkedRefused),
// the second time that is seen (the first time the part is sent once more
// on the fresh read, rechecked records it and recheck says so; counted
// as ConflictUnchangedItem and logged). A parked part's roll-up share is
// parked with it.
func (p *Processor) parkUnconditionable(parts []part, shapes map[aggregates.Key]*shape, parked map[int]parking, sent map[int]*shape, rechecked map[int]bool) (recheck bool) {
	for i, pt := range parts {
		if _, ok := parked[i]; ok {
			continue
		}
		sh := shapes[pt.key.Key()]
		// The shape the part was sent on when its condition failed is
		// compared once, with the read of the table this attempt made
		// (commitTx's reread), and dropped: a later attempt's shape may be
		// the cache's (review of session 18, hole S18-P1).
		was := sent[i]
		delete(sent, i)
		var why *parking
		switch {
		case was != nil && was.same(sh) && !rechecked[i]:
			rechecked[i], recheck = true, true
			p.metrics.Conflicts.WithLabelValues(ConflictUnchangedItem).Inc()
			p.cfg.Logger.Warn("report update's condition failed on the item read again unchanged: sent once more; parked if it fails so again",
				"report", pt.key.String(), "updated_at", sh.updatedAt)
		case was != nil && was.same(sh):
			why = &parking{reason: ParkedRefused, detail: pt.key.String() + ": its update's condition failed on the item as read again (nothing changed)"}
		case pt.key.IsRollup() || !pt.first:
		case sh.countDamaged && pt.delta.Count != 0:
			why = &parking{reason: ParkedMalformed, detail: pt.key.String() + ": transactionCount is not an integer"}
		case sh.currencyDamaged:
			why = &parking{reason: ParkedMalformed, detail: pt.key.String() + ": currency is not a string"}
		case sh.currency != "" && sh.currency != pt.currency:
			why = &parking{reason: ParkedRefused, detail: fmt.Sprintf("%s: the report is in currency %s, this delta in %s", pt.key, sh.currency, pt.currency)}
		}
		if why != nil {
			parked[i] = *why
			p.shapes.forget(pt.key.Key())
		}
	}
	return recheck
}

// rollupCancelled reads the reasons of a cancelled commit for its roll-up
// items: a delta put whose condition failed is a key collision (an error:
// a claim's delta is put once, and the guard fails first on a retry of a
// landed commit); a fold's delete whose condition failed means the delta
// item is gone, and the delete is dropped from the transaction (gone), as
// a quarantine item that exists is. Every other reason is cancelled's.
func (p *Processor) rollupCancelled(owner []int, deltas []aggregates.Key, folds []*change, gone map[int]bool, tce *ddbtypes.TransactionCanceledException) error {
	reasons := tce.CancellationReasons
	if len(reasons) > 0 && aws.ToString(reasons[0].Code) == "ConditionalCheckFailed" {
		return nil // the guard's: cancelled says what it means
	}
	for i, r := range reasons {
		if i >= len(owner) {
			break
		}
		code := aws.ToString(r.Code)
		if d, ok := deltaOf(owner[i]); ok && d < len(deltas) {
			switch code {
			case "ConditionalCheckFailed":
				if len(reasons) > 0 && aws.ToString(reasons[0].Code) == "TransactionConflict" {
					// The claim met a transaction in flight: the delta may be
					// that transaction's, the same group landing under
					// another committer. Sent again, the claim says which
					// (review of session 21, S21-P6-3).
					continue
				}
				p.metrics.Commits.WithLabelValues("failed").Inc()
				return fmt.Errorf("commit cancelled: the roll-up delta %s exists already", deltas[d])
			case "ValidationError":
				p.metrics.Commits.WithLabelValues("failed").Inc()
				return fmt.Errorf("commit cancelled: the roll-up delta %s was refused: %s", deltas[d], aws.ToString(r.Message))
			}
		}
		if f, ok := foldOf(owner[i]); ok && f < len(folds) && code == "ConditionalCheckFailed" {
			gone[f] = true
			p.cfg.Logger.Warn("roll-up delta item gone before its fold: its delete is dropped, its record folded",
				"delta", folds[f].rollup.Key.String(), "event_id", folds[f].rec.EventID)
		}
	}
	return nil
}

// Owners of a transaction's roll-up items (commitTx's owner): the i-th
// roll-up delta put and the delete of the i-th folded delta, below every
// quarantine owner; below them, the update of the i-th applied item.
// Below those, a layout-6 group's staging writes and staging deletes.
const (
	deltaOwnerBase   = -1 << 20
	foldOwnerBase    = -2 << 20
	appliedOwnerBase = -3 << 20
	stagingOwnerBase = -4 << 20
	unstageOwnerBase = -5 << 20
)

func deltaOwner(i int) int   { return deltaOwnerBase - i }
func foldOwner(i int) int    { return foldOwnerBase - i }
func appliedOwner(i int) int { return appliedOwnerBase - i }
func stagingOwner(i int) int { return stagingOwnerBase - i }
func unstageOwner(i int) int { return unstageOwnerBase - i }

// stagingOf reports a staging write or delete among a transaction's
// owners.
func stagingOf(owner int) bool { return owner <= stagingOwnerBase }

func unstageOf(owner int) (int, bool) {
	i := unstageOwnerBase - owner
	return i, owner <= unstageOwnerBase
}

func deltaOf(owner int) (int, bool) {
	i := deltaOwnerBase - owner
	return i, owner <= deltaOwnerBase && owner > foldOwnerBase
}

func foldOf(owner int) (int, bool) {
	i := foldOwnerBase - owner
	return i, owner <= foldOwnerBase && owner > appliedOwnerBase
}

func appliedOf(owner int) (int, bool) {
	i := appliedOwnerBase - owner
	return i, owner <= appliedOwnerBase && owner > stagingOwnerBase
}

// refusedApplied reads the applied items a refused transaction updated
// and returns the error of the first one whose counts are not numbers
// (DynamoDB Local names no item in a ValidationException); nil when none
// is, or when they cannot be read.
func (p *Processor) refusedApplied(ctx context.Context, counts []table.AppliedCount) error {
	for _, c := range counts {
		item, err := p.getCheckpoint(ctx, aggregates.AppliedKey(c.Tenant, c.Branch))
		if err != nil {
			return nil
		}
		if _, err := table.DecodeApplied(item); err != nil {
			return fmt.Errorf("the applied item of branch %s/%s cannot be counted into (docs/runbook.md, \"Foreign records\"): %w", c.Tenant, c.Branch, err)
		}
	}
	return nil
}

// countLandedForeign counts n foreign records in
// ledger_foreign_records_total when the commit whose claim is the run
// marker at key landed although its answer was lost: the marker stored
// holds the updatedAt of one of the claims this commit sent (sent), not
// another consumer's. A read that fails counts nothing (the metric may
// then miss them; the applied item has them).
func (p *Processor) countLandedForeign(ctx context.Context, key aggregates.Key, sent map[string]bool, n int64) {
	if len(sent) == 0 {
		return
	}
	item, err := p.getItem(ctx, key)
	if err != nil || item == nil {
		return
	}
	if at, _ := table.String(item, table.AttrUpdatedAt); sent[at] {
		p.metrics.ForeignRecords.Add(float64(n))
	}
}

// countParked counts and logs the parts of a landed commit that parked.
func (p *Processor) countParked(parts []part, parked map[int]parking, ref commitRef) {
	for i, pt := range parts {
		pk, ok := parked[i]
		if !ok {
			continue
		}
		p.metrics.Parked.WithLabelValues(pk.reason).Inc()
		p.cfg.Logger.Warn("report delta parked: the report item's update was refused for good; run ledgerctl reconcile --repair",
			"report", pt.key.String(), "reason", pk.reason, "detail", pk.detail, "records_from", ref.from, "records_to", ref.to)
		p.shapes.forget(pt.key.Key())
	}
}

// countLandedParks counts the parts of parked whose parked item exists: the
// commit that landed parked them (a consistent read each; a failed read
// only leaves the metric short, the item itself is what reconcile counts).
func (p *Processor) countLandedParks(ctx context.Context, parts []part, parked map[int]parking, ref commitRef) {
	landed := map[int]parking{}
	for i, pk := range parked {
		item, err := p.getItem(ctx, parts[i].key.ParkedKey(ref.id))
		if err == nil && item != nil {
			landed[i] = pk
		}
	}
	p.countParked(parts, landed, ref)
}

// parking is why a part is parked.
type parking struct{ reason, detail string }

// isValidation reports a request DynamoDB refused as invalid as a whole
// (ValidationException), which is how DynamoDB Local answers an update that
// cannot apply to an item (a wrong type, an invalid document path, an item
// past 400 KB) inside a transaction.
func isValidation(err error) bool {
	var rae *raiseError
	if errors.As(err, &rae) {
		return false // the raise's, not the transaction's (beforeFence)
	}
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ValidationException"
}

// refusedParts reads the items the unparked parts write (consistently, in
// full) and marks for parking each part one of whose items CheckReportItem
// finds an update would be refused on. It reports whether it found any.
func (p *Processor) refusedParts(ctx context.Context, parts []part, shapes map[aggregates.Key]*shape, parked map[int]parking) (bool, error) {
	var keys []aggregates.Key
	itemKeys := make([][]aggregates.Key, len(parts))
	for i, pt := range parts {
		if _, ok := parked[i]; ok {
			continue
		}
		itemKeys[i] = append(itemKeys[i], pt.key.Key())
		for _, d := range aggregates.Dimensions {
			for name := range pt.delta.Breakdowns[d] {
				itemKeys[i] = append(itemKeys[i], pt.key.EntryKey(d, name))
			}
		}
		keys = append(keys, itemKeys[i]...)
	}
	items := map[aggregates.Key]map[string]ddbtypes.AttributeValue{}
	for len(keys) > 0 {
		n := min(len(keys), 100)
		read, err := p.batchGet(ctx, keys[:n])
		if err != nil {
			return false, fmt.Errorf("read the items of a refused commit: %w", err)
		}
		maps.Copy(items, read)
		keys = keys[n:]
	}
	found := false
	for i, ks := range itemKeys {
		for _, k := range ks {
			problems := table.CheckReportItem(items[k])
			if len(problems) == 0 {
				continue
			}
			reason := ParkedMalformed
			if strings.Contains(problems[0], "bytes, more than") {
				reason = ParkedTooLarge
			}
			parked[i] = parking{reason: reason, detail: k.String() + ": " + strings.Join(problems, "; ")}
			p.shapes.forget(parts[i].key.Key())
			found = true
			break
		}
	}
	return found, nil
}

// parkedPut is the write that parks part pt's delta (see commitTx). A
// branch report's parked delta is also its roll-up share: it carries the
// roll-up's currency (table.WithRollupShare), since no delta item holds it.
// A partial's parked part 0 carries its branches (table.WithParkedBranches).
func (p *Processor) parkedPut(pt part, ref commitRef, why parking, now string) *ddbtypes.Put {
	item := table.ParkedItem(pt.key, ref.id, pt.delta, table.ParkedInfo{
		Reason: why.reason, Detail: why.detail, From: ref.from, To: ref.to, ParkedAt: now,
	})
	if ref.rollups && pt.rollup() && ref.g6 == nil {
		// Layout 6 leaves the share in the batch delta, whose figures are
		// pure in the plan ("Parking"): the parked item carries none.
		table.WithRollupShare(item, aggregates.RollupCurrency(pt.currency))
	}
	if pt.key.IsRollup() {
		table.WithParkedBranches(item, pt.branches) // a partial's part 0: its branches, parked with its figures
	}
	return table.PutParked(p.cfg.Table, item)
}

// cancelled interprets a cancelled commit. The guard's reason comes first:
// when it failed, the run is (partly) committed already, whatever else
// failed. owner maps each item of the transaction to its part; a part with
// a ValidationError is marked for parking. It returns retry=true when the
// transaction should simply be tried again.
//
// failed gets the parts whose condition failed (a stale shape, or a
// roll-up condition): commitTx parks one whose shape read again is the
// same. The roll-up items' reasons are rollupCancelled's.
func (p *Processor) cancelled(g Guard, keys []aggregates.ReportKey, owner []int, parked map[int]parking, qs []*quarantined, failed map[int]bool, tce *ddbtypes.TransactionCanceledException) (bool, error) {
	reasons := tce.CancellationReasons
	code := func(i int) string {
		if i < len(reasons) {
			return reasonCode(reasons[i])
		}
		return ""
	}
	taken := code(0) == "ConditionalCheckFailed"
	for i := 1; i < len(owner) && !taken; i++ {
		// The run's claim under the older key (commitRef.oldKey): the
		// guard's too.
		taken = owner[i] == ownerGuard && code(i) == "ConditionalCheckFailed"
	}
	if taken {
		g.reset()
		for _, k := range keys {
			p.shapes.forget(k.Key())
		}
		p.metrics.Conflicts.WithLabelValues(ConflictDuplicate).Inc()
		p.metrics.Commits.WithLabelValues("duplicate").Inc()
		return false, errGuardTaken
	}
	var shape, conflict, throttle bool
	for i := range reasons {
		part := ownerGuard
		if i < len(owner) {
			part = owner[i]
		}
		if _, ok := deltaOf(part); ok {
			if code(i) == "TransactionConflict" {
				conflict = true
			}
			continue // rollupCancelled's
		}
		if _, ok := foldOf(part); ok {
			switch code(i) {
			case "TransactionConflict":
				conflict = true
			case reasonThrottled:
				throttle = true
			}
			continue // rollupCancelled's
		}
		if stagingOf(part) {
			switch code(i) {
			case "", "None":
			case "ConditionalCheckFailed": // a staging delete's: commit6.cancelled dropped it
			case "TransactionConflict":
				conflict = true
			case reasonThrottled:
				throttle = true
			default:
				p.metrics.Commits.WithLabelValues("failed").Inc()
				return false, fmt.Errorf("commit cancelled: item %d of the transaction (a roll-up staging write): %s: %s", i, code(i), aws.ToString(reasons[i].Message))
			}
			continue
		}
		if a, ok := appliedOf(part); ok {
			switch code(i) {
			case "", "None":
			case "TransactionConflict":
				conflict = true
				p.metrics.Conflicts.WithLabelValues(ConflictApplied).Inc()
			case reasonThrottled:
				throttle = true
			default:
				// The item is ledger's own: a count of another type than a
				// number refuses every commit of the branch until it is
				// mended (docs/runbook.md, "Foreign records").
				p.metrics.Commits.WithLabelValues("failed").Inc()
				return false, fmt.Errorf("commit cancelled: the update of applied item %d of the transaction was refused: %s: %s", a, code(i), aws.ToString(reasons[i].Message))
			}
			continue
		}
		if q, ok := quarantineOf(part, qs); ok {
			switch code(i) {
			case "", "None":
				continue
			case "ConditionalCheckFailed": // the item exists: the record is quarantined already
				q.exists = true
				continue
			case "ValidationError":
				if q.truncate() {
					continue
				}
				p.metrics.Commits.WithLabelValues("failed").Inc()
				return false, fmt.Errorf("commit cancelled: the quarantine item of record %s was refused: %s", q.c.rec.EventID, aws.ToString(reasons[i].Message))
			}
		}
		switch code(i) {
		case "", "None":
		case "ConditionalCheckFailed": // a report's shape (the guard's was handled above)
			if _, ok := parked[part]; ok && part >= 0 {
				p.metrics.Commits.WithLabelValues("failed").Inc()
				return false, fmt.Errorf("commit cancelled: the parked delta of %s exists already under this commit's id", keys[part])
			}
			shape = true
			if part >= 0 {
				p.shapes.forget(keys[part].Key())
				failed[part] = true
			}
		case "TransactionConflict":
			conflict = true
		case reasonThrottled:
			throttle = true
		case "ValidationError":
			if part < 0 {
				p.metrics.Commits.WithLabelValues("failed").Inc()
				return false, fmt.Errorf("commit cancelled: the guard's write was refused: %s", aws.ToString(reasons[i].Message))
			}
			if _, ok := parked[part]; ok {
				// The parked put itself was refused: nothing else can be done.
				p.metrics.Commits.WithLabelValues("failed").Inc()
				return false, fmt.Errorf("commit cancelled: parking the delta of %s was refused: %s", keys[part], aws.ToString(reasons[i].Message))
			}
			reason := ParkedRefused
			msg := aws.ToString(reasons[i].Message)
			switch {
			case strings.Contains(msg, "size"):
				reason = ParkedTooLarge
			case strings.Contains(msg, "type"), strings.Contains(msg, "document path"):
				reason = ParkedMalformed
			}
			parked[part] = parking{reason: reason, detail: msg}
			p.shapes.forget(keys[part].Key())
		default:
			p.metrics.Commits.WithLabelValues("failed").Inc()
			return false, fmt.Errorf("commit cancelled: item %d of the transaction: %s: %s", i, code(i), aws.ToString(reasons[i].Message))
		}
	}
	if shape {
		p.metrics.Conflicts.WithLabelValues(ConflictConditionFailed).Inc()
	}
	if conflict {
		p.metrics.Conflicts.WithLabelValues(ConflictTransactionConflict).Inc()
		p.countRetry("TransactWriteItems", classServer)
	}
	if throttle {
		p.countRetry("TransactWriteItems", classThrottle)
	}
	return true, nil
}

// ownerGuard marks the claim among a transaction's items (commitTx's owner);
// parts are 0…, quarantine items quarantineOwner(i).
const ownerGuard = -1

func quarantineOwner(i int) int { return -2 - i }

// quarantineOf returns the quarantine item an owner entry names.
func quarantineOf(owner int, qs []*quarantined) (*quarantined, bool) {
	if i := -2 - owner; i >= 0 && i < len(qs) {
		return qs[i], true
	}
	return nil, false
}

// quarantineFixes counts the quarantine items dropped (they exist) or
// truncated: each is a change a commit sends again at no attempt's cost.
func quarantineFixes(qs []*quarantined) int {
	n := 0
	for _, q := range qs {
		if q.exists {
			n++
		}
		if q.truncated {
			n++
		}
	}
	return n
}

// reportWrites are the updates of one part: the report item's, and one per
// entry that goes to an entry item; inline names the entries added to the
// report item's maps.
type reportWrites struct {
	updates []*ddbtypes.Update
	inline  [3][]string
}

// reportWrites builds the additive updates of one part of a report's delta
// against the report item's known shape (table.ReportUpdate has the rule).
func (p *Processor) reportWrites(k aggregates.ReportKey, delta *aggregates.Report, sh *shape, now string, opts table.UpdateOptions) (reportWrites, error) {
	w, err := table.ReportUpdateWith(p.cfg.Table, k, delta, sh.reportShape(), now, opts)
	return reportWrites{updates: w.Updates, inline: w.Inline}, err
}

// getItem reads one item of the ledger table with a consistent read; nil
// when absent.
func (p *Processor) getItem(ctx context.Context, k aggregates.Key) (map[string]ddbtypes.AttributeValue, error) {
	return p.getItemOf(ctx, p.cfg.Table, k)
}

// getCheckpoint reads a checkpoint item of the coordination table with a
// consistent read; nil when absent.
func (p *Processor) getCheckpoint(ctx context.Context, k aggregates.Key) (map[string]ddbtypes.AttributeValue, error) {
	return p.getItemOf(ctx, p.cfg.CoordinationTable, k)
}

func (p *Processor) getItemOf(ctx context.Context, tableName string, k aggregates.Key) (map[string]ddbtypes.AttributeValue, error) {
	var item map[string]ddbtypes.AttributeValue
	err := p.retry(ctx, "GetItem", func(ctx context.Context) error {
		out, err := p.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &tableName, Key: table.Key(k), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return err
		}
		item = out.Item
		return nil
	})
	return item, err
}
