package streamemu

import (
	"container/heap"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go"
	"golang.org/x/time/rate"
)

// Upstream is the real stream the emulation reads: a DynamoDB Streams
// client of DynamoDB Local (poller.NewStreamsClient). Its records are
// re-sharded; its shards are never shown to the emulation's callers.
type Upstream interface {
	DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// Config describes the emulated stream. Zero fields take the defaults
// named; a zero schedule (RollAfter and RollRecords both 0) never closes a
// shard on its own (Close does).
type Config struct {
	// StreamARN is the upstream stream's ARN, the one the emulation answers
	// for (consumers key their checkpoints by it, as on AWS).
	StreamARN string
	// Shards is how many open shards the stream starts with (default 4),
	// dividing the partition-key hash space evenly.
	Shards int
	// PartitionKey names the key attribute records are sharded by
	// (default "PK", the ledger table's partition key).
	PartitionKey string
	// RollAfter is an open shard's life on Clock before it closes (AWS:
	// about 4 hours); each shard's is drawn within ±25% of it.
	RollAfter time.Duration
	// RollRecords closes an open shard once it holds this many records
	// (each shard's drawn within ±25%): a schedule tests can count on.
	RollRecords int
	// SplitRatio is the share of closes that split the shard into two
	// children (the hash range halved); the others roll into one child
	// with the same range. Splits stop while MaxOpenShards are open.
	SplitRatio float64
	// MaxOpenShards bounds the open shards splits may make (default
	// 4 × Shards).
	MaxOpenShards int
	// Retention is how long a record stays readable and a closed shard
	// listed after it closed (default 24h, AWS's).
	Retention time.Duration
	// IteratorTTL is a shard iterator's life (default 15m, AWS's).
	IteratorTTL time.Duration
	// ListPage is the most shards one DescribeStream returns (default and
	// at most 100, AWS's Limit bound): small fleets set it lower to page
	// as a large stream does.
	ListPage int
	// Limits are AWS's documented call limits; the zero value enforces
	// none (AWSLimits has AWS's values).
	Limits Limits
	// Clock is the stream's time (default: the wall clock).
	Clock Clock
	// Seed seeds the schedule's draws (split or roll, each shard's life).
	Seed uint64
	// PullInterval is the least wall time between two reads of the
	// upstream stream (default 10ms); Sync reads it at once.
	PullInterval time.Duration
	// HistoryFilter chooses the records History keeps for the whole run
	// (nil: every record). History is the one part of the emulation that
	// outlives the retention: a long run at scale (the fleet benchmark)
	// keeps only the coordination items' records (checkpoints, leases),
	// which its order and idle checks read, so that memory stays with the retained records.
	HistoryFilter func(types.Record) bool
}

// Limits are call limits, counted on the wall clock. Zero fields are not
// enforced.
type Limits struct {
	// DescribeStreamPerSecond: calls per second on the stream, beyond
	// which DescribeStream answers LimitExceededException (AWS: 10).
	DescribeStreamPerSecond float64
	// GetRecordsPerShardPerSecond: GetRecords per second per shard, all
	// readers together, beyond which LimitExceededException (AWS: 5).
	GetRecordsPerShardPerSecond float64
	// ReadersPerShard: iterator chains that may read a shard at once; a
	// further one gets LimitExceededException (AWS: 2). A chain is an
	// iterator from GetShardIterator and the NextShardIterators that
	// follow it; it stops counting ReaderIdle after its last call.
	ReadersPerShard int
	// ReaderIdle is how long a chain counts as a reader after its last
	// GetRecords (default 1s).
	ReaderIdle time.Duration
}

// AWSLimits are DynamoDB Streams' documented limits (see the package
// documentation for the sources).
var AWSLimits = Limits{DescribeStreamPerSecond: 10, GetRecordsPerShardPerSecond: 5, ReadersPerShard: 2, ReaderIdle: time.Second}

func (c Config) withDefaults() (Config, error) {
	if c.StreamARN == "" {
		return c, errors.New("streamemu: StreamARN is required")
	}
	if c.Shards == 0 {
		c.Shards = 4
	}
	if c.Shards < 1 {
		return c, fmt.Errorf("streamemu: %d shards", c.Shards)
	}
	if c.PartitionKey == "" {
		c.PartitionKey = "PK"
	}
	if c.ListPage <= 0 || c.ListPage > 100 {
		c.ListPage = 100
	}
	if c.MaxOpenShards == 0 {
		c.MaxOpenShards = 4 * c.Shards
	}
	if c.Retention == 0 {
		c.Retention = 24 * time.Hour
	}
	if c.IteratorTTL == 0 {
		c.IteratorTTL = 15 * time.Minute
	}
	if c.Clock == nil {
		c.Clock = wallClock{}
	}
	if c.PullInterval == 0 {
		c.PullInterval = 10 * time.Millisecond
	}
	if c.Limits.ReaderIdle == 0 {
		c.Limits.ReaderIdle = time.Second
	}
	return c, nil
}

// Stream is an emulated AWS DynamoDB stream over an upstream one: it
// implements the Streams API's DescribeStream, GetShardIterator and
// GetRecords (the interface the poller, the tumbling-window commit and the
// benchmark's event source mapping take). It is safe for concurrent use.
type Stream struct {
	cfg Config
	up  Upstream

	mu       sync.Mutex
	shards   []*shard // creation order, which is shard id order; deleted ones until compacted
	byID     map[string]*shard
	open     []*shard // the open shards by hash range
	closeQ   closeHeap
	arrivals fifo[arrival]
	closings fifo[*shard]
	deleted  int               // deleted shards still in shards
	parents  map[string]string // every shard ever made → its parent
	seq      uint64            // the last sequence number handed out
	serial   uint64
	chains   uint64
	rng      *rand.Rand
	desc     *types.StreamDescription // upstream's, without shards
	describe *rate.Limiter
	history  []Entry
	early    []EarlyRead
	calls    map[string]int
	refused  map[string]int // by error code
	listed   int            // shards DescribeStream returned

	pullMu   sync.Mutex // one upstream read at a time
	lastPull time.Time
	cursor   upstreamCursor
}

// shard is one emulated shard.
type shard struct {
	id, parent string
	lo, hi     uint64 // the partition-key hash range it takes records for
	start      string // starting sequence number, below its first record's
	created    time.Time
	closeAt    time.Time // by schedule; zero: never by time
	closeAfter int       // records; 0: never by count
	closed     bool
	closedAt   time.Time
	end        string // ending sequence number, once closed
	recs       []record
	base       int    // records before base were trimmed and dropped
	trimmedTo  string // the last trimmed record's sequence number
	total      int    // records ever added
	children   []string
	endServed  bool // a reader was handed its end (no next iterator)
	limiter    *rate.Limiter
	readers    map[uint64]time.Time // chain → its last GetRecords (wall clock)
	serial     uint64               // creation order
	deleted    bool                 // closed longer than the retention
}

type record struct {
	rec types.Record
	at  time.Time // when the emulation took it in, on Clock
}

// Entry is one record as the emulation took it in, in upstream order
// (DynamoDB Local's single shard orders every write of the table): its
// emulated shard and sequence number, and the record itself.
type Entry struct {
	Shard, Seq string
	Record     types.Record
}

// EarlyRead is a GetRecords that returned records of a shard whose parent
// is still in the stream and had not been read to its end by anyone: a
// consumer reading a child before its parent.
type EarlyRead struct {
	Shard, Parent string
	Records       int
}

// New returns an emulated stream over up, the stream cfg.StreamARN.
func New(up Upstream, cfg Config) (*Stream, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Stream{
		cfg:     cfg,
		up:      up,
		byID:    map[string]*shard{},
		parents: map[string]string{},
		seq:     4_000_000_000_000,
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		calls:   map[string]int{},
		refused: map[string]int{},
	}
	if cfg.Limits.DescribeStreamPerSecond > 0 {
		s.describe = rate.NewLimiter(rate.Limit(cfg.Limits.DescribeStreamPerSecond), max(1, int(cfg.Limits.DescribeStreamPerSecond)))
	}
	now := cfg.Clock.Now()
	step := math.MaxUint64 / uint64(cfg.Shards)
	for i := range cfg.Shards {
		lo, hi := uint64(i)*step, uint64(i+1)*step-1
		if i == cfg.Shards-1 {
			hi = math.MaxUint64
		}
		s.open = append(s.open, s.newShard("", lo, hi, now))
	}
	return s, nil
}

func (s *Stream) nextSeq() string {
	s.seq++
	return fmt.Sprintf("%021d", s.seq)
}

// jitter draws d within ±25%.
func (s *Stream) jitter(d float64) float64 { return d * (0.75 + s.rng.Float64()/2) }

// newShard adds an open shard created at t. Shard ids sort in creation
// order, as AWS's do (a time, then a serial).
func (s *Stream) newShard(parent string, lo, hi uint64, t time.Time) *shard {
	s.serial++
	sh := &shard{
		id:      fmt.Sprintf("shardId-%020d-%08x", t.UnixMilli(), s.serial),
		parent:  parent,
		lo:      lo,
		hi:      hi,
		start:   s.nextSeq(),
		created: t,
		readers: map[uint64]time.Time{},
		serial:  s.serial,
	}
	if s.cfg.RollAfter > 0 {
		sh.closeAt = t.Add(time.Duration(s.jitter(float64(s.cfg.RollAfter))))
		heap.Push(&s.closeQ, sh)
	}
	if s.cfg.RollRecords > 0 {
		sh.closeAfter = max(1, int(s.jitter(float64(s.cfg.RollRecords))))
	}
	if s.cfg.Limits.GetRecordsPerShardPerSecond > 0 {
		r := s.cfg.Limits.GetRecordsPerShardPerSecond
		sh.limiter = rate.NewLimiter(rate.Limit(r), max(1, int(r)))
	}
	s.shards = append(s.shards, sh)
	s.byID[sh.id] = sh
	s.parents[sh.id] = parent
	return sh
}

// closeShard closes sh at t and opens its children: two (halves of its
// range) on a split, one on a roll. split < 0 lets the schedule decide.
func (s *Stream) closeShard(sh *shard, t time.Time, split int) []string {
	sh.closed, sh.closedAt = true, t
	sh.end = sh.start
	if n := len(sh.recs); n > 0 {
		sh.end = aws.ToString(sh.recs[n-1].rec.Dynamodb.SequenceNumber)
	} else if sh.trimmedTo != "" {
		sh.end = sh.trimmedTo
	}
	if split < 0 {
		split = 0
		if s.cfg.SplitRatio > 0 && s.rng.Float64() < s.cfg.SplitRatio && len(s.open) < s.cfg.MaxOpenShards {
			split = 1
		}
	}
	var kids []*shard
	if split == 1 && sh.hi > sh.lo {
		mid := sh.lo + (sh.hi-sh.lo)/2
		kids = []*shard{s.newShard(sh.id, sh.lo, mid, t), s.newShard(sh.id, mid+1, sh.hi, t)}
	} else {
		kids = []*shard{s.newShard(sh.id, sh.lo, sh.hi, t)}
	}
	s.replaceOpen(sh, kids)
	s.closings.push(sh)
	for _, k := range kids {
		sh.children = append(sh.children, k.id)
	}
	return sh.children
}

// advance brings the stream to now: shards due to close by schedule close
// (at their scheduled time, so a clock jump plays every close it skipped),
// records past the retention are trimmed, and closed shards past it are
// deleted.
func (s *Stream) advance(now time.Time) {
	for s.closeQ.Len() > 0 && !s.closeQ[0].closeAt.After(now) {
		due := heap.Pop(&s.closeQ).(*shard)
		if !due.closed {
			s.closeShard(due, due.closeAt, -1)
		}
	}
	horizon := now.Add(-s.cfg.Retention)
	s.trimTo(horizon)
	s.deleteTo(horizon)
}

// hashKey is the partition key's hash: all records of one item (one
// partition key) go to the same shard. FNV-1a alone leaves keys that differ
// only in their last bytes (a tenant's roll-up lanes, TENANT#t#ROLLUPLANE#0
// … #31) within 2^-24 of the hash space of each other, so they would all
// share a shard; MurmurHash3's 64-bit finaliser spreads them over the whole
// space, as DynamoDB's partitioning hash does (it does not document which
// hash it uses; only that it spreads partition keys evenly).
func (s *Stream) hashKey(r types.Record) uint64 {
	return fmix64(s.fnvKey(r))
}

// fmix64 is MurmurHash3's 64-bit finaliser: every input bit affects every
// output bit.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

func (s *Stream) fnvKey(r types.Record) uint64 {
	h := fnv.New64a()
	if r.Dynamodb != nil {
		switch v := r.Dynamodb.Keys[s.cfg.PartitionKey].(type) {
		case *types.AttributeValueMemberS:
			h.Write([]byte("S" + v.Value))
		case *types.AttributeValueMemberN:
			h.Write([]byte("N" + v.Value))
		case *types.AttributeValueMemberB:
			h.Write(append([]byte("B"), v.Value...))
		}
	}
	return h.Sum64()
}

// add routes upstream records to the open shard of their key's hash.
func (s *Stream) add(recs []types.Record) {
	now := s.cfg.Clock.Now()
	s.advance(now)
	for _, r := range recs {
		k := s.hashKey(r)
		i := s.openIndex(k)
		if i == len(s.open) || s.open[i].lo > k {
			panic("streamemu: no open shard for a hash") // the open shards always cover the hash space
		}
		sh := s.open[i]
		seq := s.nextSeq()
		r.Dynamodb = ptrCopy(r.Dynamodb)
		r.Dynamodb.SequenceNumber = aws.String(seq)
		sh.recs = append(sh.recs, record{rec: r, at: now})
		s.arrivals.push(arrival{sh: sh, at: now})
		sh.total++
		if s.cfg.HistoryFilter == nil || s.cfg.HistoryFilter(r) {
			s.history = append(s.history, Entry{Shard: sh.id, Seq: seq, Record: r})
		}
		if sh.closeAfter > 0 && sh.total >= sh.closeAfter {
			s.closeShard(sh, now, -1)
		}
	}
}

func ptrCopy(r *types.StreamRecord) *types.StreamRecord {
	if r == nil {
		return &types.StreamRecord{}
	}
	c := *r
	return &c
}

// Close closes the shard now, as its schedule would: into two children
// when split is set (if its hash range can be halved), else into one. It
// returns the children's ids.
func (s *Stream) Close(shardID string, split bool) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(s.cfg.Clock.Now())
	sh := s.byID[shardID]
	switch {
	case sh == nil:
		return nil, fmt.Errorf("streamemu: no shard %s", shardID)
	case sh.closed:
		return nil, fmt.Errorf("streamemu: shard %s is closed", shardID)
	}
	n := 0
	if split {
		n = 1
	}
	return s.closeShard(sh, s.cfg.Clock.Now(), n), nil
}

