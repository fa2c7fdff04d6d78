package processor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// This file commits plan layout 6's batches (docs/exactly-once.md, "Plan
// layout 6"): the groups planBatch6 plans (with open question 9, the
// branches-only staged items, when roll-ups are on), each one
// TransactWriteItems carrying what layout 4's carried (report parts,
// folds, quarantine items) and what the plan adds — the branches'
// applied counts and open marks, staging writes, the batch's roll-up
// delta items and the deletes of their staging items.

// commitBatch6 commits batch, (prev, to], under plan (layout 6) from its
// group next (0, or a pending batch's pendingNext).
func (p *Processor) commitBatch6(ctx context.Context, g *ShardGuard, batch []change, to string, plan batchPlan, next int, res *Result) error {
	if plan.lanes == 0 {
		// Roll-ups off ("m/e/6/0"): no roll-up delta record is folded (as in
		// a batch planned before roll-ups), no delta put; on a copy (a
		// plan read again may be "m/e/6/32").
		batch = withoutRollups(batch)
	}
	fold := aggregates.NewFold()
	for i := range batch {
		batch[i].addTo(fold)
	}
	var folds []*change
	if plan.lanes > 0 {
		folds = foldingChanges(batch)
	}
	b := batch6{label: streamLabel(g.stream), shard: g.shard, to: to}
	p6 := planBatch6(b, batch, fold, needingQuarantine(batch), folds, plan, plan6Options{branchesOnly: true})
	if len(p6.groups) == 0 && anyGuarded(batch) {
		// Claimed all the same (see commitBatch).
		p6.groups = []group6{{}}
	}
	n := len(p6.groups)
	digest := p6.digest()
	if pb := g.pending; pb != nil && (n != pb.groups || digest != pb.digest) {
		return fmt.Errorf("shard %s: the pending batch through %s was planned as %d groups (plan %s), now %d (plan %s): changed code mid-batch? See docs/runbook.md",
			g.shard, pb.to, pb.groups, pb.digest, n, digest)
	}
	openID := b.label + "~" + g.shard + "~" + to
	contribs := p6.groupContribs()
	for k := next; k < n; k++ {
		c := p6.commitOf(k, openID, contribs[k])
		// The staging reads come after this committer has seen pendingNext
		// = k: its own landing of group k-1, or the guard's consistent read
		// of the checkpoint it resumes from (S19-P6-2).
		if err := p.readStaging(ctx, g, c); err != nil {
			return fmt.Errorf("commit group %d of %d of the batch through %s: %w", k+1, n, to, err)
		}
		err := p.commitTx(ctx, g,
			func() ddbtypes.TransactWriteItem { return g.claimGroup(k, n, to, plan, digest) },
			func() { g.claimedGroup(k, n, to, plan, digest) }, p6.groups[k].parts, p6.groups[k].quarantine, p6.groups[k].folds,
			commitRef{id: g.shard + "~" + to + "~" + digest + "~g" + strconv.Itoa(k), rollups: plan.lanes > 0,
				from: batch[0].rec.SequenceNumber, to: to, g6: c})
		if err != nil {
			return fmt.Errorf("commit group %d of %d of the batch through %s: %w", k+1, n, to, err)
		}
		p.stagingGone(c)
		res.Runs++
	}
	p.account(batch, len(fold.Keys()) > 0, res)
	return nil
}

// streamLabel is a stream's label: the last element of its ARN.
func streamLabel(arn string) string {
	if i := strings.LastIndex(arn, "/"); i >= 0 {
		return arn[i+1:]
	}
	return arn
}

// commit6 is what group k of a layout-6 plan writes besides layout 4's
// parts, folds and quarantine items (commitRef.g6).
type commit6 struct {
	p  *plan6
	k  int
	id string // the open marks' batch id
	// contrib maps the group's parts (commitTx's index) to the delta item
	// (an index of p.items) their branch transition goes to; -1 for none.
	contrib []int
	// staged holds the staging items the group deletes, as read; gone the
	// ones found gone (or at another lastGroup): staging_gone.
	staged map[int]*table.Staged
	gone   map[int]bool
}

// groupContribs returns, per group, the delta item (an index of p.items)
// each of its parts' branch transition goes to, in the group's part
// order; -1 for a part that is no contributor.
func (p *plan6) groupContribs() [][]int {
	to := make([]int, len(p.parts))
	for i := range to {
		to[i] = -1
	}
	for s := range p.items {
		for _, i := range p.items[s].contributors {
			to[i] = s
		}
	}
	out := make([][]int, len(p.groups))
	for i := range p.parts {
		k := p.partGroup[i]
		out[k] = append(out[k], to[i])
	}
	return out
}

