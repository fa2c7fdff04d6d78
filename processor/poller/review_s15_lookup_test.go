package poller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/ledger-dev/ledger/processor/poller"
)

// listingWatch notes when each listing of the whole stream ended (its last
// page answered).
type listingWatch struct {
	poller.Streams
	mu   sync.Mutex
	ends []time.Time
}

func (w *listingWatch) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	out, err := w.Streams.DescribeStream(ctx, in, opts...)
	if err == nil && in.ShardFilter == nil && out.StreamDescription != nil && out.StreamDescription.LastEvaluatedShardId == nil {
		w.mu.Lock()
		w.ends = append(w.ends, time.Now())
		w.mu.Unlock()
	}
	return out, err
}

func (w *listingWatch) endedAfter(t time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ends) > 0 && w.ends[len(w.ends)-1].After(t)
}

// Review, session 15: the children of a shard this poller finished are
// looked up at the next pass, or found in a listing of the whole stream
// that ends first (one due, one paused across passes, or, on a stream that
// does not filter by parent, the listing every shard end makes). A
// listing that did not have them yet (AWS may list a closed shard's
// children a moment after it closes; a listing paused across passes read
// its pages before) dropped the lookup all the same, and the children
// waited for the next listing of the whole stream (--discover-interval,
// 5 minutes), while a CHILD_SHARDS lookup that finds none is tried again
// for two minutes. A listing without them keeps the lookup now.
func TestPoller_ChildrenListedAfterTheListingThatFollowedTheirParentsEndAreFound(t *testing.T) {
	e := newEnv(t, 1501)
	f := e.stream
	f.addShard("shardId-P", "")
	f.appendTo("shardId-P", e.write(t, 60)...)
	f.close("shardId-P")
	w := &listingWatch{Streams: f.client("p1")}
	tp := e.poller(t, "p1", w, nil, func(c *poller.Config) { c.DiscoverInterval = time.Hour })
	stop := start(t, tp)

	var finished time.Time
	eventually(t, "P finished", 20*time.Second, func() bool {
		for _, l := range tp.logs.lines() {
			if l["msg"] == "shard finished: read to its end" {
				finished, _ = time.Parse(time.RFC3339Nano, l["time"].(string))
				return true
			}
		}
		return false
	})
	// The stream (this one does not filter by parent) is listed after P's
	// end, before P's child is listed.
	eventually(t, "a listing after P's end", 20*time.Second, func() bool { return w.endedAfter(finished) })
	read := counter(t, tp.m.RecordsRead)

	f.addShard("shardId-C", "shardId-P")
	recs := e.write(t, 40)
	f.appendTo("shardId-C", recs...)
	eventually(t, "P's child read", 20*time.Second, func() bool { return counter(t, tp.m.RecordsRead) >= read+float64(len(recs)) })
	stop()
	e.requireReconciled(t)
}