// Sync reads the upstream stream up to its current end now.
func (s *Stream) Sync(ctx context.Context) error {
	s.pullMu.Lock()
	defer s.pullMu.Unlock()
	return s.pullLocked(ctx)
}

// pull reads the upstream stream when PullInterval has passed since the
// last read and no other read is under way; errors are left to the next
// pull (the records are then only late, as on AWS).
func (s *Stream) pull(ctx context.Context) {
	if !s.pullMu.TryLock() {
		return
	}
	defer s.pullMu.Unlock()
	if time.Since(s.lastPull) < s.cfg.PullInterval {
		return
	}
	_ = s.pullLocked(ctx)
}

// upstreamCursor is where the emulation reads the upstream stream: its
// shards in order of their starting sequence number, each to its end.
type upstreamCursor struct {
	shard string
	iter  *string
	last  map[string]string // shard → the last sequence number taken
	done  map[string]bool   // shards read to their end
}

func (s *Stream) pullLocked(ctx context.Context) error {
	s.lastPull = time.Now()
	c := &s.cursor
	if c.last == nil {
		c.last, c.done = map[string]string{}, map[string]bool{}
	}
	for range 10_000 {
		if c.iter == nil {
			next, err := s.nextUpstreamShard(ctx)
			if err != nil || next == "" {
				return err
			}
			in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(s.cfg.StreamARN), ShardId: aws.String(next), ShardIteratorType: types.ShardIteratorTypeTrimHorizon}
			if seq := c.last[next]; seq != "" {
				in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(seq)
			}
			out, err := s.up.GetShardIterator(ctx, in)
			if err != nil {
				return fmt.Errorf("streamemu: upstream shard iterator %s: %w", next, err)
			}
			c.shard, c.iter = next, out.ShardIterator
			if c.iter == nil {
				c.done[next] = true
				continue
			}
		}
		out, err := s.up.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: c.iter, Limit: aws.Int32(1000)})
		if err != nil {
			c.iter = nil // reopened after the last record taken
			var expired *types.ExpiredIteratorException
			if errors.As(err, &expired) {
				continue
			}
			return fmt.Errorf("streamemu: upstream records: %w", err)
		}
		if n := len(out.Records); n > 0 {
			c.last[c.shard] = aws.ToString(out.Records[n-1].Dynamodb.SequenceNumber)
			s.mu.Lock()
			s.add(out.Records)
			s.mu.Unlock()
		}
		c.iter = out.NextShardIterator
		if c.iter == nil {
			c.done[c.shard] = true
			continue
		}
		if len(out.Records) == 0 {
			return nil // caught up
		}
	}
	return nil
}

