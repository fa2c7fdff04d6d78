package compact_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/compact"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// sumCounter sums the samples of the counter family name in reg whose
// labels include every pair of want.
func sumCounter(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// The consumers' view of what a delete and its compaction write, on the
// table's real stream: a poller reads a transaction's INSERT, the MODIFY
// to its tombstone, the compaction's mark (tombstone to tombstone) and its
// REMOVE of the marked tombstone, beside another transaction that stays.
// The reports hold the one that stays (reconcile finds no difference), and
// nothing is quarantined: the mark and the REMOVE move no figure. (The
// Lambda's kinds and the fixtures replay take records through the same
// classify: processor/unit_test.go, TestClassify.)
func TestReviewS16_TheConsumersTakeADeleteAndItsCompactionForNoFigure(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := newBooks(t)
	put := func(id, amount string) aggregates.Key {
		k := aggregates.TransactionKey(b.tenant, "north", aggregates.Date{Year: 2026, Month: 11, Day: 20}, id)
		item, err := table.EncodeTransaction(k, table.Transaction{ID: id, Tenant: b.tenant, Branch: "north", Type: "EXPENSE",
			Amount: amount, Category: "c", CreatedAt: "2026-11-20T12:00:00Z", UpdatedAt: "2026-11-20T12:00:00Z", Version: 1})
		require.NoError(t, err)
		table.Count(item, 1)
		b.putItem(item)
		return k
	}
	gone := put("01JD00000000000000000000G1", "5")
	put("01JD00000000000000000000S1", "7")
	// The delete, as the writer leaves it.
	tomb := b.get(gone)
	for _, name := range table.TombstoneRemoves {
		delete(tomb, name)
	}
	tomb[table.AttrDeletedAt] = table.S(time.Now().UTC().Format(time.RFC3339Nano))
	tomb[table.AttrVersion] = table.S("2")
	table.Count(tomb, 2)
	b.putItem(tomb)

	res, err := compact.Run(ctx, b.api, b.table, b.coord(), compact.Options{Now: func() time.Time { return time.Now().Add(72 * time.Hour) }})
	require.NoError(t, err)
	require.Equal(t, 1, res.Compacted)

	info, err := table.DescribeTable(ctx, b.api, b.table)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	proc, err := processor.New(b.api, processor.Config{Table: b.table}, processor.NewMetrics(reg))
	require.NoError(t, err)
	pl, err := poller.New(dynamodbstreams.NewFromConfig(ddbtest.Config(t)), b.api, proc, poller.Config{
		Table: b.table, StreamARN: info.StreamARN, Owner: "compact-review",
		IdleBackoff: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, poller.NewMetrics(reg))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- pl.Run(ctx) }()

	// The compaction's REMOVE is the key's last record: once it is
	// counted, every record of the key has been.
	require.Eventually(t, func() bool {
		return sumCounter(t, reg, "ledger_records_total", map[string]string{"event": "REMOVE"}) >= 1
	}, 3*time.Minute, 100*time.Millisecond, "the poller reads the compaction's REMOVE")
	require.Eventually(t, func() bool {
		diffs, _, err := processor.Reconcile(ctx, b.api, b.table, processor.Scope{})
		return err == nil && len(diffs) == 0
	}, time.Minute, 100*time.Millisecond, "the reports hold the transaction that stays")
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("poller: %v", err)
	}
	assert.Zero(t, sumCounter(t, reg, "ledger_quarantined_records_total", nil), "nothing quarantined")
	assert.GreaterOrEqual(t, sumCounter(t, reg, "ledger_records_total", map[string]string{"event": "MODIFY"}), 2.0, "the delete and the mark read")
	_, stats, err := processor.Reconcile(context.Background(), b.api, b.table, processor.Scope{})
	require.NoError(t, err)
	assert.Equal(t, 1, stats.Transactions, "one transaction left")
	out, err := b.api.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &b.table, Key: table.Key(gone), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.Nil(t, out.Item, "compacted")
}
