// Package rebucket moves a branch's history into its current business
// calendar: it stamps every transaction again with the periods its
// branch's calendar and its tenant's period types give it now, online,
// while the writer takes writes and the consumers run.
//
// It moves no money itself. Restamping a transaction is one conditional
// UpdateItem of the transaction item (its businessDate, periods and
// updatedAt); the item's stream record is a MODIFY whose old image holds the
// old stamp and whose new image the new one, and the consumers fold it as
// they fold every change: the contribution leaves its old periods and
// enters its new ones, in one delta, exactly once (docs/exactly-once.md).
// So a rebucket is exact for the same reasons the reports are, and
// reconcile checks it the same way.
//
// A run is safe to repeat and to interrupt: a transaction already in its
// current calendar is left alone (so a second run writes nothing), and each
// write is conditional on the item being as read (same version, createdAt
// and stamp): a client's change that lands first wins, and the transaction
// is read again and restamped only if the writer's own stamp of it is not
// current. docs/design.md, "Business calendars", has the argument and what
// a run costs.
package rebucket

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// API is the part of the DynamoDB API a rebucket uses.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// DefaultSettle is how long after a calendar change a rebucket waits
// before it reads a branch's transactions: at least the writers' directory
// cache lifetime (writer --directory-ttl, 5 s by default), so that every
// transaction written after the wait is stamped in the new calendar by the
// writer itself.
const DefaultSettle = 15 * time.Second

// Options tune a run.
type Options struct {
	// Settle: see DefaultSettle (0: DefaultSettle; negative: no wait).
	Settle time.Duration
	// Parallel is the number of transactions restamped at once (default 8).
	Parallel int
	// Progress, if set, is called from one goroutine at a time after each
	// page of transactions and each branch.
	Progress func(Progress)
	// Now and Sleep default to the clock; tests replace them.
	Now   func() time.Time
	Sleep func(context.Context, time.Duration) error
}

// Progress is how far a run has come.
type Progress struct {
	Branch              string // the branch being moved
	Branches, Done      int    // branches in scope, and done
	Read, Moved, Failed int    // transactions read and restamped so far
	Waiting             time.Duration
}

// Result says what a run did.
type Result struct {
	Branches     int
	Transactions int // read
	Moved        int // restamped
	Current      int // already in the current calendar
	Invalid      int // not valid transactions: contribute nothing, left alone
	Deleted      int // tombstones of deleted transactions: left alone
	Unplaceable  int // valid, but without periods in the current calendar: left alone (ErrUnplaceable)
	Retried      int // writes that found the item changed since read, and read it again
	WriteUnits   float64
}

// ErrScope is returned for a scope without a tenant.
var ErrScope = errors.New("rebucket: a tenant is needed")

