package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// The pieces of issue 25's randomized test with kills (docs/exactly-once.md,
// "R as built (session 26)", "The randomized test with kills (session
// 27)"), shared by the poller's variant (cmd/poller) and the tumbling
// Lambda's (cmd/lambda): a writer that writes only as the writer does, the
// damage it suffers at random moments, and the tally of the counted
// repairs run against it.

// Churn writes a seeded random mix of changes to a few keys of some
// branches, every one as the writer writes it (table.Count: the stored
// count plus one, the sig of the result; a delete is the writer's
// tombstone), so that a rebased branch stays provable by the counted
// repair: creates, edits, an edit and its revert back to back, deletes,
// a create and its delete back to back, and re-creates of deleted keys.
// The back-to-back pairs land in one window or batch more often than not:
// a commit that nets to zero on a report (issue 25, finding 1). One
// goroutine at a time.
type Churn struct {
	rng      *rand.Rand
	branches []processor.Scope
	dates    []string
	keys     map[aggregates.Key]*churnKey
	live     map[processor.Scope][]aggregates.Key
	dead     map[processor.Scope][]aggregates.Key
	n        int
	// Counts are the steps written, by kind; Records the stream records.
	Counts  map[string]int
	Records int
}

// ChurnAPI is what Churn needs of DynamoDB: it reads each key's stored
// count before it writes, as the writer does (a rebase's probe moves it).
type ChurnAPI interface {
	WriteAPI
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

type churnKey struct {
	changes int64
	item    map[string]ddbtypes.AttributeValue // the live image; nil once deleted
}

// ChurnDates are the days Churn writes: three days, two months, one year
// (enough reports for Damage), and a day of another year.
var ChurnDates = []string{"2024-05-30", "2024-05-31", "2024-06-01", "2024-06-02", "2024-06-15", "2025-01-02"}

// NewChurn returns a writer of branches for seed.
func NewChurn(seed uint64, branches ...processor.Scope) *Churn {
	return &Churn{rng: rand.New(rand.NewPCG(seed, 0x5eed)), branches: branches, dates: ChurnDates,
		keys: map[aggregates.Key]*churnKey{}, live: map[processor.Scope][]aggregates.Key{},
		dead: map[processor.Scope][]aggregates.Key{}, Counts: map[string]int{}}
}

// Seed writes perDay transactions on every day of every branch: each
// branch then has three daily, two monthly and a yearly report once
// committed (what Damage needs).
func (c *Churn) Seed(ctx context.Context, api ChurnAPI, tableName string, perDay int) error {
	for _, b := range c.branches {
		for _, d := range c.dates {
			for range perDay {
				if err := c.create(ctx, api, tableName, b, d); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Step writes one random change of a random branch and returns its kind.
func (c *Churn) Step(ctx context.Context, api ChurnAPI, tableName string) (string, error) {
	b := c.branches[c.rng.IntN(len(c.branches))]
	live, dead := c.live[b], c.dead[b]
	kind := ""
	var err error
	switch r := c.rng.IntN(100); {
	case len(live) < 3 || r < 15:
		kind, err = "create", c.create(ctx, api, tableName, b, c.dates[c.rng.IntN(len(c.dates))])
	case r < 45:
		kind, err = "edit", c.edit(ctx, api, tableName, live[c.rng.IntN(len(live))])
	case r < 65:
		kind = "edit_and_revert"
		k := live[c.rng.IntN(len(live))]
		before := clone(c.keys[k].item)
		if err = c.edit(ctx, api, tableName, k); err == nil {
			err = c.put(ctx, api, tableName, k, before)
		}
	case r < 77:
		kind, err = "delete", c.remove(ctx, api, tableName, b, c.rng.IntN(len(live)))
	case r < 90:
		kind = "create_and_delete"
		if err = c.create(ctx, api, tableName, b, c.dates[c.rng.IntN(len(c.dates))]); err == nil {
			err = c.remove(ctx, api, tableName, b, len(c.live[b])-1)
		}
	case len(dead) > 0:
		kind = "recreate"
		i := c.rng.IntN(len(dead))
		k := dead[i]
		c.dead[b] = append(dead[:i:i], dead[i+1:]...)
		c.live[b] = append(c.live[b], k)
		err = c.put(ctx, api, tableName, k, c.newItem(k, k.SK[:10]))
	default:
		kind, err = "edit", c.edit(ctx, api, tableName, live[c.rng.IntN(len(live))])
	}
	if err != nil {
		return kind, fmt.Errorf("churn %s: %w", kind, err)
	}
	c.Counts[kind]++
	return kind, nil
}

// RunInBursts runs Step until quit is closed: bursts of up to 40 changes,
// each followed, one time in two, by a quiet spell of up to 1.5 s. A
// branch written without pause is never proven (its consumers are never
// caught up: docs/exactly-once.md, "R as built", liveness); the quiet
// spells are when repairs can prove and write.
func (c *Churn) RunInBursts(ctx context.Context, api ChurnAPI, tableName string, rng *rand.Rand, quit <-chan struct{}) error {
	for {
		for range 1 + rng.IntN(40) {
			if _, err := c.Step(ctx, api, tableName); err != nil {
				return err
			}
			time.Sleep(time.Duration(rng.IntN(8)) * time.Millisecond)
		}
		pause := time.Duration(0)
		if rng.IntN(2) == 0 {
			pause = time.Duration(rng.IntN(1500)) * time.Millisecond
		}
		select {
		case <-quit:
			return nil
		case <-time.After(pause):
		}
	}
}

func (c *Churn) newItem(k aggregates.Key, date string) map[string]ddbtypes.AttributeValue {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	id := k.SK[strings.IndexByte(k.SK, '#')+1:]
	return map[string]ddbtypes.AttributeValue{
		"PK": s(k.PK), "SK": s(k.SK), "entityType": s(aggregates.EntityTransaction), "id": s(id),
		"type": s([]string{"INCOME", "EXPENSE"}[c.rng.IntN(2)]), "amount": n(c.amount()),
		"category":  s([]string{"rent", "food", "café ☕", "a.b"}[c.rng.IntN(4)]),
		"createdAt": s(date + "T12:00:00Z"), "updatedAt": s(now),
	}
}

func (c *Churn) amount() string { return fmt.Sprintf("%d.%02d", 1+c.rng.IntN(500), c.rng.IntN(100)) }

func (c *Churn) create(ctx context.Context, api ChurnAPI, tableName string, b processor.Scope, date string) error {
	c.n++
	d, err := aggregates.ParseDate(date)
	if err != nil {
		return err
	}
	k := aggregates.TransactionKey(b.Tenant, b.Branch, d, "c"+strconv.Itoa(c.n))
	c.live[b] = append(c.live[b], k)
	return c.put(ctx, api, tableName, k, c.newItem(k, date))
}

func (c *Churn) edit(ctx context.Context, api ChurnAPI, tableName string, k aggregates.Key) error {
	item := clone(c.keys[k].item)
	item["amount"] = n(c.amount())
	if c.rng.IntN(3) == 0 {
		item["category"] = s([]string{"rent", "food", "café ☕", "a.b"}[c.rng.IntN(4)])
	}
	if c.rng.IntN(4) == 0 {
		item["type"] = s([]string{"INCOME", "EXPENSE"}[c.rng.IntN(2)])
	}
	item["updatedAt"] = s(time.Now().UTC().Format(time.RFC3339Nano))
	return c.put(ctx, api, tableName, k, item)
}

// remove writes the writer's tombstone of branch b's i-th live key.
func (c *Churn) remove(ctx context.Context, api ChurnAPI, tableName string, b processor.Scope, i int) error {
	live := c.live[b]
	k := live[i]
	c.live[b] = append(live[:i:i], live[i+1:]...)
	c.dead[b] = append(c.dead[b], k)
	tomb := clone(c.keys[k].item)
	for _, name := range table.TombstoneRemoves {
		delete(tomb, name)
	}
	now := s(time.Now().UTC().Format(time.RFC3339Nano))
	tomb[table.AttrDeletedAt], tomb[table.AttrUpdatedAt] = now, now
	if err := c.put(ctx, api, tableName, k, tomb); err != nil {
		return err
	}
	c.keys[k].item = nil
	return nil
}

// put stores item at k as the writer does: its count the stored one plus
// one (read consistently: a rebase's probe moves it), its version the
// count.
func (c *Churn) put(ctx context.Context, api ChurnAPI, tableName string, k aggregates.Key, item map[string]ddbtypes.AttributeValue) error {
	st := c.keys[k]
	if st == nil {
		st = &churnKey{}
		c.keys[k] = st
	}
	got, err := api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &tableName, Key: table.Key(k), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return err
	}
	st.changes, _ = table.Changes(got.Item)
	item = clone(item)
	item["version"] = n(strconv.FormatInt(st.changes+1, 10))
	table.Count(item, st.changes+1)
	if _, err := api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &tableName, Item: item}); err != nil {
		return err
	}
	st.changes++
	st.item = item
	c.Records++
	return nil
}

// Hurt damages reports of branch b at a random moment, as a bug or a hand
// edit would, and returns the reports it touched: with heavy, every kind
// of Damage (once per branch: it needs the reports it breaks whole);
// otherwise one report's income nudged (a report whose income is no
// number, or that is gone, is left alone).
func Hurt(ctx context.Context, api DamageAPI, tableName string, b processor.Scope, rng *rand.Rand, heavy bool) ([]aggregates.ReportKey, error) {
	if heavy {
		return Damage(ctx, api, tableName, b.Tenant, b.Branch)
	}
	out, err := api.Query(ctx, &dynamodb.QueryInput{TableName: &tableName, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": s(aggregates.ReportPK(b.Tenant, b.Branch))}})
	if err != nil {
		return nil, err
	}
	var heads []aggregates.ReportKey
	for _, it := range out.Items {
		sk, _ := it["SK"].(*ddbtypes.AttributeValueMemberS)
		if sk == nil {
			continue
		}
		ref, err := aggregates.ParseReportItemKey(aggregates.Key{PK: aggregates.ReportPK(b.Tenant, b.Branch), SK: sk.Value})
		if err == nil && ref.Kind == aggregates.ReportHeader {
			heads = append(heads, ref.Report)
		}
	}
	if len(heads) == 0 {
		return nil, nil
	}
	k := heads[rng.IntN(len(heads))]
	_, err = api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &tableName, Key: table.Key(k.Key()),
		UpdateExpression:          aws.String("SET totalIncome = totalIncome + :d"),
		ConditionExpression:       aws.String("attribute_type(totalIncome, :n)"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":d": n("0.5"), ":n": s("N")}})
	var ccf *ddbtypes.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hurt %s: %w", k, err)
	}
	return []aggregates.ReportKey{k}, nil
}

// RepairTally runs counted repairs and counts what each did: proved and
// wrote, proved with nothing to write, or refused, by reason. A refusal
// that a writer writing only as the writer does cannot cause (a foreign
// write, more committed than written, not rebased, an abandoned batch's
// mark) is kept in Unexpected: a finding. Safe for concurrent use.
type RepairTally struct {
	mu                   sync.Mutex
	Runs, Wrote, Clean   int
	Rounds, Transactions int
	Refused              map[string]int
	Unexpected           []string
}

// Expected refusals, by the reason's name in the tally.
var refusalReasons = []struct{ name, text string }{
	{"behind", "written and not yet committed"},
	{"open_batch", "a batch is half-committed"},
	{"busy", processor.ErrRepairBusy.Error()},
}

// Repair runs the counted repair of b (processor.CountedRepair, as
// `ledgerctl reconcile --repair` runs it for a rebased branch) and counts
// its outcome. It returns the error of a repair that neither proved nor
// refused.
func (rt *RepairTally) Repair(ctx context.Context, api processor.RebaseAPI, tableName, streamARN string, b processor.Scope) (processor.CountedRepairResult, error) {
	res, err := processor.CountedRepair(ctx, api, tableName, processor.CountedRepairOptions{
		Tenant: b.Tenant, Branch: b.Branch, StreamARN: streamARN})
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.Refused == nil {
		rt.Refused = map[string]int{}
	}
	rt.Runs++
	rt.Rounds += res.Rounds
	rt.Transactions += res.Transactions
	switch {
	case err == nil && res.Transactions > 0:
		rt.Wrote++
	case err == nil:
		rt.Clean++
	case errors.Is(err, processor.ErrNotProven):
		for _, r := range refusalReasons {
			if strings.Contains(err.Error(), r.text) {
				rt.Refused[r.name]++
				return res, nil
			}
		}
		// An abandoned batch's mark cannot come from this workload: a
		// batch that finished during R0's check starts the round again
		// (S27-R4, found here before it was fixed).
		rt.Refused["unexpected"]++
		rt.Unexpected = append(rt.Unexpected, err.Error())
	default:
		return res, err
	}
	return res, nil
}

// Written is Wrote, read under the tally's lock (while repairs run).
func (rt *RepairTally) Written() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.Wrote
}

// String is the tally in one line.
func (rt *RepairTally) String() string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return fmt.Sprintf("%d repairs: %d wrote (%d transactions), %d proved with nothing to write, refused %v; %d rounds",
		rt.Runs, rt.Wrote, rt.Transactions, rt.Clean, rt.Refused, rt.Rounds)
}