// commitOf returns group k's commit6; contrib is groupContribs()[k].
func (p *plan6) commitOf(k int, id string, contrib []int) *commit6 {
	return &commit6{p: p, k: k, id: id, contrib: contrib, staged: map[int]*table.Staged{}, gone: map[int]bool{}}
}

func (c *commit6) group() *group6 { return &c.p.groups[c.k] }

func (c *commit6) stagingKey(s int) aggregates.Key {
	b := c.p.batch
	return table.StagingKey(b.stagingPK(), c.p.items[s].stagingSK(b))
}

// readStaging reads, consistently, the staging item of every delta item
// group k puts and deletes the staging of, and keeps its values if its
// lastGroup is the item's klast. An item gone (or at another lastGroup,
// or damaged) is staging_gone only if a checkpoint read made after it
// still says pendingNext = k; otherwise the group landed (its landing
// deletes the items) and errGuardTaken says so.
func (p *Processor) readStaging(ctx context.Context, g *ShardGuard, c *commit6) error {
	return p.readStagingOf(ctx, g, c, c.group().deletes)
}

// readStagingOf is readStaging for the delta items items (indexes of
// c.p.items, each in c.group().deletes): each is kept (its values read
// again) or marked gone.
func (p *Processor) readStagingOf(ctx context.Context, g *ShardGuard, c *commit6, items []int) error {
	var gone []int
	for _, s := range items {
		key := c.stagingKey(s)
		item, err := p.getItemOf(ctx, p.cfg.CoordinationTable, key)
		if err != nil {
			return fmt.Errorf("read staging item %s: %w", key, err)
		}
		st, derr := table.DecodeStaging(item)
		if derr != nil || st == nil || st.LastGroup != c.p.items[s].klast {
			gone = append(gone, s)
			continue
		}
		c.staged[s] = st
		delete(c.gone, s)
	}
	if len(gone) == 0 {
		return nil
	}
	item, err := p.getCheckpoint(ctx, g.key)
	if err != nil {
		return fmt.Errorf("read checkpoint %s: %w", g.key, err)
	}
	cp, _ := table.DecodeCheckpoint(g.shard, item)
	if pb := cp.Pending; pb == nil || pb.To != c.p.batch.to || pb.Next != c.k {
		g.reset()
		p.metrics.Conflicts.WithLabelValues(ConflictDuplicate).Inc()
		return errGuardTaken
	}
	for _, s := range gone {
		c.gone[s] = true
		delete(c.staged, s)
	}
	return nil
}

// stagingGone counts and logs the staging items a landed group found
// gone: its delta items were put without the staged transitions.
func (p *Processor) stagingGone(c *commit6) {
	for s := range c.gone {
		p.metrics.Conflicts.WithLabelValues(ConflictStagingGone).Inc()
		p.cfg.Logger.Error("roll-up staging item gone before its delta group: the delta was put without the staged branch transitions; branches is off for its periods until ledgerctl reconcile --repair (quiescent)",
			"staging", c.stagingKey(s).String(), "delta", c.p.items[s].key(c.p.batch).String(), "group", c.k)
	}
}

// appliedWrites are the group's applied actions (step 5).
func (c *commit6) appliedWrites(coord string) ([]ddbtypes.TransactWriteItem, []table.AppliedCount) {
	var out []ddbtypes.TransactWriteItem
	var counts []table.AppliedCount
	for _, a := range c.group().applied {
		switch a.kind {
		case appliedOpen:
			out = append(out, table.OpenApplied(coord, a.count.Tenant, a.count.Branch, c.id))
		case appliedCountClose:
			out = append(out, table.CountAppliedClose(coord, a.count, c.id))
			counts = append(counts, a.count)
		default:
			out = append(out, table.CountApplied(coord, a.count))
			counts = append(counts, a.count)
		}
	}
	return out, counts
}

