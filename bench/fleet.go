package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// FleetConfig is issue 23's fleet benchmark: Pollers in-process
// poller.Pollers (the real code, each with its own metrics and its own
// counted coordinator client) reading an emulated AWS stream
// (internal/streamemu) of Shards open shards in front of a fresh DynamoDB
// Local, while transactions are written at Rate a second spread over every
// shard. Zero fields take the defaults named.
type FleetConfig struct {
	// Shards is the open shards the stream starts with (default 1,000).
	Shards int
	// Pollers is the fleet's size (default 8). The run starts Pollers-1 of
	// them, one joins at a third of Duration and the first leaves
	// (cancelled: it hands its leases back) at two thirds. A join into a
	// fleet that has not yet leased 90% of the open shards measures the
	// start, not the join: the join then waits for that (at most until
	// Duration: at 1,000 shards with a day of history the start leases
	// 90% after 77–100 s, and a bound of two thirds of a 2-minute run, 80
	// s, put the join inside the start in session 27's runs, BENCHMARKS.md
	// "Session 28"), the leave comes a third of Duration after
	// the join, and the writes go on a third of Duration after the leave,
	// so that each event's span is a third of Duration.
	Pollers int
	// Rate is transactions written a second (default 100), their items
	// spread over 4 × Shards partition keys, so over every shard.
	Rate int
	// Duration is the steady phase, wall time (default 3m).
	Duration time.Duration
	// IdleFor is the idle phase after the last change was committed: no
	// writes, the fleet left running (default 30s).
	IdleFor time.Duration
	// Compression is how much faster the stream's clock runs than the
	// wall clock (default 24: a shard's ~4 hours pass in 10 minutes,
	// iterators expire after 37 s).
	Compression float64
	// History is stream time played before the fleet starts, with no
	// records (default 24h: shards rolled and split over a day, several
	// thousand closed ones listed at 1,000 open; negative: none).
	History time.Duration
	// SplitRatio is the share of closes that split (default 0.2).
	SplitRatio float64
	// Seed seeds the workload and the stream's schedule.
	Seed uint64
	// DrainTimeout bounds the final drain before the oracle (default 5m).
	DrainTimeout time.Duration
	// DynamoDBLocalDir is passed to ddblocal.Start (empty: its default).
	DynamoDBLocalDir string
	// MaxIdleBackoff is every poller's --max-idle-backoff (0: cmd/poller's
	// default): the idle cost against a quiet shard's first write's lag.
	MaxIdleBackoff time.Duration
	// Poller adjusts every poller's configuration (nil: the defaults of
	// cmd/poller).
	Poller func(*poller.Config)
	// Log receives progress lines and the pollers' warnings (nil: none).
	Log io.Writer
}

