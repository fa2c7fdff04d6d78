package poller_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
)

// Review (adversarial, session 19): the pre-take read bound, the paused
// gauge and the listing cadence (docs/exactly-once.md).

// slowTakes answers every lease take (table.TakeLease: the owner set and
// the shard described) delay late, the write landing first, as a loaded
// table does; renewals, releases and every other call are answered at
// once.
type slowTakes struct {
	poller.Table
	delay time.Duration
}

func isTake(in *dynamodb.UpdateItemInput) bool {
	_, owner := in.ExpressionAttributeValues[":o"]
	_, shard := in.ExpressionAttributeValues[":sh"]
	_, next := in.ExpressionAttributeValues[":next"]
	return owner && shard && next
}

func (s slowTakes) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := s.Table.UpdateItem(ctx, in, opts...)
	if isTake(in) {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	return out, err
}

// Hole R19-1 (takeBound, liveness). A poller that renews its lease items
// in its rounds (LeaseModeRenew; a heartbeat poller in compat) and holds
// no lease at a round's start got a whole lease duration for its reads
// before the takes and for the takes themselves (takeBound: nothing held,
// nothing a long round can cost). But the first leases it takes are
// held from their take's send, and renewed only at the round after this
// one, a renewal interval after it ends: takes in batches of 16 that
// outlast two thirds of a lease duration let the first batch expire
// before its first renewal. Here 48 shards, one renewing poller, every
// take answered 0.3 lease durations late: three batches (0.9 lease
// durations) in the round, the first batch's 16 leases expired at the
// next round (their readers stopped, the leases counted expired, taken
// again later). With the fix the takes of a renewing poller stop half a
// renewal interval after they began (as a holder's), the first batch
// always made: no lease expires.
func TestReviewS19_ARenewingPollerTakingItsFirstLeasesRenewsThemInTime(t *testing.T) {
	ddbtest.Long(t)
	const shards = 48
	const lease = 6 * time.Second
	e := newEmuEnv(t, 1901, streamemu.Config{Shards: shards, Seed: 1901})
	a := e.hbPoller(t, "a", func(api poller.Table) poller.Table { return slowTakes{Table: api, delay: lease * 3 / 10} }, nil, nil,
		func(c *poller.Config) { c.LeaseDuration, c.LeaseMode = lease, poller.LeaseModeRenew })
	e.write(t, 40)
	stop := start(t, a)
	eventually(t, "a holds every lease", 30*lease, // a liveness bound
		func() bool { return counter(t, a.m.LeasesHeld) == shards })
	time.Sleep(2 * lease) // renewals of the last takes
	stop()
	expired := counter(t, a.m.LeaseEvents.WithLabelValues(poller.LeaseExpired))
	t.Logf("leases expired before their first renewal: %.0f", expired)
	assert.Zero(t, expired, "leases expired: a round of takes outlasted the first ones' life")
	assert.Zero(t, counter(t, a.m.LeaseLosses.WithLabelValues(poller.LossExpired)))
	e.finish(t, nil)
}
