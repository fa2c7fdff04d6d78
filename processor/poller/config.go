package poller

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/ledger-dev/ledger/table"
	"strings"
	"time"
)

// StartPosition is where the poller starts reading a shard that has no
// checkpoint yet.
type StartPosition string

// The start positions. TrimHorizon reads everything the stream still holds.
// Latest applies only to a fresh start, when the stream has no checkpoint
// at all: the shards listed then are marked in the table (closed ones as
// finished, open ones to be opened at LATEST, which a restart before their
// first checkpoint repeats), and every shard that appears later starts at
// its trim horizon, so nothing after the start is lost at a split. What
// LATEST skips must be repaired once with `ledgerctl reconcile --repair`
// after catching up (docs/exactly-once.md, assumption 1); so must records
// written between a LATEST open and a restart that came before the shard's
// first checkpoint.
const (
	TrimHorizon StartPosition = "TRIM_HORIZON"
	Latest      StartPosition = "LATEST"
)

// LeaseMode is how a poller keeps its leases live (Config.LeaseMode).
type LeaseMode string

// The lease modes.
const (
	LeaseModeHeartbeat LeaseMode = "heartbeat"
	LeaseModeRenew     LeaseMode = "renew"
)

// ParseStartPosition parses TRIM_HORIZON or LATEST (case-insensitive).
func ParseStartPosition(s string) (StartPosition, error) {
	switch StartPosition(strings.ToUpper(strings.TrimSpace(s))) {
	case TrimHorizon:
		return TrimHorizon, nil
	case Latest:
		return Latest, nil
	}
	return "", fmt.Errorf("start position %q: want TRIM_HORIZON or LATEST", s)
}

