// Package compact retires the tombstones of deleted transactions
// (docs/design.md, "Transaction"; docs/exactly-once.md, "The design:
// counted changes"): once the stream no longer holds a tombstone's
// records, it marks the tombstone (a counted change) and hard-deletes it
// in a transaction that adds the key's count to its branch's retired count
// (table.MarkTombstone, table.RetireTombstone), so that the number of
// stream records a branch's items ever produced stays readable (the sum
// of the changes of its items plus retired) while tombstones do not pile
// up.
//
// A run is safe to repeat, to interrupt and to run while the writer and
// the consumers run: each step is one conditional transaction (the
// tombstone still as read, or as marked, and no rebase of its branch
// running), so a tombstone is retired at most once and a count is never
// moved without its delete; a tombstone a stopped run marked is retired
// by the next.
package compact

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// API is the part of the DynamoDB API a compaction uses.
type API interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// StreamRetention is how long DynamoDB Streams keeps a record: 24 hours
// (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Streams.html).
const StreamRetention = 24 * time.Hour

// MinOlderThan is the youngest tombstone a run may retire: one whose
// records the stream may still hold would be counted by the consumers
// as a record after its REMOVE, out of order with its retirement.
const MinOlderThan = StreamRetention

// DefaultOlderThan is the stream's retention plus a margin of as much
// again (a consumer catching up after a day's outage still finds the
// records of the tombstones it is about to read).
const DefaultOlderThan = 2 * StreamRetention

// ErrTooYoung is returned for an OlderThan below MinOlderThan.
var ErrTooYoung = fmt.Errorf("compact: tombstones younger than the stream's retention (%s) are kept", MinOlderThan)

// Options tune a run.
type Options struct {
	// OlderThan: the tombstones retired are those deleted at least this
	// long ago (0: DefaultOlderThan; below MinOlderThan: ErrTooYoung).
	OlderThan time.Duration
	// Now defaults to the clock.
	Now func() time.Time
	// Progress, if set, is called after each page of the scan.
	Progress func(Result)
	// Parallel is how many branches' tombstones of a page are retired at
	// once (0: DefaultParallel); a branch's own are retired one at a time,
	// as each retirement updates the branch's applied item. Each
	// retirement is two round trips in sequence: one at a time, a run
	// retires a few dozen a second for the whole table, fewer than one
	// tenant at its write budget can delete (the adversarial review of
	// session 16, C16-3).
	Parallel int
}

// DefaultParallel is Options.Parallel's default.
const DefaultParallel = 8

// Result says what a run did.
type Result struct {
	Scanned    int   // items the scan read (what DynamoDB bills)
	Tombstones int   // tombstones found
	Compacted  int   // retired: deleted, their counts moved into retired
	Young      int   // deleted less than OlderThan ago: kept
	Uncounted  int   // without a change count (another path's): kept, a rebase gives them one
	Changed    int   // written since the scan read them (a probe), or in a conflicting transaction: kept, retired by a later run
	Rebasing   int   // of a branch a rebase runs on: kept, retired by a later run
	Failed     int   // refused as malformed (a damaged applied item): kept, named in Run's error
	Retired    int64 // the records their retirement added to retired counts (each key's count after its mark)
}

// add adds o's counts to r's.
func (r *Result) add(o Result) {
	r.Scanned += o.Scanned
	r.Tombstones += o.Tombstones
	r.Compacted += o.Compacted
	r.Young += o.Young
	r.Uncounted += o.Uncounted
	r.Changed += o.Changed
	r.Rebasing += o.Rebasing
	r.Failed += o.Failed
	r.Retired += o.Retired
}

// Run retires every tombstone of ledgerTable deleted at least
// opts.OlderThan ago, moving its count into its branch's applied item in
// the coordination table coord (which must be another table:
// table.CheckCoordinationTable). A tombstone whose step DynamoDB refuses
// as malformed (a ValidationException: its branch's applied item holds a
// count of another type) is kept and the run goes on with the others;
// the error then names each (ErrMalformed), after the scan's end. Any
// other error stops the run.
func Run(ctx context.Context, api API, ledgerTable, coord string, opts Options) (Result, error) {
	if err := table.CheckCoordinationTable(ledgerTable, coord); err != nil {
		return Result{}, fmt.Errorf("compact: %w", err)
	}
	if opts.OlderThan == 0 {
		opts.OlderThan = DefaultOlderThan
	}
	if opts.OlderThan < MinOlderThan {
		return Result{}, ErrTooYoung
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Parallel <= 0 {
		opts.Parallel = DefaultParallel
	}
	now := opts.Now()
	cut := now.Add(-opts.OlderThan)
	runID := fmt.Sprintf("compact-%d", now.UnixNano())
	var res Result
	// Whole items: a mark's sig digests the whole tombstone. Eventually
	// consistent (half the read units of a strongly consistent scan):
	// every step is conditioned on the count the scan read, which every
	// write of a tombstone moves, so a stale item fails its step and is
	// kept for a later run (Changed), and a tombstone the scan does not
	// see yet is retired by a later run (the adversarial review of session
	// 16, cost).
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(ledgerTable),
		ConsistentRead:            aws.Bool(false),
		FilterExpression:          aws.String("attribute_exists(#del) AND begins_with(#pk, :t)"),
		ExpressionAttributeNames:  map[string]string{"#pk": table.AttrPK, "#del": table.AttrDeletedAt},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":t": table.S(aggregates.TenantPrefix)},
	}
	pages := dynamodb.NewScanPaginator(api, in)
	var malformed []error
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return res, errors.Join(append(malformed, fmt.Errorf("compact: scan %s: %w", ledgerTable, err))...)
		}
		res.Scanned += int(out.ScannedCount)
		page, bad, err := retirePage(ctx, api, ledgerTable, coord, runID, out.Items, cut, opts.Parallel)
		res.add(page)
		for _, e := range bad {
			if len(malformed) < maxNamed {
				malformed = append(malformed, e)
			}
		}
		if err != nil {
			return res, errors.Join(append(malformed, err)...)
		}
		if opts.Progress != nil {
			opts.Progress(res)
		}
	}
	if res.Failed > len(malformed) {
		malformed = append(malformed, fmt.Errorf("compact: %d more tombstones %s", res.Failed-len(malformed), ErrMalformed))
	}
	return res, errors.Join(malformed...)
}

