package processor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// The roll-up repair (docs/design.md "Reconcile and repair"; the roll-up
// review's holes 3 (d), 5 and 6 in docs/exactly-once.md). Every write it
// makes to a roll-up is a repair delta item put into a lane, folded by the
// lane's committer through the same exactly-once path as any delta, so a
// repair never races a committer on a partial:
//
//   - a damaged partial is moved: one transaction deletes it (its report
//     item on its updatedAt as read, its entry items on existing) and puts
//     its readable figures as a repair delta: exact, whatever runs;
//   - a parked partial delta is moved the same way (deleted on existing,
//     its delta put);
//   - a difference of figures or branches is put as one repair delta of
//     expected − stored, and only under the runbook's quiescent procedure
//     (writes disabled, consumers drained): computed under writes it may
//     count a change twice (hole 3);
//   - strays are deleted by Repair (their figures are in no sum).

// RollupRepairOptions tune RepairRollups.
type RollupRepairOptions struct {
	// Quiescent says the runbook's quiescent procedure holds: writes
	// disabled and the consumers drained. Without it a difference of
	// figures or branches is named (Refused), never put.
	Quiescent bool
	// Held, if set, says which roll-ups have a record in flight that names
	// them (InFlightResult.PeriodSettled): they are left alone, every other
	// period of the tenant is repaired.
	Held func(RollupCell) bool
}

// RollupRepairResult says what RepairRollups did: partials and parked
// deltas moved into a lane, repair deltas put for differences, and the
// roll-ups left alone: held (in flight), refused (a difference outside the
// quiescent procedure) or skipped (an item changed since it was read).
type RollupRepairResult struct {
	Moved, MovedParked, Deltas int
	Held, Refused, Skipped     []RollupCell
	// TooLarge are the roll-ups with a partial whose items and repair
	// delta do not fit one transaction (100 writes): left as they are, for
	// the quiescent procedure by hand (docs/runbook.md).
	TooLarge []RollupCell
	// Stuck are the roll-ups with stuck delta items (RollupDifference.Stuck)
	// left waiting outside the quiescent procedure: RedeliverWaiting puts
	// them back through a lane only under it (a delta merely late would be
	// folded twice).
	Stuck []RollupCell
}

// errTooManyWrites is a move that does not fit one transaction.
var errTooManyWrites = errors.New("the move does not fit one transaction (100 writes)")

// ErrNotQuiescent is why a difference of a roll-up's figures is not
// repaired outside the quiescent procedure.
var ErrNotQuiescent = errors.New("a roll-up difference is repaired by comparison only under the quiescent procedure (writes disabled, consumers drained: docs/runbook.md)")

