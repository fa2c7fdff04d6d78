package compact_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/compact"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

// The tests that take a table, one each: nine; and BenchmarkCompact_Retire.
var tables = ddbtest.Pool{Size: 10}

var now = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

type books struct {
	t      *testing.T
	api    *dynamodb.Client
	table  string
	tenant string
	n      int
}

func newBooks(t *testing.T) *books {
	return &books{t: t, api: ddbtest.Client(t), table: tables.Table(t), tenant: "acme"}
}

func (b *books) coord() string { return table.CoordinationTableName(b.table) }

// put writes a counted transaction of branch with changes c; deleted, when
// not zero, makes it a tombstone deleted that long before now; counted
// false leaves the count out (another path's tombstone).
func (b *books) put(branch string, c int64, deleted time.Duration, counted bool) aggregates.Key {
	b.t.Helper()
	b.n++
	id := "01JD00000000000000000000" + string(rune('A'+b.n/10)) + string(rune('0'+b.n%10))
	k := aggregates.TransactionKey(b.tenant, branch, aggregates.Date{Year: 2026, Month: 11, Day: 20}, id)
	item, err := table.EncodeTransaction(k, table.Transaction{ID: id, Tenant: b.tenant, Branch: branch, Type: "EXPENSE",
		Amount: "5", Category: "c", CreatedAt: "2026-11-20T12:00:00Z", UpdatedAt: "2026-11-20T12:00:00Z", Version: c})
	require.NoError(b.t, err)
	if deleted > 0 {
		for _, name := range table.TombstoneRemoves {
			delete(item, name)
		}
		item[table.AttrDeletedAt] = table.S(now.Add(-deleted).Format(time.RFC3339Nano))
	}
	if counted {
		table.Count(item, c)
	}
	b.putItem(item)
	return k
}

func (b *books) putItem(item map[string]ddbtypes.AttributeValue) {
	b.t.Helper()
	_, err := b.api.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &b.table, Item: item})
	require.NoError(b.t, err)
}

func (b *books) get(k aggregates.Key) map[string]ddbtypes.AttributeValue {
	b.t.Helper()
	out, err := b.api.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &b.table, Key: table.Key(k), ConsistentRead: aws.Bool(true)})
	require.NoError(b.t, err)
	return out.Item
}

func (b *books) exists(k aggregates.Key) bool {
	b.t.Helper()
	out, err := b.api.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &b.table, Key: table.Key(k), ConsistentRead: aws.Bool(true)})
	require.NoError(b.t, err)
	return out.Item != nil
}

func (b *books) applied(branch string) (table.Applied, map[string]ddbtypes.AttributeValue) {
	b.t.Helper()
	a, err := table.GetApplied(context.Background(), b.api, b.coord(), b.tenant, branch)
	require.NoError(b.t, err)
	out, err := b.api.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(b.coord()),
		Key: table.Key(aggregates.AppliedKey(b.tenant, branch)), ConsistentRead: aws.Bool(true)})
	require.NoError(b.t, err)
	return a, out.Item
}

func TestCompact_RetiresTheOldTombstonesIntoTheirBranchesRetiredCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBooks(t)
	oldA := b.put("north", 2, 72*time.Hour, true)
	oldB := b.put("north", 5, 49*time.Hour, true)
	oldC := b.put("south", 3, 30*24*time.Hour, true)
	young := b.put("north", 2, 47*time.Hour, true) // within the default 48 h
	live := b.put("north", 4, 0, true)
	uncounted := b.put("north", 2, 72*time.Hour, false)

	res, err := compact.Run(ctx, b.api, b.table, b.coord(), compact.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	assert.Equal(t, 5, res.Tombstones)
	assert.Equal(t, 3, res.Compacted)
	// Each retires its count after its mark: 2 + 1, 5 + 1, 3 + 1.
	assert.Equal(t, 1, res.Young)
	assert.Equal(t, 1, res.Uncounted)
	assert.Equal(t, int64(3+6+4), res.Retired)
	for k, want := range map[aggregates.Key]bool{oldA: false, oldB: false, oldC: false, young: true, live: true, uncounted: true} {
		assert.Equal(t, want, b.exists(k), "%s kept", k)
	}
	north, item := b.applied("north")
	assert.Equal(t, int64(3+6), north.Retired, "each key's count after its mark (not its REMOVE)")
	assert.Equal(t, aggregates.EntityApplied, item[table.AttrEntityType].(*ddbtypes.AttributeValueMemberS).Value)
	assert.NotContains(t, item, table.AttrExpiresAt, "the applied item lives as long as its branch")
	south, _ := b.applied("south")
	assert.Equal(t, int64(4), south.Retired)

	// Again: nothing more to retire, nothing counted twice.
	res, err = compact.Run(ctx, b.api, b.table, b.coord(), compact.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	assert.Zero(t, res.Compacted)
	north, _ = b.applied("north")
	assert.Equal(t, int64(9), north.Retired)

	// A shorter --older-than retires the young one too.
	res, err = compact.Run(ctx, b.api, b.table, b.coord(), compact.Options{OlderThan: 24 * time.Hour, Now: func() time.Time { return now }})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Compacted)
	north, _ = b.applied("north")
	assert.Equal(t, int64(12), north.Retired)
}

