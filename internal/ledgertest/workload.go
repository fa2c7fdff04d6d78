package ledgertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// WriteAPI is the part of the DynamoDB API a Workload writes with.
type WriteAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// Workload writes a seeded, randomized mix of transaction changes straight
// to a table, as the writer (and a careless operator) could: inserts,
// modifies of every aggregated field and of irrelevant ones, deletes,
// re-inserts of deleted keys, invalid items with transaction keys (and
// their later fixes), and items that are not transactions.
type Workload struct {
	rng      *rand.Rand
	Tenants  []string
	Branches []string
	Dates    []string
	// Categories, CostCenters and PaymentMethods are breakdown names,
	// including ones with characters that need expression attribute names.
	Categories, CostCenters, PaymentMethods []string

	live    []aggregates.Key
	items   map[aggregates.Key]map[string]ddbtypes.AttributeValue
	bad     map[aggregates.Key]bool // live items that are invalid (kept with Invalid set)
	deleted []aggregates.Key
	n       int

	// Invalid, when positive, is the share of steps that write an invalid
	// transaction (an insert poisoned as Step's are); the other steps then
	// write none (their poisoned inserts and modifies are valid ones, and a
	// modify of an invalid item fixes it).
	// Zero keeps Step's mix, where about one record in ten is invalid.
	Invalid float64

	// Counts of the operations written, by kind.
	Counts map[string]int

	// Tombstones, when set, makes every other remove leave a deleted
	// transaction's tombstone (table.TombstoneRemoves gone, deletedAt set:
	// a MODIFY, as the writer's DELETE does) instead of deleting the item
	// (a REMOVE, as another path can). The random draws are the same
	// either way.
	Tombstones bool

	// Stamp, when set, stamps every transaction written (a create, or a
	// change that rewrites it whole) as the writer does: the stamp of its
	// createdAt in its branch's calendar. Unset, or when it returns a stamp
	// without periods, transactions are written without a stamp
	// (aggregates.LegacyStamp).
	Stamp func(tenant, branch string, created time.Time) (aggregates.Stamp, error)

	// Currency, when set, stamps every transaction written with its
	// branch's currency as the writer does ("" for a branch without one:
	// no currency attribute).
	Currency func(tenant, branch string) string

	// Counted, when set, makes the writes the writer could make count
	// their changes as it does (table.Count: changes = the stored item's
	// count + 1, or 1 where no item is, and the sig of the result):
	// inserts, modifies, fixes, tombstones and re-inserts. The others are
	// another path's: a modify of an irrelevant field copies the item with
	// its count and sig, a poison of entityType writes no count, and a
	// hard delete is a REMOVE (docs/exactly-once.md, "The design: counted
	// changes", A). The random draws are the same either way.
	Counted bool
	// WriterShaped counts, per branch ("tenant/branch"), the writes
	// (each a stream record) made with Counted that are writer-shaped by
	// the design's rule: a count stepping by one from the stored item's
	// (or 1 where no item is stored), of an item whose entityType is the
	// transaction's. A counted write over an item stored without a count
	// starts it at 1 and is not writer-shaped, nor is one of an item a
	// poison left with another entityType.
	WriterShaped map[string]int
	// stored is the change count of each key's stored item (tombstones
	// included), -1 for an item stored without one; absent: no item.
	stored map[aggregates.Key]int64
}

// NewWorkload returns a workload generator for seed. Its dates cover month,
// year and leap-day boundaries.
func NewWorkload(seed uint64) *Workload {
	return &Workload{
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		Tenants:  []string{"acme", "globex"},
		Branches: []string{"north", "south", "east"},
		Dates: []string{"2023-12-31", "2024-01-01", "2024-01-31", "2024-02-01", "2024-02-28", "2024-02-29",
			"2024-03-01", "2024-06-30", "2024-12-31", "2025-01-01"},
		Categories:     []string{"food", "rent", "travel", "a.b", "x#y", "café ☕", "with space", "k:v", "sl/ash", "payroll"},
		CostCenters:    []string{"cc-1", "cc-2", "ops", "R&D"},
		PaymentMethods: []string{"card", "cash", "pix", "wire"},
		items:          map[aggregates.Key]map[string]ddbtypes.AttributeValue{},
		bad:            map[aggregates.Key]bool{},
		Counts:         map[string]int{},
		WriterShaped:   map[string]int{},
		stored:         map[aggregates.Key]int64{},
	}
}

