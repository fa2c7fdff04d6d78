package poller_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/stretchr/testify/assert"
)

// noLeaseReads fails every read of one lease item (a Query of its key)
// while fail is set: the owner cannot answer a drain's ask (it re-reads
// the lease first). Sweeps of the lease partition go through.
type noLeaseReads struct {
	poller.Table
	fail atomic.Bool
}

func (c *noLeaseReads) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if sk, ok := in.ExpressionAttributeValues[":sk"].(*ddbtypes.AttributeValueMemberS); ok && c.fail.Load() && strings.HasPrefix(sk.Value, "LEASE#") {
		return nil, errors.New("injected: lease reads fail")
	}
	return c.Table.Query(ctx, in, opts...)
}

// Review (session 17) of the late heartbeat, hole D1: a drain run with
// LeaseMode renew (`poller --drain` with LEDGER_LEASE_MODE=renew left set
// for a rolling upgrade) judged every lease by the counter rule alone and
// fenced nobody. A heartbeat owner's counters never move and a drain never
// registers (no compat), so a lease duration after its first read the
// drain took a live heartbeat poller's leases over while that poller read
// on, unfenced and unaware: two readers of each shard (exactness left to
// the checkpoint's condition). Here the owner cannot answer the drain's
// asks (its lease reads fail) for four lease durations: the drain must
// take nothing over meanwhile (the owner's beat moves). Then the asks are
// answered, the drain completes, and every record is committed once.
// Without the fix the drain takes every lease over within the window.
func TestReviewS17HB_ADrainInRenewModeTakesNoLeaseOfALiveHeartbeatPoller(t *testing.T) {
	ddbtest.Long(t)
	const shards = 4
	const lease = 6 * time.Second // the owner's slowness is injected
	e := newEmuEnv(t, 1703, streamemu.Config{Shards: shards, Seed: 1703})
	cfg := func(c *poller.Config) { c.LeaseDuration = lease }
	reads := &noLeaseReads{}
	a := e.hbPoller(t, "a", func(api poller.Table) poller.Table { reads.Table = api; return reads }, nil, nil, cfg)
	e.write(t, 20)
	stopA := start(t, a)
	eventually(t, "a holds every shard", 20*lease, func() bool { return counter(t, a.m.LeasesHeld) == shards })

	reads.fail.Store(true)
	e.write(t, 20)
	d := e.poller(t, "drain", nil, func(c *poller.Config) {
		c.Drain = true
		c.LeaseDuration = lease
		c.LeaseMode = poller.LeaseModeRenew
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	time.Sleep(4 * lease)
	assert.Zero(t, counter(t, d.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver)), "the drain took a live heartbeat poller's leases over")
	assert.Zero(t, counter(t, d.m.LeaseEvents.WithLabelValues(poller.LeaseFenced)), "a's beat moves: not fenced")

	reads.fail.Store(false)
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the drain did not complete")
	}
	stopA()
	end := time.Now()
	requireNoOverlap(t, append(readerIntervals(t, a.logs.lines(), end), readerIntervals(t, d.logs.lines(), end)...))
	e.finish(t, nil)
}