func (c FleetConfig) withDefaults() FleetConfig {
	if c.Shards <= 0 {
		c.Shards = 1000
	}
	if c.Pollers <= 1 {
		c.Pollers = 8
	}
	if c.Rate <= 0 {
		c.Rate = 100
	}
	if c.Duration <= 0 {
		c.Duration = 3 * time.Minute
	}
	if c.IdleFor <= 0 {
		c.IdleFor = 30 * time.Second
	}
	if c.Compression <= 0 {
		c.Compression = 24
	}
	if c.History == 0 {
		c.History = 24 * time.Hour
	}
	if c.SplitRatio == 0 {
		c.SplitRatio = 0.2
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 5 * time.Minute
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// FleetResult is what a fleet run measured (BENCHMARKS.md, "Issue 23: the
// fleet at 1,000 shards", explains each figure).
type FleetResult struct {
	Shards, Pollers, Rate int
	Duration, IdleFor     time.Duration
	Compression           float64
	History               time.Duration
	MaxIdleBackoff        time.Duration // the pollers' (0: the default)
	Machine               Machine

	// The stream: shards listed when the fleet started (open and closed),
	// shards closed during the run (rolls and splits), and at the end.
	ShardsAtStart, ClosedDuringRun, ShardsAtEnd int
	// Written is the transactions written, WriteRate the rate achieved.
	Written   int
	WriteRate float64

	// Exactness: report differences by the reconcile oracle after a final
	// drain, children's checkpoints moved before their parent was finished
	// (the history of the checkpoint items: the coordination table's
	// stream, which the run turns on, and the data table's History where
	// they were before the coordination table), and reads of a child's
	// records before anyone had its parent's end (EarlyReads).
	Differences     int
	OrderViolations int
	// CheckpointRecords is the checkpoint images the order check read.
	CheckpointRecords int
	EarlyReads        int
	Drained           bool
	DrainTook         time.Duration

	// Balance: leases held by each running poller, sampled every second,
	// and, for the start, the join and the leave, how long until every
	// running poller held its fair share ±10% (-1: not by the next event).
	Leases  []LeaseSample
	Balance []BalanceEvent
	// FirstAllLeased is when the running pollers first held as many
	// leases (on open shards and on closed ones not yet finished) as 90% of
	// the open shards: seconds from the start; -1: never.
	FirstAllLeased float64
	// JoinListed is the seconds from the joiner's start to its first
	// listing of the stream complete (its Ready; -1: not before the run's
	// end): what bounds its takes from a day's walk (BENCHMARKS.md,
	// "Session 27: the joiner's first listing").
	JoinListed float64

	// Write units by partition key: the hottest keys the whole run wrote
	// (data, reports and coordination) with their peak a second.
	HotKeys []KeyRate
	// Commits is the processor's commit transactions; CommitUnits their
	// write units; Coordination the pollers' own UpdateItems (leases and
	// checkpoint moves outside commits) and their units.
	Commits, CommitUnits, Coordination, CoordinationUnits int

	// Per poller: its coordinator calls against the leases it held.
	PerPoller []FleetPoller

	// Discovery: DescribeStream calls, those refused (rate), shards the
	// calls returned in all.
	DescribeStream, DescribeThrottled, ShardsListed int
	// GetRecords calls and those refused.
	GetRecords, GetRecordsThrottled int

	// The idle phase: GetRecords on the open shards, the records the
	// consumers' own coordination put in the stream, the open shards, and
	// GetRecords per idle shard per hour.
	IdleGetRecords, IdleCoordinationRecords, IdleOpenShards int
	IdleGetRecordsPerShardHour                              float64

	// Memory: the process's peak RSS (every poller, the emulation holding
	// the retained records, the meter's item copies), and the most records
	// one poller held at once (ledger_poller_held_records).
	PeakRSS        int64
	MaxHeldRecords int

	// Lag from the write (updatedAt) to the commit of the records with an
	// effect, seconds.
	LagN           int
	LagP50, LagP99 float64
	// Stages splits the lag: where the time went, and the steady state
	// (writes after the fleet first leased 90% of the open shards) apart
	// from the start (fleetstages.go).
	Stages LagStages
	// Describes is the live fleet's DescribeStream calls by kind and
	// outcome, from the pollers' ledger_stream_describe_stream_total.
	Describes map[string]int
	// Uncommitted is the inserts and modifies written that the live
	// fleet had not committed DrainTimeout after the writes ended (the
	// drain commits them; their lag is not in LagP99), and SettleTook how
	// long it took the fleet to commit the rest after the writes ended.
	Uncommitted int
	// UncommittedRead names those of them the live fleet had read:
	// shard, sequence number, write and first read times.
	UncommittedRead []string `json:",omitempty"`
	// UnreadShards names, when some changes were left uncommitted, the
	// shards holding records the live fleet never got in a GetRecords
	// answer (up to 20): whether the fleet left a shard unread, or the
	// expected count is wrong.
	UnreadShards []string `json:",omitempty"`
	SettleTook   time.Duration
	Took         time.Duration
	Errors       []string
}

// LeaseSample is the leases each running poller held at At seconds.
type LeaseSample struct {
	At   float64
	Held map[string]int
	// Offers is each running poller's ledger_poller_offers_total by
	// outcome so far (non-zero outcomes only): what became of the leases
	// offered to it, over time (a joiner's take before and after its
	// first listing).
	Offers map[string]map[string]int `json:",omitempty"`
}

// BalanceEvent is a change of the fleet and how long the leases took to
// settle after it.
type BalanceEvent struct {
	Event string
	At    float64 // seconds from the start
	// Within is the seconds until every running poller held its fair share
	// ±10% (-1: not before the next event or the end).
	Within float64
	// Worst is the largest deviation from the fair share at the end of the
	// event's span, as a share of it.
	Worst float64
}

// FleetPoller is one poller's coordinator traffic: Query calls and the
// items they returned, UpdateItems, over the minutes it ran, and the
// leases it held on average.
type FleetPoller struct {
	Owner                      string
	Queries, ItemsRead, Writes int
	Minutes, MeanLeases        float64
	// LeaseEvents is its ledger_poller_lease_events_total by event
	// (acquired, handed_off, taken_over, expired, …).
	LeaseEvents map[string]int `json:",omitempty"`
	// Offers is its ledger_poller_offers_total by outcome (taken, later,
	// not_its, unknown_shard, parent_unfinished, checkpoint_unread,
	// refused).
	Offers map[string]int `json:",omitempty"`
}

// countedTable is a poller's coordinator client, counted.
type countedTable struct {
	poller.Table
	queries, items, writes atomic.Int64
}

func (c *countedTable) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := c.Table.Query(ctx, in, opts...)
	c.queries.Add(1)
	if err == nil {
		c.items.Add(int64(len(out.Items)))
	}
	return out, err
}

func (c *countedTable) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.writes.Add(1)
	return c.Table.UpdateItem(ctx, in, opts...)
}

// opRecord is op as the stream record its write makes (without the write
// time Put stamps).
func opRecord(op Op) processor.Record {
	r := processor.Record{EventName: "INSERT", SequenceNumber: "1", Keys: ledgertable.Key(op.Key), OldImage: op.Old, NewImage: op.New}
	if op.Old != nil {
		r.EventName = "MODIFY"
	}
	return r
}

