package processor_test

import (
	"context"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

// scanRecorder records the segments of the Scans sent to the real table.
type scanRecorder struct {
	processor.ReconcileAPI
	mu       sync.Mutex
	segments map[[2]int32]int // {Segment, TotalSegments} (-1: not set) → calls
}

func (s *scanRecorder) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	k := [2]int32{-1, -1}
	if in.Segment != nil {
		k[0] = aws.ToInt32(in.Segment)
	}
	if in.TotalSegments != nil {
		k[1] = aws.ToInt32(in.TotalSegments)
	}
	s.mu.Lock()
	s.segments[k]++
	s.mu.Unlock()
	return s.ReconcileAPI.Scan(ctx, in, opts...)
}

// A reconcile of the whole table finds the same thing whatever its
// parallelism; with one segment it sends a plain Scan (DynamoDB Local
// serves one that names a segment about twice as slowly), with more, one
// Scan per segment.
func TestReconcileWith_ParallelScanSegments(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	w := ledgertest.NewWorkload(3)
	require.NoError(t, w.Run(ctx, e.ddb, e.table, 200))
	shard, recs := e.records(t)
	p := e.processor(t, nil, nil)
	_, err := p.Process(ctx, p.ShardGuard(e.streamARN, shard), recs)
	require.NoError(t, err)

	for _, tc := range []struct {
		parallel int
		want     map[[2]int32]int
	}{
		{1, map[[2]int32]int{{-1, -1}: 1}},
		{3, map[[2]int32]int{{0, 3}: 1, {1, 3}: 1, {2, 3}: 1}},
	} {
		rec := &scanRecorder{ReconcileAPI: e.ddb, segments: map[[2]int32]int{}}
		diffs, stats, err := processor.ReconcileWith(ctx, rec, e.table, processor.Scope{}, processor.ReconcileOptions{Parallel: tc.parallel})
		require.NoError(t, err, "parallel %d", tc.parallel)
		assert.Empty(t, diffs, "parallel %d", tc.parallel)
		assert.Equal(t, w.Live(), stats.Transactions, "parallel %d", tc.parallel)
		assert.Positive(t, stats.Reports, "parallel %d", tc.parallel)
		assert.Equal(t, tc.want, rec.segments, "parallel %d: scans by {segment, total segments}", tc.parallel)
	}
}

// readMeter sums what the real table answered to reconcile's reads: every
// page's ScannedCount and consumed capacity, and whether each read asked
// for it.
type readMeter struct {
	processor.ReconcileAPI
	mu              sync.Mutex
	items           int
	units           float64
	reads, unmetred int
}

func (m *readMeter) count(asked ddbtypes.ReturnConsumedCapacity, scanned int32, c *ddbtypes.ConsumedCapacity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	if asked != ddbtypes.ReturnConsumedCapacityTotal {
		m.unmetred++
	}
	m.items += int(scanned)
	if c != nil {
		m.units += aws.ToFloat64(c.CapacityUnits)
	}
}

func (m *readMeter) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	out, err := m.ReconcileAPI.Scan(ctx, in, opts...)
	if err == nil {
		m.count(in.ReturnConsumedCapacity, out.ScannedCount, out.ConsumedCapacity)
	}
	return out, err
}

func (m *readMeter) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := m.ReconcileAPI.Query(ctx, in, opts...)
	if err == nil {
		m.count(in.ReturnConsumedCapacity, out.ScannedCount, out.ConsumedCapacity)
	}
	return out, err
}