func (w *Workload) pick(xs []string) string { return xs[w.rng.IntN(len(xs))] }

func s(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
func n(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberN{Value: v} }

// amount returns a positive decimal with up to 2 decimals, sometimes with a
// trailing zero or a tenth, to exercise exact arithmetic.
func (w *Workload) amount() string {
	switch w.rng.IntN(5) {
	case 0:
		return "0.1"
	case 1:
		return strconv.Itoa(1+w.rng.IntN(500)) + ".10"
	default:
		return strconv.Itoa(w.rng.IntN(100000)) + "." + fmt.Sprintf("%02d", 1+w.rng.IntN(99))
	}
}

func (w *Workload) newItem(k aggregates.Key, date string) map[string]ddbtypes.AttributeValue {
	w.n++
	created, _ := time.Parse("2006-01-02", date)
	created = created.Add(time.Duration(w.rng.Int64N(int64(24 * time.Hour))))
	item := map[string]ddbtypes.AttributeValue{
		"PK": s(k.PK), "SK": s(k.SK), "entityType": s("TRANSACTION"), "id": s(k.SK[11:]),
		"type": s([]string{"INCOME", "EXPENSE"}[w.rng.IntN(2)]), "amount": n(w.amountOf(w.digits(k))),
		"category": s(w.pick(w.Categories)), "createdAt": s(created.UTC().Format(time.RFC3339Nano)),
		"version": n("1"), "updatedAt": s(time.Now().UTC().Format(time.RFC3339Nano)),
	}
	if w.rng.IntN(3) > 0 {
		item["costCenter"] = s(w.pick(w.CostCenters))
	}
	if w.rng.IntN(3) > 0 {
		item["paymentMethod"] = s(w.pick(w.PaymentMethods))
	}
	if w.Currency != nil {
		tenant, branch, _ := aggregates.ParseTransactionPK(k.PK)
		if c := w.Currency(tenant, branch); c != "" {
			item[aggregates.AttrCurrency] = s(c)
		}
	}
	if w.Stamp != nil {
		tenant, branch, _ := aggregates.ParseTransactionPK(k.PK)
		st, err := w.Stamp(tenant, branch, created)
		if err != nil {
			panic(fmt.Sprintf("workload: stamp %s: %v", created, err)) // a test's calendar is wrong
		}
		if len(st.Periods) > 0 {
			item[aggregates.AttrBusinessDate] = s(st.BusinessDate.String())
			item[aggregates.AttrPeriods] = s(st.EncodePeriods())
		}
	}
	return item
}

// poison makes item invalid in one of the ways aggregates.ParseTransaction refuses (docs/design.md, "Transaction").
func (w *Workload) poison(item map[string]ddbtypes.AttributeValue) string {
	kinds := []string{"amount_string", "amount_missing", "amount_zero", "type_lower", "category_empty", "date_mismatch", "entity_type", "cost_center_empty"}
	kind := w.pick(kinds)
	switch kind {
	case "amount_string":
		item["amount"] = s("12.50")
	case "amount_missing":
		delete(item, "amount")
	case "amount_zero":
		item["amount"] = n("0")
	case "type_lower":
		item["type"] = s("income")
	case "category_empty":
		item["category"] = s("")
	case "date_mismatch":
		item["createdAt"] = s("1999-01-01T00:00:00Z")
	case "entity_type":
		item["entityType"] = s("TXN")
	case "cost_center_empty":
		item["costCenter"] = s("")
	}
	return kind
}

// Step writes one randomly chosen change and returns its kind.
func (w *Workload) Step(ctx context.Context, api WriteAPI, table string) (string, error) {
	r := w.rng.IntN(100)
	var kind string
	var err error
	if w.Invalid > 0 {
		if w.rng.Float64() < w.Invalid {
			kind, err = w.insert(ctx, api, table, true)
			if err == nil {
				w.Counts[kind]++
			}
			return kind, err
		}
	}
	switch {
	case len(w.live) == 0 || r < 40:
		kind, err = w.insert(ctx, api, table, false)
	case r < 65:
		kind, err = w.modify(ctx, api, table)
	case r < 77:
		kind, err = w.remove(ctx, api, table)
	case r < 83 && len(w.deleted) > 0:
		kind, err = w.reinsert(ctx, api, table)
	case r < 90:
		kind, err = w.insert(ctx, api, table, w.Invalid <= 0) // with Invalid set, a valid insert
	case r < 95:
		kind, err = w.other(ctx, api, table)
	default:
		kind, err = w.modifyIrrelevant(ctx, api, table)
	}
	if err == nil {
		w.Counts[kind]++
	}
	return kind, err
}

// Run writes count changes.
func (w *Workload) Run(ctx context.Context, api WriteAPI, table string, count int) error {
	for i := 0; i < count; i++ {
		if _, err := w.Step(ctx, api, table); err != nil {
			return fmt.Errorf("workload step %d: %w", i, err)
		}
	}
	return nil
}

// count makes item, about to be stored at k, a counted write when
// Counted is set and the write is one the writer could make (writer),
// and records what k's stored item then counts.
func (w *Workload) count(k aggregates.Key, item map[string]ddbtypes.AttributeValue, writer bool) {
	if !w.Counted {
		return
	}
	if !writer {
		if c, ok := table.Changes(item); ok {
			w.stored[k] = c
		} else {
			w.stored[k] = -1
		}
		return
	}
	prev, exists := w.stored[k]
	next := int64(1)
	if exists && prev > 0 {
		next = prev + 1
	}
	table.Count(item, next)
	et, _ := item["entityType"].(*ddbtypes.AttributeValueMemberS)
	if (!exists || prev > 0) && et != nil && et.Value == aggregates.EntityTransaction {
		tenant, branch, _ := aggregates.ParseTransactionPK(k.PK)
		w.WriterShaped[tenant+"/"+branch]++
	}
	w.stored[k] = next
}

func (w *Workload) put(ctx context.Context, api WriteAPI, table string, k aggregates.Key, item map[string]ddbtypes.AttributeValue, writer bool) error {
	w.count(k, item, writer)
	if _, err := api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: item}); err != nil {
		return err
	}
	if _, ok := w.items[k]; !ok {
		w.live = append(w.live, k)
	}
	w.items[k] = item
	return nil
}

