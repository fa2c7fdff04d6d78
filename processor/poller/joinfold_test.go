package poller_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor/poller"
)

// The set-ups shared by the joiner tests of sessions 22 and 23 (a holder
// of every shard, a joiner whose listing is refused, the fleet finished
// once the listing goes through).

// sixBranchEnv is an emulated stream of shards shards (seed) holding 60
// writes over six branches: records on every shard (the default's six
// keys reach two).
func sixBranchEnv(t *testing.T, seed uint64, shards int) *emuEnv {
	t.Helper()
	e := newEmuEnv(t, seed, streamemu.Config{Shards: shards, Seed: seed})
	e.w.Branches = []string{"north", "south", "east", "west", "centre", "harbour"}
	e.write(t, 60)
	return e
}

// holderOfAll starts poller a (its coordination table wrapped by coord,
// nil: none) and waits until it holds every one of the stream's shards.
func (e *emuEnv) holderOfAll(t *testing.T, shards int, coord func(poller.Table) poller.Table) (a *testPoller, stopA func()) {
	t.Helper()
	a = e.hbPoller(t, "a", coord, nil, nil, nil)
	stopA = start(t, a)
	eventually(t, "a holds every shard", 2*time.Minute, func() bool { return counter(t, a.m.LeasesHeld) == float64(shards) })
	return a, stopA
}

// refusedListing is a listing of the whole stream refused while its shut
// is set (set here).
func (e *emuEnv) refusedListing() *unlistable {
	listing := &unlistable{Streams: e.s, shut: &atomic.Bool{}}
	listing.shut.Store(true)
	return listing
}

// listAndFinish lets b's listing through, writes 30 more, stops b then a,
// and requires that no two readers read one shard at once and that the
// reports are exact (finish).
func (e *emuEnv) listAndFinish(t *testing.T, listing *unlistable, a *testPoller, stopA func(), b *testPoller, stopB func()) {
	t.Helper()
	listing.shut.Store(false)
	e.write(t, 30)
	time.Sleep(2 * time.Second)
	stopB()
	stopA()
	end := time.Now()
	requireNoOverlap(t, append(readerIntervals(t, a.logs.lines(), end), readerIntervals(t, b.logs.lines(), end)...))
	e.finish(t, nil)
}
