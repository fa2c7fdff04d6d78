package processor_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

// The package creates all its tables before any test writes.
var tables = ddbtest.Pool{Size: 239} // +1 review s27 (review_s27_random_test.go, found by the randomized test with kills): an open mark whose batch finishes during the check (R4); +1 session 27 tests of the lead's step R fixes (review_s27_rfixes_test.go): a checkpoint read failing refuses the branch (R5); +2 review s27 of step R's fixes (review_s27_counted_test.go): a malformed open mark dropped by the rebase when told (R2), an id used twice (R3); +3 review s26 of step R (review_s26_counted_test.go): an abandon between two transactions of R6 (R1), an abandoned batch's open mark (R2), an unknown outcome names the roll-ups (R3); +12 the counted repair (repair_exact_test.go: the two sequences of issue 25 finding 1 in three consumer kinds, now run (6); countedrepair_test.go: a racing writer and consumer in three kinds (3), random repairs under a batch and a standard-mode consumer (2), lost answers of R6, foreign writes); +3 review of S26-B1's fix (review_s26_revb1_test.go): a throttled probe (B1a: sent again, and the bound), an earlier probe id's probes committed in the next round (B1b); +1 a batch counts a foreign write (counted_test.go); +5 review s26 of step B (review_s26_rebase_test.go): a lost probe then a write before the re-read (B1), an abandon before the last transaction (B2), an abandon during a round (B3), a report cut between transactions (B5), a stop after a landed transaction (B7); +6 the rebase (rebase_probes_test.go): probes counted per id (marker, batch, a resumer), an abandoned batch's open mark, another rebase's probe meanwhile, lost answers; +4 review s26 of the raise (review_s26_raise_test.go): a flags item created after a raise, a processor living past an unfence, a throttled raise, a waiter on the raise; +1 the first write raises the protocol (readx_test.go); +5 step X and its review (readx_test.go: a fenced checkpoint read and refused, fenced heads reconciled and repaired; review_s25_readx_test.go: X1, X2, X5); +3 review s24 of T24-1 (review_s24_t24_test.go): a window without a checkpoint whose first records were trimmed (answer kept, answer lost), two invocations of it at once; +6 session 24 trims (review_s24_starttrim_test.go): a window without a checkpoint whose records were all trimmed (4: closed and open shard, answer kept and lost), a checkpoint created meanwhile (2: at the window's last, before it); +1 the checkpoint's moves metered (meter_update_test.go); +3 review s24 lead (review_s24_lead_test.go): a trim passed over a gap counted and read on, over an abandoned batch, over records read; +3 a commit whose context ends (cancelled_test.go): during the fence, the commit, a backoff; +3 review s23 trims (review_s23_trim_test.go): a second trim after records read past a counted checkpoint, a trim after an operator's abandon-batch, a count older than the retention; +7 session 23 trims (abandon_test.go): a stale reader before the checkpoint, an overtaken abandon (2: before and past the trim point), one count per gap (2: a second consumer, the window's retry), a closed shard's trimmed tail (2: answers kept, answers lost); +1 review s22 abandon (review_s22_abandon_test.go): an abandon landed, its answer lost, the checkpoint moved on before the re-read; +6 the guard-alone abandon transaction (abandon_test.go): a pending layout-6 batch, its lost answer, a reopen at TRIM_HORIZON without a pending batch (answer kept, answer lost), the tumbling window's trim, a failed abandon tried again; +7 review s21 plan 6 as built (review_s21_plan6_test.go): two committers at a delta group (before and after the staging read), roll-ups off between crash and resume, a staging delete refused once, a contributor parked in a middle group, a roll-ups-off consumer losing group 0, a delta put refused beside a claim conflict; +7 plan layout 6 wired (batch6_test.go): several groups, a netting batch, a crash and a resumer, staging gone, a layout-4 pending batch, roll-ups off, every answer lost; +1 review s19 plan 6 (review_s19_plan6_test.go): the staging and open-mark expressions; +1 review s18 counted (review_s18_counted_test.go): many branches in one batch, an older version's run on the same batch, the older key's room; +8 counted changes, standard mode (counted_test.go): netting run, foreign write (2: answer kept, answer lost), damaged applied item, write units, randomized, records without effect on the reports, a conflict on the applied item; +5 review s18 (review_s18_park_test.go): a stale cached shape, a sent shape compared once, a recheck seen, a recheck's answer lost (marker, batch); +9 review s18 (review_s18_fence_test.go): 2 rollback copy (env, the old consumer's scratch), 1 tombstone gone, 2 failed fence, 2 lost answer and two fences, 1 migration run again, 1 old start mark on a tombstone; +1 the mid-version consumer's scratch table (migrate_test.go, a second run keeps a checkpoint moved on); +2 newer delta format (deltaformat_test.go): batch, marker; +4 legacy tombstone (review_s16_fence_test.go): 1 review s16, 2 first claim after an old one, 1 idle stream; +4 a write rolled back (rolledback_test.go): once and every time, marker and batch; +1 roll-up write units (rollupcost_test.go); +5 review s17 (review_s17_rollups_test.go): a half-committed batch across the switch, each way, and a delta read with roll-ups off in each guard mode; +3 roll-ups off (norollups_test.go): one per guard mode; +3 review s16 (review_s16_rollup_test.go): 2 count changed and back, 1 parked partial branches; +21 roll-ups (rollup_test.go): 12 sum of parts, 1 stale count, 2 back to zero, 1 damaged count, 2 deletes and moves, 1 lane records, 1 tumbling range, 1 resumer; +8 roll-up reconcile and repair (reconcile_rollup_test.go): 6 damages, 1 busy period, 1 waiting delta