// writerOf is the writer, of n, that writes every change of the item at
// k: one item's changes are written one after another, in order.
func writerOf(k aggregates.Key, n int) int {
	h := fnv.New32a()
	h.Write([]byte(k.PK))
	h.Write([]byte{0})
	h.Write([]byte(k.SK))
	return int(h.Sum32() % uint32(n))
}

// fleetLag is lag across shards: the stream's sequence numbers are unique
// across its shards, so the record a commit's checkpoint names tells the
// shard, whose pending records up to it are then committed.
type fleetLag struct {
	mu      sync.Mutex
	shardOf map[string]string              // sequence number read → its shard
	pending map[string]map[string]lagStamp // shard → sequence number → its times so far
	samples []float64
	// stages are the committed records' times, for the per-stage figures
	// (fleetstages.go); firstRead is when each shard was first read.
	stages    []lagSample
	firstRead map[string]time.Time
	ended     map[string]time.Time // when a reader first got each shard's end
	// calls and opens are every GetRecords (its start and answer) and
	// every GetShardIterator answered on each shard, for tracing the
	// steady state's slow records (fleetstages.go, tail).
	calls map[string][]readCall
	opens map[string][]time.Time
}

// readCall is one answered GetRecords: when it was sent and answered.
type readCall struct{ sent, answered time.Time }

func newFleetLag() *fleetLag {
	return &fleetLag{shardOf: map[string]string{}, pending: map[string]map[string]lagStamp{}, firstRead: map[string]time.Time{}, ended: map[string]time.Time{},
		calls: map[string][]readCall{}, opens: map[string][]time.Time{}}
}

// readShard notes that shard was read (any GetRecords, records or none),
// sent at sent and answered at at.
func (l *fleetLag) readShard(shard string, sent, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.firstRead[shard]; !ok {
		l.firstRead[shard] = at
	}
	l.calls[shard] = append(l.calls[shard], readCall{sent: sent, answered: at})
}

// opened notes that an iterator on shard was answered at at (a reader's
// start, or its reopening after an expired or refused iterator).
func (l *fleetLag) opened(shard string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opens[shard] = append(l.opens[shard], at)
}

func (l *fleetLag) read(shard string, recs []processor.Record) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		l.shardOf[r.SequenceNumber] = shard
		if t, ok := writeTime(r); ok {
			if l.pending[shard] == nil {
				l.pending[shard] = map[string]lagStamp{}
			}
			if _, again := l.pending[shard][r.SequenceNumber]; !again {
				l.pending[shard][r.SequenceNumber] = lagStamp{wrote: t, read: now}
			}
		}
	}
}

func (l *fleetLag) committed(last string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	shard, ok := l.shardOf[last]
	if !ok {
		return
	}
	for seq, t := range l.pending[shard] {
		if processor.CompareSequence(seq, last) <= 0 {
			l.samples = append(l.samples, at.Sub(t.wrote).Seconds())
			l.stages = append(l.stages, lagSample{wrote: t.wrote, read: t.read, committed: at, shardRead: l.firstRead[shard], shard: shard})
			delete(l.pending[shard], seq)
		}
	}
}

func (l *fleetLag) outstanding() (pending, samples int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.pending {
		pending += len(p)
	}
	return pending, len(l.samples)
}

// pendingList names the records read and not yet committed: shard,
// sequence number, and when each was written (seconds from start) and
// first read.
// unreadShards names the shards of infos holding records no GetRecords
// answer gave the live fleet (records added but not read, trimmed ones
// included), at most most of them: each with its state, its parent's end
// and its reads, in seconds from start.
func (l *fleetLag) unreadShards(infos []streamemu.ShardInfo, start time.Time, most int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	read := map[string]int{}
	for _, shard := range l.shardOf {
		read[shard]++
	}
	at := func(t time.Time, ok bool) string {
		if !ok {
			return "never"
		}
		return fmt.Sprintf("%.1f s", t.Sub(start).Seconds())
	}
	var out []string
	for _, sh := range infos {
		if sh.Records <= read[sh.ID] {
			continue
		}
		state := "open"
		if sh.Closed {
			state = "closed"
		}
		first, read1 := l.firstRead[sh.ID]
		var last time.Time
		if c := l.calls[sh.ID]; len(c) > 0 {
			last = c[len(c)-1].answered
		}
		parentEnd, ended := l.ended[sh.Parent]
		out = append(out, fmt.Sprintf("%s (%s, %d records, %d read, %d trimmed; parent %q ended %s; first read %s, last GetRecords answered %s)",
			sh.ID, state, sh.Records, read[sh.ID], sh.Trimmed, sh.Parent, at(parentEnd, ended), at(first, read1), at(last, !last.IsZero())))
		if len(out) == most {
			break
		}
	}
	return out
}

