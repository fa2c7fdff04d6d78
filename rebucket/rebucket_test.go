package rebucket_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/rebucket"
	"github.com/ledger-dev/ledger/table"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

var tables = ddbtest.Pool{Size: 5}

// books is a writer as the writer service behaves towards the table: it
// stamps every transaction it creates or changes with the calendar in
// force (read on every write: a directory cache of no lifetime), and
// changes and deletes only the version it read.
type books struct {
	api            *dynamodb.Client
	table          string
	tenant, branch string
	rng            *rand.Rand
	mu             sync.Mutex
	live           []string // ids
	n              int
}

func (b *books) calendar(ctx context.Context) (table.BranchCalendar, error) {
	return table.LoadBranchCalendar(ctx, b.api, b.table, b.tenant, b.branch)
}

func (b *books) key(id string) aggregates.Key {
	created := createdOf(id)
	return aggregates.TransactionKey(b.tenant, b.branch, aggregates.DateOf(created), id)
}

// ids encode their createdAt: "tx-{unix seconds}-{n}".
func createdOf(id string) time.Time {
	var sec int64
	var n int
	if _, err := fmt.Sscanf(id, "tx-%d-%d", &sec, &n); err != nil {
		panic(err)
	}
	return time.Unix(sec, 0).UTC()
}

// instant picks a createdAt around the business-day cut-offs of 2026 in
// the zones the tests use.
func (b *books) instant() time.Time {
	base := time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)
	day := b.rng.IntN(365)
	return base.Add(time.Duration(day)*24*time.Hour + time.Duration(b.rng.IntN(24*60))*time.Minute)
}

func (b *books) put(ctx context.Context, id string, version int64, cond string, values map[string]ddbtypes.AttributeValue) error {
	bc, err := b.calendar(ctx)
	if err != nil {
		return err
	}
	created := createdOf(id)
	st, err := bc.Stamp(created)
	if err != nil {
		return err
	}
	tx := table.Transaction{ID: id, Tenant: b.tenant, Branch: b.branch, Type: []string{"INCOME", "EXPENSE"}[b.rng.IntN(2)],
		Amount: strconv.Itoa(1+b.rng.IntN(999)) + "." + strconv.Itoa(10+b.rng.IntN(90)), Category: []string{"food", "rent", "pix"}[b.rng.IntN(3)],
		CreatedAt: created.Format(time.RFC3339Nano), UpdatedAt: time.Now().UTC().Format(time.RFC3339Nano), Version: version}
	tx.SetStamp(st)
	item, err := table.EncodeTransaction(b.key(id), tx)
	if err != nil {
		return err
	}
	_, err = b.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &b.table, Item: item, ConditionExpression: aws.String(cond), ExpressionAttributeValues: values})
	return err
}

// step creates, changes or deletes one transaction, as a client would.
func (b *books) step(ctx context.Context) error {
	b.mu.Lock()
	op := b.rng.IntN(10)
	if len(b.live) < 20 {
		op = 0
	}
	var id string
	switch {
	case op < 5:
		b.n++
		id = fmt.Sprintf("tx-%d-%d", b.instant().Unix(), b.n)
	default:
		id = b.live[b.rng.IntN(len(b.live))]
	}
	b.mu.Unlock()
	if op < 5 {
		if err := b.put(ctx, id, 1, "attribute_not_exists(PK)", nil); err != nil {
			return err
		}
		b.mu.Lock()
		b.live = append(b.live, id)
		b.mu.Unlock()
		return nil
	}
	out, err := b.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &b.table, Key: table.Key(b.key(id)), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		return err
	}
	v, _ := table.Int64(out.Item, table.AttrVersion)
	cond := map[string]ddbtypes.AttributeValue{":v": table.Int(v)}
	var ccf *ddbtypes.ConditionalCheckFailedException
	if op == 9 {
		_, err = b.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &b.table, Key: table.Key(b.key(id)),
			ConditionExpression: aws.String("version = :v"), ExpressionAttributeValues: cond})
		if err == nil {
			b.mu.Lock()
			for i, l := range b.live {
				if l == id {
					b.live = append(b.live[:i], b.live[i+1:]...)
					break
				}
			}
			b.mu.Unlock()
		}
	} else {
		err = b.put(ctx, id, v+1, "version = :v", cond)
	}
	if errors.As(err, &ccf) {
		return nil // a concurrent change won: a client would read again
	}
	return err
}

// setCalendar changes the branch's calendar and the tenant's period types
// as the writer's PATCH does.
func setCalendar(t *testing.T, api *dynamodb.Client, tableName, tenant, branch string, c aggregates.Calendar, periods []aggregates.PeriodType) {
	t.Helper()
	putCalendar(t, api, tableName, tenant, branch, c, periods, time.Now())
}

