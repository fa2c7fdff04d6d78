// Package processor turns DynamoDB stream records into exactly-once report
// commits: it decodes records from Lambda events or the Streams API into one
// Record type, validates and folds them, quarantines what cannot be valid,
// and commits each run of records in one TransactWriteItems together with a
// guard that makes redelivery harmless. docs/exactly-once.md is the argument.
package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/table"
)

// DynamoDB is the part of the DynamoDB API the processor calls.
type DynamoDB interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	// Query looks for checkpoints left in the ledger table by the layout
	// before the coordination table (table.LegacyStreamState).
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Config configures a Processor. Zero fields take the documented defaults.
type Config struct {
	// Table is the DynamoDB table holding transactions and reports. Required.
	Table string
	// CoordinationTable holds the shards' checkpoints, which commits claim
	// in the same transaction as the reports they update (default
	// table.CoordinationTableName(Table); never Table: its writes must not
	// be records of the stream the consumers read).
	CoordinationTable string
	// MaxAttempts bounds the attempts of every DynamoDB call, commits
	// included (default 10).
	MaxAttempts int
	// BaseBackoff and MaxBackoff shape the exponential backoff with full
	// jitter between attempts (defaults 25ms and 3s).
	BaseBackoff, MaxBackoff time.Duration
	// MaxItemsPerRun bounds the items one commit transaction writes besides
	// its guard (default and maximum 99: TransactWriteItems takes 100
	// actions). A batch's groups are planned counting every entry of a
	// report's delta as a possible entry item (table/report.go), runs
	// counting the entry items the report shapes last read call for.
	MaxItemsPerRun int
	// MaxEntriesPerItem bounds the breakdown entries one report update
	// changes, keeping its expressions under DynamoDB's 4 KB limit (default
	// and maximum table.MaxInlineEntries, 32: a report item's whole inline
	// map in one update).
	MaxEntriesPerItem int
	// MarkerTTL is how long run markers live (default 7 days; it must exceed
	// the stream's 24-hour retention).
	MarkerTTL time.Duration
	// ShapeCacheSize bounds the report shapes kept in memory (default 50,000).
	ShapeCacheSize int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives what an operator must act on, such as a parked delta
	// (default slog.Default()).
	Logger *slog.Logger
	// NoRollups turns the tenant roll-ups off (docs/design.md, "Tenant
	// roll-ups", "Turning roll-ups off"): new commits put no roll-up delta
	// items, set no currency and no count condition on branch reports, and
	// fold no roll-up delta records (a new batch is planned by the rule
	// before roll-ups, layout 3; a batch left pending by a consumer with
	// roll-ups on is finished as planned, its deltas included). Branch
	// reports are kept exactly as with roll-ups on. Turning roll-ups on
	// later leaves the roll-ups short of the changes consumed meanwhile:
	// docs/runbook.md, "Turning tenant roll-ups on or off".
	NoRollups bool
	// RollupCostLogUnits: a commit whose roll-up writes for one tenant
	// reach this many write units logs that tenant and its units
	// (rollupcost.go; default DefaultRollupCostLogUnits, a partition's
	// second; negative: never).
	RollupCostLogUnits int
}

// DefaultRollupCostLogUnits is the default of Config.RollupCostLogUnits.
const DefaultRollupCostLogUnits = 1000