// maxNamed bounds the tombstones Run's error names one by one.
const maxNamed = 10

// retirePage retires the tombstones among items: those of one branch in
// the order read, one at a time (each retirement updates the branch's
// applied item, and two at once would conflict on it), the branches'
// parallel at a time. It returns what it did, the errors of the
// tombstones refused as malformed (counted in Failed), and the first
// other error (which stops the page's other retirements: each is one
// conditional transaction, so one stopped half-way is finished or kept by
// a later run).
func retirePage(ctx context.Context, api API, ledgerTable, coord, runID string, items []map[string]ddbtypes.AttributeValue, cut time.Time, parallel int) (Result, []error, error) {
	var groups [][]map[string]ddbtypes.AttributeValue
	at := map[string]int{}
	for _, item := range items {
		pk, _ := table.String(item, table.AttrPK)
		i, ok := at[pk]
		if !ok {
			i = len(groups)
			at[pk] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], item)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan []map[string]ddbtypes.AttributeValue)
	var (
		mu    sync.Mutex
		total Result
		bad   []error
		fatal error
		wg    sync.WaitGroup
	)
	for range min(parallel, max(len(groups), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for group := range work {
				for _, item := range group {
					var r Result
					err := retire(ctx, api, ledgerTable, coord, runID, item, cut, &r)
					mu.Lock()
					total.add(r)
					stop := false
					switch {
					case errors.Is(err, ErrMalformed):
						total.Failed++
						bad = append(bad, err)
					case err != nil:
						if fatal == nil {
							fatal = err
						}
						cancel()
						stop = true
					}
					mu.Unlock()
					if stop {
						break
					}
				}
			}
		}()
	}
feed:
	for _, group := range groups {
		select {
		case work <- group:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if fatal == nil && ctx.Err() != nil {
		fatal = ctx.Err()
	}
	return total, bad, fatal
}

// ErrMalformed wraps the error of a tombstone's step that DynamoDB refused
// as malformed (a ValidationException, or a cancellation for a
// ValidationError): another path damaged an item the step writes, most
// likely its branch's applied item (a retired count that is no number).
// The tombstone is kept; the operator repairs the item and runs again.
var ErrMalformed = errors.New("refused as malformed")

// retire retires one tombstone the scan read (the whole item), if it is
// old enough: it marks it (unless a run that stopped half-way marked it
// already) and then deletes it with its count (table.MarkTombstone,
// table.RetireTombstone).
func retire(ctx context.Context, api API, ledgerTable, coord, runID string, item map[string]ddbtypes.AttributeValue, cut time.Time, res *Result) error {
	k := table.KeyOf(item)
	if !aggregates.IsTransactionKey(k.PK) {
		return nil // deletedAt on an item of another kind: not a tombstone
	}
	res.Tombstones++
	del, _ := table.String(item, table.AttrDeletedAt)
	at, err := time.Parse(time.RFC3339Nano, del)
	if err != nil || !at.Before(cut) {
		// A deletedAt that is no time was not written by the writer:
		// kept, as a young one is.
		res.Young++
		return nil
	}
	c, ok := table.Changes(item)
	if !ok {
		res.Uncounted++
		return nil
	}
	id, marked := table.String(item, table.AttrCompacting)
	if !marked {
		items, err := table.MarkTombstone(ledgerTable, coord, item, runID)
		if err != nil {
			return err
		}
		if done, err := transact(ctx, api, k, items, res); !done || err != nil {
			return err
		}
		id, c = runID, c+1
	}
	items, err := table.RetireTombstone(ledgerTable, coord, k, id, c)
	if err != nil {
		return err
	}
	done, err := transact(ctx, api, k, items, res)
	if done {
		res.Compacted++
		res.Retired += c
	}
	return err
}

// transact writes one step of a retirement: done when it landed; a step
// whose tombstone changed since it was read (or that conflicted with
// another write) or whose branch is being rebased is counted and left for
// a later run; one refused as malformed is an ErrMalformed.
func transact(ctx context.Context, api API, k aggregates.Key, items []ddbtypes.TransactWriteItem, res *Result) (bool, error) {
	_, err := api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	var tce *ddbtypes.TransactionCanceledException
	var apiErr smithy.APIError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &apiErr) && apiErr.ErrorCode() == "ValidationException":
		// DynamoDB Local answers a type mismatch in a transaction's update
		// so (table/second_review25_test.go).
		return false, fmt.Errorf("compact %s: %w: %w", k, ErrMalformed, err)
	case errors.As(err, &tce):
		code := func(i int) string {
			if i < len(tce.CancellationReasons) {
				return aws.ToString(tce.CancellationReasons[i].Code)
			}
			return ""
		}
		switch {
		case code(0) == "ConditionalCheckFailed", code(0) == "TransactionConflict", code(1) == "TransactionConflict":
			res.Changed++
			return false, nil
		case code(1) == "ConditionalCheckFailed":
			res.Rebasing++
			return false, nil
		case code(0) == "ValidationError", code(1) == "ValidationError":
			return false, fmt.Errorf("compact %s: %w: %w", k, ErrMalformed, err)
		}
	}
	return false, fmt.Errorf("compact %s: %w", k, err)
}
