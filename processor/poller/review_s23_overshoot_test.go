package poller_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// The review of the givers' count (session 23, docs/exactly-once.md,
// "Review (adversarial, session 23): the givers' count").

// lostTake lands owner's first take of a lease and loses its answer, then
// fails the re-reads of that lease that follow (readAttempts of them): the
// take's outcome stays unknown to its poller. Every other call goes
// through.
type lostTake struct {
	poller.Table
	owner string

	mu     sync.Mutex
	done   bool   // the take was lost
	shard  string // its lease's sort key
	failed int    // re-reads of it failed so far
}

// rereads is how many re-reads of the lease lostTake fails: the store's
// readAttempts.
const rereads = 3

func (l *lostTake) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	sk, _ := table.String(in.Key, table.AttrSK)
	owner, _ := table.String(in.ExpressionAttributeValues, ":o")
	take := strings.HasPrefix(sk, "LEASE#") && in.ExpressionAttributeValues[":next"] != nil && owner == l.owner
	l.mu.Lock()
	lose := take && !l.done
	if lose {
		l.done, l.shard = true, sk
	}
	l.mu.Unlock()
	out, err := l.Table.UpdateItem(ctx, in, opts...)
	if lose && err == nil {
		return nil, errors.New("the take's answer lost by the test")
	}
	return out, err
}

func (l *lostTake) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	sk, _ := table.String(in.ExpressionAttributeValues, ":sk")
	l.mu.Lock()
	fail := l.done && sk == l.shard && l.failed < rereads
	if fail {
		l.failed++
	}
	l.mu.Unlock()
	if fail {
		return nil, errors.New("the lease's re-read refused by the test")
	}
	return l.Table.Query(ctx, in, opts...)
}

func (l *lostTake) lost() (shard string, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimPrefix(l.shard, "LEASE#"), l.failed
}

// S23-C1: the holder a hands the joiner b its share while b's first
// listing is refused. b's take of one offered lease lands but its answer
// is lost, and the re-reads that would tell (takeLeases) fail: the take's
// outcome is unknown. Before the fix takeOffers cleared that offer as one
// refused: the lease, in b's name before the take (a's release) and
// after it, was in no offer and in no held count: read by nobody while
// b's beat moves and its listing is refused (b takes its name's leases it
// was not offered only at its share, after the listing), and left out of
// what the givers count of b (held + offers), against the invariant of
// "The givers' overshoot (session 23)". With the fix an offer whose take
// has an unknown outcome stays offered, as a deferred one does: the next
// pass reads the lease (its own, or not taken) and takes it.
func TestReviewS23C1_AnOfferWhoseTakesOutcomeIsUnknownStaysOffered(t *testing.T) {
	ddbtest.Long(t)
	const shards = 8
	e := sixBranchEnv(t, 2331, shards)
	a, stopA := e.holderOfAll(t, shards, nil)
	listing := e.refusedListing()
	lt := &lostTake{owner: "b"}
	b := e.hbPoller(t, "b", func(api poller.Table) poller.Table { lt.Table = api; return lt }, nil, listing, nil)
	stopB := start(t, b)
	eventually(t, "b's take is lost and its re-reads fail", time.Minute, func() bool {
		_, failed := lt.lost()
		return failed == rereads
	})
	shard, _ := lt.lost()
	t.Logf("b's take of %s: landed, its answer lost, %d re-reads failed", shard, rereads)
	eventually(t, "every shard is held while b's listing is refused", 30*time.Second, func() bool {
		return counter(t, a.m.LeasesHeld)+counter(t, b.m.LeasesHeld) == shards
	})
	require.True(t, listing.shut.Load())
	require.False(t, b.Ready(), "b's listing completed: the test proves nothing")

	e.listAndFinish(t, listing, a, stopA, b, stopB)
}