// nextUpstreamShard lists the upstream shards and returns the oldest not
// read to its end ("" when none), noting the stream's description.
func (s *Stream) nextUpstreamShard(ctx context.Context) (string, error) {
	var all []types.Shard
	var start *string
	for {
		out, err := s.up.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(s.cfg.StreamARN), ExclusiveStartShardId: start})
		if err != nil {
			return "", fmt.Errorf("streamemu: upstream describe: %w", err)
		}
		d := out.StreamDescription
		if d == nil {
			return "", errors.New("streamemu: upstream describe: no description")
		}
		s.mu.Lock()
		if s.desc == nil {
			c := *d
			c.Shards, c.LastEvaluatedShardId = nil, nil
			s.desc = &c
		}
		s.mu.Unlock()
		all = append(all, d.Shards...)
		start = d.LastEvaluatedShardId
		if aws.ToString(start) == "" {
			break
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		return seqLess(startOf(all[i]), startOf(all[j]))
	})
	for _, sh := range all {
		if id := aws.ToString(sh.ShardId); !s.cursor.done[id] {
			return id, nil
		}
	}
	return "", nil
}

func startOf(sh types.Shard) string {
	if sh.SequenceNumberRange == nil {
		return ""
	}
	return aws.ToString(sh.SequenceNumberRange.StartingSequenceNumber)
}

