package poller_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
)

// Review (adversarial, session 17), hole S17-D1: a finished shard's
// children are looked up (ShardFilter CHILD_SHARDS) while a listing of the
// whole stream, paced by the poller's share of the stream's DescribeStream
// rate, is under way across rounds. Before, a listing due (or under way)
// skipped the lookups: the children of every shard finished during a
// listing waited for the listing to complete, and a listing that takes
// longer than --discover-interval (⌈S/100⌉ × P / --describe-rate seconds
// of calls, spread over rounds: 7,055 shards and 17 pollers at the default
// rate) is due again as soon as it completes (its time is its first
// page's), so no lookup was ever made and every child waited for a whole
// listing. Here one poller lists a stream of two shards a page at 1 call a
// second, every listing longer than the 2 s discover interval; shards roll
// and split under it. Counted, not timed: before it has read 20 shards to
// their end (each closed after the poller's first listing) it has looked
// up children (before: 0 lookups, every child found by a listing). Then
// the reports are exact and no child was read before its parent.
func TestReviewS17_ChildrenAreLookedUpWhileAPacedListingIsUnderWay(t *testing.T) {
	e := newEmuEnv(t, 1701, streamemu.Config{Shards: 8, RollRecords: 25, SplitRatio: 0.3, MaxOpenShards: 10, Seed: 1701, ListPage: 2})
	tp := e.poller(t, "a", nil, func(c *poller.Config) {
		c.DescribeRate = 1 // one page a second: a listing of 3 or more pages spans 2 s or more
		c.DiscoverInterval = 2 * time.Second
	})
	stop := start(t, tp)
	finished := func() int {
		n := 0
		for _, sh := range e.s.Shards() {
			if sh.Closed && sh.EndServed {
				n++
			}
		}
		return n
	}
	// Its first listing complete (nothing written yet), it reads every
	// shard: the shards that close from here close after it listed them.
	eventually(t, "the first listing complete and the shards taken", time.Minute, func() bool {
		return counter(t, tp.m.LeasesHeld) >= 8
	})
	deadline := time.Now().Add(3 * time.Minute) // bounds a poller that stopped reading
	lookups := func() float64 {
		return counter(t, tp.m.Describes.WithLabelValues(poller.DescribeChildren, poller.DescribeOK))
	}
	for lookups() == 0 && finished() < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("the poller read %d shards to their end in 3 minutes", finished())
		}
		e.write(t, 10)
		time.Sleep(300 * time.Millisecond) // shards close slower than the listing pages
	}
	pages := counter(t, tp.m.Describes.WithLabelValues(poller.DescribeList, poller.DescribeOK))
	t.Logf("%d shards read to their end: %v children lookups, %v listing pages", finished(), lookups(), pages)
	assert.Positive(t, lookups(), "children looked up while the paced listing was under way, before 20 shard ends")
	stop()
	e.finish(t, nil)
}