func (c Config) withDefaults() (Config, error) {
	if c.Table == "" {
		return c, errors.New("processor config: table name is required")
	}
	if c.RollupCostLogUnits == 0 {
		c.RollupCostLogUnits = DefaultRollupCostLogUnits
	}
	if c.CoordinationTable == "" {
		c.CoordinationTable = table.CoordinationTableName(c.Table)
	}
	if err := table.CheckCoordinationTable(c.Table, c.CoordinationTable); err != nil {
		return c, fmt.Errorf("processor config: %w", err)
	}
	def := func(v *int, d, max int) {
		if *v <= 0 || *v > max {
			*v = d
		}
	}
	def(&c.MaxAttempts, 10, 1000)
	def(&c.MaxItemsPerRun, 99, 99)
	def(&c.MaxEntriesPerItem, table.MaxInlineEntries, table.MaxInlineEntries)
	def(&c.ShapeCacheSize, 50000, 1<<30)
	if c.BaseBackoff <= 0 {
		c.BaseBackoff = 25 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 3 * time.Second
	}
	if c.MarkerTTL <= 0 {
		c.MarkerTTL = 7 * 24 * time.Hour
	}
	if c.MarkerTTL < 25*time.Hour {
		return c, fmt.Errorf("processor config: marker TTL %s must exceed the stream's 24h retention", c.MarkerTTL)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Processor applies batches of stream records to the reports exactly once.
// It is safe for concurrent use by several goroutines, each with its own
// Guard.
type Processor struct {
	api     DynamoDB
	cfg     Config
	metrics *Metrics
	shapes  *shapeCache
	// protocol holds the raise of the flags' protocol this Processor did
	// (RaiseProtocol, beforeFence): lock, a lock its waiters leave when
	// their context ends; at, when a raise last answered on an existing
	// flags item (zero: never).
	protocol struct {
		lock chan struct{}
		at   time.Time
	}
	// oldLayout (tests only) plans new batches under the layout before 6
	// (batchPlan).
	oldLayout bool
}

// New returns a Processor writing to cfg.Table through api. metrics may be
// nil (collectors are then created unregistered).
func New(api DynamoDB, cfg Config, metrics *Metrics) (*Processor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	p := &Processor{api: api, cfg: cfg, metrics: metrics, shapes: newShapeCache(cfg.ShapeCacheSize)}
	p.protocol.lock = make(chan struct{}, 1)
	return p, nil
}

func (p *Processor) now() time.Time { return p.cfg.Now().UTC() }

// legacyTombstone reads the shard's key of the layout before the
// coordination table in the ledger table: a checkpoint there (not a
// tombstone) is table.ErrLegacyStreamState, counted as
// conflicts_total{reason="legacy_checkpoint"}; otherwise it reports
// whether a tombstone stands there (false: nothing). The guard asks at
// every load, so that a shard a consumer of the previous version started
// after a migration, or one whose checkpoint a rollback copied back, is
// refused before anything is planned, whatever mark the coordination
// checkpoint carries, and so that a mark whose tombstone is gone is not
// trusted. One consistent GetItem of the shard's old key (1 read unit),
// not a Query of the stream's old partition, which holds a tombstone of
// every shard a commit touched in the last 7 days (docs/exactly-once.md,
// "A shard's legacy tombstone"). Without a stream ARN there is no old key:
// it reports true.
func (p *Processor) legacyTombstone(ctx context.Context, stream, shard string) (bool, error) {
	if stream == "" {
		return true, nil
	}
	item, err := p.getItemOf(ctx, p.cfg.Table, table.LegacyCheckpointKey(stream, shard))
	if err != nil {
		return false, fmt.Errorf("look for the checkpoint of %s in the ledger table %s: %w", shard, p.cfg.Table, err)
	}
	if table.IsLegacyCheckpoint(item) {
		p.metrics.Conflicts.WithLabelValues(ConflictLegacyCheckpoint).Inc()
		return false, fmt.Errorf("stream %s, shard %s: %w", stream, shard, table.ErrLegacyStreamState)
	}
	return item != nil, nil
}

// Metrics returns the processor's collectors.
func (p *Processor) Metrics() *Metrics { return p.metrics }

// protocolRaiseEvery is how long a raise of the protocol that found the
// flags item holds for a Processor's writes (RaiseProtocol): a consumer
// that lives on past an operator's ledgerctl unfence (a warm Lambda whose
// mapping is enabled again on this version, a poller left running) says
// protocol 4 again within it before it fences more (docs/exactly-once.md,
// review of session 26, S26-P2). One conditional write and one read per
// interval and process, no stream record unless it raises.
const protocolRaiseEvery = time.Minute

// RaiseProtocol sets the flags item's protocol to this version's
// (table.Protocol) where it is absent or lower: what every consumer does
// before its first fence, so that the table says protocol 4 before the
// first fence is written and an older ledgerctl refuses reconcile --repair
// from then on (docs/exactly-once.md, "F as built (session 25)", the
// protocol flag). A table without a flags item is left without one.
// raised says it wrote. Once it has answered without error, later calls
// on this Processor do nothing for protocolRaiseEvery (by Config.Now),
// whether it found a flags item or not: a flags item created later,
// without a protocol, is raised within the interval (S26-P1), and a
// table without one (the writer serves no write there) costs no extra
// write per commit. The
// pollers call it at start, and every write that can fence
// (transactWrite, updateItem) calls it first (beforeFence), so a Lambda's
// cold start needs no table and an empty batch writes nothing. Its write
// and read are counted as UpdateItem and GetItem in the write metrics.
// Calls wait for each other; a waiter whose ctx ends returns ctx.Err().
func (p *Processor) RaiseProtocol(ctx context.Context) (raised bool, err error) {
	select {
	case p.protocol.lock <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-p.protocol.lock }()
	now := p.cfg.Now()
	if at := p.protocol.at; !at.IsZero() && now.Sub(at) >= 0 && now.Sub(at) < protocolRaiseEvery {
		return false, nil
	}
	raised, _, err = table.RaiseProtocolOnFlags(ctx, meteredFlags{p}, p.cfg.Table, table.Protocol)
	if err != nil {
		return false, err
	}
	p.protocol.at = now
	if raised {
		p.cfg.Logger.Info("flags item raised to this version's protocol", "protocol", table.Protocol)
	}
	return raised, nil
}

// meteredFlags is the table's API for the raise of the protocol, its
// write counted in ledger_dynamodb_write_requests/units_total{operation="UpdateItem"}.
type meteredFlags struct{ p *Processor }

func (m meteredFlags) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return m.p.api.GetItem(ctx, in, opts...)
}

func (m meteredFlags) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c := *in
	c.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	m.p.metrics.WriteRequests.WithLabelValues("UpdateItem").Inc()
	out, err := m.p.api.UpdateItem(ctx, &c, opts...)
	if err == nil && out.ConsumedCapacity != nil {
		m.p.metrics.WriteUnits.WithLabelValues("UpdateItem").Add(aws.ToFloat64(out.ConsumedCapacity.CapacityUnits))
	}
	return out, err
}