func (w *Workload) insert(ctx context.Context, api WriteAPI, table string, poisoned bool) (string, error) {
	date := w.pick(w.Dates)
	k := aggregates.Key{PK: aggregates.TransactionPK(w.pick(w.Tenants), w.pick(w.Branches)), SK: date + "#t" + strconv.Itoa(w.n)}
	item := w.newItem(k, date)
	kind := "insert"
	if poisoned {
		kind = "poison_" + w.poison(item)
		w.bad[k] = true
	}
	return kind, w.put(ctx, api, table, k, item, kind != "poison_entity_type")
}

func (w *Workload) randomLive() (aggregates.Key, map[string]ddbtypes.AttributeValue) {
	k := w.live[w.rng.IntN(len(w.live))]
	return k, w.items[k]
}

func clone(m map[string]ddbtypes.AttributeValue) map[string]ddbtypes.AttributeValue {
	out := make(map[string]ddbtypes.AttributeValue, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// modify changes aggregated fields of a live item; sometimes it makes a
// valid item invalid, or fixes an invalid one by rewriting it whole.
func (w *Workload) modify(ctx context.Context, api WriteAPI, table string) (string, error) {
	k, old := w.randomLive()
	item := clone(old)
	kind := "modify"
	c := w.rng.IntN(10)
	switch {
	case w.Invalid > 0 && w.bad[k]:
		c = 1 // a fix: only Invalid's share of the records is invalid
	case w.Invalid > 0 && c == 0:
		c = 2 // a valid modify instead of a poisoned one
	}
	switch c {
	case 0:
		kind = "modify_poison_" + w.poison(item)
		w.bad[k] = true
	case 1:
		fixed := w.newItem(k, k.SK[:10])
		fixed["version"] = old["version"]
		item, kind = fixed, "modify_fix"
		delete(w.bad, k)
	default:
		for changed := false; !changed; {
			if w.rng.IntN(2) == 0 {
				item["amount"], changed = n(w.amountOf(w.digits(k))), true
			}
			if w.rng.IntN(3) == 0 {
				item["type"], changed = s([]string{"INCOME", "EXPENSE"}[w.rng.IntN(2)]), true
			}
			if w.rng.IntN(3) == 0 {
				item["category"], changed = s(w.pick(w.Categories)), true
			}
			if w.rng.IntN(4) == 0 {
				if w.rng.IntN(3) == 0 {
					delete(item, "costCenter")
				} else {
					item["costCenter"] = s(w.pick(w.CostCenters))
				}
				changed = true
			}
			if w.rng.IntN(4) == 0 {
				if w.rng.IntN(3) == 0 {
					delete(item, "paymentMethod")
				} else {
					item["paymentMethod"] = s(w.pick(w.PaymentMethods))
				}
				changed = true
			}
		}
	}
	item["updatedAt"] = s(time.Now().UTC().Format(time.RFC3339Nano))
	return kind, w.put(ctx, api, table, k, item, kind != "modify_poison_entity_type")
}

func (w *Workload) modifyIrrelevant(ctx context.Context, api WriteAPI, table string) (string, error) {
	k, old := w.randomLive()
	item := clone(old)
	item["description"] = s("note " + strconv.Itoa(w.rng.IntN(1000)))
	return "modify_irrelevant", w.put(ctx, api, table, k, item, false)
}

func (w *Workload) remove(ctx context.Context, api WriteAPI, tableName string) (string, error) {
	i := w.rng.IntN(len(w.live))
	k := w.live[i]
	kind := "remove"
	if w.Tombstones && len(w.deleted)%2 == 0 {
		tomb := clone(w.items[k])
		for _, name := range table.TombstoneRemoves {
			delete(tomb, name)
		}
		now := s(time.Now().UTC().Format(time.RFC3339Nano))
		tomb[table.AttrDeletedAt], tomb[table.AttrUpdatedAt] = now, now
		w.count(k, tomb, true)
		if _, err := api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &tableName, Item: tomb}); err != nil {
			return "", err
		}
		kind = "tombstone"
	} else if _, err := api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &tableName, Key: map[string]ddbtypes.AttributeValue{"PK": s(k.PK), "SK": s(k.SK)}}); err != nil {
		return "", err
	}
	if kind == "remove" {
		delete(w.stored, k) // a hard delete: no item
	}
	w.live[i] = w.live[len(w.live)-1]
	w.live = w.live[:len(w.live)-1]
	delete(w.items, k)
	w.deleted = append(w.deleted, k)
	return kind, nil
}

func (w *Workload) reinsert(ctx context.Context, api WriteAPI, table string) (string, error) {
	i := w.rng.IntN(len(w.deleted))
	k := w.deleted[i]
	w.deleted[i] = w.deleted[len(w.deleted)-1]
	w.deleted = w.deleted[:len(w.deleted)-1]
	return "reinsert", w.put(ctx, api, table, k, w.newItem(k, k.SK[:10]), true)
}

// other writes an item that is not a transaction: a tenant's metadata.
func (w *Workload) other(ctx context.Context, api WriteAPI, table string) (string, error) {
	t := w.pick(w.Tenants)
	k := aggregates.TenantKey(t)
	_, err := api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]ddbtypes.AttributeValue{
		"PK": s(k.PK), "SK": s(k.SK), "entityType": s("TENANT"), "name": s(t), "version": n(strconv.Itoa(w.rng.IntN(1000))),
	}})
	return "other", err
}

// Live returns how many transaction items (valid or not) the table holds.
func (w *Workload) Live() int { return len(w.live) }
