package streamemu

import (
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// The indexes that keep a call's cost independent of the stream's size
// (issue 23: 1,000 open shards and several thousand closed ones over a
// compressed day):
//
//   - Stream.byID finds a shard by id;
//   - Stream.open holds the open shards sorted by hash range, so a record
//     finds its shard by binary search;
//   - closeHeap orders the open shards by scheduled close, so advance only
//     looks at the shards due;
//   - Stream.arrivals is every retained record in arrival order (on Clock),
//     so the retention trims the oldest records, one at a time, without
//     looking at any shard that has none to trim;
//   - Stream.closings is the closed shards in close order, so deletion
//     after the retention looks only at the shards due;
//   - Stream.shards keeps creation (id) order for DescribeStream, found by
//     binary search; deleted shards are skipped and compacted away once
//     they are a quarter of it.
//
// A shard's records are a slice whose trimmed head is cleared and sliced
// off, so memory holds the retained records only.

// closeHeap is the open shards with a scheduled close, earliest first (ties
// in creation order, as the schedule played them before the index). Shards
// closed otherwise (Close, RollRecords) stay in it and are skipped when
// they come up.
type closeHeap []*shard

func (h closeHeap) Len() int { return len(h) }
func (h closeHeap) Less(i, j int) bool {
	if !h[i].closeAt.Equal(h[j].closeAt) {
		return h[i].closeAt.Before(h[j].closeAt)
	}
	return h[i].serial < h[j].serial
}
func (h closeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *closeHeap) Push(x any)   { *h = append(*h, x.(*shard)) }
func (h *closeHeap) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return x
}

// arrival is a record taken into a shard at a time (Clock).
type arrival struct {
	sh *shard
	at time.Time
}

// fifo is a queue of T whose popped head is cleared and compacted away.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) push(x T) { q.items = append(q.items, x) }
func (q *fifo[T]) len() int { return len(q.items) - q.head }
func (q *fifo[T]) peek() T  { return q.items[q.head] }
func (q *fifo[T]) pop() T {
	var zero T
	x := q.items[q.head]
	q.items[q.head] = zero
	q.head++
	if q.head >= 1024 && q.head*2 >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items = q.items[:n]
		q.head = 0
	}
	return x
}

// openIndex returns the position of the open shard taking hash k.
func (s *Stream) openIndex(k uint64) int {
	return sort.Search(len(s.open), func(i int) bool { return s.open[i].hi >= k })
}

// replaceOpen replaces the open shard sh by its children (in hash order).
func (s *Stream) replaceOpen(sh *shard, kids []*shard) {
	i := s.openIndex(sh.lo)
	if i >= len(s.open) || s.open[i] != sh {
		panic("streamemu: open index out of step") // every open shard is in it
	}
	switch len(kids) {
	case 1:
		s.open[i] = kids[0]
	case 2:
		s.open = append(s.open, nil)
		copy(s.open[i+2:], s.open[i+1:])
		s.open[i], s.open[i+1] = kids[0], kids[1]
	}
}

// trimTo trims the records taken in at or before horizon.
func (s *Stream) trimTo(horizon time.Time) {
	for s.arrivals.len() > 0 && !s.arrivals.peek().at.After(horizon) {
		sh := s.arrivals.pop().sh
		if sh.deleted || len(sh.recs) == 0 {
			continue
		}
		sh.trimmedTo = aws.ToString(sh.recs[0].rec.Dynamodb.SequenceNumber)
		sh.recs[0] = record{}
		sh.recs = sh.recs[1:]
		sh.base++
		if len(sh.recs) == 0 {
			sh.recs = nil // let the emptied array go
		}
	}
}

// deleteTo deletes the shards closed at or before horizon.
func (s *Stream) deleteTo(horizon time.Time) {
	for s.closings.len() > 0 && !s.closings.peek().closedAt.After(horizon) {
		sh := s.closings.pop()
		sh.deleted = true
		sh.recs, sh.readers, sh.limiter = nil, nil, nil
		delete(s.byID, sh.id)
		s.deleted++
	}
	if s.deleted > 0 && s.deleted*4 >= len(s.shards) {
		kept := s.shards[:0]
		for _, sh := range s.shards {
			if !sh.deleted {
				kept = append(kept, sh)
			}
		}
		clear(s.shards[len(kept):])
		s.shards = kept
		s.deleted = 0
	}
}