func (l *fleetLag) pendingList(start time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for shard, p := range l.pending {
		for seq, t := range p {
			out = append(out, fmt.Sprintf("%s %s written at %.1f s, first read at %.1f s", shard, seq, t.wrote.Sub(start).Seconds(), t.read.Sub(start).Seconds()))
		}
	}
	sort.Strings(out)
	return out
}

func (l *fleetLag) percentiles() (n int, p50, p99 float64) {
	c := &lagClock{}
	l.mu.Lock()
	c.samples = append(c.samples, l.samples...)
	l.mu.Unlock()
	return c.percentiles()
}

// fleetStreams shows every page the pollers read to the lag clock.
type fleetStreams struct {
	*streamemu.Stream
	arn string
	lag *fleetLag
}

func (s fleetStreams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	sent := time.Now()
	out, err := s.Stream.GetRecords(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	shard, _ := streamemu.IteratorShard(*in.ShardIterator)
	s.lag.readShard(shard, sent, time.Now())
	if out.NextShardIterator == nil {
		s.lag.shardEnded(shard, time.Now())
	}
	if len(out.Records) == 0 {
		return out, nil
	}
	recs := make([]processor.Record, len(out.Records))
	for i := range out.Records {
		recs[i] = processor.FromStream(out.Records[i], s.arn)
	}
	s.lag.read(shard, recs)
	return out, nil
}

func (s fleetStreams) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	out, err := s.Stream.GetShardIterator(ctx, in, opts...)
	if err == nil && in.ShardId != nil {
		s.lag.opened(*in.ShardId, time.Now())
	}
	return out, err
}

// fleetCommits meters the processor's writes and tells the lag clock up to
// which record each commit's checkpoint moved (its :last).
type fleetCommits struct {
	*Meter
	lag *fleetLag
}

func (c fleetCommits) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := c.Meter.TransactWriteItems(ctx, in, opts...)
	if err != nil {
		return out, err
	}
	for _, it := range in.TransactItems {
		if it.Update != nil {
			if seq := str(it.Update.ExpressionAttributeValues[":last"]); seq != "" {
				c.lag.committed(seq, time.Now())
				break
			}
		}
	}
	return out, nil
}

// jumpClock is the stream's clock: Factor times the wall clock, plus the
// jumps made.
type jumpClock struct {
	mu     sync.Mutex
	start  time.Time
	base   time.Time
	factor float64
}

func (c *jumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Add(time.Duration(float64(time.Since(c.start)) * c.factor))
}

func (c *jumpClock) jump(d time.Duration) {
	c.mu.Lock()
	c.base = c.base.Add(d)
	c.mu.Unlock()
}

// fleetPoller is one running poller.
type fleetPoller struct {
	owner   string
	reg     *prometheus.Registry
	coord   *countedTable
	cancel  context.CancelFunc
	done    chan error
	started time.Time
	stopped time.Time
	p       *poller.Poller
	run     context.Context // the poller's run: done once it is stopped
	leaving bool            // being stopped or stopped (under the run's lock)
	leases  float64         // sum of samples
	samples int
}

