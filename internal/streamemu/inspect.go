package streamemu

import (
	"maps"
	"time"
)

// ShardInfo is a shard as the emulation knows it, for tests.
type ShardInfo struct {
	ID, Parent string
	Children   []string
	Closed     bool
	Records    int // records ever added
	Trimmed    int // records trimmed
	Created    time.Time
	EndServed  bool // a reader was handed its end
}

// Shards returns the shards in the stream now (deleted ones are gone), in
// creation order.
func (s *Stream) Shards() []ShardInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(s.cfg.Clock.Now())
	out := make([]ShardInfo, 0, len(s.shards))
	for _, sh := range s.shards {
		if sh.deleted {
			continue
		}
		out = append(out, ShardInfo{
			ID: sh.id, Parent: sh.parent, Children: append([]string(nil), sh.children...), Closed: sh.closed,
			Records: sh.total, Trimmed: sh.base, Created: sh.created, EndServed: sh.endServed,
		})
	}
	return out
}

// Parents returns every shard's parent ("" for none), deleted shards
// included: the whole lineage the stream has had.
func (s *Stream) Parents() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.parents))
	maps.Copy(out, s.parents)
	return out
}

// History returns every record taken in, in upstream order, with its
// emulated shard and sequence number: the order DynamoDB Local applied
// the writes, so a test can see what was committed before what.
func (s *Stream) History() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Entry(nil), s.history...)
}

// EarlyReads returns the GetRecords that returned a child's records while
// its parent was in the stream and not yet read to its end by anyone.
func (s *Stream) EarlyReads() []EarlyRead {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]EarlyRead(nil), s.early...)
}

// Calls returns how many calls of op (DescribeStream, GetShardIterator,
// GetRecords) were made, answered or refused.
func (s *Stream) Calls(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// Refused returns how many calls of op were answered with the error code
// (e.g. Refused("DescribeStream", "LimitExceededException")).
func (s *Stream) Refused(op, code string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused[op+" "+code]
}

// IteratorShard returns the shard an iterator of this emulation reads
// (false for anything else): for tests that act on one shard's reads.
func IteratorShard(iterator string) (string, bool) {
	it, ok := decode(iterator)
	return it.shard, ok
}

// ShardsListed returns how many shards DescribeStream has returned in
// all: what discovery cost the stream.
func (s *Stream) ShardsListed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listed
}