// raiseError is a write's error when the raise of the protocol before it
// failed (beforeFence): nothing was sent, so no guard has an outcome to
// tell and no retry of the write can mend it (the raise was retried
// already). classifyErr calls it permanent, or cancelled when its context
// ended.
type raiseError struct{ err error }

func (e *raiseError) Error() string { return "before the write: " + e.err.Error() }
func (e *raiseError) Unwrap() error { return e.err }

// beforeFence raises the protocol before a write (RaiseProtocol), retried
// as p.retry retries (counted as UpdateItem's): a consumer that cannot
// say protocol 4 fences nothing. Its error is a *raiseError.
func (p *Processor) beforeFence(ctx context.Context) error {
	err := p.retry(ctx, "UpdateItem", func(ctx context.Context) error {
		_, err := p.RaiseProtocol(ctx)
		return err
	})
	if err != nil {
		return &raiseError{err: err}
	}
	return nil
}

// Result says what one Process call did.
type Result struct {
	// Committed is how many leading records are done (applied, skipped,
	// quarantined or ignored, and committed where they had an effect). When
	// it is less than the batch length, the records from Committed on must be
	// delivered again: name recs[Committed] as the first failure.
	Committed int
	// Per-outcome record counts.
	Applied, Duplicates, Quarantined, Ignored int
	// Rollups counts roll-up delta records folded into partials.
	Rollups int
	// Runs is how many commit transactions landed.
	Runs int
}

// BatchError is returned when a batch could not be committed completely. The
// records before Index are committed; the source must redeliver from Index.
type BatchError struct {
	Index          int
	EventID        string
	SequenceNumber string
	Err            error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("batch not committed from record %d (event %s, sequence %s): %v", e.Index, e.EventID, e.SequenceNumber, e.Err)
}

func (e *BatchError) Unwrap() error { return e.Err }