// Run moves every transaction of one branch (tenant and branch set) or of
// every branch of a tenant (branch empty) into its current calendar.
func Run(ctx context.Context, api API, tableName, tenant, branch string, opts Options) (Result, error) {
	if tenant == "" {
		return Result{}, ErrScope
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 8
	}
	if opts.Settle == 0 {
		opts.Settle = DefaultSettle
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Sleep == nil {
		opts.Sleep = sleep
	}
	branches := []string{branch}
	if branch == "" {
		var err error
		if branches, err = listBranches(ctx, api, tableName, tenant); err != nil {
			return Result{}, err
		}
	}
	r := &run{api: api, table: tableName, tenant: tenant, opts: opts}
	r.progress.Branches = len(branches)
	for _, b := range branches {
		if err := r.branch(ctx, b); err != nil {
			return r.res, fmt.Errorf("rebucket %s/%s: %w", tenant, b, err)
		}
		r.res.Branches++
		r.report(func(p *Progress) { p.Done++ })
	}
	if r.res.Unplaceable > 0 {
		return r.res, fmt.Errorf("rebucket %s: %d %w", tenant, r.res.Unplaceable, ErrUnplaceable)
	}
	return r.res, nil
}

type run struct {
	api    API
	table  string
	tenant string
	opts   Options

	mu       sync.Mutex // guards res, progress and the callback
	res      Result
	progress Progress
}

func (r *run) report(change func(*Progress)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	change(&r.progress)
	if r.opts.Progress != nil {
		r.opts.Progress(r.progress)
	}
}

func (r *run) count(change func(*Result)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	change(&r.res)
}

// maxPasses bounds how often one branch is read again because its calendar
// changed while it was being moved.
const maxPasses = 3

// ErrCalendarChanging is returned for a branch whose calendar (or its
// tenant's period types) changed during every one of maxPasses passes.
var ErrCalendarChanging = errors.New("the calendar changed during every pass: run again once it stays put")

// ErrUnplaceable is returned (wrapped) at the end of a run that found
// transactions the current calendar gives no periods (Result.Unplaceable):
// every other transaction is moved, those are left as they are.
var ErrUnplaceable = errors.New("transactions have no periods in their branch's current calendar (outside the years 0000 to 9999): left in their old periods")

// branch moves one branch: it waits until the writers stamp in the
// branch's current calendar, then restamps what is not. A calendar that
// changed while the branch was read (the writers stamp in the newer one,
// the pass restamped in the older one) sends it round again.
func (r *run) branch(ctx context.Context, branch string) error {
	for pass := 1; ; pass++ {
		bc, err := r.settled(ctx, branch)
		if err != nil {
			return err
		}
		if err := r.pass(ctx, branch, bc); err != nil {
			return err
		}
		after, err := table.LoadBranchCalendar(ctx, r.api, r.table, r.tenant, branch)
		if err != nil {
			return err
		}
		if sameCalendar(bc, after) {
			return nil
		}
		if pass == maxPasses {
			return ErrCalendarChanging
		}
	}
}

// settled reads the branch's calendar once --settle has passed since its
// last change: waiting, and reading again after the wait, until a read
// finds no change within the last --settle (a change made during a wait
// is waited for in turn).
func (r *run) settled(ctx context.Context, branch string) (table.BranchCalendar, error) {
	for {
		bc, err := table.LoadBranchCalendar(ctx, r.api, r.table, r.tenant, branch)
		if err != nil {
			return table.BranchCalendar{}, err
		}
		wait := bc.ChangedAt.Add(r.opts.Settle).Sub(r.opts.Now())
		if r.opts.Settle <= 0 || wait <= 0 {
			r.report(func(p *Progress) { p.Branch, p.Waiting = branch, 0 })
			return bc, nil
		}
		r.report(func(p *Progress) { p.Branch, p.Waiting = branch, wait })
		if err := r.opts.Sleep(ctx, wait); err != nil {
			return table.BranchCalendar{}, err
		}
	}
}

// sameCalendar reports whether a and b are the same reading of a branch's
// calendar: the same calendar and period types, unchanged since.
func sameCalendar(a, b table.BranchCalendar) bool {
	return a.Calendar.Equal(b.Calendar) && slices.Equal(a.Periods, b.Periods) && a.ChangedAt.Equal(b.ChangedAt)
}

// pass restamps the branch's transactions into bc.
func (r *run) pass(ctx context.Context, branch string, bc table.BranchCalendar) error {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(r.table),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": table.AttrPK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": table.S(aggregates.TransactionPK(r.tenant, branch))},
		ConsistentRead:            aws.Bool(true),
	}
	pages := dynamodb.NewQueryPaginator(r.api, in)
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("read transactions: %w", err)
		}
		if err := r.page(ctx, bc, out.Items); err != nil {
			return err
		}
		r.report(func(p *Progress) { p.Read += len(out.Items) })
	}
	return nil
}

// page restamps the items of one page, Parallel at a time.
func (r *run) page(ctx context.Context, bc table.BranchCalendar, items []map[string]ddbtypes.AttributeValue) error {
	work := make(chan map[string]ddbtypes.AttributeValue)
	errc := make(chan error, r.opts.Parallel)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range r.opts.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for item := range work {
				if err := r.restamp(ctx, bc, item); err != nil {
					errc <- err
					cancel()
					return
				}
			}
		}()
	}
feed:
	for _, item := range items {
		select {
		case work <- item:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	return ctx.Err()
}

// maxAttempts bounds how often one transaction is read again because a
// client changed it between the read and the write.
const maxAttempts = 10

// restamp puts one transaction into its current calendar, unless it is
// there already or is not a valid transaction.
func (r *run) restamp(ctx context.Context, bc table.BranchCalendar, item map[string]ddbtypes.AttributeValue) error {
	k := table.KeyOf(item)
	for attempt := 1; ; attempt++ {
		r.count(func(res *Result) {
			if attempt == 1 {
				res.Transactions++
			} else {
				res.Retried++
			}
		})
		tx, err := parseUnstamped(item)
		if errors.Is(err, aggregates.ErrDeleted) {
			r.count(func(res *Result) { res.Deleted++ })
			return nil // a tombstone: no transaction, nothing to move
		}
		if err != nil {
			r.count(func(res *Result) { res.Invalid++ })
			return nil // contributes nothing wherever it is stamped
		}
		want, err := bc.Stamp(tx.CreatedAt)
		if errors.Is(err, aggregates.ErrPeriodOutOfRange) {
			// No stamp can hold it (the writer refuses such a createdAt
			// in this calendar): left in its old periods, counted, and the
			// run goes on with the others.
			r.count(func(res *Result) { res.Unplaceable++ })
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		if tx.Stamped && tx.Stamp.Equal(want) {
			r.count(func(res *Result) { res.Current++ })
			return nil
		}
		units, err := r.write(ctx, k, item, want)
		if err == nil {
			r.count(func(res *Result) { res.Moved++; res.WriteUnits += units })
			r.report(func(p *Progress) { p.Moved++ })
			return nil
		}
		var ccf *ddbtypes.ConditionalCheckFailedException
		if !errors.As(err, &ccf) || attempt == maxAttempts {
			r.report(func(p *Progress) { p.Failed++ })
			return fmt.Errorf("restamp %s: %w", k, err)
		}
		// Changed since read (a client's edit or delete): read it again.
		if ccf.Item != nil {
			item = ccf.Item
			continue
		}
		out, err := r.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.table), Key: table.Key(k), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return fmt.Errorf("read %s again: %w", k, err)
		}
		if out.Item == nil {
			return nil // compacted: nothing to move
		}
		item = out.Item
	}
}

