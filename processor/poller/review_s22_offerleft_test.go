package poller_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// The review of offerLeft and the ungated offer watch (session 22,
// docs/exactly-once.md, "Review (adversarial, session 22): offerLeft and
// the ungated watch").

// offerExpr is the update expression of an offer (table.OfferLease).
var offerExpr = aws.ToString(table.OfferLease("t", "s", "o", "x").UpdateExpression)

// firstOfferFails fails, while armed, the first offer write of each shard
// whose lease item, read first, is as which says (a throttled or refused
// write, not applied); the offers after it go through.
type firstOfferFails struct {
	poller.Table
	e      *emuEnv
	which  func(table.Lease) bool
	armed  atomic.Bool
	failed atomic.Int32
	mu     sync.Mutex
	seen   map[string]bool
}

func (f *firstOfferFails) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.armed.Load() && aws.ToString(in.UpdateExpression) == offerExpr {
		ss, _ := in.ExpressionAttributeValues[":s"].(*ddbtypes.AttributeValueMemberSS)
		if ss != nil && len(ss.Value) == 1 {
			id := ss.Value[0]
			out, err := f.e.ddb.GetItem(ctx, &dynamodb.GetItemInput{
				TableName: aws.String(table.CoordinationTableName(f.e.table)), ConsistentRead: aws.Bool(true),
				Key: table.Key(aggregates.LeaseKey(f.e.stream.arn, id)),
			})
			if err != nil {
				return nil, err
			}
			f.mu.Lock()
			first := !f.seen[id] && f.which(table.DecodeLease(id, out.Item))
			if first {
				f.seen[id] = true
			}
			f.mu.Unlock()
			if first {
				f.failed.Add(1)
				return nil, &ddbtypes.InternalServerError{Message: aws.String("offer refused by the test")}
			}
		}
	}
	return f.Table.UpdateItem(ctx, in, opts...)
}

// S21-W4 made deterministic (session 22): the holder a, at its share,
// registers the children of the shards it finishes and can place some
// of them neither by a take nor by an offer (here the offer write fails;
// in S21-W4 nobody was seen receiving yet). The joiner b's listing is
// refused: b sweeps nothing and takes only what it is offered and its own
// children. Before offerLeft such a child was left to the sweeps, and no
// sweep takes it: a's are bounded by its share, b makes none. a's
// shards split and b's stay open, so that the leasable shards are even
// in number: by the share's arithmetic balance's moves (each one letting
// a take one more free child) stop one short of them (a at the ceiling,
// b one under it), and one child stays unheld for good without
// offerLeft; with it, a offers it again at its next round and b takes
// it. (With an odd number the same arithmetic has balance's moves alone
// end with every shard held: a likely reason, not traced, why only some
// runs of TestReviewS20J1_…/splits failed.)
func TestReviewS22_AChildWhoseOfferFailedIsOfferedAgainToAJoinerNotListed(t *testing.T) {
	ddbtest.Long(t)
	const shards = 8
	e := sixBranchEnv(t, 2201, shards)
	// Only a child's offer (offerKids: its lease free); a hand-over's
	// (the lease already in the receiver's name) is S22-H1's.
	offers := &firstOfferFails{e: e, seen: map[string]bool{}, which: func(l table.Lease) bool { return l.Owner == "" }}
	a, stopA := e.holderOfAll(t, shards, func(api poller.Table) poller.Table { offers.Table = api; return offers })
	listing := e.refusedListing()
	b := e.hbPoller(t, "b", nil, nil, listing, nil)
	stopB := start(t, b)
	eventually(t, "a hands b its share", 2*time.Minute, func() bool {
		return counter(t, b.m.LeasesHeld) >= shards/2-1 && counter(t, a.m.LeasesHeld)+counter(t, b.m.LeasesHeld) == shards
	})
	time.Sleep(3 * time.Second) // balance settles (a round a second)

	ls, _, err := table.ReadLeasePage(context.Background(), e.ddb, table.CoordinationTableName(e.table), e.stream.arn, nil, 100)
	require.NoError(t, err)
	owner := map[string]string{}
	for _, l := range ls {
		owner[l.Shard] = l.Owner
	}
	var mine, theirs []string
	for _, sh := range e.s.Shards() {
		if sh.Closed {
			continue
		}
		switch owner[sh.ID] {
		case "a":
			mine = append(mine, sh.ID)
		case "b":
			theirs = append(theirs, sh.ID)
		}
	}
	require.Len(t, append(mine, theirs...), shards, "every open shard held by a or b")
	require.GreaterOrEqual(t, len(mine), shards/2, "a holds half the shards or more")
	offers.armed.Store(true)
	split := mine
	if len(mine)%2 == 1 {
		split = append(split, theirs[0]) // the leasable shards even: 8+len(split)
	}
	for _, id := range split {
		_, err := e.s.Close(id, true)
		require.NoError(t, err)
	}
	e.write(t, 60)
	eventually(t, "every open shard is held while b's listing is refused", time.Minute, func() bool {
		return int(counter(t, a.m.LeasesHeld)+counter(t, b.m.LeasesHeld)) == openShards(e.s)
	})
	require.Positive(t, offers.failed.Load(), "no offer of a child failed: the test proves nothing")
	require.True(t, listing.shut.Load())
	require.False(t, b.Ready(), "b's listing completed: the test proves nothing")

	e.listAndFinish(t, listing, a, stopA, b, stopB)
}

