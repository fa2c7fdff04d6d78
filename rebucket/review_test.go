package rebucket_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/rebucket"
	"github.com/ledger-dev/ledger/table"
)

// Tests from the adversarial review of issue 22's rebucket: each one a
// sequence of events after which a run said it was done (or gave up)
// while the branch was not in its current calendar.

// putCalendar stores a branch's calendar and its tenant's period types as
// the writer's PATCH does, changed at changedAt.
func putCalendar(t *testing.T, api *dynamodb.Client, tableName, tenant, branch string, c aggregates.Calendar, periods []aggregates.PeriodType, changedAt time.Time) {
	t.Helper()
	ctx := context.Background()
	at := table.S(changedAt.UTC().Format(time.RFC3339Nano))
	item := table.Key(aggregates.BranchKey(tenant, branch))
	item[table.AttrEntityType] = table.S(aggregates.EntityBranch)
	item[table.AttrCalendarChangedAt] = at
	for k, v := range table.EncodeCalendar(c) {
		item[k] = v
	}
	_, err := api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &tableName, Item: item})
	require.NoError(t, err)
	ten := table.Key(aggregates.TenantKey(tenant))
	ten[table.AttrEntityType] = table.S(aggregates.EntityTenant)
	ten[table.AttrReportPeriods] = table.EncodeReportPeriods(periods)
	ten[table.AttrReportPeriodsChangedAt] = at
	_, err = api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &tableName, Item: ten})
	require.NoError(t, err)
}

// createAll creates n transactions of b, one a day from 2026-01-01 at
// the UTC time of day hhmm (minutes), stamped in the calendar in force; it
// returns their ids in key order.
func createAll(t *testing.T, ctx context.Context, b *books, n, hhmm int) []string {
	t.Helper()
	base := time.Date(2026, time.January, 1, 0, hhmm, 0, 0, time.UTC)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("tx-%d-%d", base.AddDate(0, 0, i).Unix(), i)
		require.NoError(t, b.put(ctx, ids[i], 1, "attribute_not_exists(PK)", nil))
	}
	return ids
}

// unsettled is how many transactions of the branch reconcile finds outside
// its current calendar.
func unsettled(t *testing.T, ctx context.Context, api *dynamodb.Client, tableName, tenant, branch string) int {
	t.Helper()
	_, stats, err := processor.Reconcile(ctx, api, tableName, processor.Scope{Tenant: tenant, Branch: branch})
	require.NoError(t, err)
	return stats.Unsettled[processor.Scope{Tenant: tenant, Branch: branch}]
}

func mustCalendar(t *testing.T, zone, dayStart, week string, fiscal int) aggregates.Calendar {
	t.Helper()
	c, err := aggregates.NewCalendar(zone, dayStart, week, fiscal)
	require.NoError(t, err)
	return c
}

// clockedAPI records, on the test's clock, when the run first wrote.
type clockedAPI struct {
	rebucket.API
	now       func() time.Time
	mu        sync.Mutex
	firstRead time.Time
}

func (c *clockedAPI) Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.mu.Lock()
	if c.firstRead.IsZero() {
		c.firstRead = c.now()
	}
	c.mu.Unlock()
	return c.API.Query(ctx, in, optFns...)
}

