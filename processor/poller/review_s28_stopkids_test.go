package poller_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// refuseRegister refuses, once armed, every registration of a child
// shard's lease item (table.RegisterShard) its poller writes.
type refuseRegister struct {
	poller.Table
	armed   atomic.Bool
	refused atomic.Int64
}

func (r *refuseRegister) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if r.armed.Load() && in.ExpressionAttributeNames["#par"] == table.AttrLeaseParent && in.ConditionExpression != nil && *in.ConditionExpression == "attribute_not_exists(#c)" {
		r.refused.Add(1)
		return nil, errors.New("injected: the registration of a child shard refused")
	}
	return r.Table.UpdateItem(ctx, in, opts...)
}

// Review of session 28, S28-K1: a stop whose registration of a child did
// not land (refused; or deferred by the pacer, logged at debug) offered
// the child all the same. Its lease item does not exist, the receiver's
// listing predates it: the receiver cleared the offer as unknown_shard, a
// worker write spent for nothing at a stop, and the stop logged the child
// offered and nothing at WARN of it left to the next listing. Here a's
// registrations are refused once its shards split and a stops at its
// first reader's end: a must offer no child it could not register (b
// clears none as unknown_shard) and must say, at WARN, that children were
// left to the next listing.
func TestPoller_AStopDoesNotOfferAChildItCouldNotRegister(t *testing.T) {
	ddbtest.Long(t)
	const shards = 4
	e := sixBranchEnv(t, 2802, shards)
	const lease = 6 * time.Second // the stop's budget 1 s, as the stop test's (S28-K11)
	rare := func(c *poller.Config) { c.DiscoverInterval, c.LeaseDuration = 10*time.Minute, lease }

	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	var a *testPoller
	hook := &stopAtEnd{arn: e.stream.arn, stop: cancelA, stopping: func() bool {
		return logged(a.logs.lines(), "poller stopping: committing what is in hand, then releasing leases") > 0
	}}
	refuse := &refuseRegister{}
	a = e.hbPoller(t, "a", func(api poller.Table) poller.Table {
		hook.Table = api
		refuse.Table = hook
		return refuse
	}, nil, nil, rare)
	doneA := make(chan error, 1)
	go func() { doneA <- a.Run(ctxA) }()
	b := e.hbPoller(t, "b", nil, nil, nil, rare)
	stopB := start(t, b)
	defer stopB()
	eventually(t, "a and b hold two shards each", time.Minute, func() bool {
		return counter(t, a.m.LeasesHeld) == shards/2 && counter(t, b.m.LeasesHeld) == shards/2
	})

	watch := leasesNamed(t, e, "a")
	require.Len(t, watch, shards/2, "a's leases")
	hook.mu.Lock()
	hook.watch = watch
	hook.mu.Unlock()
	refuse.armed.Store(true)
	for id := range watch {
		_, err := e.s.Close(id, true)
		require.NoError(t, err)
	}
	select {
	case err := <-doneA:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("a did not stop within 30s")
	}
	require.NotEmpty(t, hook.endedShards(), "no reader of a met its shard's end during the stop: the test proves nothing")
	require.Positive(t, refuse.refused.Load(), "a registered no child at its stop: the test proves nothing")

	// b reads its offers at every round (a third of a lease duration):
	// three rounds see every offer a's stop made cleared.
	time.Sleep(lease)
	assert.Zero(t, counter(t, b.m.Offers.WithLabelValues(poller.OfferUnknownShard)),
		"b was offered children a could not register (cleared as unknown_shard)")
	assert.Zero(t, logged(a.logs.lines(), "stopping: the children of the shards finished offered to the live pollers"),
		"a counted offered children it could not register")
	assert.Positive(t, logged(a.logs.lines(), "stopping: children of the shards finished left to the next listing of the stream"),
		"a's stop did not say that children were left to the next listing")
}