// RepairRollups heals the roll-up differences of diffs (Rollup set; the
// others are Repair's), each in the transactions above. It returns an
// error only for a failure to reach the table; a roll-up whose items
// changed since they were read is skipped (reconcile again).
func RepairRollups(ctx context.Context, api ReconcileAPI, tableName string, diffs []Difference, now time.Time, opts RollupRepairOptions) (RollupRepairResult, error) {
	var res RollupRepairResult
	stamp := now.UTC().Format(time.RFC3339Nano)
	seq := 0
	claim := func(kind string) string {
		seq++
		return "REPAIR#" + stamp + "#" + kind + strconv.Itoa(seq)
	}
	for _, diff := range diffs {
		d := diff.Rollup
		if d == nil || d.Period.Type == "" {
			continue // not a roll-up, or a tenant not judged
		}
		if len(d.Stuck) > 0 && !opts.Quiescent {
			res.Stuck = append(res.Stuck, d.RollupCell)
		}
		if opts.Held != nil && opts.Held(d.RollupCell) {
			res.Held = append(res.Held, d.RollupCell)
			continue
		}
		intact, large := true, false
		for _, sr := range d.damaged {
			ok, err := moveDamagedPartial(ctx, api, tableName, d.RollupCell, sr, claim("M"), stamp)
			if errors.Is(err, errTooManyWrites) {
				intact, large = false, true
				continue
			}
			if err != nil {
				return res, fmt.Errorf("repair %s: move partial %s: %w", d.RollupCell, sr.Key.Key(), err)
			}
			if !ok {
				intact = false
				continue
			}
			res.Moved++
		}
		for _, item := range d.parked {
			r, _, err := table.DecodeParked(item)
			if err != nil {
				intact = false
				continue
			}
			b, err := table.ParkedBranches(item)
			if err != nil {
				intact = false
				continue
			}
			ok, err := moveIntoLane(ctx, api, tableName, d.RollupCell, &aggregates.RollupDelta{Report: *r, Branches: b}, claim("P"), stamp,
				[]ddbtypes.TransactWriteItem{{Delete: &ddbtypes.Delete{TableName: &tableName, Key: table.Key(table.KeyOf(item)), ConditionExpression: aws.String("attribute_exists(PK)")}}})
			if err != nil {
				return res, fmt.Errorf("repair %s: move parked delta %s: %w", d.RollupCell, table.KeyOf(item), err)
			}
			if !ok {
				intact = false
				continue
			}
			res.MovedParked++
		}
		switch {
		case large:
			res.TooLarge = append(res.TooLarge, d.RollupCell)
			continue
		case !intact:
			res.Skipped = append(res.Skipped, d.RollupCell)
			continue
		}
		if !d.Differs() {
			continue
		}
		if !opts.Quiescent {
			res.Refused = append(res.Refused, d.RollupCell)
			continue
		}
		fix := &aggregates.RollupDelta{Report: *negReport(&d.Stored.Report), Branches: d.Expected.Branches - d.Stored.Branches}
		fix.Report.Merge(&d.Expected.Report)
		fix.Prune()
		// The difference's delta items are independent puts: a roll-up
		// with more breakdown names than one transaction holds is put in
		// several (under the quiescent procedure what one landed is
		// counted by the next reconcile, which finds the rest).
		c := claim("D")
		items := table.RollupDeltaItems(d.Tenant, aggregates.RollupLane(c), c, d.Currency, map[aggregates.Period]*aggregates.RollupDelta{d.Period: fix}, stamp)
		for i := 0; i < len(items); i += 100 {
			var puts []ddbtypes.TransactWriteItem
			for _, it := range items[i:min(i+100, len(items))] {
				puts = append(puts, ddbtypes.TransactWriteItem{Put: table.PutRollupDelta(tableName, it)})
			}
			if _, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: puts}); err != nil {
				return res, fmt.Errorf("repair %s: put repair delta: %w", d.RollupCell, err)
			}
		}
		if len(items) > 0 {
			res.Deltas++
		}
	}
	return res, nil
}

// moveDamagedPartial deletes a damaged partial's items, on condition that
// the report item is as read (its updatedAt, or still absent) and every
// entry item still exists, and puts their readable figures as a repair
// delta, in one transaction. ok is false when the condition failed.
func moveDamagedPartial(ctx context.Context, api ReconcileAPI, tableName string, c RollupCell, sr *table.StoredReport, claim, stamp string) (bool, error) {
	figures, _ := sr.DecodeRollup()
	var ops []ddbtypes.TransactWriteItem
	if sr.Item != nil {
		del := &ddbtypes.Delete{TableName: &tableName, Key: table.Key(sr.Key.Key())}
		if u, ok := sr.Item[table.AttrUpdatedAt]; ok {
			del.ConditionExpression = aws.String("#u = :u")
			del.ExpressionAttributeNames = map[string]string{"#u": table.AttrUpdatedAt}
			del.ExpressionAttributeValues = map[string]ddbtypes.AttributeValue{":u": u}
		} else {
			del.ConditionExpression = aws.String("attribute_exists(PK) AND attribute_not_exists(#u)")
			del.ExpressionAttributeNames = map[string]string{"#u": table.AttrUpdatedAt}
		}
		ops = append(ops, ddbtypes.TransactWriteItem{Delete: del})
	}
	for _, e := range sr.Entries {
		ops = append(ops, ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{TableName: &tableName, Key: table.Key(table.KeyOf(e)), ConditionExpression: aws.String("attribute_exists(PK)")}})
	}
	return moveIntoLane(ctx, api, tableName, c, figures, claim, stamp, ops)
}

// moveIntoLane writes, in one transaction, ops and the repair delta items
// of d for cell c (lane aggregates.RollupLane(claim)); ok is false when a
// condition failed (nothing landed). A transaction over 100 actions is
// errTooManyWrites, and nothing is sent.
func moveIntoLane(ctx context.Context, api ReconcileAPI, tableName string, c RollupCell, d *aggregates.RollupDelta, claim, stamp string, ops []ddbtypes.TransactWriteItem) (bool, error) {
	d.Prune()
	items := table.RollupDeltaItems(c.Tenant, aggregates.RollupLane(claim), claim, c.Currency, map[aggregates.Period]*aggregates.RollupDelta{c.Period: d}, stamp)
	for _, it := range items {
		ops = append(ops, ddbtypes.TransactWriteItem{Put: table.PutRollupDelta(tableName, it)})
	}
	if len(ops) == 0 {
		return true, nil
	}
	if len(ops) > 100 {
		return false, fmt.Errorf("%d writes: %w", len(ops), errTooManyWrites)
	}
	_, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: ops})
	var tce *ddbtypes.TransactionCanceledException
	if errors.As(err, &tce) {
		return false, nil
	}
	return err == nil, err
}

