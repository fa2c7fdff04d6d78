package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
)

// TestPoller_DamagedReportsOfOneBranchStopNoOtherReport damages report
// items of one branch in every way the issue lists (a total of the wrong
// type, a breakdown that is not a map, an entry field of the wrong type,
// an item padded to DynamoDB's 400 KB limit, a report that should not
// exist, a report deleted) while a poller runs and writes continue to every
// branch. The poller never stops: the other branches' reports stay exact
// meanwhile, refused deltas are parked; reconcile names each damaged
// report, --repair heals them all, and after more writes and a drain there
// is no difference.
func TestPoller_DamagedReportsOfOneBranchStopNoOtherReport(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 41)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 300)...)
	e.drain(t, "p0", nil)
	e.requireReconciled(t)

	damaged, err := ledgertest.Damage(ctx, e.ddb, e.table, "acme", "north")
	require.NoError(t, err)

	// Writes go on while a poller runs.
	p := e.poller(t, "p1", nil, nil, nil)
	stop := start(t, p)
	probe, err := processor.New(e.ddb, processor.Config{Table: e.table}, nil)
	require.NoError(t, err)
	caughtUp := func(last st.Record) func() bool {
		return func() bool {
			cp, err := probe.ShardGuard(e.stream.arn, "shardId-A").Checkpoint(ctx)
			require.NoError(t, err)
			return processor.CompareSequence(cp, aws.ToString(last.Dynamodb.SequenceNumber)) >= 0
		}
	}
	var last st.Record
	for range 5 {
		recs := e.write(t, 80)
		f.appendTo("shardId-A", recs...)
		last = recs[len(recs)-1]
	}
	eventually(t, "the poller to catch up past the damage", 60*time.Second, caughtUp(last))

	diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, processor.Scope{})
	require.NoError(t, err)
	assert.NoError(t, ledgertest.DamageFound(diffs, damaged, "acme", "north"))
	assert.Positive(t, counter(t, p.pm.Parked.WithLabelValues(processor.ParkedMalformed)), "deltas for the mistyped reports were parked")
	assert.Zero(t, counter(t, p.pm.Commits.WithLabelValues("failed")), "no commit failed: the shard never stopped")

	res, err := processor.Repair(ctx, e.ddb, e.table, diffs, time.Now())
	require.NoError(t, err)
	assert.Equal(t, len(diffs), res.Repaired, "skipped %v, partial %v", res.Skipped, res.Partial)
	recs := e.write(t, 100)
	f.appendTo("shardId-A", recs...)
	eventually(t, "the poller to drain the last writes", 60*time.Second, caughtUp(recs[len(recs)-1]))
	stop()
	e.requireReconciled(t)
}