// S22-H1: a lease handed over (balance) to a joiner whose first listing
// has not completed, and whose offer write (the release's "tell the new
// owner") failed. The lease is in the joiner's name, so nobody else may
// take it while the joiner's beat moves; the joiner takes the leases of
// its name only at its share (takeShare), after its listing, and learns
// of this one from no offer: it was read by nobody until the listing
// completed (for good while DescribeStream refused it), where the log
// said "it takes it at its sweep, or it expires". With the fix the giver
// offers it again at its next rounds (tellAgain) until the write goes
// through, the receiver stops being live or the lease moves on.
func TestReviewS22H1_ALeaseHandedOverWhoseOfferFailedIsOfferedAgainToAJoinerNotListed(t *testing.T) {
	ddbtest.Long(t)
	const shards = 8
	e := sixBranchEnv(t, 2202, shards)
	// Only a hand-over's offer: the lease already in the receiver's name.
	offers := &firstOfferFails{e: e, seen: map[string]bool{}, which: func(l table.Lease) bool { return l.Owner == "b" }}
	a, stopA := e.holderOfAll(t, shards, func(api poller.Table) poller.Table { offers.Table = api; return offers })
	offers.armed.Store(true)
	listing := e.refusedListing()
	b := e.hbPoller(t, "b", nil, nil, listing, nil)
	stopB := start(t, b)
	eventually(t, "every shard is held while b's listing is refused", time.Minute, func() bool {
		return counter(t, b.m.LeasesHeld) >= shards/2-1 && counter(t, a.m.LeasesHeld)+counter(t, b.m.LeasesHeld) == shards
	})
	require.Positive(t, offers.failed.Load(), "no hand-over's offer failed: the test proves nothing")
	require.True(t, listing.shut.Load())
	require.False(t, b.Ready(), "b's listing completed: the test proves nothing")
	offers.armed.Store(false)

	e.listAndFinish(t, listing, a, stopA, b, stopB)
}

// refusedCheckpoints refuses, while armed, the reads of the checkpoint of
// each shard in which for refuse from the first (a throttled partition);
// the reads after that go through.
type refusedCheckpoints struct {
	poller.Table
	arn    string
	which  func(shard string) bool
	refuse time.Duration
	armed  atomic.Bool
	mu     sync.Mutex
	first  map[string]time.Time
	n      int // reads refused
}

func (r *refusedCheckpoints) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if r.armed.Load() {
		pk, _ := in.ExpressionAttributeValues[":pk"].(*ddbtypes.AttributeValueMemberS)
		if sk, ok := in.ExpressionAttributeValues[":sk"].(*ddbtypes.AttributeValueMemberS); ok && pk != nil {
			if id, ok := strings.CutPrefix(sk.Value, "SHARD#"); ok && aggregates.CheckpointKey(r.arn, id).PK == pk.Value && r.which(id) {
				r.mu.Lock()
				if _, ok := r.first[id]; !ok {
					r.first[id] = time.Now()
				}
				refused := time.Since(r.first[id]) < r.refuse
				if refused {
					r.n++
				}
				r.mu.Unlock()
				if refused {
					return nil, &ddbtypes.ProvisionedThroughputExceededException{Message: aws.String("checkpoint read refused by the test")}
				}
			}
		}
	}
	return r.Table.Query(ctx, in, opts...)
}

