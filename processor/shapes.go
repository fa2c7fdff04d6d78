package processor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// shape is what a report update needs to know of its item: which breakdown
// maps exist and which entries they hold; and, for the tenant roll-ups, the
// report's count and currency (docs/design.md "The number of branches
// that contributed"). The count is the one figure it holds: a branch
// report's part 0 sends it as a condition when it moves the count, so a
// stale count costs a cancelled transaction and a re-read, as a stale map
// does; the cache records count + d after each commit that landed.
type shape struct {
	present         [3]bool
	entries         [3]map[string]bool
	count           int64
	countDamaged    bool
	countFenced     bool // the count is protocol 4's fence (table.FencedHead)
	currency        string
	currencyDamaged bool
	// updatedAt is the item's updatedAt as read, or as the commit that
	// landed last set it: what tells an unchanged item from one changed
	// and changed back (same).
	updatedAt string
}

// reportShape is sh as table.ReportUpdate takes it.
func (sh *shape) reportShape() table.ReportShape {
	return table.ReportShape{Present: sh.present, Entries: sh.entries, Count: sh.count, CountDamaged: sh.countDamaged, CountFenced: sh.countFenced,
		Currency: sh.currency, CurrencyDamaged: sh.currencyDamaged, UpdatedAt: sh.updatedAt}
}

// same reports whether two shapes read of one item are alike: the same
// maps, names, count, currency and updatedAt. The count alone is no
// witness: another committer may have moved it and moved it back between
// a cancelled commit and its re-read (a hot branch's records on two
// shards), and every commit sets updatedAt (docs/exactly-once.md, "Tenant
// roll-ups", review of session 16, hole S16-1).
func (sh *shape) same(o *shape) bool {
	if sh == nil || o == nil {
		return sh == o
	}
	if sh.present != o.present || sh.count != o.count || sh.countDamaged != o.countDamaged || sh.countFenced != o.countFenced ||
		sh.currency != o.currency || sh.currencyDamaged != o.currencyDamaged || sh.updatedAt != o.updatedAt {
		return false
	}
	for d := range sh.entries {
		if (sh.entries[d] == nil) != (o.entries[d] == nil) || len(sh.entries[d]) != len(o.entries[d]) {
			return false
		}
		for n := range sh.entries[d] {
			if !o.entries[d][n] {
				return false
			}
		}
	}
	return true
}

// shapeCache remembers report shapes between commits so that a steady stream
// reads nothing; a stale shape only costs a cancelled transaction (its
// conditions fail) and a re-read. Shapes are immutable once stored.
type shapeCache struct {
	mu  sync.Mutex
	m   map[aggregates.Key]*shape
	max int
}

func newShapeCache(max int) *shapeCache { return &shapeCache{m: map[aggregates.Key]*shape{}, max: max} }

func (c *shapeCache) forget(k aggregates.Key) {
	c.mu.Lock()
	delete(c.m, k)
	c.mu.Unlock()
}

func (c *shapeCache) store(k aggregates.Key, s *shape) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		clear(c.m) // crude but bounded: the next commits re-read what they need
	}
	c.m[k] = s
}

// applied records the shape of k after a commit, written at now, that
// added the names of inline to its maps, d to its count and (when not "")
// set its currency. A parked part is not applied: its item did not change.
func (c *shapeCache) applied(k aggregates.Key, before *shape, inline [3][]string, d int64, currency, now string) {
	after := &shape{present: before.present, count: before.count + d, countDamaged: before.countDamaged, countFenced: before.countFenced,
		currency: before.currency, currencyDamaged: before.currencyDamaged, updatedAt: now}
	if currency != "" {
		after.currency = currency
	}
	for _, d := range aggregates.Dimensions {
		if len(inline[d]) == 0 {
			after.entries[d] = before.entries[d]
			continue
		}
		after.present[d] = true
		after.entries[d] = make(map[string]bool, len(before.entries[d])+len(inline[d]))
		for n := range before.entries[d] {
			after.entries[d][n] = true
		}
		for _, n := range inline[d] {
			after.entries[d][n] = true
		}
	}
	c.store(k, after)
}

// get returns the shapes of keys, reading the ones not cached with one
// consistent BatchGetItem per 100 keys.
func (c *shapeCache) get(ctx context.Context, p *Processor, keys []aggregates.ReportKey) (map[aggregates.Key]*shape, error) {
	return c.getFresh(ctx, p, keys, nil)
}