// Config configures a Poller. Zero fields take the documented defaults;
// Validate says what is wrong with the rest.
type Config struct {
	// Table is the ledger table, whose stream the poller reads. Required.
	Table string
	// CoordinationTable holds the shards' checkpoints and leases (default
	// table.CoordinationTableName(Table); never Table itself).
	CoordinationTable string
	// StreamARN is the table's stream (see ResolveStream). Required.
	StreamARN string
	// Owner names this poller in lease items. It must be unique among the
	// live pollers and drains of the stream (cmd/poller uses
	// hostname-pid-random). A second process given a live one's Owner
	// claims its worker item: the first one's Run then returns an
	// *OwnerInUseError (docs/exactly-once.md, review of the heartbeat,
	// HB6). Required.
	Owner string

	// StartPosition applies to shards without a checkpoint (default
	// TrimHorizon).
	StartPosition StartPosition
	// Drain makes Run return nil once every record readable in the stream
	// when Run started is committed (docs/exactly-once.md, "The drain's
	// promise"): every shard is read to its end, or to an empty page (its
	// current end), except the shards made after the start. A drain run
	// reads every shard it needs: it takes free and expired leases and
	// asks live owners to hand theirs over.
	Drain bool
	// DrainEmptyPages is how many empty pages in a row an open shard must
	// answer before a drain takes its current end as reached (default 3;
	// 1: the first one, as before session 25), each read with the next
	// iterator of the one before: an iterator opened anew (an expiry,
	// failures, a trim) starts the count again. AWS documents an empty page
	// as no proof of it: "If there are no stream records available in the
	// portion of the shard that the iterator points to, GetRecords returns
	// an empty list. Note that it might take multiple calls to get to a
	// portion of the shard that contains stream records." The pages are
	// read at the fast idle pace (MinReadInterval doubling to IdleBackoff),
	// each one more GetRecords per open shard; no number of them proves an
	// open shard's end (docs/exactly-once.md, "The drain's promise", D2).
	DrainEmptyPages int
	// NoRollups turns the tenant roll-ups off in the processor NewService
	// wires (processor.Config.NoRollups; cmd/poller --rollups=false).
	NoRollups bool

	// MaxRecords is the GetRecords limit (default and maximum 1000).
	MaxRecords int
	// BatchRecords is how many records one commit batch may hold (default
	// 10,000, at least MaxRecords, at most 10,000): the fold of more
	// records, fewer report updates per record (BENCHMARKS.md). While a
	// shard is behind (its pages come back full), the reader reads on into
	// one batch up to this size before committing; a caught-up shard
	// gathers its pages for up to BatchWindow. A read never takes the batch
	// past this size (its GetRecords limit is what is left). This is what
	// is in memory per shard: up to 10 pages of at most 1 MB, within
	// MaxHeldRecords for all shards.
	BatchRecords int
	// BatchWindow is how long a shard reader holds the records it has read
	// before committing them as one batch, counted from the read of the
	// first record not yet committed (default 1s; negative: no window, each
	// page is committed as soon as it is read). Records keep being read
	// during the window; the batch is committed at the first read after the
	// window has elapsed, when it reaches BatchRecords, when a drain reads
	// an empty page (caught up), and on a stop (shutdown, hand-off). Held
	// records are not checkpointed: a reader that dies holding them leaves
	// them to be read again after the checkpoint. The window is the lever
	// between lag and cost on a caught-up stream, like the event source
	// mapping's MaximumBatchingWindowInSeconds: a longer window folds more
	// changes into one write of each report item and adds up to itself to
	// every change's lag (BENCHMARKS.md, "Issue 16: the poller's batching
	// window"). BatchWindowSetting's limits are those of a set window; the
	// flag's 0 (no window) is -1 here.
	BatchWindow time.Duration
	// MinReadInterval is the least time between two GetRecords calls on one
	// shard (default 200ms: at most 5 calls per second per shard, the
	// documented DynamoDB Streams limit).
	MinReadInterval time.Duration
	// IdleBackoff is the fast polling interval of a shard whose pages are
	// empty (default 1s): waits start at MinReadInterval and double while
	// pages stay empty, up to IdleBackoff; a page with records brings the
	// wait back to MinReadInterval.
	IdleBackoff time.Duration
	// MaxIdleBackoff is how far the wait of a shard that stays idle grows
	// beyond IdleBackoff (default 10s, or IdleBackoff if longer; at most
	// 10m, inside a shard iterator's 15 minutes): past IdleBackoff it keeps doubling
	// per empty page up to MaxIdleBackoff, each wait drawn in [3/4, 1] of
	// its step (jitter), and drops back as soon as a page has records. It
	// is the trade between the stream's read cost and lag: an idle shard
	// costs about 3,600 / (0.875 × MaxIdleBackoff in seconds) GetRecords an
	// hour, and the first write after a quiet period waits up to
	// MaxIdleBackoff longer to be read (BENCHMARKS.md, "Issue 23: adaptive
	// idle backoff"). Equal to IdleBackoff: no growth (every idle shard
	// polled every IdleBackoff, as before issue 23). A drain and the
	// reader of a closed shard never wait longer than IdleBackoff: they
	// are waiting for an end, not for new writes.
	MaxIdleBackoff time.Duration
	// OfferWatch is how often a heartbeat poller reads its own worker item
	// for leases offered to it (handed over by a poller over its share or
	// leaving, children left for it), and takes them at once (default 1s;
	// negative: never, offers are then taken at the round after the
	// heartbeat whose answer shows them, up to two renewal intervals
	// later). Not while the poller's validity has ended, nor while it
	// renews every lease item (compat), nor before a LATEST start is
	// decided: those offers wait for the round (docs/exactly-once.md,
	// review of session 21). Each read is one consistent read of one small
	// item (a Query of its key: 1 read unit up to 4 KB; 2 while a joiner's
	// item holds over a hundred offers): about 86,400 a day per poller at
	// the default. While a lease changes hands its shard is read by nobody, so
	// this is what a hand-over adds to the lag of the records written
	// meanwhile (BENCHMARKS.md, "Session 21: the hand-over is the steady
	// state's tail").
	OfferWatch time.Duration
	// MaxHeldRecords is the poller's budget of stream records in memory,
	// across every shard it reads (default 20,000): the records of the
	// GetRecords calls in flight (counted at their Limit before the call),
	// the batches being gathered and those being committed. A reader
	// takes its page's Limit from the budget before reading, and gives
	// back what the page did not use and, after the commit, the batch. A
	// reader with nothing held waits for budget in turn (first come, first
	// served, so none starves) and reads a smaller page when only part of
	// its limit is free (at least the budget divided by the readers
	// running, or its limit if smaller); a reader gathering a batch commits
	// it early rather than wait for more while others wait. Exactness does
	// not depend on it: it only limits reads. A shard resuming a batch a
	// previous reader half committed (ErrIncompleteBatch, after a crash
	// mid-batch) reads that batch whole even past the budget, since it
	// cannot commit part of it. A budget under one page (MaxRecords) is
	// allowed: the pages are smaller.
	MaxHeldRecords int
	// MaxHeldBytes bounds the same records by their wire size (SizeBytes),
	// whatever their count (default 32 MiB, at least 1 MiB): a read takes
	// 1 MiB from it before the call, AWS's most for one GetRecords
	// response, and keeps what the page held; the batch's bytes come back
	// after its commit. It is what bounds memory when records are large (a
	// tenant's report items of up to 40 KB make records of up to 80 KB,
	// which MaxHeldRecords alone would let fill gigabytes). Reads wait for
	// it in turn like for MaxHeldRecords; at most MaxHeldBytes / 1 MiB
	// reads are in flight at once. A stream that answers more than 1 MiB
	// in a page has the excess counted past the budget.
	MaxHeldBytes int
	// ThrottleBackoff and MaxThrottleBackoff shape the exponential backoff
	// with full jitter after a throttled or failed GetRecords (defaults 200ms
	// and 5s). MaxReadFailures bounds consecutive failed reads of a shard
	// before its reader gives the shard up (default 10; the coordinator
	// picks it up again later).
	ThrottleBackoff, MaxThrottleBackoff time.Duration
	MaxReadFailures                     int

	// LeaseDuration is how long a lease stays valid without renewal
	// (default 20s). The owner heartbeats (or, in LeaseModeRenew, renews
	// every lease) every LeaseDuration/3; another poller takes a lease over
	// once it has seen the owner's beat (or the lease's counter) unchanged
	// for LeaseDuration.
	LeaseDuration time.Duration
	// LeaseMode is how a live poller keeps its leases: LeaseModeHeartbeat
	// (the default) by its worker item's heartbeat, one write per round
	// whatever it holds, a lease item written only when it changes hands;
	// LeaseModeRenew by renewing every lease item each round, as pollers
	// before session 16 do (for a fleet being upgraded, and to measure the
	// difference). A heartbeat poller renews every lease too while the
	// worker registry shows a live poller that does not heartbeat
	// (docs/exactly-once.md, "The worker heartbeat": migration). A drain
	// always renews its leases, and judges the others' by the worker
	// registry (a heartbeat owner's by its beat, fenced first) whatever its
	// LeaseMode (the review of the late heartbeat, session 17, D1).
	LeaseMode LeaseMode
	// DiscoverInterval is how often the whole stream is listed (default
	// 5m, and at start): a listing is due this long after the last one
	// completed. Between listings a finished shard's children are
	// looked up with ShardFilter CHILD_SHARDS by the poller that finished
	// it, which registers them in lease items, where the others learn of
	// them (design.md, "Scale").
	DiscoverInterval time.Duration
	// LeaseScanPage is how many lease items a live poller reads of the
	// stream's lease partition at each renewal round (default 250; the
	// whole partition at start): a sweep that goes on from where the last
	// page ended, to find free and expired leases, finished shards and
	// new ones. A pass reads it and the worker registry, not every lease
	// and checkpoint (design.md, "Scale"); a lease whose owner died is
	// found expired within LeaseDuration plus two sweeps of the partition.
	LeaseScanPage int
	// DescribeRate is the DescribeStream calls a second the whole fleet
	// allows itself on the stream (default 8, of AWS's 10 per stream,
	// leaving 2 for its other readers): each poller calls at most
	// DescribeRate times its weight over the weights of the live pollers
	// of the worker registry (1 each; 8 for a poller whose first listing
	// is under way, once every other has acknowledged it), and slows
	// down when throttled (design.md, "Scale").
	DescribeRate int
	// CoordinationWriteRate is the write units a second the whole fleet
	// allows itself in each of the stream's two coordination partitions
	// (the lease partition, STREAM#{stream}, and the worker partition,
	// STREAM#{stream}#WORKERS) for the writes that keep no lease valid:
	// takes, releases (hand-overs, finishes, a stop's), registrations of
	// children, a drain's requests, offers, asks and their clears, the
	// fence of a gone poller, the leave (default 400, of the 1,000 one
	// partition takes; issue 23's ceiling is 500). Each poller writes at
	// most this divided by the live pollers of the worker registry (a
	// drain: its share with them, all of it in its first pass), a write
	// charged the units its item took at its last write. The heartbeat
	// and lease renewals are never paced. A write whose turn comes after
	// its round's deadline is left to the next round, and a stop's after
	// ShutdownTimeout + 5 s (design.md, "Scale": "Hot keys"; runbook, "A hot
	// coordination key").
	CoordinationWriteRate int
	// CheckpointInterval is how often a shard whose records had no effect
	// (nothing committed, e.g. only the consumers' own report writes) has
	// its checkpoint moved to the last record read (default 10s).
	CheckpointInterval time.Duration
	// ShutdownTimeout bounds the final commits after Run's context ends
	// (default 20s); leases are released after them.
	ShutdownTimeout time.Duration

	// Logger receives the poller's structured logs (default slog.Default()).
	Logger *slog.Logger
}

