package poller_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// rollupProof is what the roll-up half of issue 24's proof found.
type rollupProof struct {
	drains     int            // drain pollers run after finish until no delta waited
	partitions map[string]int // roll-up partial partitions (lanes) by currency
	reports    int            // branch reports reconcile read
	txs        int            // transactions reconcile read (valid or not)
	stamps     int            // transactions whose stamp the oracle checked
}

func (p rollupProof) String() string {
	cs := make([]string, 0, len(p.partitions))
	for c, n := range p.partitions {
		cs = append(cs, fmt.Sprintf("%s %d", c, n))
	}
	sort.Strings(cs)
	return fmt.Sprintf("%d more drains until no delta waited; roll-up partitions by currency %v; %d transactions, %d branch reports; %d stamps checked by the calendar oracle", p.drains, cs, p.txs, p.reports, p.stamps)
}

// requireRollupsReconciled folds every roll-up delta still waiting in a
// lane (the last commits' deltas come back as stream records: a drain
// poller reads them, up to 5 times), then reconciles the whole table with
// the roll-ups judged (processor.ReconcileOptions.Rollups): 0 differences
// in the branch reports and in the tenant roll-ups (Σ partials by
// currency and period = Σ the branch folds), every stamp as its branch's
// calendar gives it, and a partial in each of the chain's currencies.
func (e *emuEnv) requireRollupsReconciled(t *testing.T, chain *ledgertest.Chain) rollupProof {
	t.Helper()
	ctx := context.Background()
	var p rollupProof
	var diffs []processor.Difference
	var stats processor.ReconcileStats
	for {
		var err error
		diffs, stats, err = processor.ReconcileWith(ctx, e.ddb, e.table, processor.Scope{}, processor.ReconcileOptions{Rollups: true})
		require.NoError(t, err)
		if stats.RollupWaiting[chain.Tenant] == 0 {
			break
		}
		require.Less(t, p.drains, 5, "roll-up deltas still waiting after 5 drains: %v", stats.RollupWaiting)
		p.drains++
		require.NoError(t, e.s.Sync(ctx))
		d := e.poller(t, fmt.Sprintf("rollup-drain%d", p.drains), nil, func(c *poller.Config) { c.Drain = true })
		e.runDrain(t, d, 3*time.Minute)
	}
	for _, d := range diffs {
		t.Errorf("reconcile difference (roll-ups judged): %s", d)
	}
	assert.Empty(t, stats.Unsettled, "stamps as the branches' calendars give them")
	assert.Empty(t, stats.CalendarErrors)
	p.reports, p.txs = stats.Reports, stats.Transactions
	require.Positive(t, stats.Reports)
	// The stamps against the tests' own brute-force calendar oracle (no
	// code shared with aggregates/calendar.go): with reconcile's 0
	// differences, the branch reports and roll-ups are the folds of the
	// transactions in periods computed independently.
	checked, bad, err := chain.Calendars().Check(ctx, e.ddb, e.table)
	require.NoError(t, err)
	assert.Empty(t, bad, "every stamp as the independent oracle computes it")
	assert.Positive(t, checked)
	p.stamps = checked

	// The roll-ups are there, in every currency: not a reconcile of
	// nothing. And the amounts are in their currency's digits, all of them
	// used: BHD's third fraction digit, JPY's whole amounts.
	p.partitions = map[string]int{}
	pages := dynamodb.NewScanPaginator(e.ddb, &dynamodb.ScanInput{TableName: aws.String(e.table)})
	seen := map[string]bool{}
	fullDigits := map[string]bool{}
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		require.NoError(t, err)
		for _, item := range out.Items {
			pk, _ := table.String(item, "PK")
			if tx, err := table.ParseTransaction(item); err == nil && tx.Tenant == chain.Tenant {
				cur := chain.Branches[tx.Branch].Currency
				assert.Equal(t, cur, tx.Currency, "transaction %s of %s", tx.ID, tx.Branch)
				assert.NoError(t, aggregates.CheckAmountDigits(tx.Amount, cur))
				if _, frac, _ := strings.Cut(aggregates.FormatAmount(tx.Amount), "."); len(frac) == aggregates.CurrencyDigits(cur) {
					fullDigits[cur] = true
				}
			}
			tenant, currency, _, ok := aggregates.ParseRollupPK(pk)
			if !ok || seen[pk] {
				continue
			}
			seen[pk] = true
			assert.Equal(t, chain.Tenant, tenant)
			p.partitions[currency]++
		}
	}
	for _, c := range ledgertest.ChainCurrencies {
		assert.Positive(t, p.partitions[c], "roll-up partials in %s", c)
		assert.True(t, fullDigits[c], "an amount in %s with its %d fraction digits", c, aggregates.CurrencyDigits(c))
	}
	return p
}
