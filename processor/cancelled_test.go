package processor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

// A commit whose context ends before it lands or fails (a poller's lease
// lost or expired mid-commit, its stop's grace over) is given up and
// counted once as ledger_commits_total{outcome="cancelled"}, never as
// failed, whatever it was doing: the shard's fence in flight, the commit's
// transaction in flight, or the backoff after a throttled attempt. Before,
// the first two counted failed (LedgerCommitsFailing fired on a lease lost
// under load, and the fleet's conflict proof saw one such "failed" commit
// in a loaded run) and the third nothing. Delivered again with a live
// context, the records commit exactly.
func TestProcess_ACommitWhoseContextEndsIsCancelledNotFailed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		at    int64            // the TransactWriteItems during which the context ends (1: the shard's fence)
		fault ledgertest.Fault // what that request meets
	}{
		{"during the fence's call", 1, ledgertest.Pass},
		{"during the commit's call", 2, ledgertest.Pass},
		// The throttle is answered at once; the context ends 100 ms into
		// the 10 s backoff.
		{"during the backoff after a throttle", 2, ledgertest.Throttle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			require.NoError(t, ledgertest.NewWorkload(2407).Run(context.Background(), e.ddb, e.table, 20))
			shard, recs := e.records(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var n atomic.Int64
			e.faults.Decide = func(op string) ledgertest.Fault {
				if op == "TransactWriteItems" && n.Add(1) == tc.at {
					if tc.fault == ledgertest.Throttle {
						time.AfterFunc(100*time.Millisecond, cancel)
					} else {
						cancel() // the request goes on with its context ended
					}
					return tc.fault
				}
				return ledgertest.Pass
			}
			p, err := processor.New(e.faulty, processor.Config{Table: e.table, BaseBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second}, processor.NewMetrics(prometheus.NewRegistry()))
			require.NoError(t, err)
			g := p.ShardGuard(e.streamARN, shard)
			_, err = p.Process(ctx, g, recs)
			require.ErrorIs(t, err, context.Canceled)
			m := p.Metrics()
			assert.Zero(t, testutil.ToFloat64(m.Commits.WithLabelValues("failed")), "commits failed")
			assert.Equal(t, 1.0, testutil.ToFloat64(m.Commits.WithLabelValues(processor.CommitCancelled)), "commits cancelled")

			e.faults.Decide = nil
			res, err := p.Process(context.Background(), g, recs)
			require.NoError(t, err)
			assert.Equal(t, len(recs), res.Committed)
			e.requireReconciled(t)
			assert.Zero(t, testutil.ToFloat64(m.Commits.WithLabelValues("failed")), "commits failed")
		})
	}
}