// TestRebucket_ACalendarChangedDuringTheSettleWaitIsWaitedForAgain: the
// branch's calendar changes while the run waits for the writers to settle
// on the previous change. The run reads the new calendar after its wait,
// but the writers' caches may hold the one before the new change for up to
// their TTL: the run must not read the transactions before --settle has
// passed since the new change either.
func TestRebucket_ACalendarChangedDuringTheSettleWaitIsWaitedForAgain(t *testing.T) {
	ctx := context.Background()
	api := ddbtest.Client(t)
	tableName := tables.Table(t)
	const tenant, branch, settle = "waits", "b", 15 * time.Second
	b := &books{api: api, table: tableName, tenant: tenant, branch: branch, rng: rand.New(rand.NewPCG(1, 2))}
	t0 := time.Now().UTC()
	putCalendar(t, api, tableName, tenant, branch, aggregates.DefaultCalendar(), aggregates.DefaultPeriodTypes, t0.Add(-time.Hour))
	createAll(t, ctx, b, 3, 2*60) // 02:00 UTC: the day before in both new calendars

	var mu sync.Mutex
	clock := t0
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	putCalendar(t, api, tableName, tenant, branch, mustCalendar(t, "America/Sao_Paulo", "04:00", "MONDAY", 1), aggregates.DefaultPeriodTypes, t0)
	second := t0.Add(10 * time.Second) // the change made during the wait
	sleeps := 0
	sleep := func(_ context.Context, d time.Duration) error {
		mu.Lock()
		clock = clock.Add(d)
		sleeps++
		first := sleeps == 1
		mu.Unlock()
		if first {
			putCalendar(t, api, tableName, tenant, branch, mustCalendar(t, "Asia/Tokyo", "12:00", "MONDAY", 1), aggregates.DefaultPeriodTypes, second)
		}
		return nil
	}
	capi := &clockedAPI{API: api, now: now}
	res, err := rebucket.Run(ctx, capi, tableName, tenant, branch, rebucket.Options{Settle: settle, Parallel: 1, Now: now, Sleep: sleep})
	require.NoError(t, err)
	require.Equal(t, 3, res.Moved)
	require.False(t, capi.firstRead.Before(second.Add(settle)),
		"the transactions were read at %s, %s after the calendar's last change; want at least --settle (%s)",
		capi.firstRead.Format(time.RFC3339), capi.firstRead.Sub(second), settle)
}

// TestRebucket_ACalendarChangedDuringTheRunIsNotReportedDone: the
// branch's calendar changes while a run restamps its history (an admin's
// second PATCH, or a second rebucket started after it). Clients go on
// changing transactions, which the writer stamps in the newest calendar.
// The run, still holding the calendar it read at its start, restamps the
// rest of the history into that one — moving the writer's fresh stamps
// back out of the current calendar — and exits 0, "done". After a run that
// says it is done every transaction must be in the branch's current
// calendar.
func TestRebucket_ACalendarChangedDuringTheRunIsNotReportedDone(t *testing.T) {
	ctx := context.Background()
	api := ddbtest.Client(t)
	tableName := tables.Table(t)
	const tenant, branch = "changes", "b"
	b := &books{api: api, table: tableName, tenant: tenant, branch: branch, rng: rand.New(rand.NewPCG(3, 4))}
	putCalendar(t, api, tableName, tenant, branch, aggregates.DefaultCalendar(), aggregates.DefaultPeriodTypes, time.Now().Add(-time.Hour))
	ids := createAll(t, ctx, b, 30, 2*60) // 02:00 UTC: the day before in São Paulo, the same day in Tokyo

	putCalendar(t, api, tableName, tenant, branch, mustCalendar(t, "America/Sao_Paulo", "04:00", "MONDAY", 1), aggregates.DefaultPeriodTypes, time.Now())
	tokyo := mustCalendar(t, "Asia/Tokyo", "00:00", "MONDAY", 1)
	var once sync.Once
	res, err := rebucket.Run(ctx, api, tableName, tenant, branch, rebucket.Options{Settle: -1, Parallel: 1, Progress: func(p rebucket.Progress) {
		if p.Moved < 5 {
			return
		}
		once.Do(func() {
			// The calendar changes again; a client then changes the
			// branch's last transaction through a writer, which stamps
			// it in the new calendar.
			putCalendar(t, api, tableName, tenant, branch, tokyo, aggregates.DefaultPeriodTypes, time.Now())
			last := ids[len(ids)-1]
			require.NoError(t, b.put(ctx, last, 2, "version = :v", map[string]ddbtypes.AttributeValue{":v": table.Int(1)}))
		})
	}})
	t.Logf("run: %+v, %v", res, err)
	if err == nil {
		require.Zero(t, unsettled(t, ctx, api, tableName, tenant, branch),
			"the run exited 0 (%+v) with transactions outside the branch's current calendar", res)
	}
}