// Process applies one ordered batch of records from one shard (or one Lambda
// event) exactly once, under the guard g. It is idempotent: processing the
// same records again, or a batch that overlaps committed ones, changes no
// report. Invalid transaction records are quarantined (never applied, never
// lost) and do not stop the batch. On failure the error is a *BatchError
// naming the first record not committed, and Result.Committed equals its
// index.
func (p *Processor) Process(ctx context.Context, g Guard, recs []Record) (Result, error) {
	start := time.Now()
	p.metrics.BatchSize.Observe(float64(len(recs)))
	defer func() { p.metrics.BatchDuration.Observe(time.Since(start).Seconds()) }()

	var res Result
	changes := make([]change, len(recs))
	for i := range recs {
		changes[i] = classify(&recs[i])
	}
	dedupe(changes)
	quarantineForeignCurrency(changes)
	// A roll-up delta of a newer format than this version reads stops the
	// records at it: those before it are committed, it and those after it
	// are not (refuseNewerFormat).
	all, newer := recs, firstNewerFormat(changes)
	if newer >= 0 {
		recs, changes = recs[:newer], changes[:newer]
	}
	fail := func(i int, err error) (Result, error) {
		res.Committed = i
		if i >= len(recs) {
			return res, err
		}
		return res, &BatchError{Index: i, EventID: recs[i].EventID, SequenceNumber: recs[i].SequenceNumber, Err: err}
	}

	done := 0   // records before done are finished
	stalls := 0 // guard conflicts in a row that skipped nothing
	pos := ""   // the guard's position: progress of a batch another consumer commits too
	if i := outOfOrder(changes); g.ordered() && i >= 0 {
		// The checkpoint drops a prefix by sequence number: a record after a
		// higher one would be dropped with it, never applied. Callers sort.
		return fail(0, fmt.Errorf("record %d (sequence %s) is out of order: a shard's records must be handed over in sequence order", i, recs[i].SequenceNumber))
	}
	for done < len(recs) {
		n, redeliver, err := g.committed(ctx, changes[done:])
		if err == nil {
			if now := g.position(); now != pos {
				pos, stalls = now, 0
			}
		}
		if n > 0 {
			if qerr := p.skipped(ctx, changes[done:done+n], &res); qerr != nil {
				return fail(done, qerr)
			}
			done += n
		}
		if err != nil {
			return fail(done, err)
		}
		if redeliver {
			res.Committed = done
			return res, nil
		}
		if done == len(recs) {
			if err := g.settle(ctx); err != nil {
				return fail(done, err)
			}
			break
		}
		advanced, err := g.commit(ctx, changes[done:], &res)
		done += advanced
		if errors.Is(err, errGuardTaken) {
			// Someone committed part of what we hold: re-read the guard. A
			// guard that keeps failing without showing progress is a bug or
			// a consumer racing us forever; give up after MaxAttempts.
			if stalls++; advanced == 0 && n == 0 && stalls > p.cfg.MaxAttempts {
				return fail(done, fmt.Errorf("guard conflict without progress %d times: %w", stalls, err))
			}
			continue
		}
		stalls = 0
		if err != nil {
			return fail(done, err)
		}
	}
	res.Committed = len(recs)
	if newer >= 0 {
		return p.refuseNewerFormat(all, newer, res)
	}
	return res, nil
}

// skipped accounts for changes the guard found done: committed ones count
// as duplicates; unguarded ones (without effect) count as what they are.
// Invalid records no claim covers get their quarantine item by an
// idempotent put: a trimmed batch's (abandoned: its groups that never
// landed carried some of their items) and any a guard skipped unclaimed.
func (p *Processor) skipped(ctx context.Context, changes []change, res *Result) error {
	var requarantine []change
	for i := range changes {
		c := &changes[i]
		o := OutcomeDuplicate
		switch {
		case c.abandoned && !c.dup:
			o = OutcomeAbandoned
			if c.needsQuarantine() {
				requarantine = append(requarantine, *c)
			}
		case c.dup || !c.unguarded:
			res.Duplicates++
		case !c.isTxn:
			o = OutcomeIgnored
			res.Ignored++
		case c.invalid != nil:
			o = OutcomeQuarantined
			res.Quarantined++
			requarantine = append(requarantine, *c)
		default:
			res.Duplicates++
		}
		p.metrics.Records.WithLabelValues(eventLabel(c.rec.EventName), o).Inc()
	}
	return p.putQuarantine(ctx, requarantine)
}

func eventLabel(name string) string {
	switch name {
	case "INSERT", "MODIFY", "REMOVE":
		return name
	}
	return "UNKNOWN"
}

// firstRunEnd is where the first run of changes ends when it should be as
// short as possible: after the first change a guard must claim (the records
// before it ride along in its claim), or at the end when none needs one.
func firstRunEnd(changes []change) int {
	for i := range changes {
		if changes[i].guarded() {
			return i + 1
		}
	}
	return len(changes)
}
