package poller_test

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// askClearRace holds the owner's answer to an ask (ClearAsks naming
// shard) until the drain's own ask for that shard has landed, and the
// owner's heartbeats meanwhile (their answers would carry the drain's ask
// to the owner's next round): the interleaving of the review of session
// 25, S25-K1, made certain.
type askClearRace struct {
	poller.Table
	shard   string
	mu      sync.Mutex
	armed   bool
	blocked bool
	held    chan struct{} // closed when the ClearAsks is held
	release chan struct{} // closed by the drain's ask for shard
	cleared chan struct{} // closed once the ClearAsks returned
}

func ssHas(in *dynamodb.UpdateItemInput, shard string) bool {
	ss, ok := in.ExpressionAttributeValues[":s"].(*ddbtypes.AttributeValueMemberSS)
	return ok && slices.Contains(ss.Value, shard)
}

func (f *askClearRace) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	expr := aws.ToString(in.UpdateExpression)
	f.mu.Lock()
	first := f.armed && strings.HasPrefix(expr, "DELETE #as") && ssHas(in, f.shard)
	if first {
		f.armed, f.blocked = false, true
	}
	beat := f.blocked && strings.HasPrefix(expr, "SET #et = :et, #o = :o, #h")
	f.mu.Unlock()
	switch {
	case first:
		close(f.held)
		select {
		case <-f.release:
		case <-ctx.Done():
		}
		out, err := f.Table.UpdateItem(ctx, in, opts...)
		f.mu.Lock()
		f.blocked = false
		f.mu.Unlock()
		close(f.cleared)
		return out, err
	case beat:
		select {
		case <-f.cleared:
		case <-ctx.Done():
		}
	}
	return f.Table.UpdateItem(ctx, in, opts...)
}

// drainAsks closes release once the drain's ask (AskWorker) for shard has
// landed.
type drainAsks struct {
	poller.Table
	shard   string
	release chan struct{}
	once    sync.Once
}

func (f *drainAsks) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := f.Table.UpdateItem(ctx, in, opts...)
	if err == nil && strings.HasPrefix(aws.ToString(in.UpdateExpression), "ADD #as") && ssHas(in, f.shard) {
		f.once.Do(func() { close(f.release) })
	}
	return out, err
}

// The review of session 25 of branch s25-kidplan (not merged), S25-K1, the
// same race as S25-A1 (docs/exactly-once.md, "A drain's ask lost to its
// owner's clear (session 25, S25-A1; found by CI)"): a drain's ask cleared
// by the owner's answer to an earlier ask for the same lease. An owner
// clears the asks it answered by value (ClearAsks: DELETE from a string
// set), so an ask for the same shard that lands between the heartbeat
// answer the owner read its asks from and that write is removed with the
// answered one. A drain asks twice for one lease when its first request
// met the lease being handed over (seen in the kidplan test's final drain:
// r, stopping, handed KP-18-N to b; the drain's request landed on the
// lease in b's name before b's take, which removed the pendingOwner; b
// answered that ask finding nobody asking, while the drain's second
// request and ask landed). The second request stays in pendingOwner, so
// the drain asks no more; the owner reads none of its lease items and
// keeps the lease: the drain never exits (5 minutes in that run, until the
// test's cleanup). Here the earlier ask is written by the test (an ask
// whose request a take removed), and the owner's ClearAsks of it is held
// until the drain's own ask has landed. Fixed (retell): a poller tells the
// owner again, a renewal interval after the last ask, of a request still
// pending in its name. Without the fix the drain does not exit in 90 s.
func TestReviewS25K1_ADrainsAskClearedByTheAnswerToAnEarlierAskIsAskedAgain(t *testing.T) {
	ddbtest.Long(t)
	const shards = 4
	e := newEmuEnv(t, 2511, streamemu.Config{Shards: shards, Seed: 2511})
	race := &askClearRace{held: make(chan struct{}), release: make(chan struct{}), cleared: make(chan struct{})}
	// Its heartbeats are held for the race's few seconds: 10 s leases
	// outlive that.
	a := e.hbPoller(t, "a", func(api poller.Table) poller.Table { race.Table = api; return race }, nil, nil,
		func(c *poller.Config) { c.LeaseDuration = 10 * time.Second })
	e.write(t, 40)
	stopA := start(t, a)
	eventually(t, "a holds every shard", time.Minute, func() bool { return counter(t, a.m.LeasesHeld) == shards })
	var mine []string
	for s, o := range e.leaseOwners(t) {
		if o == "a" {
			mine = append(mine, s)
		}
	}
	require.NotEmpty(t, mine)
	sort.Strings(mine)
	x := mine[0]
	race.mu.Lock()
	race.shard, race.armed = x, true
	race.mu.Unlock()
	// The earlier ask, whose pendingOwner a take removed: a answers it
	// finding nobody asking, and clears it.
	_, err := e.ddb.UpdateItem(context.Background(), table.AskWorker(table.CoordinationTableName(e.table), e.stream.arn, "a", x))
	require.NoError(t, err)
	select {
	case <-race.held:
	case <-time.After(time.Minute):
		t.Fatal("a did not answer the ask")
	}
	asks := &drainAsks{shard: x, release: race.release}
	d := e.hbPoller(t, "D", func(api poller.Table) poller.Table { asks.Table = api; return asks }, nil, nil,
		func(c *poller.Config) { c.Drain, c.LeaseDuration = true, 10*time.Second })
	// A liveness bound: without the fix the drain waits for x for ever.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	err = d.Run(ctx)
	assert.NoError(t, err)
	require.NoError(t, ctx.Err(), "the drain did not get %s: its ask was cleared by a's answer to the earlier one", x)
	stopA()
	e.finish(t, nil)
}