func TestCompact_RefusesTombstonesYoungerThanTheStreamsRetention(t *testing.T) {
	t.Parallel()
	api := &hooked{}
	_, err := compact.Run(context.Background(), api, "any", "any-coordination", compact.Options{OlderThan: 23 * time.Hour})
	assert.ErrorIs(t, err, compact.ErrTooYoung)
	assert.Zero(t, api.scans.Load(), "nothing read")
}

// hooked runs before ahead of the first TransactWriteItems, and
// beforeSecond ahead of the second.
type hooked struct {
	*dynamodb.Client
	before, beforeSecond func()
	calls                atomic.Int64
	scans                atomic.Int64
}

func (h *hooked) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	h.scans.Add(1)
	if h.Client == nil {
		return nil, errors.New("no client")
	}
	return h.Client.Scan(ctx, in, opts...)
}

func (h *hooked) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	switch n := h.calls.Add(1); {
	case n == 1 && h.before != nil:
		h.before()
	case n == 2 && h.beforeSecond != nil:
		h.beforeSecond()
	}
	return h.Client.TransactWriteItems(ctx, in, opts...)
}

// A tombstone written between the scan and its retirement (a rebase's
// probe moves its count) is kept, and nothing is retired for it.
func TestCompact_ATombstoneChangedSinceTheScanIsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBooks(t)
	k := b.put("north", 2, 72*time.Hour, true)
	api := &hooked{Client: b.api, before: func() {
		_, err := b.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &b.table, Key: table.Key(k),
			UpdateExpression:          aws.String("SET changes = :c, probe = :p"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":c": table.Int(3), ":p": table.S("rebase-1")}})
		require.NoError(t, err)
	}}
	res, err := compact.Run(ctx, api, b.table, b.coord(), compact.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Changed)
	assert.Zero(t, res.Compacted)
	assert.True(t, b.exists(k))
	a, _ := b.applied("north")
	assert.Zero(t, a.Retired, "nothing retired without its delete")
}

// No tombstone of a branch is retired while a rebase of it runs.
func TestCompact_NotWhileARebaseOfTheBranchRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBooks(t)
	k := b.put("north", 2, 72*time.Hour, true)
	other := b.put("south", 2, 72*time.Hour, true)
	applied := table.Key(aggregates.AppliedKey(b.tenant, "north"))
	applied[table.AttrRebasing] = table.S("rebase-1")
	_, err := b.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(b.coord()), Item: applied})
	require.NoError(t, err)
	res, err := compact.Run(ctx, b.api, b.table, b.coord(), compact.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Rebasing)
	assert.Equal(t, 1, res.Compacted, "the other branch's")
	assert.True(t, b.exists(k))
	assert.False(t, b.exists(other))
	a, _ := b.applied("north")
	assert.Zero(t, a.Retired)
}

// A compaction marks a tombstone with a counted change before it deletes
// it (the second review's C-b: only a REMOVE of a marked tombstone is a
// compaction's), and retires the key's count after the mark (C-a: the
// REMOVE is not in retired). A tombstone a stopped run marked is retired
// by the next without a second mark.
func TestCompact_MarksWithACountedChangeThenRetiresTheKeysCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBooks(t)
	k := b.put("north", 4, 72*time.Hour, true)
	var marked map[string]ddbtypes.AttributeValue
	api := &hooked{Client: b.api, beforeSecond: func() { marked = b.get(k) }}
	res, err := compact.Run(ctx, api, b.table, b.coord(), compact.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	require.NotNil(t, marked, "marked before its delete")
	assert.Contains(t, marked, table.AttrCompacting)
	c, _ := table.Changes(marked)
	assert.Equal(t, int64(5), c, "the mark is a counted change")
	assert.True(t, table.SigMatches(marked))
	assert.Equal(t, 1, res.Compacted)
	assert.Equal(t, int64(5), res.Retired)
	assert.False(t, b.exists(k))

	// A run that stopped after its mark: the next retires what it marked.
	k2 := b.put("north", 2, 72*time.Hour, true)
	half := b.get(k2)
	half[table.AttrCompacting] = table.S("compact-1")
	table.Count(half, 3)
	b.putItem(half)
	api = &hooked{Client: b.api}
	res, err = compact.Run(ctx, api, b.table, b.coord(), compact.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Compacted)
	assert.Equal(t, int64(1), api.calls.Load(), "no second mark")
	assert.False(t, b.exists(k2))
	a, _ := b.applied("north")
	assert.Equal(t, int64(5+3), a.Retired)
}