func newTableName(t testing.TB) string { return tables.Table(t) }

// env is one fresh table on the package's DynamoDB Local with clients.
type env struct {
	ddb       *dynamodb.Client
	streams   *dynamodbstreams.Client
	table     string
	streamARN string
	faults    *ledgertest.FaultTransport
	faulty    *dynamodb.Client // goes through faults
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{ddb: ddbtest.Client(t), faults: &ledgertest.FaultTransport{}}
	e.table = newTableName(t)
	e.streams = dynamodbstreams.NewFromConfig(ddbtest.Config(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := table.DescribeTable(ctx, e.ddb, e.table)
	require.NoError(t, err)
	e.streamARN = info.StreamARN
	require.NotEmpty(t, e.streamARN)
	e.faulty = dynamodb.NewFromConfig(ddbtest.Config(t, infra.WithTransportWrapper(func(next http.RoundTripper) http.RoundTripper {
		e.faults.Next = next
		return e.faults
	})), func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	return e
}

func (e *env) processor(t testing.TB, reg prometheus.Registerer, api processor.DynamoDB) *processor.Processor {
	t.Helper()
	if api == nil {
		api = e.ddb
	}
	p, err := processor.New(api, processor.Config{Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}, processor.NewMetrics(reg))
	require.NoError(t, err)
	return p
}

// records reads every record of the env's stream, in order (DynamoDB Local
// has a single shard).
func (e *env) records(t testing.TB) (shard string, recs []processor.Record) {
	t.Helper()
	shards, err := ledgertest.ReadAll(context.Background(), e.streams, e.streamARN, nil)
	require.NoError(t, err)
	require.Len(t, shards, 1, "DynamoDB Local has one shard")
	return shards[0].ID, shards[0].Records
}

func (e *env) requireReconciled(t testing.TB) processor.ReconcileStats {
	t.Helper()
	diffs, stats, err := processor.Reconcile(context.Background(), e.ddb, e.table, processor.Scope{})
	require.NoError(t, err)
	for _, d := range diffs {
		t.Errorf("reconcile difference: %s", d)
	}
	return stats
}

func reconcileBranch(ctx context.Context, e *env, tenant, branch string) ([]processor.Difference, processor.ReconcileStats, error) {
	return processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{Tenant: tenant, Branch: branch})
}