// seqLess compares sequence numbers as the numbers they are.
func seqLess(a, b string) bool {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// The API's errors, as AWS answers them (the SDK's types, so consumers
// classify them as they would AWS's).
func errLimit(what string) error {
	return &types.LimitExceededException{Message: aws.String("Rate exceeded for " + what)}
}

func errNotFound(what string) error {
	return &types.ResourceNotFoundException{Message: aws.String("Requested resource not found: " + what)}
}

func errTrimmed() error {
	return &types.TrimmedDataAccessException{Message: aws.String("The data you are trying to access has been trimmed.")}
}

func errExpired() error {
	return &types.ExpiredIteratorException{Message: aws.String("The provided iterator exceeds the maximum age allowed.")}
}

func errValidation(msg string) error {
	return &smithy.GenericAPIError{Code: "ValidationException", Message: msg, Fault: smithy.FaultClient}
}

// count notes a call and, for a refusal, its error code.
func (s *Stream) count(op string, err error) {
	s.calls[op]++
	var ae smithy.APIError
	if errors.As(err, &ae) {
		s.refused[op+" "+ae.ErrorCode()]++
	}
}

// DescribeStream lists the stream's shards, at most Limit (≤ 100, default
// 100) after ExclusiveStartShardId, in creation order, with
// LastEvaluatedShardId set when more follow; with a ShardFilter of type
// CHILD_SHARDS, only the children of its ShardId. Beyond
// Limits.DescribeStreamPerSecond it answers LimitExceededException.
func (s *Stream) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, _ ...func(*dynamodbstreams.Options)) (out *dynamodbstreams.DescribeStreamOutput, err error) {
	s.pull(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.count("DescribeStream", err) }()
	if aws.ToString(in.StreamArn) != s.cfg.StreamARN {
		return nil, errNotFound("stream " + aws.ToString(in.StreamArn))
	}
	if s.describe != nil && !s.describe.Allow() {
		return nil, errLimit("DescribeStream on " + s.cfg.StreamARN)
	}
	limit := int(aws.ToInt32(in.Limit))
	switch {
	case in.Limit == nil:
		limit = s.cfg.ListPage
	case limit < 1 || limit > 100:
		return nil, errValidation(fmt.Sprintf("1 validation error detected: Value '%d' at 'limit' failed to satisfy constraint: Member must have value less than or equal to 100", limit))
	}
	limit = min(limit, s.cfg.ListPage)
	now := s.cfg.Clock.Now()
	s.advance(now)
	d := types.StreamDescription{
		StreamArn:      aws.String(s.cfg.StreamARN),
		StreamStatus:   types.StreamStatusEnabled,
		StreamViewType: types.StreamViewTypeNewAndOldImages,
	}
	if s.desc != nil {
		d = *s.desc
		d.StreamArn = aws.String(s.cfg.StreamARN)
	}
	var list []*shard
	if f := in.ShardFilter; f != nil {
		if f.Type != types.ShardFilterTypeChildShards || aws.ToString(f.ShardId) == "" {
			return nil, errValidation(fmt.Sprintf("invalid ShardFilter: type %q, shard %q", f.Type, aws.ToString(f.ShardId)))
		}
		if p := s.byID[aws.ToString(f.ShardId)]; p != nil {
			for _, id := range p.children {
				if c := s.byID[id]; c != nil {
					list = append(list, c)
				}
			}
		}
	} else {
		after := aws.ToString(in.ExclusiveStartShardId)
		i := sort.Search(len(s.shards), func(i int) bool { return s.shards[i].id > after })
		list = make([]*shard, 0, min(limit, len(s.shards)-i))
		for ; i < len(s.shards) && len(list) < limit; i++ {
			if !s.shards[i].deleted {
				list = append(list, s.shards[i])
			}
		}
		for ; i < len(s.shards); i++ {
			if !s.shards[i].deleted { // more follow
				d.LastEvaluatedShardId = aws.String(list[limit-1].id)
				break
			}
		}
	}
	s.listed += len(list)
	d.Shards = make([]types.Shard, 0, len(list))
	for _, sh := range list {
		r := &types.SequenceNumberRange{StartingSequenceNumber: aws.String(sh.start)}
		if sh.closed {
			r.EndingSequenceNumber = aws.String(sh.end)
		}
		var parent *string
		if sh.parent != "" {
			parent = aws.String(sh.parent)
		}
		d.Shards = append(d.Shards, types.Shard{ShardId: aws.String(sh.id), ParentShardId: parent, SequenceNumberRange: r})
	}
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: &d}, nil
}