// S22-H2: a child offered (offerKids, its lease free) to a joiner whose
// first listing has not completed, whose read of the child's checkpoint
// fails (throttled, every attempt). takeOffers cleared the offer
// (checkpoint_unread) as if decided, and the giver had dropped the child
// once its offer write landed: nobody was to take it, a at its share and
// b sweeping nothing, until b's listing completed (for good while
// DescribeStream refused it). The same for a parent's checkpoint read that
// failed (parent_unfinished). With the fix an offer whose read failed
// stays offered, as one whose lease was not read in time does (later).
func TestReviewS22H2_AChildOfferedWhoseCheckpointReadFailedStaysOffered(t *testing.T) {
	ddbtest.Long(t)
	const shards = 8
	e := sixBranchEnv(t, 2203, shards)
	a, stopA := e.holderOfAll(t, shards, nil)
	listing := e.refusedListing()
	// b's reads of the checkpoints of a's new children: refused for 3 s
	// from the first (three rounds: the offers the heartbeat's answers
	// brought before the clear are read in them too).
	cps := &refusedCheckpoints{arn: e.stream.arn, refuse: 3 * time.Second, first: map[string]time.Time{}, which: func(string) bool { return false }}
	b := e.hbPoller(t, "b", func(api poller.Table) poller.Table { cps.Table = api; return cps }, nil, listing, nil)
	stopB := start(t, b)
	eventually(t, "a hands b its share", 2*time.Minute, func() bool {
		return counter(t, b.m.LeasesHeld) >= shards/2-1 && counter(t, a.m.LeasesHeld)+counter(t, b.m.LeasesHeld) == shards
	})
	time.Sleep(3 * time.Second) // balance settles (a round a second)

	ls, _, err := table.ReadLeasePage(context.Background(), e.ddb, table.CoordinationTableName(e.table), e.stream.arn, nil, 100)
	require.NoError(t, err)
	owner := map[string]string{}
	for _, l := range ls {
		owner[l.Shard] = l.Owner
	}
	var mine, theirs []string
	for _, sh := range e.s.Shards() {
		if sh.Closed {
			continue
		}
		switch owner[sh.ID] {
		case "a":
			mine = append(mine, sh.ID)
		case "b":
			theirs = append(theirs, sh.ID)
		}
	}
	require.Len(t, append(mine, theirs...), shards, "every open shard held by a or b")
	require.GreaterOrEqual(t, len(mine), shards/2, "a holds half the shards or more")
	// Only a's shards split (and one of b's when a holds an odd number:
	// the leasable shards even, as in TestReviewS22_…): b's own children
	// are read by b's reader ends (takeUnlisted), not under test.
	parents := map[string]bool{}
	for _, id := range mine {
		parents[id] = true
	}
	cps.which = func(id string) bool {
		for _, sh := range e.s.Shards() {
			if sh.ID == id {
				return parents[sh.Parent]
			}
		}
		return false
	}
	defer func() {
		for _, o := range []string{poller.OfferTaken, poller.OfferLater, poller.OfferNotIts, poller.OfferCheckpointUnread, poller.OfferParentUnfinished} {
			t.Logf("b's offers %s: %v", o, counter(t, b.m.Offers.WithLabelValues(o)))
		}
	}()
	cps.armed.Store(true)
	split := mine
	if len(mine)%2 == 1 {
		split = append(split, theirs[0])
	}
	for _, id := range split {
		_, err := e.s.Close(id, true)
		require.NoError(t, err)
	}
	e.write(t, 60)
	eventually(t, "every open shard is held while b's listing is refused", time.Minute, func() bool {
		return int(counter(t, a.m.LeasesHeld)+counter(t, b.m.LeasesHeld)) == openShards(e.s)
	})
	cps.mu.Lock()
	refused := cps.n
	cps.mu.Unlock()
	t.Logf("shards split: %d; checkpoint reads refused: %d", len(split), refused)
	require.Positive(t, refused, "no checkpoint read of a child offered to b was refused: the test proves nothing")
	require.True(t, listing.shut.Load())
	require.False(t, b.Ready(), "b's listing completed: the test proves nothing")
	cps.armed.Store(false)

	e.listAndFinish(t, listing, a, stopA, b, stopB)
}
