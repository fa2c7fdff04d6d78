package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	ledgertable "github.com/ledger-dev/ledger/table"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Cost is what a Meter counted.
type Cost struct {
	// Requests counts write requests by operation (PutItem, UpdateItem,
	// DeleteItem, TransactWriteItems), failed ones included.
	Requests map[string]int
	// ItemWrites counts the items those requests wrote (every action of a
	// transaction), failed ones included.
	ItemWrites int
	// Units is the write capacity billed by AWS's rules (itemsize.go):
	// transactional actions twice, failed conditional writes and cancelled
	// transactions included.
	Units int
	// UnitsByOp splits Units by operation.
	UnitsByOp map[string]int
	// LocalUnits is what DynamoDB Local should report as ConsumedCapacity
	// for the successful writes if it sizes items as AWS does: the same
	// units for a single-item write; for a transaction, DynamoDB Local
	// 3.3.1 reports, per table, twice the sum of the distinct per-item
	// values (two actions of 2 WCU each are reported as 4, not 8: see
	// BENCHMARKS.md; a commit's checkpoint in the coordination table is
	// reported apart from its reports), and this is computed the same way, so that the cross-check covers the
	// item sizes inside transactions too.
	LocalUnits int
	// Reported is the sum of the ConsumedCapacity DynamoDB reported.
	Reported float64
	// Failed counts failed conditional writes and cancelled transactions.
	Failed int
	// ItemsRead counts the items Query calls returned.
	ItemsRead int
	// Calls and Time count every call by operation (reads included) and
	// the time spent waiting for DynamoDB in them.
	Calls map[string]int
	Time  map[string]time.Duration
	// Mismatches describes the first few writes whose reported capacity
	// differs from the computed one.
	Mismatches []string
	// Kinds splits the billed writes by the kind of item written, as
	// Meter.Classify names it (nil without one).
	Kinds map[string]KindCost
}

// KindCost is what one kind of item (Meter.Classify) was billed.
type KindCost struct {
	// Units is the write units billed for items of this kind, TxUnits the
	// part of them inside transactions (twice the item's units, as every
	// transactional action), Writes the item writes billed.
	Units, TxUnits, Writes int
	// Transactions is the transactions that wrote an item of this kind;
	// KeyTouches the partition keys of this kind they wrote, counted once
	// per transaction (a transaction updating three partials of one key
	// touches it once).
	Transactions, KeyTouches int
}

// Writes is the total of Requests.
func (c Cost) Writes() int {
	n := 0
	for _, v := range c.Requests {
		n += v
	}
	return n
}

type itemKey struct{ table, pk, sk string }

// Meter is a DynamoDB client that bills every write it passes on. It keeps
// a copy of every item written through it (applying update expressions
// itself, expr.go), so it knows each item's size before and after each
// write without reading anything back, and it asks DynamoDB for the
// ConsumedCapacity of each write to cross-check the computation. Items
// written by other clients are unknown to it; Check compares its copies
// with the table. Reads pass through unmetered. It is safe for concurrent
// use as long as no two goroutines write the same item at once.
type Meter struct {
	*dynamodb.Client

	// Classify, when set before the first write, names the kind of the
	// item a write goes to, from its table and partition key (Cost.Kinds,
	// KeyRate.Kind).
	Classify func(table, pk string) string

	mu    sync.Mutex
	items map[itemKey]map[string]ddbtypes.AttributeValue
	cost  Cost
	errs  []error
	keys  map[keyRateKey]*KeyRate // write units by partition key, per second
}

type keyRateKey struct{ table, pk string }

// KeyRate is the write units billed to one partition key: in all, and at
// most in one second (wall clock, the second the write settled): what one
// partition of AWS's 1,000 write units a second must carry for it.
type KeyRate struct {
	Table, PK string
	Kind      string // Meter.Classify's name for the key ("" without one)
	Units     int    // in all
	Peak      int    // the most in one second
	PeakAt    time.Time
	Seconds   int // seconds with any unit

	sec int64 // the second being counted
	cur int
}