// A reconcile counts every item its reads read and the read units
// DynamoDB reported for them (issue 25's curve reports both): the whole
// table once for the key scan, then each branch's transactions and report
// partition. Its Queries are paged small, so that many pages are summed.
func TestReconcileWith_CountsItemsReadAndReadUnits(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	w := ledgertest.NewWorkload(7)
	require.NoError(t, w.Run(ctx, e.ddb, e.table, 120))

	// What the reads must see, counted independently: every item of the
	// table, and again every item of a branch's partitions (all of them:
	// no consumer ran) and its branch's and tenant's directory items.
	all, branchItems := 0, 0
	branches := map[[2]string]bool{}
	p := dynamodb.NewScanPaginator(e.ddb, &dynamodb.ScanInput{TableName: aws.String(e.table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		require.NoError(t, err)
		for _, item := range page.Items {
			all++
			pk := item["PK"].(*ddbtypes.AttributeValueMemberS).Value
			if tenant, branch, ok := aggregates.ParseTransactionPK(pk); ok {
				branchItems++
				branches[[2]string{tenant, branch}] = true
			}
		}
	}
	require.Positive(t, branchItems)
	for b := range branches {
		for _, k := range []aggregates.Key{aggregates.TenantKey(b[0]), aggregates.BranchKey(b[0], b[1])} {
			out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.table), ConsistentRead: aws.Bool(true),
				Key: map[string]ddbtypes.AttributeValue{"PK": &ddbtypes.AttributeValueMemberS{Value: k.PK}, "SK": &ddbtypes.AttributeValueMemberS{Value: k.SK}}})
			require.NoError(t, err)
			if out.Item != nil {
				branchItems++
			}
		}
	}

	for _, parallel := range []int{1, 3} {
		m := &readMeter{ReconcileAPI: pagedQueries{e.ddb}}
		_, stats, err := processor.ReconcileWith(ctx, m, e.table, processor.Scope{}, processor.ReconcileOptions{Parallel: parallel})
		require.NoError(t, err)
		assert.Equal(t, all+branchItems, stats.ItemsRead, "parallel %d: the table, then each branch's items", parallel)
		assert.Equal(t, m.items, stats.ItemsRead, "parallel %d", parallel)
		assert.Zero(t, m.unmetred, "parallel %d: reads sent without ReturnConsumedCapacity TOTAL", parallel)
		assert.Positive(t, m.units, "parallel %d: DynamoDB Local reports consumed capacity", parallel)
		assert.InDelta(t, m.units, stats.ReadUnits, 1e-9, "parallel %d", parallel)
	}
}

// pagedQueries makes the real table answer Queries in pages of 20 items,
// as a branch of millions of transactions is answered in pages of 1 MB.
type pagedQueries struct{ processor.ReconcileAPI }

func (q pagedQueries) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	in.Limit = aws.Int32(20)
	return q.ReconcileAPI.Query(ctx, in, opts...)
}

// Progress counts a branch's transactions page by page, not only once the
// branch is done: one branch can take minutes.
func TestReconcileWith_ProgressCountsTransactionsPageByPage(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	w := ledgertest.NewWorkload(5)
	require.NoError(t, w.Run(ctx, e.ddb, e.table, 150))

	var last processor.ReconcileProgress
	withinBranch := 0 // calls that counted transactions of a branch not yet done
	_, stats, err := processor.ReconcileWith(ctx, pagedQueries{e.ddb}, e.table, processor.Scope{}, processor.ReconcileOptions{
		Parallel: 1,
		Progress: func(p processor.ReconcileProgress) {
			if p.Transactions > last.Transactions && p.BranchesDone == last.BranchesDone {
				withinBranch++
			}
			last = p
		},
	})
	require.NoError(t, err)
	assert.Positive(t, withinBranch, "transactions counted before their branch was done")
	assert.Equal(t, stats.Transactions, last.Transactions)
	assert.Equal(t, w.Live(), last.Transactions)
	assert.Equal(t, last.Branches, last.BranchesDone)
}

// A stray item has no figures (no Stored, no Expected): Settled keeps it
// when both reads found it, drops it when only one did, and never looks at
// figures it does not have (issue 25: it dereferenced the nil Expected).
func TestSettled_StrayItemsOfBothReadsAreKeptWithoutFigures(t *testing.T) {
	junk := aggregates.Key{PK: "TENANT#acme#BRANCH#north#REPORTING", SK: "JUNK"}
	gone := aggregates.Key{PK: "TENANT#acme#BRANCH#north#REPORTING", SK: "GONE"}
	fresh := aggregates.Key{PK: "TENANT#acme#BRANCH#north#REPORTING", SK: "FRESH"}
	stray := func(k aggregates.Key) processor.Difference {
		return processor.Difference{Stray: &k, Lines: []string{"not a report, entry or parked delta"}}
	}
	first := []processor.Difference{stray(junk), stray(gone)}
	second := []processor.Difference{stray(junk), stray(fresh)}
	got := processor.Settled(first, second)
	require.Len(t, got, 1)
	assert.Equal(t, junk, *got[0].Stray)
	assert.Contains(t, got[0].String(), "stray item "+junk.String())
}
