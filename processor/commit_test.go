package processor_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

func TestProcess_WorkloadThenRedeliveryChangesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	w := ledgertest.NewWorkload(1)
	require.NoError(t, w.Run(ctx, e.ddb, e.table, 300))
	shard, recs := e.records(t)
	require.Greater(t, len(recs), 250)

	reg := prometheus.NewRegistry()
	p := e.processor(t, reg, nil)
	g := p.ShardGuard(e.streamARN, shard)
	res, err := p.Process(ctx, g, recs)
	require.NoError(t, err)
	assert.Equal(t, len(recs), res.Committed)
	assert.Positive(t, res.Quarantined)
	assert.Positive(t, res.Ignored)
	assert.Equal(t, 0, res.Duplicates)
	stats := e.requireReconciled(t)
	assert.Equal(t, w.Live(), stats.Transactions)

	// The same records again, through a new processor and guard (a restart
	// from the trim horizon): all duplicates, nothing written.
	p2 := e.processor(t, nil, nil)
	res, err = p2.Process(ctx, p2.ShardGuard(e.streamARN, shard), recs)
	require.NoError(t, err)
	assert.Equal(t, len(recs), res.Duplicates)
	e.requireReconciled(t)

	assert.Equal(t, float64(0), testutil.ToFloat64(p.Metrics().Conflicts.WithLabelValues(processor.ConflictConditionFailed)))
	assert.Equal(t, float64(res.Committed), testutil.ToFloat64(p2.Metrics().Records.WithLabelValues("INSERT", processor.OutcomeDuplicate))+
		testutil.ToFloat64(p2.Metrics().Records.WithLabelValues("MODIFY", processor.OutcomeDuplicate))+
		testutil.ToFloat64(p2.Metrics().Records.WithLabelValues("REMOVE", processor.OutcomeDuplicate))+
		testutil.ToFloat64(p2.Metrics().Records.WithLabelValues("INSERT", processor.OutcomeIgnored))+
		testutil.ToFloat64(p2.Metrics().Records.WithLabelValues("MODIFY", processor.OutcomeIgnored))+
		testutil.ToFloat64(p2.Metrics().Records.WithLabelValues("REMOVE", processor.OutcomeIgnored)))
}