// iterator is what a shard iterator encodes: a position (records before
// it were read), the chain it belongs to, and when it was issued (Clock).
type iterator struct {
	shard  string
	pos    int
	chain  uint64
	issued time.Time
}

func (it iterator) encode() *string {
	raw := fmt.Sprintf("%s|%d|%d|%d", it.shard, it.pos, it.chain, it.issued.UnixNano())
	return aws.String("emu1:" + base64.RawURLEncoding.EncodeToString([]byte(raw)))
}

func decode(v string) (iterator, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(v, "emu1:"))
	if err != nil || !strings.HasPrefix(v, "emu1:") {
		return iterator{}, false
	}
	f := strings.Split(string(raw), "|")
	if len(f) != 4 {
		return iterator{}, false
	}
	pos, err1 := strconv.Atoi(f[1])
	chain, err2 := strconv.ParseUint(f[2], 10, 64)
	ns, err3 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return iterator{}, false
	}
	return iterator{shard: f[0], pos: pos, chain: chain, issued: time.Unix(0, ns)}, true
}

// GetShardIterator returns an iterator into a shard: TRIM_HORIZON (its
// oldest record kept), LATEST (after its last), AT_ or
// AFTER_SEQUENCE_NUMBER. A sequence number at or before a trimmed record
// answers TrimmedDataAccessException; a shard deleted (closed longer than
// the retention) or never made, ResourceNotFoundException; a sequence
// number outside the shard's range, ValidationException.
func (s *Stream) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, _ ...func(*dynamodbstreams.Options)) (out *dynamodbstreams.GetShardIteratorOutput, err error) {
	s.pull(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.count("GetShardIterator", err) }()
	if aws.ToString(in.StreamArn) != s.cfg.StreamARN {
		return nil, errNotFound("stream " + aws.ToString(in.StreamArn))
	}
	now := s.cfg.Clock.Now()
	s.advance(now)
	sh := s.byID[aws.ToString(in.ShardId)]
	if sh == nil {
		return nil, errNotFound("shard " + aws.ToString(in.ShardId))
	}
	it := iterator{shard: sh.id, issued: now}
	s.chains++
	it.chain = s.chains
	seq := aws.ToString(in.SequenceNumber)
	switch in.ShardIteratorType {
	case types.ShardIteratorTypeTrimHorizon:
		it.pos = sh.base
	case types.ShardIteratorTypeLatest:
		it.pos = sh.base + len(sh.recs)
	case types.ShardIteratorTypeAtSequenceNumber, types.ShardIteratorTypeAfterSequenceNumber:
		after := in.ShardIteratorType == types.ShardIteratorTypeAfterSequenceNumber
		if seq == "" || seqLess(seq, sh.start) || (sh.closed && seqLess(sh.end, seq)) {
			return nil, errValidation(fmt.Sprintf("Invalid SequenceNumber %s for shard %s", seq, sh.id))
		}
		if sh.trimmedTo != "" && (seqLess(seq, sh.trimmedTo) || (!after && seq == sh.trimmedTo)) {
			return nil, errTrimmed()
		}
		i := sort.Search(len(sh.recs), func(i int) bool {
			r := aws.ToString(sh.recs[i].rec.Dynamodb.SequenceNumber)
			if after {
				return seqLess(seq, r)
			}
			return !seqLess(r, seq)
		})
		it.pos = sh.base + i
	default:
		return nil, errValidation(fmt.Sprintf("invalid ShardIteratorType %q", in.ShardIteratorType))
	}
	return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: it.encode()}, nil
}