// parseUnstamped parses a transaction item; one whose only fault is its
// stamp (damaged by another path: quarantined, counting nowhere) is read
// as if it had none, so that it is stamped again — its stream record then
// brings its amount into the reports (invalid old image, valid new one).
func parseUnstamped(item map[string]ddbtypes.AttributeValue) (aggregates.Transaction, error) {
	tx, err := table.ParseTransaction(item)
	var inv *aggregates.InvalidError
	if err == nil || !errors.As(err, &inv) || inv.Reason != aggregates.ReasonPeriods {
		return tx, err
	}
	bare := maps.Clone(item)
	delete(bare, aggregates.AttrBusinessDate)
	delete(bare, aggregates.AttrPeriods)
	return table.ParseTransaction(bare)
}

// write restamps the item at k, on condition that it is still as read: same
// version, createdAt, stamp (or still without one) and change count. It is
// the item's next counted change (docs/exactly-once.md, "The design:
// counted changes", W): changes + 1 and the sig of the item it leaves,
// which it computes from item (the count as read is its condition), and
// no probe.
func (r *run) write(ctx context.Context, k aggregates.Key, item map[string]ddbtypes.AttributeValue, s aggregates.Stamp) (float64, error) {
	names := map[string]string{
		"#bd": aggregates.AttrBusinessDate, "#p": aggregates.AttrPeriods, "#u": table.AttrUpdatedAt,
		"#v": table.AttrVersion, "#c": table.AttrCreatedAt, "#ch": table.AttrChanges, "#sig": table.AttrSig,
		"#probe": table.AttrProbe,
	}
	updatedAt := r.opts.Now().UTC().Format(time.RFC3339Nano)
	next := maps.Clone(item)
	next[aggregates.AttrBusinessDate] = table.S(s.BusinessDate.String())
	next[aggregates.AttrPeriods] = table.S(s.EncodePeriods())
	next[table.AttrUpdatedAt] = table.S(updatedAt)
	changes, _ := table.Changes(item)
	table.Count(next, changes+1)
	values := map[string]ddbtypes.AttributeValue{
		":bd": next[aggregates.AttrBusinessDate], ":p": next[aggregates.AttrPeriods], ":u": next[table.AttrUpdatedAt],
		":ch": next[table.AttrChanges], ":sig": next[table.AttrSig],
	}
	cond := "attribute_exists(#pk)"
	names["#pk"] = table.AttrPK
	for _, a := range []struct{ attr, name, value string }{
		{table.AttrVersion, "#v", ":v"}, {table.AttrCreatedAt, "#c", ":c"},
		{aggregates.AttrBusinessDate, "#bd", ":obd"}, {aggregates.AttrPeriods, "#p", ":op"},
		{table.AttrChanges, "#ch", ":och"},
	} {
		if v, ok := item[a.attr]; ok {
			cond += " AND " + a.name + " = " + a.value
			values[a.value] = v
		} else {
			cond += " AND attribute_not_exists(" + a.name + ")"
		}
	}
	out, err := r.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(r.table), Key: table.Key(k),
		UpdateExpression:          aws.String("SET #bd = :bd, #p = :p, #u = :u, #ch = :ch, #sig = :sig REMOVE #probe"),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnConsumedCapacity:    ddbtypes.ReturnConsumedCapacityTotal,

		ReturnValuesOnConditionCheckFailure: ddbtypes.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err != nil {
		return 0, err
	}
	if out.ConsumedCapacity != nil && out.ConsumedCapacity.CapacityUnits != nil {
		return *out.ConsumedCapacity.CapacityUnits, nil
	}
	return 0, nil
}

// listBranches lists a tenant's branches (their ids), strongly consistent.
func listBranches(ctx context.Context, api API, tableName, tenant string) ([]string, error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(tableName),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": table.AttrPK, "#sk": table.AttrSK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": table.S(aggregates.BranchPK(tenant))},
		ProjectionExpression:      aws.String("#sk"),
		ConsistentRead:            aws.Bool(true),
	}
	var out []string
	pages := dynamodb.NewQueryPaginator(api, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("rebucket: list the branches of %s: %w", tenant, err)
		}
		for _, item := range page.Items {
			if sk, ok := table.String(item, table.AttrSK); ok {
				out = append(out, sk)
			}
		}
	}
	return out, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