// A Setting is a tunable of Config: its default, taken when the field is
// zero, and the range Config accepts. cmd/poller's flags and `ledgerctl run`
// take their defaults and limits from here, so there is one set.
type Setting[T int | time.Duration] struct {
	Name              string // as the flag spells it, e.g. "idle-backoff"
	Default, Min, Max T
}

// Check returns v, or the default when v is zero, and an error when the
// result lies outside [Min, Max].
func (s Setting[T]) Check(v T) (T, error) {
	if v == 0 {
		v = s.Default
	}
	if v < s.Min || v > s.Max {
		return v, fmt.Errorf("%s %v: want between %v and %v", s.Name, v, s.Min, s.Max)
	}
	return v, nil
}

// The settings of Config with their defaults and limits.
var (
	MaxRecordsSetting         = Setting[int]{"max-records", 1000, 1, 1000}
	BatchRecordsSetting       = Setting[int]{"batch-records", 10000, 1000, 10000}
	BatchWindowSetting        = Setting[time.Duration]{"batch-window", time.Second, time.Millisecond, 5 * time.Minute}
	MinReadIntervalSetting    = Setting[time.Duration]{"min-read-interval", 200 * time.Millisecond, 0, time.Minute}
	IdleBackoffSetting        = Setting[time.Duration]{"idle-backoff", time.Second, 10 * time.Millisecond, 5 * time.Minute}
	MaxIdleBackoffSetting     = Setting[time.Duration]{"max-idle-backoff", 10 * time.Second, 10 * time.Millisecond, 10 * time.Minute}
	OfferWatchSetting         = Setting[time.Duration]{"offer-watch", time.Second, 100 * time.Millisecond, time.Minute}
	MaxHeldRecordsSetting     = Setting[int]{"max-held-records", 20000, 1, 10_000_000}
	MaxHeldBytesSetting       = Setting[int]{"max-held-bytes", 32 << 20, pageBytes, 1 << 40}
	ThrottleBackoffSetting    = Setting[time.Duration]{"throttle-backoff", 200 * time.Millisecond, time.Millisecond, time.Minute}
	MaxThrottleBackoffSetting = Setting[time.Duration]{"max-throttle-backoff", 5 * time.Second, time.Millisecond, 10 * time.Minute}
	LeaseDurationSetting      = Setting[time.Duration]{"lease-duration", 20 * time.Second, 300 * time.Millisecond, 10 * time.Minute}
	DiscoverIntervalSetting   = Setting[time.Duration]{"discover-interval", 5 * time.Minute, 10 * time.Millisecond, time.Hour}
	CheckpointIntervalSetting = Setting[time.Duration]{"checkpoint-interval", 10 * time.Second, 10 * time.Millisecond, time.Hour}
	LeaseScanPageSetting      = Setting[int]{"lease-scan-page", 250, 1, 100_000}
	DescribeRateSetting       = Setting[int]{"describe-rate", 8, 1, 1000}
	// The 500-unit ceiling of issue 23 less a margin for the writes that
	// are not paced (heartbeats, renewals) and the pollers' bursts.
	CoordinationWriteRateSetting = Setting[int]{"coordination-write-rate", 400, 1, 100_000}
	// ShutdownTimeout stays under the 30 s a container gets between SIGTERM
	// and SIGKILL (ECS and Kubernetes default), leaving time to release the
	// leases.
	ShutdownTimeoutSetting = Setting[time.Duration]{"shutdown-timeout", 20 * time.Second, time.Second, 25 * time.Second}
	MaxReadFailuresSetting = Setting[int]{"max-read-failures", 10, 1, 1000}
	DrainEmptyPagesSetting = Setting[int]{"drain-empty-pages", 3, 1, 100}
)

