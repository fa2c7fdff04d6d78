package poller

// The adversarial review of session 15 (docs/exactly-once.md, "Leases and
// the other writes outside the commit", "Review (adversarial, session
// 15)"): holes in the coordinator's bookkeeping that need no table, tested
// on the coordinator's state directly.

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor"
)

func newBarePoller(t *testing.T) *Poller {
	t.Helper()
	proc, err := processor.New(nil, processor.Config{Table: "t"}, nil)
	require.NoError(t, err)
	p, err := New(nil, unreachableTable{}, proc, Config{Table: "t", StreamARN: "arn", Owner: "me"}, nil)
	require.NoError(t, err)
	return p
}

// unreachableTable answers every call with an error, as a table the
// poller cannot reach: writes outside the coordinator's state fail.
type unreachableTable struct{}

var errUnreachable = errors.New("table unreachable")

func (unreachableTable) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return nil, errUnreachable
}

func (unreachableTable) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return nil, errUnreachable
}

// A reader that reached its shard's end and marked it finished while its
// lease was lost (it expired at the coordinator's renewal, or another
// poller took it, before the coordinator took the reader's result) used to
// have its result dropped with the lease: the shard was not put up for its
// children's lookup, and since nobody reads a finished shard again, nobody
// else looked them up either; they waited for the next listing of the
// whole stream (--discover-interval, 5 minutes). The finish is the
// reader's, whoever holds the lease now.
func TestPoller_AShardFinishedAsItsLeaseIsLostHasItsChildrenLookedUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost bool
	}{
		{"lease held", false},
		{"lease lost as the reader finished", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newBarePoller(t)
			p.shards = []shard{{id: "parent", closed: true}}
			p.cps = map[string]checkpoint{}
			h := &holding{lease: lease{shard: "parent", owner: "other", counter: 7}, running: true, lost: tc.lost, stop: make(chan struct{})}
			if !tc.lost {
				h.lease.owner = "me"
			}
			p.held["parent"] = h
			// The release of a held lease fails (no table here): it is left
			// to expire.
			p.readerDone(context.Background(), readerResult{shard: "parent", finished: true})
			assert.Equal(t, []string{"parent"}, p.lookup, "the children of the finished shard are looked up at the next pass")
			assert.True(t, p.cps["parent"].finished)
			assert.NotContains(t, p.held, "parent")
			assert.False(t, p.lastStop.IsZero(), "a drain lists the stream again after this end")
		})
	}
}