func startPoller(t *testing.T, ctx context.Context, api *dynamodb.Client, tableName string) {
	t.Helper()
	info, err := table.DescribeTable(ctx, api, tableName)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	proc, err := processor.New(api, processor.Config{Table: tableName}, processor.NewMetrics(reg))
	require.NoError(t, err)
	pl, err := poller.New(dynamodbstreams.NewFromConfig(ddbtest.Config(t)), api, proc, poller.Config{
		Table: tableName, StreamARN: info.StreamARN, Owner: "rebucket-test",
		IdleBackoff: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, poller.NewMetrics(reg))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- pl.Run(ctx) }()
	t.Cleanup(func() {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("poller: %v", err)
		}
	})
}

// exact waits until reconcile finds no difference and every transaction is
// in its branch's current calendar.
func exact(t *testing.T, ctx context.Context, api *dynamodb.Client, tableName string) processor.ReconcileStats {
	t.Helper()
	var last []processor.Difference
	var stats processor.ReconcileStats
	require.Eventually(t, func() bool {
		var err error
		last, stats, err = processor.Reconcile(ctx, api, tableName, processor.Scope{})
		return err == nil && len(last) == 0
	}, 5*time.Minute, 200*time.Millisecond, "reports must equal the fold of the transactions: %v", last)
	return stats
}

// TestRebucket_MovesHistoryExactlyWhileClientsWriteAndAPollerRuns: a
// branch keeps the default calendar while a workload writes its history;
// then its calendar becomes São Paulo's with a 04:00 day start and weeks
// from Sunday, fiscal years from July, and its tenant keeps all seven
// period types. A rebucket runs while the workload goes on changing the
// same branch and a poller commits; it is killed halfway and run again.
// After a drain the reports equal the fold of the transactions, every
// transaction is in the new calendar, each stamp matches an independent
// computation of its periods, and a further run writes nothing.
func TestRebucket_MovesHistoryExactlyWhileClientsWriteAndAPollerRuns(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api := ddbtest.Client(t)
	tableName := tables.Table(t)
	const tenant, branch = "chain", "sp"
	seeds, err := ledgertest.Seeds(os.Getenv, 1)
	require.NoError(t, err)
	seed := seeds[0]
	b := &books{api: api, table: tableName, tenant: tenant, branch: branch, rng: rand.New(rand.NewPCG(seed, 7))}
	setCalendar(t, api, tableName, tenant, branch, aggregates.DefaultCalendar(), aggregates.DefaultPeriodTypes)
	startPoller(t, ctx, api, tableName)
	for range 400 {
		require.NoError(t, b.step(ctx))
	}
	before := exact(t, ctx, api, tableName)
	require.Empty(t, before.Unsettled)

	sp, err := aggregates.NewCalendar("America/Sao_Paulo", "04:00", "SUNDAY", 7)
	require.NoError(t, err)
	setCalendar(t, api, tableName, tenant, branch, sp, aggregates.PeriodTypes[:])
	require.Eventually(t, func() bool {
		_, st, err := processor.Reconcile(ctx, api, tableName, processor.Scope{})
		return err == nil && st.Unsettled[processor.Scope{Tenant: tenant, Branch: branch}] > 0
	}, time.Minute, 100*time.Millisecond, "reconcile names the transactions not in the new calendar")

	// Clients keep writing while the rebucket runs.
	wctx, stopWriting := context.WithCancel(ctx)
	writing := make(chan error, 1)
	go func() {
		for wctx.Err() == nil {
			if err := b.step(wctx); err != nil && wctx.Err() == nil {
				writing <- err
				return
			}
		}
		writing <- nil
	}()

	// Killed halfway: cancelled once a quarter of the history is moved.
	killCtx, kill := context.WithCancel(ctx)
	var once sync.Once
	opts := rebucket.Options{Settle: -1, Parallel: 4, Progress: func(p rebucket.Progress) {
		if p.Moved >= 100 {
			once.Do(kill)
		}
	}}
	first, err := rebucket.Run(killCtx, api, tableName, tenant, "", opts)
	require.ErrorIs(t, err, context.Canceled, "the first run is killed")
	require.Positive(t, first.Moved)
	opts.Progress = nil
	second, err := rebucket.Run(ctx, api, tableName, tenant, "", opts)
	require.NoError(t, err)
	t.Logf("killed run: %+v; second run: %+v", first, second)

	stopWriting()
	require.NoError(t, <-writing)
	stats := exact(t, ctx, api, tableName)
	require.Empty(t, stats.Unsettled, "every transaction is in the new calendar")
	require.Zero(t, stats.Unstamped)

	// The stamps, checked against an independent computation of the
	// periods, and the reports of the old period values gone or empty.
	checked, bad, err := ledgertest.CheckStamps(ctx, api, tableName, tenant, branch,
		ledgertest.OracleCalendar{Zone: "America/Sao_Paulo", DayStart: 4 * 60, WeekStart: time.Sunday, FiscalStart: time.July}, aggregates.PeriodTypes[:])
	require.NoError(t, err)
	require.Empty(t, bad)
	require.Positive(t, checked)

	third, err := rebucket.Run(ctx, api, tableName, tenant, "", opts)
	require.NoError(t, err)
	require.Zero(t, third.Moved, "a further run writes nothing")
	require.Equal(t, third.Transactions, third.Current+third.Invalid)
}
