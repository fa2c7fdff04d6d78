package writer_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	ledgertable "github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// calendarBranch is a branch of the end-to-end calendar test: its calendar
// as the API takes it and as the oracle takes it, and the instants around
// which its transactions are written (cut-offs on ordinary days and on
// days whose clocks change).
type calendarBranch struct {
	id       string
	calendar string
	oracle   ledgertest.OracleCalendar
	around   []string // local wall-clock instants (zone's time), "2006-01-02T15:04"
}

var calendarBranches = []calendarBranch{
	{"sp", `{"timeZone":"America/Sao_Paulo","dayStartsAt":"04:00","weekStartsOn":"SUNDAY","fiscalYearStartMonth":7}`,
		ledgertest.OracleCalendar{Zone: "America/Sao_Paulo", DayStart: 4 * 60, WeekStart: time.Sunday, FiscalStart: time.July},
		[]string{"2026-11-28T04:00", "2026-06-30T04:00", "2026-12-31T04:00", "2018-11-04T04:00", "2018-02-18T04:00"}},
	// London's cut-off at 01:30 is in the skipped hour on 29 March 2026 and
	// in the repeated hour on 25 October 2026.
	{"ldn", `{"timeZone":"Europe/London","dayStartsAt":"01:30","weekStartsOn":"MONDAY","fiscalYearStartMonth":4}`,
		ledgertest.OracleCalendar{Zone: "Europe/London", DayStart: 90, WeekStart: time.Monday, FiscalStart: time.April},
		[]string{"2026-03-29T01:30", "2026-10-25T01:30", "2026-03-31T01:30", "2026-04-01T01:30"}},
	// New York's 02:30 does not exist on 8 March 2026 and happens once on
	// 1 November (its repeated hour is 01:00–02:00).
	{"nyc", `{"timeZone":"America/New_York","dayStartsAt":"02:30","weekStartsOn":"WEDNESDAY","fiscalYearStartMonth":10}`,
		ledgertest.OracleCalendar{Zone: "America/New_York", DayStart: 150, WeekStart: time.Wednesday, FiscalStart: time.October},
		[]string{"2026-03-08T02:30", "2026-11-01T01:30", "2026-09-30T02:30", "2026-12-31T02:30"}},
	{"ktm", `{"timeZone":"Asia/Kathmandu","dayStartsAt":"00:00","weekStartsOn":"SATURDAY","fiscalYearStartMonth":12}`,
		ledgertest.OracleCalendar{Zone: "Asia/Kathmandu", DayStart: 0, WeekStart: time.Saturday, FiscalStart: time.December},
		[]string{"2026-12-01T00:00", "2026-01-01T00:00"}},
	{"kiri", `{"timeZone":"Pacific/Kiritimati","dayStartsAt":"23:00","weekStartsOn":"MONDAY","fiscalYearStartMonth":1}`,
		ledgertest.OracleCalendar{Zone: "Pacific/Kiritimati", DayStart: 23 * 60, WeekStart: time.Monday, FiscalStart: time.January},
		[]string{"2026-12-31T23:00", "2026-01-01T23:00"}},
	{"lhw", `{"timeZone":"Australia/Lord_Howe","dayStartsAt":"02:00","weekStartsOn":"SUNDAY","fiscalYearStartMonth":7}`,
		ledgertest.OracleCalendar{Zone: "Australia/Lord_Howe", DayStart: 120, WeekStart: time.Sunday, FiscalStart: time.July},
		[]string{"2026-04-05T02:00", "2026-10-04T02:00"}},
}