// negReport returns −r.
func negReport(r *aggregates.Report) *aggregates.Report {
	out := &aggregates.Report{Totals: r.Totals.Neg()}
	for _, dim := range aggregates.Dimensions {
		for name, t := range r.Breakdowns[dim] {
			if out.Breakdowns[dim] == nil {
				out.Breakdowns[dim] = map[string]aggregates.Totals{}
			}
			out.Breakdowns[dim][name] = t.Neg()
		}
	}
	return out
}

// passOnRollupShare deletes one parked branch-report delta and, when it
// carries a roll-up share (table.RollupShare), puts that share as a repair
// delta in the same transaction (R-a: the branch repair passes on to the
// roll-up only the shares of the parked deltas it deletes, never new −
// old). The claim is the parked item's key, so a lost answer's retry fails
// on both conditions and lands nothing twice.
func passOnRollupShare(ctx context.Context, api ReconcileAPI, tableName string, k aggregates.ReportKey, item map[string]ddbtypes.AttributeValue, stamp string) error {
	pk := table.KeyOf(item)
	del := ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{TableName: &tableName, Key: table.Key(pk), ConditionExpression: aws.String("attribute_exists(PK)")}}
	cur, ok := table.RollupShare(item)
	r, _, err := table.DecodeParked(item)
	if !ok || err != nil {
		_, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{del}})
		var tce *ddbtypes.TransactionCanceledException
		if errors.As(err, &tce) {
			return nil // deleted meanwhile
		}
		return err
	}
	c := RollupCell{Tenant: k.Tenant, Currency: cur, Period: k.Period}
	claim := "PARKED#" + k.Branch + "#" + pk.SK
	_, err = moveIntoLane(ctx, api, tableName, c, &aggregates.RollupDelta{Report: *r}, claim, stamp, []ddbtypes.TransactWriteItem{del})
	return err
}

// RedeliverWaiting re-delivers the roll-up delta items waiting in a
// tenant's lanes whose periods held (nil: none) does not name, each in one
// transaction that deletes it (on attribute_exists) and puts its copy
// under a new claim (REDELIVER#{time}#{its sort key}), whose INSERT record
// the lane's consumer folds. It is for the quiescent procedure only: with
// writes disabled and the consumers drained, a delta item still waiting
// whose periods no in-flight record names was never read from the stream
// (its record trimmed, the review's hole 3 (a)), so the copy is its only
// fold; while consumers run, the item may simply not be folded yet, and
// its record would be folded besides the copy. It returns how many items
// it re-delivered; an item that does not decode is left (a stray, which
// Repair deletes).
func RedeliverWaiting(ctx context.Context, api ReconcileAPI, tableName, tenant string, now time.Time, held func(RollupCell) bool) (int, error) {
	stamp := now.UTC().Format(time.RFC3339Nano)
	var items []*table.RollupDeltaItem
	var stats ReconcileStats
	if _, err := readLanes(ctx, api, tableName, tenant, &stats, func(d *table.RollupDeltaItem, _ time.Time) { items = append(items, d) }, func(aggregates.Key, error) {}); err != nil {
		return 0, fmt.Errorf("redeliver roll-up deltas of %s: %w", tenant, err)
	}
	n := 0
next:
	for _, d := range items {
		for p := range d.Periods {
			if held != nil && held(RollupCell{Tenant: tenant, Currency: d.Currency, Period: p}) {
				continue next
			}
		}
		claim := "REDELIVER#" + stamp + "#" + d.Key.SK
		k := aggregates.RollupDeltaKey(tenant, aggregates.RollupLane(claim), claim, d.Currency, 0)
		_, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
			{Delete: table.DeleteRollupDelta(tableName, d.Key)},
			{Put: table.PutRollupDelta(tableName, table.EncodeRollupDelta(k, d.Currency, d.Periods, stamp))},
		}})
		var tce *ddbtypes.TransactionCanceledException
		switch {
		case errors.As(err, &tce):
			continue // folded meanwhile: not waiting any more
		case err != nil:
			return n, fmt.Errorf("redeliver roll-up delta %s: %w", d.Key, err)
		}
		n++
	}
	return n, nil
}