// getFresh is get, reading the keys in fresh from the table even when
// cached. A shape a park is decided on must be one (commitTx): the cache
// is shared by every consumer of the Processor (the poller's readers of
// all its shards), and one of them may store, after the shape was
// forgotten, a shape it read before the item changed (a late answer),
// which would look like "the item as it was sent" (docs/exactly-once.md,
// review of session 18, hole S18-P1).
func (c *shapeCache) getFresh(ctx context.Context, p *Processor, keys []aggregates.ReportKey, fresh map[aggregates.Key]bool) (map[aggregates.Key]*shape, error) {
	out := make(map[aggregates.Key]*shape, len(keys))
	var missing []aggregates.Key
	c.mu.Lock()
	for _, rk := range keys {
		k := rk.Key()
		if s, ok := c.m[k]; ok && !fresh[k] {
			out[k] = s
		} else {
			missing = append(missing, k)
		}
	}
	c.mu.Unlock()
	for len(missing) > 0 {
		n := min(len(missing), 100)
		read, err := p.readShapes(ctx, missing[:n])
		if err != nil {
			return nil, err
		}
		for k, s := range read {
			out[k] = s
			c.store(k, s)
		}
		missing = missing[n:]
	}
	return out, nil
}

func (p *Processor) readShapes(ctx context.Context, keys []aggregates.Key) (map[aggregates.Key]*shape, error) {
	items, err := p.batchGet(ctx, keys, table.ReportShapeAttributes()...)
	if err != nil {
		return nil, fmt.Errorf("read report shapes: %w", err)
	}
	out := make(map[aggregates.Key]*shape, len(keys))
	for _, k := range keys {
		out[k] = shapeOf(items[k]) // an absent item has no maps
	}
	return out, nil
}

// batchGet reads up to 100 distinct items with consistent reads, projecting
// the keys and attrs (whole items without attrs), retrying unprocessed keys with backoff. Absent items
// are absent from the result.
func (p *Processor) batchGet(ctx context.Context, keys []aggregates.Key, attrs ...string) (map[aggregates.Key]map[string]ddbtypes.AttributeValue, error) {
	names := map[string]string{"#pk": table.AttrPK, "#sk": table.AttrSK}
	proj := []string{"#pk", "#sk"}
	for i, a := range attrs {
		ph := "#a" + strconv.Itoa(i)
		names[ph] = a
		proj = append(proj, ph)
	}
	seen := make(map[aggregates.Key]bool, len(keys))
	var req []map[string]ddbtypes.AttributeValue
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			req = append(req, table.Key(k))
		}
	}
	out := make(map[aggregates.Key]map[string]ddbtypes.AttributeValue, len(req))
	pending := map[string]ddbtypes.KeysAndAttributes{p.cfg.Table: {
		Keys:                     req,
		ConsistentRead:           aws.Bool(true),
		ProjectionExpression:     aws.String(strings.Join(proj, ", ")),
		ExpressionAttributeNames: names,
	}}
	if len(attrs) == 0 {
		pending = map[string]ddbtypes.KeysAndAttributes{p.cfg.Table: {Keys: req, ConsistentRead: aws.Bool(true)}}
	}
	for attempt := 1; len(pending) > 0; attempt++ {
		var resp *dynamodb.BatchGetItemOutput
		err := p.retry(ctx, "BatchGetItem", func(ctx context.Context) error {
			var err error
			resp, err = p.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: pending})
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, item := range resp.Responses[p.cfg.Table] {
			pk, _ := table.String(item, table.AttrPK)
			sk, _ := table.String(item, table.AttrSK)
			out[aggregates.Key{PK: pk, SK: sk}] = item
		}
		pending = resp.UnprocessedKeys
		if len(pending) > 0 {
			if attempt >= p.cfg.MaxAttempts {
				return nil, fmt.Errorf("keys still unprocessed after %d attempts", attempt)
			}
			p.countRetry("BatchGetItem", classThrottle)
			if err := sleep(ctx, p.backoff(attempt)); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func shapeOf(item map[string]ddbtypes.AttributeValue) *shape {
	r := table.DecodeReportShape(item)
	return &shape{present: r.Present, entries: r.Entries, count: r.Count, countDamaged: r.CountDamaged, countFenced: r.CountFenced,
		currency: r.Currency, currencyDamaged: r.CurrencyDamaged, updatedAt: r.UpdatedAt}
}
