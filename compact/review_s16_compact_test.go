package compact_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/compact"
	"github.com/ledger-dev/ledger/table"
)

// The adversarial review of session 16 (docs/exactly-once.md, "Review
// (adversarial, session 16): counted changes, sig and tombstones as
// built"): compaction run twice at once, against a damaged applied item,
// and pointed at the wrong table.

// Two compactions at once, the second run whole inside the first: before
// the first's mark (its mark then fails on the count, it keeps the
// tombstone for a later run) and between the first's mark and its delete
// (the second retires what the first marked; the first's delete then fails
// on the count). Either way the tombstone is retired once: retired holds
// its count after the one mark.
func TestReviewS16_TwoCompactionsAtOnceRetireATombstoneOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBooks(t)
	opts := compact.Options{Now: func() time.Time { return now }}
	for i, tc := range []struct {
		name   string
		second bool // inside the first's second step (after its mark)
	}{{"before the mark", false}, {"between the mark and the delete", true}} {
		branch := []string{"north", "south"}[i]
		k := b.put(branch, 3, 72*time.Hour, true)
		var inner compact.Result
		other := func() {
			var err error
			inner, err = compact.Run(ctx, b.api, b.table, b.coord(), compact.Options{Now: func() time.Time { return now.Add(time.Second) }})
			require.NoError(t, err)
		}
		api := &hooked{Client: b.api}
		if tc.second {
			api.beforeSecond = other
		} else {
			api.before = other
		}
		outer, err := compact.Run(ctx, api, b.table, b.coord(), opts)
		require.NoError(t, err, tc.name)
		assert.Equal(t, 1, outer.Compacted+inner.Compacted, "%s: retired once", tc.name)
		assert.Equal(t, 1, outer.Changed+inner.Changed, "%s: the loser kept it", tc.name)
		assert.False(t, b.exists(k), tc.name)
		a, _ := b.applied(branch)
		assert.Equal(t, int64(4), a.Retired, "%s: its count after one mark, once", tc.name)
	}
}

// One branch's applied item damaged by another path (retired is no
// number): its tombstone's retirement is refused as malformed
// (ValidationException), which stopped the whole run before the fix — and,
// the damaged branch sorting where it does in the scan, every run after
// it: no tombstone of any tenant behind it was retired again. Now that
// tombstone is kept (marked: a counted change, retired by a later run once
// the item is repaired), the run retires every other, and its error names
// the damaged one.
func TestReviewS16_ADamagedAppliedItemKeepsItsTombstoneOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBooks(t)
	damaged := b.put("north", 2, 72*time.Hour, true)
	var others []aggregates.Key
	for _, branch := range []string{"b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8"} {
		others = append(others, b.put(branch, 2, 72*time.Hour, true))
	}
	applied := table.Key(aggregates.AppliedKey(b.tenant, "north"))
	applied[table.AttrRetired] = table.S("x")
	_, err := b.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(b.coord()), Item: applied})
	require.NoError(t, err)

	res, err := compact.Run(ctx, b.api, b.table, b.coord(), compact.Options{Now: func() time.Time { return now }})
	require.ErrorIs(t, err, compact.ErrMalformed)
	assert.Contains(t, err.Error(), damaged.PK)
	assert.Equal(t, 1, res.Failed)
	assert.Equal(t, len(others), res.Compacted, "every other tombstone retired")
	for _, k := range others {
		assert.False(t, b.exists(k), "%s retired", k)
	}
	require.True(t, b.exists(damaged), "the damaged branch's tombstone kept")
	c, _ := table.Changes(b.get(damaged))
	assert.Equal(t, int64(3), c, "marked: a counted change")

	// Repaired, the next run retires it.
	applied[table.AttrRetired] = table.Int(0)
	_, err = b.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(b.coord()), Item: applied})
	require.NoError(t, err)
	res, err = compact.Run(ctx, b.api, b.table, b.coord(), compact.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Compacted)
	a, _ := b.applied("north")
	assert.Equal(t, int64(3), a.Retired)
}

// Pointed at the ledger table as its coordination table (a mistyped
// --coordination-table or LEDGER_COORDINATION_TABLE), a compaction put
// the retired counts into APPLIED# items of the ledger table, where the
// repair never reads them (and whose writes go into the stream the
// consumers read), and deleted the tombstones: their counts lost for the
// counted repair. Every other ledgerctl command refuses that name
// (table.CheckCoordinationTable); now compaction does too, before it reads
// anything.
func TestReviewS16_TheLedgerTableIsNoCoordinationTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBooks(t)
	k := b.put("north", 2, 72*time.Hour, true)
	api := &hooked{Client: b.api}
	_, err := compact.Run(ctx, api, b.table, b.table, compact.Options{Now: func() time.Time { return now }})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is the ledger table")
	assert.Zero(t, api.scans.Load(), "nothing read")
	assert.True(t, b.exists(k), "nothing retired")
	out, err := b.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &b.table,
		Key: table.Key(aggregates.AppliedKey(b.tenant, "north")), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.Nil(t, out.Item, "no applied item in the ledger table")
}

// scanSpy records whether the scans it passes on ask for strongly
// consistent reads.
type scanSpy struct {
	*dynamodb.Client
	consistent, scans int
}

func (s *scanSpy) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	s.scans++
	if aws.ToBool(in.ConsistentRead) {
		s.consistent++
	}
	return s.Client.Scan(ctx, in, opts...)
}

// The scan is eventually consistent (review of session 16, cost: half the
// read units): every step is conditioned on the count the scan read, so
// a stale item is kept (TestCompact_ATombstoneChangedSinceTheScanIsKept
// plays one), and the run retires what it finds all the same.
func TestReviewS16_TheScanIsEventuallyConsistent(t *testing.T) {
	t.Parallel()
	b := newBooks(t)
	k := b.put("north", 2, 72*time.Hour, true)
	api := &scanSpy{Client: b.api}
	res, err := compact.Run(context.Background(), api, b.table, b.coord(), compact.Options{Now: func() time.Time { return now }})
	require.NoError(t, err)
	assert.Positive(t, api.scans)
	assert.Zero(t, api.consistent, "no strongly consistent page")
	assert.Equal(t, 1, res.Compacted)
	assert.False(t, b.exists(k))
}