// rollupWrites appends the group's staging writes, delta puts and
// staging deletes to items: the staging writes carry, per period, the
// sum of the transitions of the group's own contributors to the item (0
// for a parked part); a delta put carries the plan's figures and, as
// branches, the staged values read plus the group's own contributors'.
// A period zero in figures and branches is left out of the put (the
// digest binds the item's key and planned figures, not its map), and an
// item left with no period is not put.
func (c *commit6) rollupWrites(p *Processor, parts []part, transitions []int64, items []ddbtypes.TransactWriteItem, owner []int, deltas []aggregates.Key, now time.Time) ([]ddbtypes.TransactWriteItem, []int, []aggregates.Key) {
	own := map[int]map[string]int64{}
	for i, s := range c.contrib {
		if s < 0 || i >= len(parts) {
			continue
		}
		t := transitions[i]
		if t == parkedPart {
			t = 0 // the count did not move
		}
		if own[s] == nil {
			own[s] = map[string]int64{}
		}
		own[s][parts[i].key.Period.String()] += t
	}
	g := c.group()
	coord := p.cfg.CoordinationTable
	for j, st := range g.staging {
		key := c.stagingKey(st.item)
		pers := make([]string, len(st.periods))
		vals := map[string]int64{}
		for x, per := range st.periods {
			pers[x] = per.String()
			vals[pers[x]] = own[st.item][pers[x]]
		}
		w := table.UpdateStaging(coord, key, pers, vals, c.k, now)
		if st.put {
			w = table.PutStaging(coord, key, vals, c.k, now)
		}
		items, owner = append(items, w), append(owner, stagingOwner(j))
	}
	at := now.Format(time.RFC3339Nano)
	for _, s := range g.puts {
		it := &c.p.items[s]
		periods := map[aggregates.Period]*aggregates.RollupDelta{}
		for per, d := range it.periods {
			nd := &aggregates.RollupDelta{Report: d.Report, Branches: own[s][per.String()]}
			if st := c.staged[s]; st != nil {
				nd.Branches += st.Periods[per.String()]
			}
			if !nd.IsZero() {
				periods[per] = nd
			}
		}
		if len(periods) == 0 {
			// Every period zero in figures and branches (a branches-only
			// item whose contributors crossed no zero): nothing to fold, so
			// no item. (build, session 21) The design put it with an empty
			// periods map; DynamoDB Local's stream hands such an INSERT
			// over with its periods attribute mangled (a string), which
			// the lane's consumer quarantines as shape and never folds.
			continue
		}
		item := table.EncodeRollupDelta(it.key(c.p.batch), it.rg.Currency, periods, at)
		items = append(items, ddbtypes.TransactWriteItem{Put: table.PutRollupDelta(p.cfg.Table, item)})
		owner = append(owner, deltaOwner(len(deltas)))
		deltas = append(deltas, table.KeyOf(item))
	}
	for j, s := range g.deletes {
		if c.gone[s] {
			continue
		}
		items = append(items, table.DeleteStaging(coord, c.stagingKey(s), c.p.items[s].klast))
		owner = append(owner, unstageOwner(j))
	}
	return items, owner, deltas
}

// cancelled reads a cancelled transaction's reasons for the group's
// staging deletes: one whose condition failed is read again as
// readStaging reads it (review of session 21, S21-P6-1): an item still at
// klast is kept, with its values as read now, and its delete sent again
// (a condition can fail on an item nothing changed: DynamoDB Local does so
// on an item a concurrent transaction it then rolled back had written,
// commitTx's recheck); one gone or changed while the checkpoint still
// says pendingNext = k is staging_gone, its delete dropped; a checkpoint
// moved on is errGuardTaken (the group landed under another committer).
// It reports whether it marked any item gone.
func (c *commit6) cancelled(ctx context.Context, p *Processor, g Guard, owner []int, tce *ddbtypes.TransactionCanceledException) (bool, error) {
	reasons := tce.CancellationReasons
	if len(reasons) > 0 && aws.ToString(reasons[0].Code) == "ConditionalCheckFailed" {
		return false, nil // the guard's
	}
	var again []int
	for i, r := range reasons {
		if i >= len(owner) {
			break
		}
		j, ok := unstageOf(owner[i])
		if !ok || j >= len(c.group().deletes) || aws.ToString(r.Code) != "ConditionalCheckFailed" {
			continue
		}
		if s := c.group().deletes[j]; !c.gone[s] {
			again = append(again, s)
		}
	}
	sg, ok := g.(*ShardGuard)
	if len(again) == 0 || !ok {
		return false, nil
	}
	before := len(c.gone)
	if err := p.readStagingOf(ctx, sg, c, again); err != nil {
		return false, err
	}
	for _, s := range again {
		if c.gone[s] {
			p.cfg.Logger.Warn("roll-up staging item changed after its read: its delete is dropped, the delta put without its staged transitions",
				"staging", c.stagingKey(s).String())
		} else {
			p.cfg.Logger.Warn("roll-up staging delete refused on an item read again unchanged: sent again",
				"staging", c.stagingKey(s).String())
		}
	}
	return len(c.gone) > before, nil
}

// goneCount is how many staging deletes the group dropped (nil: none).
func (c *commit6) goneCount() int {
	if c == nil {
		return 0
	}
	return len(c.gone)
}