// GetRecords returns up to Limit (≤ 1000) records from the iterator's
// position and the next iterator, none once a closed shard's end is
// reached (an open shard at its end answers an empty page and an
// iterator). It answers ExpiredIteratorException for an iterator older
// than IteratorTTL, TrimmedDataAccessException when the position is
// trimmed, ResourceNotFoundException for a deleted shard and
// LimitExceededException beyond the per-shard rate or reader limits.
func (s *Stream) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, _ ...func(*dynamodbstreams.Options)) (out *dynamodbstreams.GetRecordsOutput, err error) {
	s.pull(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.count("GetRecords", err) }()
	it, ok := decode(aws.ToString(in.ShardIterator))
	if !ok {
		return nil, errValidation("Invalid ShardIterator")
	}
	limit := 1000
	if in.Limit != nil {
		limit = int(*in.Limit)
		if limit < 1 || limit > 1000 {
			return nil, errValidation(fmt.Sprintf("1 validation error detected: Value '%d' at 'limit' failed to satisfy constraint: Member must have value between 1 and 1000", limit))
		}
	}
	now := s.cfg.Clock.Now()
	if now.Sub(it.issued) > s.cfg.IteratorTTL {
		return nil, errExpired()
	}
	s.advance(now)
	sh := s.byID[it.shard]
	if sh == nil {
		return nil, errNotFound("shard " + it.shard)
	}
	if lim := s.cfg.Limits; lim.ReadersPerShard > 0 {
		wall := time.Now()
		for c, at := range sh.readers {
			if wall.Sub(at) > lim.ReaderIdle {
				delete(sh.readers, c)
			}
		}
		if _, known := sh.readers[it.chain]; !known && len(sh.readers) >= lim.ReadersPerShard {
			return nil, errLimit(fmt.Sprintf("shard %s: more than %d readers", sh.id, lim.ReadersPerShard))
		}
		sh.readers[it.chain] = wall
	}
	if sh.limiter != nil && !sh.limiter.Allow() {
		return nil, errLimit("GetRecords on shard " + sh.id)
	}
	if it.pos < sh.base {
		return nil, errTrimmed()
	}
	from := min(it.pos-sh.base, len(sh.recs))
	to := min(from+limit, len(sh.recs))
	out = &dynamodbstreams.GetRecordsOutput{Records: make([]types.Record, 0, to-from)}
	for _, r := range sh.recs[from:to] {
		out.Records = append(out.Records, r.rec)
	}
	if sh.closed && to == len(sh.recs) {
		sh.endServed = true
		delete(sh.readers, it.chain)
	} else {
		next := it
		next.pos, next.issued = sh.base+to, now
		out.NextShardIterator = next.encode()
	}
	if p := s.byID[sh.parent]; len(out.Records) > 0 && p != nil && !p.endServed {
		s.early = append(s.early, EarlyRead{Shard: sh.id, Parent: p.id, Records: len(out.Records)})
	}
	return out, nil
}
