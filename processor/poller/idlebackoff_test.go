package poller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/processor/poller"
)

// idleWait is one idle wait a reader would have made.
type idleWait struct {
	n int // empty pages in a row
	d time.Duration
}

// idleClock is a virtual clock for the readers' idle waits
// (poller.SetIdleHook): it records them per shard and adds them up
// instead of waiting. Once a shard has been idle for pauseAt, its reader
// is held at its next wait until resume is called.
type idleClock struct {
	mu      sync.Mutex
	waits   map[string][]idleWait
	idle    map[string]time.Duration
	pauseAt time.Duration
	paused  chan struct{} // closed when a reader reached pauseAt
	resume  chan struct{}
	once    sync.Once
}

func newIdleClock(pauseAt time.Duration) *idleClock {
	return &idleClock{waits: map[string][]idleWait{}, idle: map[string]time.Duration{}, pauseAt: pauseAt,
		paused: make(chan struct{}), resume: make(chan struct{})}
}

func (c *idleClock) hook(shard string, n int, d time.Duration) {
	c.mu.Lock()
	c.waits[shard] = append(c.waits[shard], idleWait{n, d})
	c.idle[shard] += d
	reached := c.pauseAt > 0 && c.idle[shard] >= c.pauseAt
	c.mu.Unlock()
	if reached {
		c.once.Do(func() { close(c.paused) })
		<-c.resume
	}
}

func (c *idleClock) shardWaits(shard string) []idleWait {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]idleWait(nil), c.waits[shard]...)
}

// reads counts the GetRecords calls on shard.
func (f *fakeStream) readsOf(shard string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.reads {
		if r.shard == shard {
			n++
		}
	}
	return n
}

// Issue 23: an idle shard was polled every IdleBackoff (1 s) forever:
// 3,600 GetRecords an hour per shard. Now its wait doubles per empty page
// up to MaxIdleBackoff: over half an hour of (virtual) idleness the reads
// grow with the logarithm of the time, not linearly; a page with records
// brings the wait back to the fast interval at once, and the records are
// committed exactly.
func TestPoller_IdleShardBacksOffAndARecordResetsIt(t *testing.T) {
	e := newEnv(t, 2301)
	e.stream.addShard("shardId-idle", "")
	clock := newIdleClock(30 * time.Minute)
	const fast, top = 100 * time.Millisecond, 10 * time.Minute
	// No batching window: the page with records is committed at once, and
	// the next empty page is the first of a new idle period (the empty
	// pages read while a window is open count too).
	tp := e.poller(t, "p1", nil, nil, func(c *poller.Config) { c.IdleBackoff, c.MaxIdleBackoff, c.BatchWindow = fast, top, -1 })
	poller.SetIdleHook(tp.Poller, clock.hook)
	stop := start(t, tp)
	select {
	case <-clock.paused:
	case <-time.After(60 * time.Second):
		t.Fatal("the reader did not wait through 30 minutes of virtual idleness")
	}
	reads := e.stream.readsOf("shardId-idle")
	waits := clock.shardWaits("shardId-idle")
	// Fixed polling every 100ms would be 18,000 reads in 30 minutes; the
	// doubling from 50ms to the 10-minute cap takes about 14 waits to reach
	// it, then one per 7.5 to 10 minutes.
	t.Logf("30 minutes idle: %d GetRecords, waits %v", reads, waits)
	assert.LessOrEqual(t, reads, 20, "GetRecords over 30 idle minutes")
	require.NotEmpty(t, waits)
	last := waits[len(waits)-1]
	assert.Greater(t, last.d, top/2, "the wait reached the cap")
	assert.LessOrEqual(t, last.d, top)
	for i := 1; i < len(waits); i++ {
		assert.Equal(t, waits[i-1].n+1, waits[i].n, "every page empty")
	}

	// A write: the next page has records, and the first wait after it is
	// the fast one again.
	recs := e.write(t, 5)
	require.NotEmpty(t, recs)
	e.stream.appendTo("shardId-idle", recs...)
	before := len(waits)
	close(clock.resume)
	eventually(t, "an idle wait after the records", 30*time.Second, func() bool {
		return len(clock.shardWaits("shardId-idle")) > before
	})
	after := clock.shardWaits("shardId-idle")[before]
	assert.Equal(t, 1, after.n, "the empty pages count again from one")
	assert.LessOrEqual(t, after.d, fast, "back to the fast interval")
	eventually(t, "the records committed", 30*time.Second, func() bool {
		return counter(t, tp.m.RecordsRead) >= float64(len(recs))
	})
	stop()
	e.requireReconciled(t)
}

// A drain and the reader of a closed shard are waiting for an end, not for
// writes: their idle waits never grow past IdleBackoff, whatever
// MaxIdleBackoff, so a drain takes no longer than before.
func TestPoller_DrainAndClosedShardsDoNotBackOffPastIdleBackoff(t *testing.T) {
	e := newEnv(t, 2302)
	const fast = 100 * time.Millisecond
	for _, tc := range []struct {
		name  string
		drain bool
	}{{"live", false}, {"drain", true}} {
		t.Run(tc.name, func(t *testing.T) {
			open, closed := "shardId-open-"+tc.name, "shardId-closed-"+tc.name
			e.stream.addShard(open, "")
			e.stream.addShard(closed, "")
			e.stream.appendTo(closed, e.write(t, 10)...)
			e.stream.close(closed)
			clock := newIdleClock(0)
			// The closed shard's pages come back empty a few times before
			// its records (AWS may answer an empty page inside a shard).
			streams := &emptyPagesFirst{Streams: e.stream.client(tc.name), f: e.stream, shard: closed, left: 12}
			tp := e.poller(t, tc.name, streams, nil, func(c *poller.Config) {
				c.IdleBackoff, c.MaxIdleBackoff, c.Drain = fast, 10*time.Minute, tc.drain
			})
			poller.SetIdleHook(tp.Poller, clock.hook)
			stop := start(t, tp)
			eventually(t, "the closed shard read to its end", 60*time.Second, func() bool {
				_, end := e.stream.shardTimes(closed)
				return !end.IsZero()
			})
			if !tc.drain {
				eventually(t, "the open shard backed off", 60*time.Second, func() bool {
					w := clock.shardWaits(open)
					return len(w) > 0 && w[len(w)-1].d > fast
				})
			}
			stop()
			waits := clock.shardWaits(closed)
			require.Len(t, waits, 12, "the closed shard's empty pages were waited on")
			for _, w := range waits {
				assert.LessOrEqual(t, w.d, fast, "closed shard, wait %d", w.n)
			}
			if tc.drain {
				for _, w := range clock.shardWaits(open) {
					assert.LessOrEqual(t, w.d, fast, "drain, open shard, wait %d", w.n)
				}
			}
		})
	}
	e.requireReconciled(t)
}

// emptyPagesFirst answers the first left GetRecords on shard with an empty
// page and the same iterator, then reads on.
type emptyPagesFirst struct {
	poller.Streams
	f     *fakeStream
	shard string
	mu    sync.Mutex
	left  int
}

func (s *emptyPagesFirst) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	s.f.mu.Lock()
	it, ok := s.f.iters[aws.ToString(in.ShardIterator)]
	s.f.mu.Unlock()
	s.mu.Lock()
	empty := ok && it.shard == s.shard && s.left > 0
	if empty {
		s.left--
	}
	s.mu.Unlock()
	if empty {
		return &dynamodbstreams.GetRecordsOutput{NextShardIterator: in.ShardIterator}, nil
	}
	return s.Streams.GetRecords(ctx, in, opts...)
}