// KeyRates returns the write units by partition key, the hottest (highest
// peak per second) first; with n > 0 at most n. Transactional actions count
// twice, failed conditional writes once, as AWS bills them.
func (m *Meter) KeyRates(n int) []KeyRate {
	m.mu.Lock()
	out := make([]KeyRate, 0, len(m.keys))
	for _, r := range m.keys {
		c := *r
		if c.cur > c.Peak {
			c.Peak, c.PeakAt = c.cur, time.Unix(c.sec, 0)
		}
		out = append(out, c)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Peak != out[j].Peak {
			return out[i].Peak > out[j].Peak
		}
		return out[i].Units > out[j].Units
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// bill attributes units to the write's partition key in the current
// second. m.mu is held.
func (m *Meter) bill(k itemKey, units int, now time.Time) {
	if units == 0 {
		return
	}
	if m.keys == nil {
		m.keys = map[keyRateKey]*KeyRate{}
	}
	kk := keyRateKey{k.table, k.pk}
	r := m.keys[kk]
	if r == nil {
		r = &KeyRate{Table: k.table, PK: k.pk}
		if m.Classify != nil {
			r.Kind = m.Classify(k.table, k.pk)
		}
		m.keys[kk] = r
	}
	sec := now.Unix()
	if sec != r.sec {
		if r.cur > r.Peak {
			r.Peak, r.PeakAt = r.cur, time.Unix(r.sec, 0)
		}
		r.sec, r.cur = sec, 0
		r.Seconds++
	}
	r.cur += units
	r.Units += units
}

// NewMeter wraps c.
func NewMeter(c *dynamodb.Client) *Meter {
	return &Meter{Client: c, items: map[itemKey]map[string]ddbtypes.AttributeValue{},
		cost: Cost{Requests: map[string]int{}, UnitsByOp: map[string]int{}, Calls: map[string]int{}, Time: map[string]time.Duration{}}}
}

// Cost returns what the meter counted so far.
func (m *Meter) Cost() Cost {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cost
	c.Requests, c.Calls, c.Time = maps.Clone(m.cost.Requests), maps.Clone(m.cost.Calls), maps.Clone(m.cost.Time)
	c.UnitsByOp = maps.Clone(m.cost.UnitsByOp)
	c.Mismatches = slices.Clone(m.cost.Mismatches)
	c.Kinds = maps.Clone(m.cost.Kinds)
	return c
}

// Err returns the writes the meter could not model (an update expression it
// does not understand); their bills are missing from Cost.
func (m *Meter) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return errors.Join(m.errs...)
}

func keyOf(table string, item map[string]ddbtypes.AttributeValue) itemKey {
	s := func(n string) string {
		if v, ok := item[n].(*ddbtypes.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	return itemKey{table: table, pk: s("PK"), sk: s("SK")}
}

// write is one item write as the meter bills it.
type write struct {
	key      itemKey
	old, new map[string]ddbtypes.AttributeValue
	deleted  bool
	modelErr error
	// rebase, for an update, computes the item after it from the item
	// before it: applied again when the write settles, on the item as the
	// meter then knows it, since another write of the same item (a lease
	// renewal beside a commit) may have settled since this one was planned.
	rebase func(old map[string]ddbtypes.AttributeValue) (map[string]ddbtypes.AttributeValue, error)
	put    bool
}

// current brings w up to the meter's model of its item at settle time.
func (w *write) current(items map[itemKey]map[string]ddbtypes.AttributeValue) {
	old, ok := items[w.key]
	if !ok {
		old = nil
	}
	switch {
	case w.rebase != nil:
		w.old = old
		w.new, w.modelErr = w.rebase(old)
		if w.modelErr != nil {
			w.new = w.old
		}
	case w.put, w.deleted:
		w.old = old
	default: // a condition check
		w.old, w.new = old, old
	}
}

func (w write) units() int {
	n := ledgertable.WriteUnits(sizeOf(w.old), sizeOf(w.new))
	// A global secondary index (projection ALL) is written too when the
	// item carries its key before or after.
	for _, gsi := range []string{"GSI1PK", "GSI2PK"} {
		_, inOld := w.old[gsi]
		_, inNew := w.new[gsi]
		if inOld || inNew {
			n += ledgertable.WriteUnits(sizeOf(w.old), sizeOf(w.new))
		}
	}
	return n
}

func sizeOf(item map[string]ddbtypes.AttributeValue) int {
	if item == nil {
		return 0
	}
	return ledgertable.ItemSize(item)
}

func (m *Meter) plan(table string, key map[string]ddbtypes.AttributeValue) write {
	k := keyOf(table, key)
	m.mu.Lock()
	defer m.mu.Unlock()
	return write{key: k, old: m.items[k]}
}

func (m *Meter) planPut(table string, item map[string]ddbtypes.AttributeValue) write {
	w := m.plan(table, item)
	w.new, w.put = item, true
	return w
}

func (m *Meter) planUpdate(table string, key map[string]ddbtypes.AttributeValue, expr *string, names map[string]string, values map[string]ddbtypes.AttributeValue) write {
	w := m.plan(table, key)
	w.rebase = func(old map[string]ddbtypes.AttributeValue) (map[string]ddbtypes.AttributeValue, error) {
		base := old
		if base == nil {
			base = deepCopy(key)
		}
		return applyUpdate(base, aws.ToString(expr), names, values)
	}
	w.new, w.modelErr = w.rebase(w.old)
	if w.modelErr != nil {
		w.new = w.old
	}
	return w
}

func (m *Meter) planDelete(table string, key map[string]ddbtypes.AttributeValue) write {
	w := m.plan(table, key)
	w.deleted = true
	return w
}

// settle bills writes (times factor) and, when they landed, records their
// outcome.
func (m *Meter) settle(op string, ws []write, factor int, landed bool, err error) (local int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range ws {
		ws[i].current(m.items)
	}
	m.cost.Requests[op]++
	m.cost.ItemWrites += len(ws)
	if err != nil && !landed && !isConditionFailure(err) {
		return 0 // not answered or rejected before any condition: not billed
	}
	if !landed {
		m.cost.Failed++
	}
	distinct := map[string]map[int]bool{} // by table
	now := time.Now()
	touched := map[keyRateKey]bool{} // by this request
	for _, w := range ws {
		u := w.units()
		m.cost.Units += factor * u
		m.cost.UnitsByOp[op] += factor * u
		m.bill(w.key, factor*u, now)
		if m.Classify != nil {
			m.kind(w.key, factor*u, op == "TransactWriteItems", touched)
		}
		if !landed {
			continue
		}
		if factor == 1 {
			local += u
		} else if !distinct[w.key.table][u] {
			if distinct[w.key.table] == nil {
				distinct[w.key.table] = map[int]bool{}
			}
			distinct[w.key.table][u] = true
			local += factor * u
		}
		if w.modelErr != nil {
			m.errs = append(m.errs, fmt.Errorf("%s %s/%s: %w", op, w.key.pk, w.key.sk, w.modelErr))
		}
		if w.deleted {
			delete(m.items, w.key)
		} else {
			m.items[w.key] = deepCopy(w.new)
		}
	}
	m.cost.LocalUnits += local
	return local
}

// kind bills units to the kind of k's item; touched holds the partition
// keys the request already wrote. m.mu is held.
func (m *Meter) kind(k itemKey, units int, tx bool, touched map[keyRateKey]bool) {
	if m.cost.Kinds == nil {
		m.cost.Kinds = map[string]KindCost{}
	}
	name := m.Classify(k.table, k.pk)
	c := m.cost.Kinds[name]
	c.Units += units
	c.Writes++
	if tx {
		c.TxUnits += units
		kk := keyRateKey{k.table, k.pk}
		first := true
		for t := range touched {
			if m.Classify(t.table, t.pk) == name {
				first = false
				break
			}
		}
		if first {
			c.Transactions++
		}
		if !touched[kk] {
			touched[kk] = true
			c.KeyTouches++
		}
	}
	m.cost.Kinds[name] = c
}

// timed records a call's duration.
func (m *Meter) timed(op string, start time.Time) {
	d := time.Since(start)
	m.mu.Lock()
	m.cost.Calls[op]++
	m.cost.Time[op] += d
	m.mu.Unlock()
}

// GetItem passes the read on, timed.
func (m *Meter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	defer m.timed("GetItem", time.Now())
	return m.Client.GetItem(ctx, in, opts...)
}

// BatchGetItem passes the read on, timed.
func (m *Meter) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	defer m.timed("BatchGetItem", time.Now())
	return m.Client.BatchGetItem(ctx, in, opts...)
}

// Query passes the read on, timed, counting the items returned.
func (m *Meter) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	defer m.timed("Query", time.Now())
	out, err := m.Client.Query(ctx, in, opts...)
	if err == nil {
		m.mu.Lock()
		m.cost.ItemsRead += len(out.Items)
		m.mu.Unlock()
	}
	return out, err
}

func (m *Meter) reported(op string, ws []write, local int, cc ...*ddbtypes.ConsumedCapacity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	got := 0.0
	for _, c := range cc {
		if c != nil {
			got += aws.ToFloat64(c.CapacityUnits)
		}
	}
	m.cost.Reported += got
	if got != float64(local) && len(m.cost.Mismatches) < 5 {
		var sizes []string
		for _, w := range ws {
			sizes = append(sizes, fmt.Sprintf("%s/%s %d→%d", w.key.pk, w.key.sk, sizeOf(w.old), sizeOf(w.new)))
		}
		m.cost.Mismatches = append(m.cost.Mismatches, fmt.Sprintf("%s: reported %v, computed %d: %s", op, got, local, strings.Join(sizes, "; ")))
	}
}

func isConditionFailure(err error) bool {
	var ccf *ddbtypes.ConditionalCheckFailedException
	var tce *ddbtypes.TransactionCanceledException
	return errors.As(err, &ccf) || errors.As(err, &tce)
}

// PutItem implements the DynamoDB call, metered.
func (m *Meter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	w := m.planPut(aws.ToString(in.TableName), in.Item)
	cp := *in
	cp.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	start := time.Now()
	out, err := m.Client.PutItem(ctx, &cp, opts...)
	m.timed("PutItem", start)
	local := m.settle("PutItem", []write{w}, 1, err == nil, err)
	if err == nil {
		m.reported("PutItem", []write{w}, local, out.ConsumedCapacity)
	}
	return out, err
}

// UpdateItem implements the DynamoDB call, metered.
func (m *Meter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	w := m.planUpdate(aws.ToString(in.TableName), in.Key, in.UpdateExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	cp := *in
	cp.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	start := time.Now()
	out, err := m.Client.UpdateItem(ctx, &cp, opts...)
	m.timed("UpdateItem", start)
	local := m.settle("UpdateItem", []write{w}, 1, err == nil, err)
	if err == nil {
		m.reported("UpdateItem", []write{w}, local, out.ConsumedCapacity)
	}
	return out, err
}

// DeleteItem implements the DynamoDB call, metered.
func (m *Meter) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	w := m.planDelete(aws.ToString(in.TableName), in.Key)
	cp := *in
	cp.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	start := time.Now()
	out, err := m.Client.DeleteItem(ctx, &cp, opts...)
	m.timed("DeleteItem", start)
	local := m.settle("DeleteItem", []write{w}, 1, err == nil, err)
	if err == nil {
		m.reported("DeleteItem", []write{w}, local, out.ConsumedCapacity)
	}
	return out, err
}

// TransactWriteItems implements the DynamoDB call, metered: every action
// is billed twice.
func (m *Meter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	ws := make([]write, 0, len(in.TransactItems))
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			ws = append(ws, m.planPut(aws.ToString(it.Put.TableName), it.Put.Item))
		case it.Update != nil:
			u := it.Update
			ws = append(ws, m.planUpdate(aws.ToString(u.TableName), u.Key, u.UpdateExpression, u.ExpressionAttributeNames, u.ExpressionAttributeValues))
		case it.Delete != nil:
			ws = append(ws, m.planDelete(aws.ToString(it.Delete.TableName), it.Delete.Key))
		case it.ConditionCheck != nil:
			w := m.plan(aws.ToString(it.ConditionCheck.TableName), it.ConditionCheck.Key)
			w.new = w.old
			ws = append(ws, w)
		}
	}
	cp := *in
	cp.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	start := time.Now()
	out, err := m.Client.TransactWriteItems(ctx, &cp, opts...)
	m.timed("TransactWriteItems", start)
	local := m.settle("TransactWriteItems", ws, 2, err == nil, err)
	if err == nil {
		cc := make([]*ddbtypes.ConsumedCapacity, len(out.ConsumedCapacity))
		for i := range out.ConsumedCapacity {
			cc[i] = &out.ConsumedCapacity[i]
		}
		m.reported("TransactWriteItems", ws, local, cc...)
	}
	return out, err
}