// TestRebucket_ATransactionWithoutPeriodsInTheNewCalendarDoesNotStopTheRest:
// a tenant keeps a transaction created at 9999-12-31T20:00Z (the writer
// takes createdAt up to the end of year 9999) and then moves its branch to
// a calendar in which that instant's business date is in year 10000
// (Pacific/Kiritimati, +14): no stamp can hold it. A rebucket of the
// tenant must still move the history of every other transaction and
// branch, and say which could not be moved; it stopped at the first such
// transaction, leaving the rest of that branch and every later branch of
// the tenant in their old calendar, on every run.
func TestRebucket_ATransactionWithoutPeriodsInTheNewCalendarDoesNotStopTheRest(t *testing.T) {
	ctx := context.Background()
	api := ddbtest.Client(t)
	tableName := tables.Table(t)
	const tenant = "edge"
	past := time.Now().Add(-time.Hour)
	kiritimati := mustCalendar(t, "Pacific/Kiritimati", "00:00", "MONDAY", 1)
	a := &books{api: api, table: tableName, tenant: tenant, branch: "a", rng: rand.New(rand.NewPCG(5, 6))}
	putCalendar(t, api, tableName, tenant, "a", aggregates.DefaultCalendar(), aggregates.DefaultPeriodTypes, past)
	far := fmt.Sprintf("tx-%d-%d", time.Date(9999, time.December, 31, 20, 0, 0, 0, time.UTC).Unix(), 0)
	require.NoError(t, a.put(ctx, far, 1, "attribute_not_exists(PK)", nil))
	bb := &books{api: api, table: tableName, tenant: tenant, branch: "b", rng: rand.New(rand.NewPCG(7, 8))}
	putCalendar(t, api, tableName, tenant, "b", aggregates.DefaultCalendar(), aggregates.DefaultPeriodTypes, past)
	createAll(t, ctx, bb, 10, 23*60+30) // 23:30 UTC: the next day at +14
	putCalendar(t, api, tableName, tenant, "a", kiritimati, aggregates.DefaultPeriodTypes, past.Add(time.Minute))
	putCalendar(t, api, tableName, tenant, "b", kiritimati, aggregates.DefaultPeriodTypes, past.Add(time.Minute))

	res, err := rebucket.Run(ctx, api, tableName, tenant, "", rebucket.Options{Settle: -1, Parallel: 2})
	t.Logf("run: %+v, %v", res, err)
	require.Zero(t, unsettled(t, ctx, api, tableName, tenant, "b"), "branch b's history is in its calendar")
	require.ErrorIs(t, err, rebucket.ErrUnplaceable, "a run that left a transaction outside its calendar does not exit 0")
	require.Equal(t, 1, res.Unplaceable, "the transaction no stamp can hold is counted")
}

// TestRebucket_MendsAStampThatIsTheTransactionsOnlyFault: a transaction
// whose stamp was damaged by another path (a MONTHLY that is not its
// business date's month, a business date its createdAt cannot have) is
// quarantined and counts nowhere, though every field a client wrote is
// valid. The stamp is rebucket's to write: a run stamps it in the current
// calendar, and the stream's MODIFY (invalid → valid) brings its amount
// into the reports. It was left alone as "invalid", for ever.
func TestRebucket_MendsAStampThatIsTheTransactionsOnlyFault(t *testing.T) {
	ctx := context.Background()
	api := ddbtest.Client(t)
	tableName := tables.Table(t)
	const tenant, branch = "mended", "b"
	b := &books{api: api, table: tableName, tenant: tenant, branch: branch, rng: rand.New(rand.NewPCG(9, 10))}
	putCalendar(t, api, tableName, tenant, branch, aggregates.DefaultCalendar(), aggregates.DefaultPeriodTypes, time.Now().Add(-time.Hour))
	ids := createAll(t, ctx, b, 2, 12*60) // 2026-01-01 and 2026-01-02, 12:00 UTC
	for i, bad := range []struct{ date, periods string }{
		{"2026-01-01", "DAILY#2026-01-01 MONTHLY#2026-02 YEARLY#2026"},
		{"2020-06-01", "DAILY#2020-06-01 MONTHLY#2020-06 YEARLY#2020"},
	} {
		_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &tableName, Key: table.Key(b.key(ids[i])),
			UpdateExpression:          aws.String("SET businessDate = :d, periods = :p"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":d": table.S(bad.date), ":p": table.S(bad.periods)}})
		require.NoError(t, err)
	}
	res, err := rebucket.Run(ctx, api, tableName, tenant, branch, rebucket.Options{Settle: -1})
	require.NoError(t, err)
	require.Equal(t, 2, res.Moved, "both stamps mended: %+v", res)
	_, stats, err := processor.Reconcile(ctx, api, tableName, processor.Scope{Tenant: tenant, Branch: branch})
	require.NoError(t, err)
	require.Zero(t, stats.Invalid, "every transaction is valid again")
	require.Zero(t, stats.Unsettled[processor.Scope{Tenant: tenant, Branch: branch}])
}
