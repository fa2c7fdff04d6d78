package processor_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// This file pins the review of S26-B1's fix (docs/exactly-once.md, "Review
// (adversarial, session 26): step B as built", "S26-B1's fix, reviewed").

// probeFaults is the rebase's API with a fault on some probes
// (table.Probe: its condition ends in attribute_exists(PK)): fault(n), for
// the n-th probe sent (from 1), returns the error to answer instead of
// sending it, or nil to send it.
type probeFaults struct {
	processor.RebaseAPI
	mu    sync.Mutex
	n     int
	fault func(n int) error
}

func (p *probeFaults) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.ConditionExpression != nil && strings.HasSuffix(*in.ConditionExpression, "attribute_exists(PK)") {
		p.mu.Lock()
		p.n++
		err := p.fault(p.n)
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return p.RebaseAPI.UpdateItem(ctx, in, opts...)
}

// requireCounted asserts that the branch's applied item counts every
// record of its keys once and holds nothing of a rebase.
func requireCounted(t *testing.T, e *env, tenant, branch string) {
	t.Helper()
	after := appliedOf(t, e, tenant, branch)
	var sum int64
	for _, item := range scanAll(t, e) {
		if pk, _ := table.String(item, table.AttrPK); pk == aggregates.TransactionPK(tenant, branch) {
			n, _ := table.Changes(item)
			sum += n
		}
	}
	assert.Equal(t, sum+after.Retired, after.Applied+after.Probed, "applied + probed = Σ changes + retired")
	assert.Empty(t, after.Rebasing)
	assert.Empty(t, after.ProbedBy, "the counts of every probe id used are removed")
}

// S26-B1a: a probe answered "throttled" (DynamoDB's answer that it was not
// executed) was taken as a probe whose outcome is unknown: it ended the
// round and moved the rebase to a new probe id. On a branch whose probes
// are throttled now and then (a table short of write capacity, a large
// branch) no round got through B2: the rebase stopped "busy" after its
// rounds, naming the branch's writes, with none made. Here every third
// probe sent is throttled; four keys.
func TestReviewS26_B1a_AThrottledProbeIsSentAgainNotTakenForAnUnknownOne(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for _, id := range []string{"a", "b", "c", "d"} {
		rtx{"acme", "sp", "BRL", "2026-11-27", id, "INCOME", "10", "food"}.put(t, e, "")
	}
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass()
	stop, done := c.passEvery(20 * time.Millisecond)
	api := &probeFaults{RebaseAPI: e.ddb, fault: func(n int) error {
		if n%3 == 0 {
			return &ddbtypes.ProvisionedThroughputExceededException{Message: aws.String("injected: throttled")}
		}
		return nil
	}}
	res, err := processor.Rebase(ctx, api, e.table, processor.RebaseOptions{Tenant: "acme", Branch: "sp", Wait: time.Minute, Poll: 20 * time.Millisecond})
	close(stop)
	<-done
	require.NoError(t, err)
	assert.Equal(t, 1, res.Rounds, "a throttled probe sent again ends no round")
	assert.Equal(t, int64(4), res.Probes)
	c.pass()
	requireCounted(t, e, "acme", "sp")
	e.requireReconciled(t)
}

// S26-B1b: after a probe whose outcome is unknown the next round probes
// under a new id, and the probes of the round before (landed, under the
// old id) are committed during it: point 1's check took them for probes of
// another rebase and started the round again. Every unknown probe cost two
// rounds, not one; with --rounds 2 the rebase stopped "busy". They are
// records of the branch's keys before the keys' probes of this round,
// counted in sum and in p4 as any earlier record.
func TestReviewS26_B1b_AnEarlierProbeIDsProbesCommittedDuringTheNextRoundAreThisRebases(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for _, id := range []string{"a", "b", "c"} {
		rtx{"acme", "sp", "BRL", "2026-11-27", id, "INCOME", "10", "food"}.put(t, e, "")
	}
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass()
	// The second probe's answer is lost before it is sent: the re-read
	// shows the key as listed, the outcome is unknown, round 1 ends in B2
	// with the first key's probe landed and not committed.
	api := &probeFaults{RebaseAPI: e.ddb, fault: func(n int) error {
		if n == 2 {
			return errors.New("injected: connection reset, the probe's outcome unknown")
		}
		return nil
	}}
	var stop, done chan struct{}
	pins := 0
	res, err := processor.Rebase(ctx, api, e.table, processor.RebaseOptions{Tenant: "acme", Branch: "sp", Rounds: 2, Wait: time.Minute, Poll: 20 * time.Millisecond,
		Log: func(format string, args ...any) {
			t.Logf(format, args...)
			if strings.HasPrefix(format, "B1:") {
				if pins++; pins == 2 { // the consumers run on from round 2's pin
					stop, done = c.passEvery(20 * time.Millisecond)
				}
			}
		}})
	if stop != nil {
		close(stop)
		<-done
	}
	require.NoError(t, err)
	assert.Equal(t, 2, res.Rounds)
	c.pass()
	requireCounted(t, e, "acme", "sp")
	e.requireReconciled(t)
}

// S26-B1a, the bound: a probe throttled at every send stops the rebase
// after its sends, naming the throttling (not the branch's writes), and
// the rebase clears its own pin.
func TestReviewS26_B1a_AProbeThrottledAtEverySendStopsTheRebaseNamingIt(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	rtx{"acme", "sp", "BRL", "2026-11-27", "a", "INCOME", "10", "food"}.put(t, e, "")
	c := newConsumer(t, e, "batch", nil, processor.Config{})
	c.pass()
	api := &probeFaults{RebaseAPI: e.ddb, fault: func(int) error {
		return &ddbtypes.ProvisionedThroughputExceededException{Message: aws.String("injected: throttled")}
	}}
	_, err := processor.Rebase(ctx, api, e.table, processor.RebaseOptions{Tenant: "acme", Branch: "sp", Wait: time.Minute, Poll: 20 * time.Millisecond})
	require.Error(t, err)
	assert.NotErrorIs(t, err, processor.ErrRebaseBusy)
	assert.Contains(t, err.Error(), "throttled")
	assert.Equal(t, 10, api.n, "one probe, sent 10 times")
	assert.Empty(t, appliedOf(t, e, "acme", "sp").Rebasing)
}