// Learn reads every item of table into the meter's copies, billing
// nothing: writes through the meter to items another client wrote (a
// backlog loaded with BatchWriteItem, reports an earlier consumer kept) are
// then billed on their real size. Items the meter knows already are read
// again.
func (m *Meter) Learn(ctx context.Context, table string) error {
	p := dynamodb.NewScanPaginator(m.Client, &dynamodb.ScanInput{TableName: &table, ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("meter: learn %s: %w", table, err)
		}
		m.mu.Lock()
		for _, item := range out.Items {
			m.items[keyOf(table, item)] = item
		}
		m.mu.Unlock()
	}
	return nil
}

// LearnItem is Learn for the one item of table under key (nothing learned
// when it is absent): the flags item, which the table's creation wrote
// and every consumer's first write raises (processor.RaiseProtocol), is
// then billed and checked on its real size.
func (m *Meter) LearnItem(ctx context.Context, table string, key map[string]ddbtypes.AttributeValue) error {
	out, err := m.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return fmt.Errorf("meter: learn an item of %s: %w", table, err)
	}
	if out.Item != nil {
		m.mu.Lock()
		m.items[keyOf(table, out.Item)] = out.Item
		m.mu.Unlock()
	}
	return nil
}

// Check compares the meter's copies of the items of table with what the
// table holds, by size (what billing depends on), and returns an error
// naming the first few that differ: the meter's model of some write was
// wrong.
func (m *Meter) Check(ctx context.Context, table string) error {
	real := map[itemKey]map[string]ddbtypes.AttributeValue{}
	p := dynamodb.NewScanPaginator(m.Client, &dynamodb.ScanInput{TableName: &table, ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("check meter against %s: %w", table, err)
		}
		for _, item := range out.Items {
			real[keyOf(table, item)] = item
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var bad []string
	for k, item := range m.items {
		if k.table != table {
			continue
		}
		got, ok := real[k]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s/%s: in the meter, not in the table", k.pk, k.sk))
		case ledgertable.ItemSize(got) != ledgertable.ItemSize(item):
			bad = append(bad, fmt.Sprintf("%s/%s: %d bytes in the table, %d in the meter", k.pk, k.sk, ledgertable.ItemSize(got), ledgertable.ItemSize(item)))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("meter differs from table %s on %d items, e.g. %s", table, len(bad), bad[0])
}

// TimeSummary lists the calls by the time spent in them, longest first.
func (c Cost) TimeSummary() string {
	ops := make([]string, 0, len(c.Time))
	for op := range c.Time {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool { return c.Time[ops[i]] > c.Time[ops[j]] })
	parts := make([]string, len(ops))
	for i, op := range ops {
		parts[i] = fmt.Sprintf("%s %d× %s", op, c.Calls[op], c.Time[op].Round(10*time.Millisecond))
	}
	return strings.Join(parts, ", ")
}
