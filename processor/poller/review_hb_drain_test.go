package poller_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
)

// askFaults fails the first ask (table.AskWorker: ADD #as) a drain writes
// for each shard, as a throttle on the workers' partition key would: a
// drain asks for every lease of a 1,000-shard stream at once (about 1,700
// writes on that one key).
type askFaults struct {
	poller.Table
	mu     sync.Mutex
	failed map[string]bool
}

func (f *askFaults) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if strings.HasPrefix(aws.ToString(in.UpdateExpression), "ADD #as") {
		shard := ""
		if ss, ok := in.ExpressionAttributeValues[":s"].(*ddbtypes.AttributeValueMemberSS); ok && len(ss.Value) == 1 {
			shard = ss.Value[0]
		}
		f.mu.Lock()
		first := !f.failed[shard]
		f.failed[shard] = true
		f.mu.Unlock()
		if first {
			return nil, &ddbtypes.ProvisionedThroughputExceededException{Message: aws.String("ask throttled by the test")}
		}
	}
	return f.Table.UpdateItem(ctx, in, opts...)
}

// The review of the worker heartbeat (docs/exactly-once.md, "Review
// (adversarial, session 16): the worker heartbeat"), HB5: a drain asks a
// heartbeat owner for a lease with two writes, the lease's pendingOwner
// (RequestLease) and the owner's asks (AskWorker). When the second failed
// (throttled) the first had landed, and the next pass skipped the lease
// (pendingOwner set): the warning said "asked again at the next pass", but
// it was not. The owner reads none of its lease items, so it never handed
// the lease over, and judged live (its beat moves) nobody took it: the
// drain waited for it until its timeout (here 45 s; the same run with no
// ask failing drains in 30 s). Fixed: an ask whose write failed is written
// again at each pass until it lands (Poller.unasked), and answerAsks clears
// only the asks it answered. It fails without the fix.
func TestPoller_ADrainWhoseAskFailedAsksAgain(t *testing.T) {
	ddbtest.Long(t)
	const shards = 4
	const lease = 3 * time.Second
	e := newEmuEnv(t, 414, streamemu.Config{Shards: shards, Seed: 414})
	a := e.hbPoller(t, "a", nil, nil, nil, func(c *poller.Config) { c.LeaseDuration = lease })
	e.write(t, 40)
	stopA := start(t, a)
	eventually(t, "a holds every shard", 10*lease, func() bool { return counter(t, a.m.LeasesHeld) == shards })
	f := &askFaults{failed: map[string]bool{}}
	d := e.hbPoller(t, "drain", func(api poller.Table) poller.Table { f.Table = api; return f }, nil, nil,
		func(c *poller.Config) { c.LeaseDuration, c.Drain = lease, true })
	// A liveness bound: without the fix the drain never gets the lease
	// (it waits for ever); with it, 45 s were too short at load 8.
	ctx, cancel := context.WithTimeout(context.Background(), 100*lease)
	defer cancel()
	err := d.Run(ctx)
	assert.NoError(t, err)
	assert.NoError(t, ctx.Err(), "the drain did not get the leases it asked for within %s", 100*lease)
	// At least every shard once; more when a lease of the drain's expired
	// on a loaded table (its renewals late) and it took it again (8 at
	// load 35): a figure.
	got := counter(t, d.m.LeaseEvents.WithLabelValues(poller.LeaseAcquired)) + counter(t, d.m.LeaseEvents.WithLabelValues(poller.LeaseTakenOver))
	assert.GreaterOrEqual(t, got, float64(shards), "leases the drain got")
	t.Logf("the drain took %.0f leases of %d shards", got, shards)
	stopA()
	e.finish(t, nil)
}