// TestEndToEnd_BusinessCalendars_ReportsEqualAnIndependentComputation: a
// tenant keeps all seven period types; its branches are in six zones with
// cut-offs that fall in skipped and repeated hours. Transactions are posted
// through the writer at instants around each cut-off, some changed and
// some deleted, while the real poller consumes the table's stream. After
// it drains, every stamp is what an independent computation of the periods
// gives (ledgertest's oracle), and every report the writer serves equals
// the fold of the transactions over those independently computed periods.
func TestEndToEnd_BusinessCalendars_ReportsEqualAnIndependentComputation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tableName := ownTable(t)
	e := newEnv(t, tableName)
	r := e.asAdmin(req{method: "PATCH", path: "/v1/tenants/" + e.tenant, headers: []string{"If-Match", `"1"`},
		body: `{"reportPeriods":["DAILY","WEEKLY","MONTHLY","QUARTERLY","YEARLY","FISCAL_QUARTER","FISCAL_YEAR"]}`})
	require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
	for _, b := range calendarBranches {
		e.branchWithCalendar(b.id, b.calendar)
	}

	// The real poller, in-process, over the table's stream.
	info, err := ledgertable.DescribeTable(ctx, e.ddb, tableName)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	proc, err := processor.New(e.ddb, processor.Config{Table: tableName}, processor.NewMetrics(reg))
	require.NoError(t, err)
	pl, err := poller.New(dynamodbstreams.NewFromConfig(ddbtest.Config(t)), e.ddb, proc, poller.Config{
		Table: tableName, StreamARN: info.StreamARN, Owner: "calendars",
		IdleBackoff: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, poller.NewMetrics(reg))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- pl.Run(ctx) }()

	rng := rand.New(rand.NewPCG(22, 1))
	model := map[string]writer.Transaction{}
	for _, b := range calendarBranches {
		loc, err := aggregates.LoadZone(b.oracle.Zone)
		require.NoError(t, err)
		e.branch = b.id
		for _, wall := range b.around {
			w, err := time.ParseInLocation("2006-01-02T15:04", wall, loc)
			require.NoError(t, err)
			// Either side of the cut-off, to the second and by an hour,
			// and across the day: the UTC instants of the wall time's
			// neighbourhood, whatever the clock did there.
			for _, d := range []time.Duration{-2 * time.Hour, -time.Hour, -time.Second, 0, time.Second, 30 * time.Minute, time.Hour, 2 * time.Hour, 13 * time.Hour} {
				at := w.Add(d).UTC().Format(time.RFC3339Nano)
				tx := e.create(fmt.Sprintf(`{"type":%q,"amount":"%d.%02d","category":%q,"paymentMethod":"card","createdAt":%q}`,
					[]string{"INCOME", "EXPENSE"}[rng.IntN(2)], 1+rng.IntN(500), rng.IntN(100), []string{"sales", "rent", "food"}[rng.IntN(3)], at))
				model[tx.ID] = tx
			}
		}
	}
	n := 0
	for id, tx := range model {
		switch n++; n % 7 {
		case 0:
			r := e.send(req{method: "DELETE", path: "/v1/tenants/" + e.tenant + "/branches/" + tx.Branch + "/transactions/" + id})
			require.Equal(t, http.StatusNoContent, r.Status, "answer %s", r)
			delete(model, id)
		case 1, 2:
			r := e.send(req{method: "PATCH", path: "/v1/tenants/" + e.tenant + "/branches/" + tx.Branch + "/transactions/" + id,
				body: `{"amount":"7.77","category":"changed"}`, headers: []string{"If-Match", etagOf(tx.Version)}})
			require.Equal(t, http.StatusOK, r.Status, "answer %s", r)
			model[id] = r.transaction(t)
		}
	}

	var diffs []processor.Difference
	require.Eventually(t, func() bool {
		diffs, _, err = processor.Reconcile(ctx, e.ddb, tableName, processor.Scope{})
		return err == nil && len(diffs) == 0
	}, 5*time.Minute, 100*time.Millisecond, "the poller drains the writes exactly: %v", diffs)

	// Every stamp as the oracle computes it, and every report served equal
	// to the fold over the oracle's periods.
	all := aggregates.PeriodTypes[:]
	fold := aggregates.NewFold()
	for _, b := range calendarBranches {
		checked, bad, err := ledgertest.CheckStamps(ctx, e.ddb, tableName, e.tenant, b.id, b.oracle, all)
		require.NoError(t, err)
		assert.Empty(t, bad, "branch %s", b.id)
		assert.Positive(t, checked)
		for _, tx := range e.listAll(b.id) {
			assert.Equal(t, model[tx.ID], tx)
			d := domain(t, tx)
			created, _ := time.Parse(time.RFC3339Nano, tx.CreatedAt)
			bd, periods, err := ledgertest.OracleStamp(created, b.oracle, all)
			require.NoError(t, err)
			d.Stamp, err = aggregates.ParseStamp(bd, periods)
			require.NoError(t, err)
			assert.Equal(t, bd, tx.BusinessDate)
			fold.Add(d, +1)
		}
	}
	checked := 0
	for _, k := range fold.Keys() {
		want := fold.Report(k)
		want.Prune()
		got := e.getReport(k)
		assert.Empty(t, served(t, got).Diff(want), "%s", k)
		checked++
	}
	t.Logf("%d transactions in %d zones, %d reports equal to the independent computation", len(model), len(calendarBranches), checked)
	cancel()
	require.NoError(t, <-done)
}