// gauge reads one of the poller's gauges.
// counters returns the values of counter name by its label label.
func (p *fleetPoller) counters(name, label string) map[string]int {
	mfs, err := p.reg.Gather()
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && m.GetCounter() != nil {
					out[l.GetValue()] += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

func (p *fleetPoller) gauge(name string) float64 {
	mfs, err := p.reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 && mf.GetMetric()[0].GetGauge() != nil {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// isCoordination tells the stream's records of the consumers' own items
// (checkpoints, leases: partition keys STREAM#…), the ones History keeps.
func isCoordination(r streamtypes.Record) bool {
	if r.Dynamodb == nil {
		return false
	}
	pk, _ := r.Dynamodb.Keys["PK"].(*streamtypes.AttributeValueMemberS)
	return pk != nil && strings.HasPrefix(pk.Value, "STREAM#")
}

// Fleet runs issue 23's fleet benchmark.
func Fleet(ctx context.Context, cfg FleetConfig) (*FleetResult, error) {
	cfg = cfg.withDefaults()
	began := time.Now()
	res := &FleetResult{Shards: cfg.Shards, Pollers: cfg.Pollers, Rate: cfg.Rate, Duration: cfg.Duration, IdleFor: cfg.IdleFor,
		Compression: cfg.Compression, History: cfg.History, MaxIdleBackoff: cfg.MaxIdleBackoff, Machine: machine(), FirstAllLeased: -1, JoinListed: -1}
	logf := timedLog(cfg.Log, "fleet")
	loc, err := startLocal(ctx, cfg.DynamoDBLocalDir, &res.Machine)
	if err != nil {
		return nil, err
	}
	defer func() { _ = loc.in.Stop() }()
	awsCfg, db := loc.cfg, loc.db
	const table = "fleet"
	if err := ledgertable.CreateTables(ctx, db, table); err != nil {
		return nil, err
	}
	// A stream on the coordination table (production's has none): the
	// history of the checkpoint items, in the order DynamoDB Local applied
	// the writes, for the order check.
	coord, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{
		TableName:           aws.String(ledgertable.CoordinationTableName(table)),
		StreamSpecification: &ddbtypes.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: ddbtypes.StreamViewTypeNewImage},
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: a stream on the coordination table: %w", err)
	}
	coordStream := aws.ToString(coord.TableDescription.LatestStreamArn)
	arn, err := poller.ResolveStream(ctx, db, table)
	if err != nil {
		return nil, err
	}
	clock := &jumpClock{start: time.Now(), base: time.Now(), factor: cfg.Compression}
	emu, err := streamemu.New(poller.NewStreamsClient(awsCfg), streamemu.Config{
		StreamARN: arn, Shards: cfg.Shards, RollAfter: 4 * time.Hour, SplitRatio: cfg.SplitRatio,
		MaxOpenShards: cfg.Shards + cfg.Shards/10, Limits: streamemu.AWSLimits, Clock: clock, Seed: cfg.Seed,
		HistoryFilter: isCoordination,
	})
	if err != nil {
		return nil, err
	}
	if cfg.History > 0 {
		clock.jump(cfg.History)
	}
	if err := emu.Sync(ctx); err != nil {
		return nil, err
	}
	openAtStart := 0
	var closedAtStart []string
	startShards := emu.Shards()
	for _, sh := range startShards {
		if !sh.Closed {
			openAtStart++
		} else {
			closedAtStart = append(closedAtStart, sh.ID)
		}
	}
	res.ShardsAtStart = len(startShards)
	parentsAtStart := emu.Parents()
	logf("%d shards in the stream (%d open) after %s of stream time", len(startShards), openAtStart, max(cfg.History, 0))

	meter := NewMeter(db)
	lag := newFleetLag()
	streams := fleetStreams{Stream: emu, arn: arn, lag: lag}
	var logMu sync.Mutex
	logw := writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return cfg.Log.Write(p)
	})
	var pollers []*fleetPoller
	var pmu sync.Mutex
	startPoller := func(owner string, mutate func(*poller.Config)) (*fleetPoller, error) {
		reg := prometheus.NewRegistry()
		proc, err := processor.New(fleetCommits{Meter: meter, lag: lag}, processor.Config{Table: table}, processor.NewMetrics(reg))
		if err != nil {
			return nil, err
		}
		pc := poller.Config{Table: table, StreamARN: arn, Owner: owner,
			MaxIdleBackoff: cfg.MaxIdleBackoff,
			Logger:         slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn})).With("owner", owner)}
		if cfg.Poller != nil {
			cfg.Poller(&pc)
		}
		if mutate != nil {
			mutate(&pc)
		}
		coord := &countedTable{Table: meter}
		p, err := poller.New(streams, coord, proc, pc, poller.NewMetrics(reg))
		if err != nil {
			return nil, err
		}
		pctx, cancel := context.WithCancel(ctx)
		fp := &fleetPoller{owner: owner, reg: reg, coord: coord, cancel: cancel, done: make(chan error, 1), started: time.Now(), p: p, run: pctx}
		go func() { fp.done <- p.Run(pctx) }()
		return fp, nil
	}
	stop := func(fp *fleetPoller) {
		pmu.Lock()
		fp.leaving = true
		pmu.Unlock()
		fp.cancel()
		err := <-fp.done
		pmu.Lock()
		defer pmu.Unlock()
		if err != nil && !errors.Is(err, context.Canceled) {
			res.Errors = append(res.Errors, fmt.Sprintf("poller %s: %v", fp.owner, err))
		}
		fp.stopped = time.Now()
	}
	running := func() []*fleetPoller {
		pmu.Lock()
		defer pmu.Unlock()
		var out []*fleetPoller
		for _, p := range pollers {
			if !p.leaving {
				out = append(out, p)
			}
		}
		return out
	}
	for i := range cfg.Pollers - 1 {
		fp, err := startPoller(fmt.Sprintf("p%d", i+1), nil)
		if err != nil {
			return nil, err
		}
		pollers = append(pollers, fp)
	}
	start := time.Now()
	events := []BalanceEvent{{Event: fmt.Sprintf("start: %d pollers", cfg.Pollers-1), At: 0}}

	// Sample leases and held records every second until the idle phase ends.
	sampling, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	defer func() { // on an early return: no poller outlives the run
		for _, p := range running() {
			p.cancel()
		}
	}()
	var samplerDone sync.WaitGroup
	var sampleMu sync.Mutex
	samplerDone.Add(1)
	go func() {
		defer samplerDone.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sampling.Done():
				return
			case <-t.C:
			}
			s := LeaseSample{At: time.Since(start).Seconds(), Held: map[string]int{}}
			total := 0
			for _, p := range running() {
				n := int(p.gauge("ledger_poller_leases_held"))
				s.Held[p.owner] = n
				if o := nonZero(p.counters("ledger_poller_offers_total", "outcome")); len(o) > 0 {
					if s.Offers == nil {
						s.Offers = map[string]map[string]int{}
					}
					s.Offers[p.owner] = o
				}
				total += n
				p.leases += float64(n)
				p.samples++
				if h := int(p.gauge("ledger_poller_held_records")); h > res.MaxHeldRecords {
					res.MaxHeldRecords = h
				}
			}
			sampleMu.Lock()
			res.Leases = append(res.Leases, s)
			if res.FirstAllLeased < 0 && total*10 >= openAtStart*9 {
				res.FirstAllLeased = s.At
			}
			sampleMu.Unlock()
		}
	}()

	// Write at Rate a second over 4 × Shards partition keys.
	spec := WorkloadSpec{Name: "f", Branches: 4 * cfg.Shards, Days: 30, ModifyShare: 0.10, DeleteShare: 0.05}
	// Ops for twice Duration: a join that waits for the fleet's start
	// moves the leave and the end of the writes later (FleetConfig.Pollers).
	ops := spec.Generate(int(float64(cfg.Rate)*2*cfg.Duration.Seconds()), cfg.Seed)
	end, leaveAt := cfg.Duration, 2*cfg.Duration/3
	// Eight writers, each item's changes all through one of them, in the
	// order generated: the expected count below judges a modify by the
	// old image the workload gave it, which is the stream's only when no
	// other change of the item lands between. Taken from one channel, two
	// changes of an item could land out of order when the writes fell
	// behind, and a modify that moved a report as generated could move
	// none as written, so that no commit carried its write time. (That
	// was session 28's first guess at "1 change left to the drain, never
	// read with an effect" in a 1,000-shard run; a run with this order
	// still left 2: UnreadShards now says whether the fleet left records
	// unread.)
	var work [8]chan Op
	var writers sync.WaitGroup
	var written, withTime atomic.Int64
	var writeErr atomic.Value
	for w := range work {
		work[w] = make(chan Op)
		writers.Add(1)
		go func() {
			defer writers.Done()
			for op := range work[w] {
				if err := Put(ctx, db, table, op, time.Now()); err != nil {
					writeErr.Store(err)
					continue
				}
				written.Add(1)
				if op.Kind != OpDelete && changesAReport(opRecord(op)) {
					// An insert, or a modify that moves a report: one
					// that puts a category back as it was is committed
					// without a write time the lag clock could see.
					withTime.Add(1)
				}
			}
		}()
	}
	joined, left := false, false
	var leaving sync.WaitGroup
	for i, op := range ops {
		at := start.Add(time.Duration(float64(i) / float64(cfg.Rate) * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		el := time.Since(start)
		if ctx.Err() != nil || el >= end {
			break // the rate DynamoDB Local carries under the fleet may be below Rate: WriteRate says
		}
		sampleMu.Lock()
		leased := res.FirstAllLeased >= 0
		sampleMu.Unlock()
		if !joined && el >= cfg.Duration/3 && (leased || el >= cfg.Duration) {
			joined = true
			leaveAt = max(leaveAt, el+cfg.Duration/3)
			end = max(end, leaveAt+cfg.Duration/3)
			fp, err := startPoller(fmt.Sprintf("p%d", cfg.Pollers), nil)
			if err != nil {
				return nil, err
			}
			pmu.Lock()
			pollers = append(pollers, fp)
			pmu.Unlock()
			events = append(events, BalanceEvent{Event: fmt.Sprintf("p%d joins", cfg.Pollers), At: el.Seconds()})
			logf("p%d joined", cfg.Pollers)
			go func(fp *fleetPoller) {
				t := time.NewTicker(100 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-fp.run.Done():
						return
					case <-t.C:
					}
					if fp.p.Ready() {
						took := time.Since(fp.started)
						sampleMu.Lock()
						res.JoinListed = took.Seconds()
						sampleMu.Unlock()
						logf("p%d's first listing complete %.1f s after it joined", cfg.Pollers, took.Seconds())
						return
					}
				}
			}(fp)
		}
		if !left && joined && el >= leaveAt {
			left = true
			events = append(events, BalanceEvent{Event: "p1 leaves", At: el.Seconds()})
			leaving.Add(1)
			go func() { // its shutdown (commit, hand leases back) does not hold the writes up
				defer leaving.Done()
				stop(pollers[0])
				logf("p1 left")
			}()
		}
		work[writerOf(op.Key, len(work))] <- op
	}
	for _, w := range work {
		close(w)
	}
	writers.Wait()
	leaving.Wait()
	if err, _ := writeErr.Load().(error); err != nil {
		res.Errors = append(res.Errors, fmt.Sprintf("writes: %v", err))
	}
	res.Written = int(written.Load())
	res.WriteRate = float64(res.Written) / time.Since(start).Seconds()
	logf("wrote %d transactions (%.0f/s); waiting for the fleet to commit them", res.Written, res.WriteRate)

	// Settle: every change with an effect written (an insert or a modify:
	// a delete carries no write time) has been committed, at most
	// DrainTimeout; what is left is Uncommitted.
	settleBy := time.Now().Add(cfg.DrainTimeout)
	expected := int(withTime.Load())
	for time.Now().Before(settleBy) && ctx.Err() == nil {
		if _, n := lag.outstanding(); n >= expected {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	_, n := lag.outstanding()
	res.Uncommitted = max(0, expected-n)
	if res.Uncommitted > 0 {
		// Read and not committed, or (none listed) never read with an
		// effect: which it is says where to look.
		res.UncommittedRead = lag.pendingList(start)
		res.UnreadShards = lag.unreadShards(emu.Shards(), start, 20)
	}
	res.SettleTook = time.Since(start) - cfg.Duration
	events = append(events, BalanceEvent{Event: "end of writes", At: time.Since(start).Seconds()})

	// Idle: nothing written; what do the consumers still do?
	idleShards := 0
	for _, sh := range emu.Shards() {
		if !sh.Closed {
			idleShards++
		}
	}
	gr0, h0 := emu.Calls("GetRecords"), len(emu.History())
	time.Sleep(cfg.IdleFor)
	res.IdleGetRecords = emu.Calls("GetRecords") - gr0
	res.IdleCoordinationRecords = len(emu.History()) - h0
	res.IdleOpenShards = idleShards
	if idleShards > 0 {
		res.IdleGetRecordsPerShardHour = float64(res.IdleGetRecords) / float64(idleShards) / cfg.IdleFor.Hours()
	}
	stopSampling()
	samplerDone.Wait()
	for _, p := range running() {
		stop(p)
	}
	logf("fleet stopped; draining")

	// The figures of the run before the drain adds its own.
	res.Balance = balance(events, res.Leases)
	res.HotKeys = meter.KeyRates(5)
	cost := meter.Cost()
	res.Commits = cost.Requests["TransactWriteItems"]
	res.CommitUnits = cost.UnitsByOp["TransactWriteItems"]
	for _, p := range pollers {
		end := p.stopped
		if end.IsZero() {
			end = time.Now()
		}
		fp := FleetPoller{Owner: p.owner, Queries: int(p.coord.queries.Load()), ItemsRead: int(p.coord.items.Load()),
			Writes: int(p.coord.writes.Load()), Minutes: end.Sub(p.started).Minutes(),
			LeaseEvents: p.counters("ledger_poller_lease_events_total", "event"),
			Offers:      nonZero(p.counters("ledger_poller_offers_total", "outcome"))}
		if p.samples > 0 {
			fp.MeanLeases = p.leases / float64(p.samples)
		}
		res.Coordination += fp.Writes
		res.PerPoller = append(res.PerPoller, fp)
	}
	res.CoordinationUnits = cost.UnitsByOp["UpdateItem"]
	res.DescribeStream, res.DescribeThrottled = emu.Calls("DescribeStream"), emu.Refused("DescribeStream", "LimitExceededException")
	res.ShardsListed = emu.ShardsListed()
	res.GetRecords, res.GetRecordsThrottled = emu.Calls("GetRecords"), emu.Refused("GetRecords", "LimitExceededException")
	res.LagN, res.LagP50, res.LagP99 = lag.percentiles()
	res.Stages = lag.stageFigures(start, res.FirstAllLeased, emu.Parents(), closedAtStart)
	res.Describes = describeCounts(pollers)
	res.PeakRSS = peakRSSSelf()

	// Exactness: a drain poller finishes what is left; the oracle.
	drainStart := time.Now()
	dctx, cancel := context.WithTimeout(ctx, cfg.DrainTimeout)
	d, err := startPoller("drain", func(c *poller.Config) { c.Drain = true })
	if err != nil {
		cancel()
		return nil, err
	}
	go func() { <-dctx.Done(); d.cancel() }()
	derr := <-d.done
	// A drain whose work is done but that met records trimmed by the
	// emulation's retention (or a shard gone) before it reached them
	// finished; the loss is an error of its own, not a hang.
	lost := errors.Is(derr, poller.ErrDrainLost)
	res.Drained = (derr == nil || lost) && dctx.Err() == nil
	cancel()
	res.DrainTook = time.Since(drainStart)
	switch {
	case !res.Drained:
		res.Errors = append(res.Errors, fmt.Sprintf("drain did not finish in %s: %v", cfg.DrainTimeout, derr))
	case lost:
		res.Errors = append(res.Errors, fmt.Sprintf("drain finished but records were lost: %v", derr))
	}
	diffs, _, err := processor.Reconcile(ctx, db, table, processor.Scope{})
	if err != nil {
		res.Errors = append(res.Errors, fmt.Sprintf("reconcile: %v", err))
	}
	res.Differences = len(diffs)
	coordHistory, err := readStream(ctx, poller.NewStreamsClient(awsCfg), coordStream)
	if err != nil {
		res.Errors = append(res.Errors, fmt.Sprintf("order check: %v", err))
	}
	res.OrderViolations, res.CheckpointRecords = orderViolations(emu, coordHistory)
	res.EarlyReads = len(emu.EarlyReads())
	endShards := emu.Shards()
	res.ShardsAtEnd = len(endShards)
	closed := map[string]bool{}
	for id, parent := range emu.Parents() {
		if _, before := parentsAtStart[id]; !before && parent != "" {
			closed[parent] = true // a shard made during the run: its parent closed then
		}
	}
	res.ClosedDuringRun = len(closed)
	res.Took = time.Since(began)
	logf("done in %s: %d differences, %d order violations, %d early reads", res.Took.Round(time.Second), res.Differences, res.OrderViolations, res.EarlyReads)
	return res, nil
}

// writerFunc is an io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// nonZero is m without its zero values (nil when none is left).
func nonZero(m map[string]int) map[string]int {
	var out map[string]int
	for k, v := range m {
		if v != 0 {
			if out == nil {
				out = map[string]int{}
			}
			out[k] = v
		}
	}
	return out
}

// balance computes, for each event, how long the running pollers took to
// hold their fair share ±10% each.
func balance(events []BalanceEvent, samples []LeaseSample) []BalanceEvent {
	out := append([]BalanceEvent(nil), events...)
	for i := range out {
		end := float64(1 << 30)
		if i+1 < len(out) {
			end = out[i+1].At
		}
		out[i].Within = -1
		for _, s := range samples {
			if s.At < out[i].At || s.At >= end {
				continue
			}
			worst := deviation(s.Held)
			out[i].Worst = worst
			if out[i].Within < 0 && worst <= 0.10 {
				out[i].Within = s.At - out[i].At
			}
		}
	}
	return out[:max(0, len(out)-1)] // the end of writes only bounds the leave
}

// deviation is the largest share by which a poller's leases differ from
// the fair share (1 when nothing is held).
func deviation(held map[string]int) float64 {
	total := 0
	for _, n := range held {
		total += n
	}
	if total == 0 || len(held) == 0 {
		return 1
	}
	fair := float64(total) / float64(len(held))
	worst := 0.0
	for _, n := range held {
		worst = max(worst, abs(float64(n)-fair)/fair)
	}
	return worst
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// orderViolations counts the checkpoint moves of a child shard (a commit or
// a move over records without effect) before its parent's checkpoint was
// marked finished, from the stream's own history of the checkpoint items;
// parents deleted from the stream unfinished are left out.
func orderViolations(emu *streamemu.Stream, coordHistory []streamtypes.Record) (violations, checked int) {
	parents := emu.Parents()
	inStream := map[string]bool{}
	for _, sh := range emu.Shards() {
		inStream[sh.ID] = true
	}
	finished := map[string]bool{}
	// The checkpoints are in the coordination table's stream; before it
	// (issue 23) they were in the data table's, History.
	history := coordHistory
	for _, h := range emu.History() {
		history = append(history, h.Record)
	}
	for _, h := range history {
		img := h.Dynamodb.NewImage
		if et, _ := img[ledgertable.AttrEntityType].(*streamtypes.AttributeValueMemberS); et == nil || et.Value != "CHECKPOINT" {
			continue
		}
		id, _ := img[ledgertable.AttrShardID].(*streamtypes.AttributeValueMemberS)
		if id == nil {
			continue
		}
		checked++
		if fin, _ := img["shardFinished"].(*streamtypes.AttributeValueMemberBOOL); fin != nil && fin.Value {
			finished[id.Value] = true
		}
		// A position: sequenceNumber in the old layout, pos in protocol
		// 4's fenced one (sequenceNumber a map).
		seq, _ := img[ledgertable.AttrSequenceNumber].(*streamtypes.AttributeValueMemberS)
		pos, _ := img[ledgertable.AttrPos].(*streamtypes.AttributeValueMemberS)
		if (seq == nil || seq.Value == "") && (pos == nil || pos.Value == "") {
			continue
		}
		if p := parents[id.Value]; p != "" && !finished[p] && inStream[p] {
			violations++
		}
	}
	return violations, checked
}

// peakRSSSelf is this process's peak resident set (VmHWM), in bytes.
func peakRSSSelf() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

// readStream reads every record of a stream of DynamoDB Local (one shard
// or more, each to its current end), in order.
func readStream(ctx context.Context, api poller.Streams, arn string) ([]streamtypes.Record, error) {
	d, err := api.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &arn})
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", arn, err)
	}
	var out []streamtypes.Record
	for _, sh := range d.StreamDescription.Shards {
		it, err := api.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &arn, ShardId: sh.ShardId,
			ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon})
		if err != nil {
			return nil, fmt.Errorf("iterator of %s: %w", aws.ToString(sh.ShardId), err)
		}
		for iter := it.ShardIterator; iter != nil; {
			page, err := api.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				return nil, fmt.Errorf("records of %s: %w", aws.ToString(sh.ShardId), err)
			}
			out = append(out, page.Records...)
			if len(page.Records) == 0 {
				break
			}
			iter = page.NextShardIterator
		}
	}
	return out, nil
}
