package processor_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor"
)

// The checkpoint's moves outside a commit (a window's move over records
// without effect, moveOver; its move over a trimmed tail, carryLoss, shown
// here) are one metered UpdateItem (Processor.updateItem): the request and
// the write units it consumed show in the write meter. Fails with the
// hand-counted UpdateItem of before (the request counted, units 0).
func TestMeter_TheCheckpointsMovesOutsideACommitCountTheirWriteUnits(t *testing.T) {
	ctx := context.Background()
	t.Run("over a trimmed tail", func(t *testing.T) {
		e, shard, recs := trimShard(t, 32, 150, 101)
		pendingFrom(t, e, recs, shard, 40, 60)
		p := e.processor(t, nil, nil)
		r := processor.ShardRange{StreamARN: e.streamARN, ShardID: shard, First: recs[80].SequenceNumber, Last: recs[100].SequenceNumber}
		_, err := p.CommitShardRange(ctx, closedAndTrimmed{e.streams}, r, 100)
		require.NoError(t, err)
		require.Equal(t, r.Last, cpItemOf(t, e, shard).Seq, "carried over the trimmed tail")
		m := p.Metrics()
		// The carry, and the raise of the protocol before this
		// processor's first write (its condition failed: the flags say 4
		// already; counted since the review of session 26, S26-P3).
		assert.Equal(t, 2.0, testutil.ToFloat64(m.WriteRequests.WithLabelValues("UpdateItem")))
		assert.Positive(t, testutil.ToFloat64(m.WriteUnits.WithLabelValues("UpdateItem")))
	})
}