// withDefaults returns c with defaults applied, or an error naming every
// invalid field.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	if c.Table == "" {
		errs = append(errs, errors.New("table is required"))
	} else {
		if c.CoordinationTable == "" {
			c.CoordinationTable = table.CoordinationTableName(c.Table)
		}
		if err := table.CheckCoordinationTable(c.Table, c.CoordinationTable); err != nil {
			errs = append(errs, err)
		}
	}
	if c.StreamARN == "" {
		errs = append(errs, errors.New("stream ARN is required"))
	}
	if c.Owner == "" {
		errs = append(errs, errors.New("owner is required"))
	}
	switch c.StartPosition {
	case "":
		c.StartPosition = TrimHorizon
	case TrimHorizon, Latest:
	default:
		errs = append(errs, fmt.Errorf("start position %q: want TRIM_HORIZON or LATEST", c.StartPosition))
	}
	check := func(v *int, s Setting[int]) {
		var err error
		if *v, err = s.Check(*v); err != nil {
			errs = append(errs, err)
		}
	}
	dur := func(v *time.Duration, s Setting[time.Duration]) {
		var err error
		if *v, err = s.Check(*v); err != nil {
			errs = append(errs, err)
		}
	}
	check(&c.MaxRecords, MaxRecordsSetting)
	if c.BatchRecords == 0 {
		c.BatchRecords = BatchRecordsSetting.Default
	}
	if c.BatchRecords < c.MaxRecords || c.BatchRecords > BatchRecordsSetting.Max {
		errs = append(errs, fmt.Errorf("batch records %d: want %d (max records) to %d", c.BatchRecords, c.MaxRecords, BatchRecordsSetting.Max))
	}
	if c.BatchWindow >= 0 {
		dur(&c.BatchWindow, BatchWindowSetting)
	}
	check(&c.MaxReadFailures, MaxReadFailuresSetting)
	check(&c.DrainEmptyPages, DrainEmptyPagesSetting)
	dur(&c.MinReadInterval, MinReadIntervalSetting)
	dur(&c.IdleBackoff, IdleBackoffSetting)
	if c.MaxIdleBackoff == 0 {
		// The default grows from IdleBackoff; a longer IdleBackoff than
		// the default's cap is not shortened by it.
		c.MaxIdleBackoff = max(MaxIdleBackoffSetting.Default, c.IdleBackoff)
	}
	dur(&c.MaxIdleBackoff, MaxIdleBackoffSetting)
	if c.MaxIdleBackoff < c.IdleBackoff {
		errs = append(errs, fmt.Errorf("max idle backoff %s: want at least the idle backoff %s", c.MaxIdleBackoff, c.IdleBackoff))
	}
	if c.OfferWatch >= 0 {
		dur(&c.OfferWatch, OfferWatchSetting)
	}
	check(&c.MaxHeldRecords, MaxHeldRecordsSetting)
	check(&c.LeaseScanPage, LeaseScanPageSetting)
	check(&c.DescribeRate, DescribeRateSetting)
	check(&c.CoordinationWriteRate, CoordinationWriteRateSetting)
	check(&c.MaxHeldBytes, MaxHeldBytesSetting)
	dur(&c.ThrottleBackoff, ThrottleBackoffSetting)
	dur(&c.MaxThrottleBackoff, MaxThrottleBackoffSetting)
	if c.MaxThrottleBackoff < c.ThrottleBackoff {
		errs = append(errs, fmt.Errorf("max throttle backoff %s: want at least the throttle backoff %s", c.MaxThrottleBackoff, c.ThrottleBackoff))
	}
	dur(&c.LeaseDuration, LeaseDurationSetting)
	switch c.LeaseMode {
	case "":
		c.LeaseMode = LeaseModeHeartbeat
	case LeaseModeHeartbeat, LeaseModeRenew:
	default:
		errs = append(errs, fmt.Errorf("lease mode %q: want heartbeat or renew", c.LeaseMode))
	}
	dur(&c.DiscoverInterval, DiscoverIntervalSetting)
	dur(&c.CheckpointInterval, CheckpointIntervalSetting)
	dur(&c.ShutdownTimeout, ShutdownTimeoutSetting)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("poller config: %w", errors.Join(errs...))
	}
	return c, nil
}

// pageBytes is the most one GetRecords response holds: "up to 1 MB of
// data" (the DynamoDB Streams API reference, GetRecords), taken as 1 MiB.
const pageBytes = 1 << 20

// renewInterval is how often leases are renewed and reassigned.
func (c Config) renewInterval() time.Duration { return c.LeaseDuration / 3 }
