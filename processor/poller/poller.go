package poller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// Poller reads a table's stream with the DynamoDB Streams API and commits
// every record exactly once through a processor.Processor, sharing the
// shards with other pollers through leases in the table. See the package
// documentation for the protocol.
type Poller struct {
	cfg     Config
	streams Streams
	store   *store
	proc    *processor.Processor
	pm      *processor.Metrics
	m       *Metrics
	log     *slog.Logger

	ready   atomic.Bool
	healthy atomic.Int64 // unix nanos of the last coordinator pass that read the table

	// inc is this process's incarnation (incarnation.go); born, the answer
	// time (mono) of its first claim of the worker item that landed (0:
	// none yet); superseded, set when another process of this owner name
	// claimed the item since (supersededC is closed then).
	inc         string
	born        atomic.Int64
	superseded  atomic.Pointer[OwnerInUseError]
	supersededC chan struct{}

	// Coordinator state: touched by Run's goroutine only.
	shards    []shard
	listed    time.Time // when shards was read (its listing's first page)
	listDone  time.Time // when that listing completed: the next is due DiscoverInterval after it (listDue)
	forceList bool
	listing   listing // a listing of the whole stream paused by throttling, going on at the next pass
	leases    map[string]lease
	cps       map[string]checkpoint
	seen      map[string]observation
	held      map[string]*holding
	drained   map[string]bool // read by this drain run to an empty page (drainLeaves)
	gone      map[string]bool
	// protocolFenced are the shards this poller gave up because their checkpoint
	// is fenced by another protocol than this version's (its reader ended
	// on table.ErrCheckpointProtocol; the value is that protocol): not
	// taken again for the rest of this process's life (S25-F1; givenUp).
	protocolFenced map[string]int64
	// trims are the trims this drain run's readers met (every reader's,
	// restarts included): reported when its work is complete (drainLoss).
	// Not kept by a live poller.
	trims []DrainTrim
	// losses is the loss count a drain read at its start (lossesRead: the
	// read succeeded): one that moved by its exit is reported
	// (DrainLossError.Counted).
	losses     int64
	lossesRead bool
	// goneAt is when each shard in gone was marked (this poller's clock):
	// a listing whose first page is older than the mark does not undo it
	// (review of session 17, hole S17-D4).
	goneAt map[string]time.Time
	lookup []string // finished shards whose children are still to be looked up (CHILD_SHARDS)
	// lookupSince is when each shard in lookup was first looked up and
	// found without children: AWS may list a closed shard's children a
	// moment after it closes, so it is looked up again at each pass for
	// childlessRetry.
	lookupSince map[string]time.Time
	noFilter    bool      // the stream ignores or refuses ShardFilter: list it whole instead
	lastStop    time.Time // when a reader last drained or finished a shard (a drain lists after it before exiting)
	lastRenew   time.Time // when the last round of renewals started
	takesFrom   time.Time // when this pass's first batch of takes started (takeTurn; zero: none yet)
	done        chan readerResult
	stopping    bool

	// A drain run's horizon (docs/exactly-once.md, "The drain's promise";
	// noteShards): seenOpen, the shards a DescribeStream answer of the run
	// showed open (their children are made after the run's start); late,
	// the shards made after its start (a child of one in seenOpen or in
	// late). Nil for a live poller.
	seenOpen map[string]bool
	late     map[string]bool

	// The share-bounded pass's state (share.go; a drain reads everything).
	workers       map[string]workerView // the other pollers, from the worker registry
	told          map[string]answered   // per receiver, the offers this poller wrote to it answered since the last registry read was sent (inFlight)
	registryReads int                   // reads of the registry so far
	foreignWait   atomic.Bool           // a lease of this name held by another incarnation was seen (logged once)
	offers        []string              // shards offered to this poller, from its worker item
	swept         bool                  // the lease partition was read whole once
	sweepFrom     sweepState            // where the next page of the sweep starts
	newKids       map[string]bool       // children registered during an endPass
	unoffered     map[string]bool       // children this poller registered, neither took nor could offer: offered again each round (offerLeft)
	unregistered  map[string]bool       // during a stop's stopKids: the children whose registration did not land (not offered: S28-K1)
	untold        map[string]untold     // leases handed over whose offer write failed: offered again each round (tellAgain)
	finishedNow   map[string]bool       // shards finished since the last endPass: true when the listing had their children
	latestChecked bool                  // a LATEST start was decided on every checkpoint

	// The worker heartbeat (docs/exactly-once.md, "The worker heartbeat").
	// beatUntil is the send time of the last heartbeat that landed +
	// LeaseDuration (mono: nanos since epoch, on the monotonic clock), written by the heartbeat goroutine
	// (heartbeater), read by the readers' watchdogs and the coordinator.
	beatUntil atomic.Int64
	compat    atomic.Bool   // a live poller that renews every lease is in the registry: renew ours too
	fencedOut atomic.Bool   // a heartbeat was refused by a fence: the coordinator rejoins
	paused    bool          // the heartbeat's validity ended with leases held: readers stopped (checkPause)
	heldN     atomic.Int64  // leases held, for the heartbeat's held count
	hbMu      sync.Mutex    // guards hbAnswer
	hbAnswer  *table.Worker // the last heartbeat's answer not yet seen by the coordinator
	hbStop    func()        // stops the heartbeat goroutine and waits for it

	// listedOnce is set once the first listing of the stream completed
	// (its announcement ends). Under ackMu: ackSeen, the listing pollers
	// this poller's DescribeStream rate counts, for its heartbeats to
	// acknowledge, published at generation ackGen (shareDescribe); ackHeld,
	// the acknowledgements its worker item may carry or lately carried,
	// which its rate goes on counting (ackLanded; S27-J3). viewSent is the
	// send time of the last registry read (coordinator only).
	listedOnce atomic.Bool
	ackMu      sync.Mutex
	ackSeen    []string
	ackGen     uint64
	ackHeld    map[string]ackHold
	viewSent   time.Time
	ackNow     chan struct{} // a listing poller newly counted, or this one's first listing done: the heartbeat goroutine beats at once

	// offered carries the offers the offer watch (watchOffers) read in
	// this poller's worker item to the coordinator, which takes them at
	// once (offerPass); the newest replaces one not yet taken.
	offered    chan []string
	fenced     map[string]int64 // owners this poller fenced, at the beat it saw unchanged
	registryAt time.Time        // when the registry was last read
	// registrySent is the send time of the last registry read that
	// succeeded; unverified, that a verification of the leases held
	// (verifyHeld) could not read them all.
	registrySent time.Time
	unverified   bool
	asks         []string // shards a drain asked this poller for, from its worker item
	// unasked are the requests of this poller (shard → owner) whose ask in
	// the owner's worker item (AskWorker) failed after the lease's
	// pendingOwner landed: written again at each pass until one lands (the
	// review of the heartbeat, HB5).
	unasked map[string]string
	// askedAt is when this poller last told a heartbeat owner (its worker
	// item's asks) of a request of this poller that the lease still shows
	// (pendingOwner = this poller): told again a renewal interval later
	// while the lease stays so, as the owner's clear of an earlier ask can
	// take the later one with it (S25-A1).
	askedAt map[string]time.Time
	// absent are the owners gone from the registry since it last showed
	// them: when this poller first read it without them (HB4).
	absent map[string]time.Time

	// countMu guards taken, and the heldN stored with its additions: the
	// offers this poller took (still held then), which its next
	// heartbeat removes from its worker item with a held count that
	// includes them (table.OffersCounted; countedHeld).
	countMu sync.Mutex
	taken   map[string]bool

	committed atomic.Int64 // records committed (Metrics.Committed), for the goodput gauge
	goodput   []sample     // (time, committed) of the last minute's passes

	describe *describeBudget // this poller's share of the stream's DescribeStream rate (Config.DescribeRate)

	budget *budget // records in memory across the readers (Config.MaxHeldRecords)
	bytes  *budget // their wire bytes (Config.MaxHeldBytes)
	// idleHook, when set (tests), is called with every idle wait a reader
	// would make after its n-th empty page in a row, instead of the wait.
	idleHook func(shard string, n int, d time.Duration)
}

// sample is the committed count at a time.
type sample struct {
	at time.Time
	n  int64
}

// observation is when this poller first saw a lease in its current state:
// a lease whose counter stays unchanged for LeaseDuration has expired.
type observation struct {
	owner   string
	counter int64
	at      time.Time // first read in this state
	last    time.Time // last read in this state
}

// holding is a lease this poller holds and the reader working under it.
type holding struct {
	lease      lease
	finished   bool      // the shard was read to its end: its lease is released to expire soon
	validUntil time.Time // take's or renewal's send time + LeaseDuration
	// until mirrors validUntil (unix nanos) for the reader's watchdog.
	until     atomic.Int64
	renewed   time.Time
	cancel    context.CancelFunc
	stop      chan struct{}
	stopOnce  sync.Once
	running   bool
	lost      bool   // the lease is another poller's now
	handoffTo string // stop, then give the lease to this poller
	retryAt   time.Time
	// unknownTo is the counter a renewal with an unknown outcome (an
	// error, or a failed condition) tried to write, first sent at
	// unknownSent: if a re-read shows it, that is the validity's start.
	unknownTo   int64
	unknownSent time.Time
}

func (h *holding) signalStop() { h.stopOnce.Do(func() { close(h.stop) }) }

// New returns a Poller reading streams and keeping leases and checkpoints
// in table through api; proc commits the records (its ShardGuard is the
// checkpoint). metrics may be nil (unregistered collectors).
func New(streams Streams, api Table, proc *processor.Processor, cfg Config, metrics *Metrics) (*Poller, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Poller{
		cfg:     cfg,
		streams: &countingStreams{Streams: streams, m: metrics},
		store: &store{api: api, table: cfg.CoordinationTable, streamARN: cfg.StreamARN, pace: newWritePacer(cfg.CoordinationWriteRate, metrics),
			raise: func(ctx context.Context) error { _, err := proc.RaiseProtocol(ctx); return err }},
		inc:     newIncarnation(),
		proc:    proc,
		pm:      proc.Metrics(),
		m:       metrics,
		log:     cfg.Logger.With("owner", cfg.Owner),
		seen:    map[string]observation{},
		leases:  map[string]lease{},
		cps:     map[string]checkpoint{},
		workers: map[string]workerView{},
		told:    map[string]answered{},
		taken:   map[string]bool{},
		unasked: map[string]string{},
		askedAt: map[string]time.Time{},
		absent:  map[string]time.Time{},
		fenced:  map[string]int64{},
		held:    map[string]*holding{},
		drained: map[string]bool{},
		gone:    map[string]bool{},
		goneAt:  map[string]time.Time{},
		done:    make(chan readerResult),
		budget:  newBudget(cfg.MaxHeldRecords, metrics),
		bytes:   newBytesBudget(cfg.MaxHeldBytes, metrics),

		describe:    newDescribeBudget(cfg.DescribeRate, metrics),
		supersededC: make(chan struct{}),
		offered:     make(chan []string, 1),
		ackNow:      make(chan struct{}, 1),
		ackHeld:     map[string]ackHold{},
	}, nil
}

// Ready reports whether the poller has read the stream's shards and its
// leases, and is not shutting down.
func (p *Poller) Ready() bool { return p.ready.Load() }

// Healthy reports whether the coordinator has read the table within the
// last three lease durations (or has not started yet).
func (p *Poller) Healthy() bool {
	last := p.healthy.Load()
	return last == 0 || time.Since(time.Unix(0, last)) < 3*p.cfg.LeaseDuration
}

// Run reads the stream until ctx ends, then stops reading, lets the batches
// in hand commit (for at most ShutdownTimeout), moves the checkpoints,
// releases its leases and returns nil. With Drain it returns earlier,
// once every shard is read to its current end: nil, or a
// *DrainLossError (errors.Is ErrDrainLost) naming the trims its readers
// met, the shards gone unfinished and the gaps any consumer counted
// during the run (the loss count read at its start and exit), whose
// records are lost to the
// reports until `ledgerctl reconcile --repair` (docs/exactly-once.md,
// "The drain's promise"). It returns an error when
// the stream no longer exists (the poller never exits on its own while it
// does), and an *OwnerInUseError (errors.Is ErrOwnerInUse) when another
// live process given the same Config.Owner claimed this poller's worker
// item after it (or, for a drain, a live poller uses its name): its leases
// are then dropped, not released, and the other process keeps them.
func (p *Poller) Run(ctx context.Context) error {
	p.log.Info("poller starting", "stream", p.cfg.StreamARN, "drain", p.cfg.Drain, "start_position", string(p.cfg.StartPosition),
		"lease_duration", p.cfg.LeaseDuration.String(), "incarnation", p.inc)
	// The second round comes firstRound after the first, not a renewal
	// interval: a live poller takes nothing before its second read of the
	// worker registry (pollers starting together see each other first), and
	// a whole renewal interval there (6.7 s with 20 s leases) was every
	// start's records waiting: the steady-rate lag test's p99 went from
	// 1.6–2.3 s to 8.4–9.2 s (p50 0.9–1.1 s to 4.4–5.2 s) with the
	// share-bounded pass.
	tick := time.NewTicker(min(firstRound, p.cfg.renewInterval()))
	defer tick.Stop()
	p.forceList = true
	var runErr, lossErr error
	if p.cfg.Drain {
		p.readLossesAtStart(ctx)
	}
	if err := p.pass(p.round(ctx), true); err != nil {
		runErr = err
	}
	if !p.cfg.Drain && p.cfg.OfferWatch > 0 {
		wctx, stopWatch := context.WithCancel(ctx)
		watchDone := make(chan struct{})
		go func() { defer close(watchDone); p.watchOffers(wctx) }()
		defer func() { stopWatch(); <-watchDone }()
	}
	for runErr == nil && ctx.Err() == nil && p.superseded.Load() == nil {
		if p.cfg.Drain && p.drainComplete() {
			if !p.listed.Before(p.lastStop) {
				// Records the run met and could not commit (trimmed
				// before it reached them, or in a shard gone unfinished)
				// make the exit an error of its own: the promise is
				// "committed, or named here" (ErrDrainLost).
				if lossErr = p.drainLoss(ctx); lossErr != nil {
					p.log.Error("drain complete, with records readable at its start lost to the reports: run `ledgerctl reconcile --repair`", "error", lossErr.Error())
				} else {
					p.log.Info("drain complete: every record readable at the drain's start is committed")
				}
				break
			}
			// Everything listed is read, but shards made before the start
			// may have been listed since (a child AWS lists a moment after
			// its parent's close, a shard marked gone listed again): read
			// the list again, at once the first time, at the next tick when
			// that failed (throttled). Shards that closed since it was read
			// keep nobody waiting: one the run read to an empty page is
			// done, whatever follows its page (drainLeaves), and a closed
			// shard's children are made after the start once an answer of
			// the run showed it open (issue 23: before, such a listing
			// had to show none of them closed, and a listing longer than
			// the gap between two closes never did).
			if !p.forceList {
				p.forceList = true
				runErr = p.pass(p.round(ctx), false)
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-p.supersededC:
		case <-tick.C:
			runErr = p.pass(p.round(ctx), true)
			tick.Reset(p.nextRound())
		case offers := <-p.offered:
			p.offerPass(p.round(ctx), offers)
		case r := <-p.done:
			// One round for the reader's end and the pass after it: their
			// paced writes together wait at most half a renewal interval,
			// so renewals due at that pass are held back no longer than at
			// a tick's (review of the pacer, session 23).
			rc := p.round(ctx)
			p.readerDone(rc, r)
			switch {
			case p.cfg.Drain && errors.Is(r.err, table.ErrCheckpointProtocol):
				// A drain of this version cannot keep its promise on a
				// shard another protocol fenced (S25-F1): it fails, naming
				// it, instead of waiting for a shard it gave up.
				runErr = fmt.Errorf("drain: the drain of the fence's protocol reads this shard: %w", r.err)
			case p.cfg.Drain && len(p.held) == 0:
				// A drain's last reader ended: the pass that decides
				// whether it is done reads everything.
				runErr = p.pass(rc, false)
			case time.Since(p.lastRenew) >= p.cfg.renewInterval():
				// The renewals are due: reader ends arriving one after
				// another must not hold them up (on a loaded table a
				// poller's every lease expired at once, its round late).
				runErr = p.pass(rc, true)
				tick.Reset(p.cfg.renewInterval())
			default:
				runErr = p.endPass(rc)
			}
		}
	}
	p.shutdown(ctx)
	if err := p.supersededErr(); err != nil {
		// Another process of this owner name keeps running: this one's
		// leases were dropped, not released (HB6).
		return errors.Join(err, runErr)
	}
	if runErr != nil {
		return runErr
	}
	return lossErr
}

// round is ctx for one of the coordinator's passes: its paced coordination
// writes (writePacer) wait for their turn until at most half a renewal
// interval after the first of them asked (paceWindow: however long the
// pass's reads took before it); a write whose turn comes later is not
// sent, and what it was for goes on at the next round
// (a take; an offer, told again; a release, whose lease this poller takes
// back as its own at its next round, or expires at a stop). A renewing
// poller's renewals (at the round's start) are not held back by more than
// that. The stop (shutdown) has its own budget: the caller's deadline,
// each release's 5 s.
func (p *Poller) round(ctx context.Context) context.Context {
	return withPaceWindow(ctx, p.cfg.renewInterval()/2)
}

// nextRound is how long until the poller's next round: firstRound until
// its first listing of the stream is complete, a renewal interval after.
// A listing paced by the stream's DescribeStream rate (describeBudget)
// pauses at each round's deadline; a poller still listing holds nothing
// to renew, and its next round going on with the listing a second later
// rather than a renewal interval later is what let it take its share with
// the others: in the fleet benchmark at 100 shards (8 pages a listing),
// two of seven pollers started together listed for 30 s and then found
// the shards taken (2 and 4 leases against a share of 16 for two minutes).
//
// Only a listing under way (paused, its pages kept) brings the rounds
// closer: a first listing that fails (DescribeStream refused for good: a
// missing permission) is tried again at the renewal interval, as before
// the pacer; rounds every second wrote the worker item, read the registry
// and logged the failure every second for as long as the poller ran
// (review, session 17, S17-D6). Run's second round comes firstRound after
// its first whatever the first listing did.
func (p *Poller) nextRound() time.Duration {
	if p.listed.IsZero() && !p.cfg.Drain && p.listing.seen != nil {
		return min(firstRound, p.cfg.renewInterval())
	}
	return p.cfg.renewInterval()
}

// endListWait is the longest a reader's end waits for its turn of the
// stream's DescribeStream rate to go on with a listing under way.
const endListWait = 200 * time.Millisecond

// firstRound is how long after its first round a poller's second comes
// (at most a renewal interval): long enough for pollers started together to
// have written their worker items (each writes it before it lists the
// stream), short enough that a start's first records do not wait for a
// renewal interval.
const firstRound = time.Second

// drainComplete reports whether every listed shard is finished, gone, or
// left by this drain run (drainLeaves), nothing is being read, and the
// children of every shard finished are known. Run lists the stream once
// more when the list is older than the last reader's end.
func (p *Poller) drainComplete() bool {
	if len(p.held) > 0 || p.listed.IsZero() || len(p.lookup) > 0 {
		return false
	}
	for _, s := range p.shards {
		if !p.cps[s.id].finished && !p.drainLeaves(s) && !p.gone[s.id] {
			return false
		}
	}
	return true
}

// drainLeaves reports whether this drain run leaves s unread: it holds no
// record readable at the run's start that the run has not committed
// (docs/exactly-once.md, "The drain's promise"). That is so when the run
// read s to an empty page (every record readable then, so every one
// readable at its start, was before that page and is committed), whether
// s closed since or not, provided a DescribeStream answer of the run
// showed s open (a page that also lists a child of s shows nothing:
// shard.disputed): its close, and so its children, came after the run's
// start. A shard drained and not known open that is now listed closed (a
// shard learned from a lease item, which says nothing of its close) is
// read again, to its end: its children may hold older records. It is so
// too when s was made after the run's start (late: a descendant of a
// shard shown open), whose records were all written after it. A live
// poller leaves nothing.
func (p *Poller) drainLeaves(s shard) bool {
	return p.drained[s.id] && (p.seenOpen[s.id] || !s.closed) || p.late[s.id]
}

// noteShards records, for a drain run, what shards given by a
// DescribeStream answer of the run (open: a listing or a CHILD_SHARDS
// lookup) or learned from lease items (open false: a lease item says
// nothing of a close) tell of its horizon: a shard shown open closes, if
// ever, after the run's start, so its children are made after it; so are
// their descendants.
func (p *Poller) noteShards(shards []shard, open bool) {
	if !p.cfg.Drain {
		return
	}
	if p.seenOpen == nil {
		p.seenOpen, p.late = map[string]bool{}, map[string]bool{}
	}
	if open {
		for _, s := range shards {
			// A page that lists a child of s does not show s open, whatever
			// it says (shard.disputed; review, session 23, D1).
			if !s.closed && !s.disputed {
				p.seenOpen[s.id] = true
			}
		}
	}
	for changed := true; changed; {
		// Parents list before their children (a listing is sorted by
		// starting sequence number), but nothing here needs it.
		changed = false
		for _, s := range shards {
			if !p.late[s.id] && s.parent != "" && (p.seenOpen[s.parent] || p.late[s.parent]) {
				p.late[s.id], changed = true, true
			}
		}
	}
}

// pass is one round of the coordinator: renew (when renew is set), list
// shards when due, read leases and checkpoints, take a fair share, start
// readers. A drain reads every lease and checkpoint of the stream (it
// wants every shard: its share is the stream); a live poller's pass is
// sharePass, which reads what its share needs.
func (p *Poller) pass(ctx context.Context, renew bool) error {
	if !p.cfg.Drain {
		return p.sharePass(ctx, renew)
	}
	defer p.gauges()
	if renew {
		p.renewAll(ctx)
	}
	if p.registryReads == 0 {
		// The registry first at the first pass: the drain's listing (no
		// deadline: the whole stream at once) is paced at its share of
		// the fleet it reads, not at the whole rate beside it (review of
		// session 28, S28-W1).
		p.readRegistry(ctx)
		if p.superseded.Load() != nil {
			return nil
		}
	}
	if ok, err := p.discover(ctx); !ok || err != nil {
		return err
	}
	// The registry says which owners keep their leases by heartbeat, whose
	// leases are judged by their beat (available).
	p.readRegistry(ctx)
	if p.superseded.Load() != nil {
		return nil // a live poller of this drain's name: Run stops (HB6)
	}
	return p.readAllAndAssign(ctx)
}

// discover looks up the children of the shards finished since the last
// pass and lists the whole stream when due. ok is false when the stream
// was never listed yet (nothing to do until it is); the error is the
// stream's end.
func (p *Poller) discover(ctx context.Context) (ok bool, err error) {
	p.shareDescribe()
	p.store.pace.setPollers(p.livePollers())
	// The children are looked up when no listing is due, and also while a
	// listing is under way across rounds (paced by the stream's
	// DescribeStream rate, it keeps the shards of its last complete
	// listing meanwhile): before, they waited for it to complete, and a
	// listing longer than the discover interval is due again as soon as it
	// completes (its time is its first page's), so none was ever looked up
	// (review, session 17, hole S17-D1).
	if len(p.lookup) > 0 && ((!p.forceList && !p.listDue()) || p.listing.seen != nil) {
		p.lookupChildren(ctx)
	}
	if p.forceList || p.listDue() {
		// The renewals wait for this pass: a listing throttled by the
		// stream's DescribeStream rate pauses in time for the next ones and
		// goes on from its page at the next pass.
		var until time.Time
		if len(p.held) > 0 || !p.cfg.Drain {
			// A live poller holding nothing pauses too: its heartbeat in
			// the worker registry is due at the next round, and a poller
			// whose heartbeat stops for a lease duration is not counted
			// in the others' share (the fleet benchmark at 1,000 shards:
			// pollers listing 71 pages at start looked gone to the first
			// one done, which took 581 leases).
			until = time.Now().Add(p.cfg.renewInterval() / 2)
			if p.newKids != nil && !p.listed.IsZero() {
				// At a reader's end (endPass) a listing under way goes on
				// only with the pages whose turn comes at once: paced at
				// the poller's share of DescribeStream's rate (one page a
				// second at 8 pollers), a page waited for at every reader's
				// end held the coordinator, and the next reader ends, the
				// children's takes and the renewals behind them, up to
				// half a renewal interval each. The rounds go on with it.
				until = time.Now().Add(min(endListWait, p.cfg.renewInterval()/2))
			}
		}
		listedAt := p.listing.started
		if listedAt.IsZero() {
			listedAt = time.Now()
		}
		shards, status, err := p.listing.run(ctx, p.streams, p.describe, p.cfg.StreamARN, until)
		var nf *streamtypes.ResourceNotFoundException
		for i := 1; err != nil && !errors.As(err, &nf) && !errors.Is(err, errListingPaused) && i < readAttempts && ctx.Err() == nil; i++ {
			// A failed read is retried at once (a pass is LeaseDuration/3
			// away: at start, that is the whole start delayed).
			pause(ctx, i)
			listedAt = time.Now()
			shards, status, err = p.listing.run(ctx, p.streams, p.describe, p.cfg.StreamARN, until)
		}
		switch {
		case errors.As(err, &nf):
			return false, fmt.Errorf("stream %s no longer exists: %w", p.cfg.StreamARN, err)
		case errors.Is(err, errListingPaused):
			p.log.Debug("listing shards paused (throttled); going on at the next pass", "shards_so_far", len(p.listing.shards))
			if p.listed.IsZero() {
				return false, nil
			}
			// Go on with the shards listed before.
		case err != nil:
			if ctx.Err() == nil {
				p.log.Warn("listing shards failed; retrying at the next pass", "error", err.Error())
			}
			if p.listed.IsZero() {
				return false, nil
			}
			// Go on with the shards listed before.
		default:
			if status == streamtypes.StreamStatusDisabled && len(p.shards) == 0 {
				p.log.Warn("the stream is disabled")
			}
			p.shards, p.listed, p.listDone, p.forceList = shards, listedAt, time.Now(), false
			if !p.listedOnce.Swap(true) {
				// Weight 1 from now on; the announcement is removed by a
				// heartbeat at once (the others count it until they read
				// that: more than it weighs, never less).
				p.shareDescribe()
				select {
				case p.ackNow <- struct{}{}:
				default:
				}
			}
			p.noteShards(shards, true)
			// The list has every child listed so far: those of the shards
			// still to be looked up are registered for the other pollers. A
			// shard whose children it does not have yet stays to be looked
			// up, as lookupChildren keeps it (AWS may list a closed shard's
			// children a moment after it closes, and a listing paused
			// across passes read its pages before): dropping it left them
			// to the next listing (review, session 15).
			if len(p.lookup) > 0 {
				parents := map[string]bool{}
				for _, id := range p.lookup {
					parents[id] = true
				}
				var kids []shard
				found := map[string]bool{}
				for _, s := range shards {
					if parents[s.parent] {
						kids = append(kids, s)
						found[s.parent] = true
					}
				}
				known := make(map[string]bool, len(shards))
				for _, s := range shards {
					known[s.id] = true
				}
				p.registerChildren(ctx, kids, known)
				var again []string
				for _, id := range p.lookup {
					if !found[id] && p.childless(id) {
						again = append(again, id)
					} else {
						delete(p.lookupSince, id)
					}
				}
				p.lookup = again
			}
			for _, s := range shards {
				// A shard the stream lists again is not gone (the check
				// that marked it was answered wrong): read it. Only a
				// listing begun after the mark says so: every page of this
				// one was read at listedAt or later, and one begun before
				// the mark may have listed the shard on a page read before
				// DescribeStream stopped listing it (a listing paced across
				// rounds): undoing the mark then opened the shard again and
				// found it gone again, a GetShardIterator and a
				// DescribeStream per such shard per listing, and its
				// children waited for the second mark (review of session
				// 17, hole S17-D4). A shard wrongly marked is read again
				// once a listing begun after the mark lists it: the next
				// one, due a discover interval after this one completes.
				if p.gone[s.id] && !listedAt.Before(p.goneAt[s.id]) {
					p.log.Warn("a shard marked gone is listed again; reading it", "shard", s.id)
					delete(p.gone, s.id)
					delete(p.goneAt, s.id)
				}
			}
		}
	}
	return !p.listed.IsZero(), nil
}

// listDue reports whether the next listing of the whole stream is due:
// DiscoverInterval after the last one completed. Counted from its first
// page (listed), a listing paced across rounds that outlasts the interval
// was due again the moment it completed, and the poller listed back to
// back, spending its whole share of the stream's DescribeStream rate on
// listings (review of session 17, hole S17-D2). listed keeps the first
// page's time for what needs it: a drain's "listed after the last
// reader's end" is conservative only by the first page.
func (p *Poller) listDue() bool {
	return p.listDone.IsZero() || time.Since(p.listDone) >= p.cfg.DiscoverInterval
}

// readAllAndAssign reads every lease and checkpoint of the stream, marks a
// fresh LATEST start, takes a share (a drain: everything) and starts
// readers.
func (p *Poller) readAllAndAssign(ctx context.Context) error {
	if !p.readAll(ctx) {
		return nil
	}
	if !p.stopping {
		p.assign(ctx)
		p.startReaders(ctx)
	}
	p.ready.Store(!p.stopping)
	return nil
}

// readAll reads every lease and checkpoint of the stream and marks a fresh
// LATEST start; it reports whether it read them.
func (p *Poller) readAll(ctx context.Context) bool {
	leases, cps, err := p.store.readAll(ctx, p.shards)
	for i := 1; err != nil && i < readAttempts && ctx.Err() == nil; i++ {
		pause(ctx, i)
		leases, cps, err = p.store.readAll(ctx, p.shards)
	}
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("reading leases failed; retrying at the next pass", "error", err.Error())
		}
		return false
	}
	if p.cfg.StartPosition == Latest && len(cps) == 0 && len(p.shards) > 0 {
		// A fresh start at LATEST: skip closed shards, open the others at
		// LATEST, and remember it in the table for restarts.
		for _, s := range p.shards {
			if err := p.store.markStart(ctx, s.id, s.closed); err != nil && !errors.Is(err, errConditionFailed) {
				p.log.Warn("recording the LATEST start failed", "shard", s.id, "error", err.Error())
				return false
			}
		}
		if leases, cps, err = p.store.readAll(ctx, p.shards); err != nil {
			return false
		}
	}
	p.leases, p.cps = leases, cps
	p.learnShards()
	p.healthy.Store(time.Now().UnixNano())
	p.observe()
	return true
}

// learnShards adds the shards that lease items describe and the last
// listing did not have: children another poller registered when it
// finished their parent (lookupChildren), so that a pass between two
// listings of the whole stream costs what the new shards cost. A shard
// read to its end is not added back.
func (p *Poller) learnShards() {
	known := make(map[string]bool, len(p.shards))
	for _, s := range p.shards {
		known[s.id] = true
	}
	var learned []shard
	for id, l := range p.leases {
		if l.start == "" || known[id] || p.finishedKnown(id) || p.gone[id] {
			continue
		}
		if !l.updated.IsZero() && time.Since(l.updated) > table.LeaseStale {
			continue // a shard gone with its records (table.LeaseStale)
		}
		p.shards = append(p.shards, shard{id: id, parent: l.parent, start: l.start})
		learned = append(learned, p.shards[len(p.shards)-1])
		known[id] = true
	}
	p.noteShards(learned, false)
}

// lookupChildren adds the children of the shards finished since the last
// pass to the shard list, with one DescribeStream per shard filtered to
// its children (ShardFilter CHILD_SHARDS) rather than a listing of the
// whole stream, which at AWS's scale is thousands of shards read at every
// shard's end. A throttled lookup waits for the next pass; a stream that
// ignores or refuses the filter, and any other failure, fall back to
// listing the whole stream in this pass.
func (p *Poller) lookupChildren(ctx context.Context) {
	if p.noFilter {
		p.forceList = true
		return
	}
	// Bounded in time like the takes: one call and the registrations of
	// its children per finished shard, one after another, held a poller's
	// coordinator past its leases' life at 1,000 shards (every lease of a
	// poller expired at once); the rest wait for the next pass.
	until := time.Now().Add(p.cfg.renewInterval() / 2)
	if next := p.lastRenew.Add(p.cfg.renewInterval()); !p.lastRenew.IsZero() && next.Before(until) {
		until = next
	}
	p.lookupChildrenUntil(ctx, until)
}

// lookupChildrenUntil is lookupChildren's lookups, made until until (a
// stop's are bounded by the stop's budget: stopKids); those not made stay
// in p.lookup.
func (p *Poller) lookupChildrenUntil(ctx context.Context, until time.Time) {
	known := make(map[string]bool, len(p.shards))
	for _, s := range p.shards {
		known[s.id] = true
	}
	var again []string
	defer func() { p.lookup = append(p.lookup, again...) }()
	asked := map[string]bool{}
	for len(p.lookup) > 0 && time.Now().Before(until) {
		if asked[p.lookup[0]] {
			p.lookup = p.lookup[1:] // the same shard twice in the list: one lookup
			continue
		}
		if err := p.describe.wait(ctx, until); err != nil {
			// This poller's share of the stream's rate is spent for this
			// pass: the lookups go on at the next one.
			return
		}
		asked[p.lookup[0]] = true
		kids, err := listChildren(ctx, p.streams, p.cfg.StreamARN, p.lookup[0])
		p.describe.answered(err)
		if errors.Is(err, errNoShardFilter) {
			p.log.Info("the stream does not filter shards by parent; listing it whole at shard ends", "error", err.Error())
			p.noFilter = true
		}
		var le *streamtypes.LimitExceededException
		if errors.As(err, &le) {
			// Throttled (DescribeStream's rate, shared by every poller): the
			// lookups wait for the next pass. Listing the whole stream
			// instead asks the same rate for every page of it (71 at 7,055
			// shards): the fleet benchmark's 100-shard run turned 73
			// throttled lookups into as many listings, 2,805 of its 3,596
			// DescribeStream calls refused.
			p.log.Debug("looking up a finished shard's children throttled; again at the next pass", "shard", p.lookup[0], "pending", len(p.lookup))
			return
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, errNoShardFilter) {
				p.log.Warn("looking up a finished shard's children failed; listing the stream", "shard", p.lookup[0], "error", err.Error())
			}
			p.forceList = true
			return
		}
		if len(kids) == 0 && p.childless(p.lookup[0]) {
			again = append(again, p.lookup[0])
		}
		p.registerChildren(ctx, kids, known)
		if len(kids) > 0 {
			delete(p.lookupSince, p.lookup[0])
		}
		p.lookup = p.lookup[1:]
	}
}

// livePollers is the pollers sharing the stream as this one last read the
// worker registry: itself and the others counted (workerView.counted: a
// beat seen moving, or first read less than half a lease duration ago;
// a drain reads no registry: 1).
func (p *Poller) livePollers() int {
	n := 1
	for _, w := range p.workers {
		if w.counted(p.cfg.LeaseDuration) {
			n++
		}
	}
	return n
}

// childrenListed reports whether the last listing showed id closed and
// had its children: a shard's children appear when it closes (a roll, or
// a split's two at once), so a shard closed before the listing needs no
// CHILD_SHARDS lookup when the listing has them (at start, a day of closed
// shards: one lookup each, against DescribeStream's 10 calls a second for
// the fleet, kept half the fleet benchmark's calls refused).
func (p *Poller) childrenListed(id string) bool {
	closed := false
	for _, s := range p.shards {
		if s.id == id {
			closed = s.closed
			break
		}
	}
	if !closed {
		return false
	}
	for _, s := range p.shards {
		if s.parent == id {
			return true
		}
	}
	return false
}

// childlessRetry is how long a finished shard found without children is
// looked up again at each pass.
const childlessRetry = 2 * time.Minute

// childless notes that the finished shard id was looked up (by
// CHILD_SHARDS or in a listing) and found without children, and reports
// whether to look it up again at the next pass: not listed yet, or none
// (a stream disabled), so again for childlessRetry, then left to the next
// listing. A drain lists the whole stream before it exits anyway.
func (p *Poller) childless(id string) bool {
	if p.lookupSince == nil {
		p.lookupSince = map[string]time.Time{}
	}
	since, ok := p.lookupSince[id]
	if !ok {
		since = time.Now()
		p.lookupSince[id] = since
	}
	if time.Since(since) < childlessRetry && !p.cfg.Drain {
		return true
	}
	delete(p.lookupSince, id)
	return false
}

// registerChildren adds kids to the shard list and registers each in a
// lease item: the other pollers learn of them from it, without listing the
// whole stream.
func (p *Poller) registerChildren(ctx context.Context, kids []shard, known map[string]bool) {
	p.noteShards(kids, true)
	for _, k := range kids {
		if !known[k.id] {
			known[k.id] = true
			p.shards = append(p.shards, k)
		}
		l, ok, err := p.store.register(ctx, k)
		if err != nil && ctx.Err() == nil {
			p.writeFailed(err, "registering a child shard failed; the other pollers find it at their next listing", "shard", k.id)
		}
		if ok {
			p.leases[k.id] = l
		}
		if err != nil && p.unregistered != nil {
			p.unregistered[k.id] = true
		}
		if p.newKids != nil {
			p.newKids[k.id] = true
		}
	}
}

// observe records lease state changes for expiry detection.
func (p *Poller) observe() {
	now := time.Now()
	for _, l := range p.leases {
		p.observeLease(l, now)
	}
}

// observeLease records that l was read at now.
func (p *Poller) observeLease(l lease, now time.Time) {
	o, ok := p.seen[l.shard]
	if !ok || o.counter != l.counter || o.owner != l.owner {
		o = observation{owner: l.owner, counter: l.counter, at: now}
	}
	o.last = now
	p.seen[l.shard] = o
}

// available reports whether this poller may take l without asking: it
// does not exist yet, is free, belonged to this process or was handed to
// its name, or has not been renewed for LeaseDuration. A lease of this
// owner name taken by another incarnation (a previous life, or another
// live process given the same name) is judged as another owner's: by a
// live poller with foreignExpired (its claim of the worker item is the
// fence), by a drain by the registry's item of its name (HB6).
func (p *Poller) available(l lease) (ok bool, expired bool) {
	switch {
	case !l.exists || l.owner == "":
		return true, false
	case l.owner == p.cfg.Owner && !p.foreign(l):
		return true, true
	case l.owner == p.cfg.Owner && !p.cfg.Drain:
		ok := p.foreignExpired(l)
		if !ok && p.foreignWait.CompareAndSwap(false, true) {
			// Once per process: a restart under a stable name (a
			// StatefulSet pod, a systemd unit) otherwise waits about two
			// lease durations for its previous life's leases in silence.
			p.log.Info("leases of this owner name are held by another process of it (a previous life, or a second process given the same name): taking them once they stand unchanged for a lease duration after this process's claim",
				"shard", l.shard, "their_incarnation", l.incarnation, "incarnation", p.inc, "lease_duration", p.cfg.LeaseDuration.String())
		}
		return ok, true
	}
	o, seen := p.seen[l.shard]
	if p.judgesByRegistry() {
		w, registered := p.workers[l.owner]
		switch {
		case registered && w.heartbeat && w.live(p.cfg.LeaseDuration):
			// A heartbeat owner's lease is live while its beat moves.
			return false, true
		case registered && w.heartbeat && (l.incarnation == "" || w.inc == "" || l.incarnation == w.inc):
			// Expired once its beat was read unchanged at two reads
			// LeaseDuration apart, or it left (claim H1; takeLease fences
			// it before the take).
			return true, true
		case registered && w.heartbeat:
			// Its beat stands still, but the lease was taken by another
			// process of the name than the one whose beat it is: a drain
			// given that name (it never writes the item, and renews its
			// lease items), or an earlier process, whose writes are
			// refused since the item's claim. Its beat says nothing of
			// that holder: the counter rule below (review of session 20,
			// S20-R2: a drain under the name of a poller that left had
			// its leases taken by the others, each read by both until the
			// drain's next renewal failed).
		case !registered:
			// Not in the registry as last read: a drain, a poller of a
			// version before the registry — or a heartbeat poller whose
			// item was deleted under it (the review of the heartbeat, HB4),
			// whose heartbeats then fail (HeartbeatWorkerAgain) and whose
			// validity ends within a lease duration of its last one. So
			// the owner must have been absent from the registry reads for
			// a lease duration: since the first read without it, or, never
			// seen in it, since this lease state was first seen (a read
			// older than that state may predate a heartbeat poller's
			// registration).
			since, gone := p.absent[l.owner]
			if !gone {
				since = o.at
			}
			if (!gone && !seen) || p.registryAt.Sub(since) < p.cfg.LeaseDuration {
				return false, true
			}
		}
	}
	// A poller that renews every lease (or one that never registers: a
	// drain): expired when read with the same counter at two reads
	// LeaseDuration apart (a lease read once is not taken on the strength
	// of the time since: it may have been renewed after that read). The
	// first of them no earlier than the registry read that showed the
	// owner renewing: while its item said heartbeat, its counters stood
	// still whatever its validity, and a process of its name that renews
	// (a restart in --lease-mode renew, a second process) turns its item
	// into a renewing owner's at its claim, while the heartbeating one
	// reads on until its validity ends, within a lease duration of the
	// claim (review of session 20, S20-R1).
	from := o.at
	if w, registered := p.workers[l.owner]; registered && p.judgesByRegistry() && w.renewsFrom.After(from) {
		from = w.renewsFrom
	}
	return seen && o.owner == l.owner && o.counter == l.counter && o.last.Sub(from) >= p.cfg.LeaseDuration, true
}

// finishedKnown reports whether this poller knows id was read to its end:
// its checkpoint says so (read, or finished by this poller), or its lease
// does (the release that follows the checkpoint's mark).
func (p *Poller) finishedKnown(id string) bool {
	return p.cps[id].finished || p.leases[id].finished
}

// eligible returns the shards that can be read now: not finished, not
// left by this drain run (drainLeaves), and every parent finished (or no
// longer listed).
func (p *Poller) eligible() []shard {
	listed := make(map[string]bool, len(p.shards))
	for _, s := range p.shards {
		listed[s.id] = true
	}
	var out []shard
	for _, s := range p.shards {
		if p.finishedKnown(s.id) || p.drainLeaves(s) || p.gone[s.id] || p.givenUp(s.id) {
			continue
		}
		if s.parent != "" && listed[s.parent] && !p.finishedKnown(s.parent) && !p.gone[s.parent] {
			continue
		}
		out = append(out, s)
	}
	return out
}

// assign takes this poller's fair share of the eligible shards: free and
// expired leases first; when none is left and another owner holds more
// than its share, it asks that owner to hand one over. A drain run wants
// every shard.
func (p *Poller) assign(ctx context.Context) {
	elig := p.eligible()
	p.forgetTold(elig)
	if len(elig) == 0 {
		return
	}
	owners := map[string]int{p.cfg.Owner: 0}
	asked := false
	for _, s := range elig {
		l, ok := p.leases[s.id]
		if !ok {
			continue
		}
		if free, _ := p.available(l); !free {
			owners[l.owner]++
		}
		if l.pending != "" {
			if _, ok := owners[l.pending]; !ok {
				owners[l.pending] = 0
			}
			asked = asked || l.pending == p.cfg.Owner
		}
	}
	// A fair share is floor or ceil of the eligible shards per owner:
	// each poller takes free leases up to the ceiling (target), and asks
	// for one when it holds less than the floor (lo) or another holds more
	// than the ceiling. Moving one lease from an owner above the floor to
	// one below it never puts another below the floor, so asks settle.
	target := (len(elig) + len(owners) - 1) / len(owners)
	lo := len(elig) / len(owners)
	if p.cfg.Drain {
		target = len(elig)
	}
	var candidates []lease
	for _, s := range elig {
		if _, mine := p.held[s.id]; mine {
			continue
		}
		l, ok := p.leases[s.id]
		if !ok {
			l = lease{shard: s.id}
		}
		if l.start == "" {
			// Taking it describes the shard in its lease item.
			l.parent, l.start = s.parent, s.start
		}
		if free, _ := p.available(l); free {
			candidates = append(candidates, l)
		}
	}
	rand.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
	// The takes run one after another in the coordinator's loop, which
	// also renews the leases: a lease is valid from its take, so a pass
	// taking hundreds (a poller's share at 1,000 shards and more) on a slow
	// table outlived the first ones it took, and they expired at the next
	// renewal (the fleet benchmark: 80 to 249 leases of a poller at once).
	// The rest are taken at the next passes.
	// In concurrent batches (takeLeases), each no larger than what the
	// share still wants.
	until := time.Now().Add(p.cfg.renewInterval() / 2)
	for len(candidates) > 0 {
		if len(p.held) >= target || ctx.Err() != nil || !time.Now().Before(until) {
			return
		}
		n := min(len(candidates), renewParallel, target-len(p.held))
		p.takeLeases(ctx, candidates[:n])
		candidates = candidates[n:]
	}
	// This poller's requests the leases still show: their heartbeat
	// owners told again when an ask may have been lost (retell).
	for _, s := range elig {
		if l, ok := p.leases[s.id]; ok && l.pending == p.cfg.Owner && l.owner != "" && l.owner != p.cfg.Owner {
			p.retell(ctx, l)
		} else {
			delete(p.askedAt, s.id)
		}
	}
	if len(p.held) >= target || (asked && !p.cfg.Drain) {
		return
	}
	// No free lease left: ask the busiest owner above its share (above the
	// ceiling, or above the floor while this poller is below it; a drain
	// run asks every owner) to hand one over.
	// Asks whose write failed after their request landed: the lease's
	// pendingOwner is set, so the loop below skips it, and its heartbeat
	// owner, which reads none of its lease items, learns of it only here.
	for shard, owner := range p.unasked {
		if ctx.Err() != nil {
			return
		}
		if err := p.store.ask(ctx, owner, shard); err != nil {
			p.writeFailed(err, "telling a lease's owner of the request failed again; asked again at the next pass", "shard", shard, "owner", owner)
			continue
		}
		delete(p.unasked, shard)
	}
	var ask []lease
	for _, s := range elig {
		l, ok := p.leases[s.id]
		if !ok || l.owner == "" || l.owner == p.cfg.Owner || l.pending != "" {
			continue
		}
		if p.cfg.Drain || owners[l.owner] > target || (len(p.held) < lo && owners[l.owner] > lo) {
			ask = append(ask, l)
		}
	}
	sort.SliceStable(ask, func(i, j int) bool { return owners[ask[i].owner] > owners[ask[j].owner] })
	if !p.cfg.Drain && len(ask) > 1 {
		ask = ask[:1]
	}
	for _, l := range ask {
		if err := p.store.request(ctx, l, p.cfg.Owner); err != nil {
			if !errors.Is(err, errConditionFailed) && ctx.Err() == nil {
				p.writeFailed(err, "asking for a lease failed", "shard", l.shard, "owner", l.owner)
			}
			continue
		}
		if w, ok := p.workers[l.owner]; ok && w.heartbeat {
			// A heartbeat owner reads none of its lease items: tell it in
			// its worker item too.
			p.askedAt[l.shard] = time.Now()
			if err := p.store.ask(ctx, l.owner, l.shard); err != nil {
				p.unasked[l.shard] = l.owner
				if ctx.Err() == nil {
					p.writeFailed(err, "telling a lease's owner of the request failed; asked again at the next pass", "shard", l.shard, "owner", l.owner)
				}
			}
		}
		p.m.LeaseEvents.WithLabelValues(LeaseRequested).Inc()
		p.log.Info("lease requested", "shard", l.shard, "from", l.owner)
	}
}

// retell tells a heartbeat owner again, in its worker item, of a request
// of this poller its lease l still shows (pendingOwner = this poller), a
// renewal interval after it last did. The owner reads none of its lease
// items, and an ask can be lost after the request landed: the owner,
// answering an ask for a lease it did not hold yet (an offer in transit),
// clears it, and that clear also takes an ask written again meanwhile
// (the asks are a set); the lease keeps the request, so this poller asked
// no more, and a drain waited for the lease for good (review, session 25,
// S25-A1). An ask is a hint: the owner re-reads the lease before it hands
// it over, so one told twice costs a read and a clear.
func (p *Poller) retell(ctx context.Context, l lease) {
	w, ok := p.workers[l.owner]
	if !ok || !w.heartbeat {
		return
	}
	if at, ok := p.askedAt[l.shard]; ok && time.Since(at) < p.cfg.renewInterval() {
		return
	}
	if _, failed := p.unasked[l.shard]; failed {
		return // written again by the loop over unasked
	}
	p.askedAt[l.shard] = time.Now()
	if err := p.store.ask(ctx, l.owner, l.shard); err != nil {
		delete(p.askedAt, l.shard)
		if ctx.Err() == nil {
			p.writeFailed(err, "telling a lease's owner of the request again failed; told again at the next pass", "shard", l.shard, "owner", l.owner)
		}
		return
	}
	p.log.Info("lease request told again", "shard", l.shard, "owner", l.owner)
}

// forgetTold forgets when this poller told an owner of its request for a
// shard no longer eligible (finished, gone, left by a drain): the loop
// before retell forgets only eligible ones, and the entries of shards that
// left the set while a request was last seen on them stayed for good
// (review of retell, session 25, S25-R4).
func (p *Poller) forgetTold(elig []shard) {
	if len(p.askedAt) == 0 {
		return
	}
	in := make(map[string]bool, len(elig))
	for _, s := range elig {
		in[s.id] = true
	}
	for id := range p.askedAt {
		if !in[id] {
			delete(p.askedAt, id)
		}
	}
}

// takeAttempt is one take's store calls, made concurrently with others:
// the take, and the re-read after it failed.
type takeAttempt struct {
	l       lease
	expired bool
	sent    time.Time
	taken   lease
	cur     lease
	reread  bool
	err     error
}

// takeLeases takes ls (as last seen) for this poller (a take whose answer
// was lost is recognised by a re-read: the lease at seen + 1 in this
// owner's name; a re-read after a failed condition updates what this
// poller knows of the lease): the owners of
// expired ones fenced first (in turn, once per owner), then the takes
// and their re-reads concurrently (at most renewParallel at once: a
// poller taking its share of 1,000 shards, or the leases handed to it at
// a join, does not wait for each in turn), their results applied in turn.
// A live poller not born yet (incarnation.go) takes nothing, nor does a
// heartbeat poller whose validity has ended. It returns how many are now
// held, and the shards whose take is not known done: those the write
// pacer did not send (errWriteDeferred: its turn came after the round's
// deadline; review of session 23, S23-P1) and those whose outcome is
// unknown (no answer, and no re-read to tell: the take may have landed;
// review of the givers' count, S23-C1), which takeOffers leaves offered.
func (p *Poller) takeLeases(ctx context.Context, ls []lease) (int, map[string]bool) {
	if !p.cfg.Drain && p.born.Load() == 0 {
		// A live poller takes nothing before one of its claims of its
		// worker item was answered: only a process holding no lease may
		// claim the item unconditionally, and a claim that lands late
		// (after another process of its name claimed and took over) must
		// bring no lease with it (HB6, claim H6).
		return 0, nil
	}
	if p.heartbeats() && (p.fencedOut.Load() || !time.Now().Before(fromMono(p.beatUntil.Load()))) {
		// A heartbeat poller whose validity has ended (paused: no
		// heartbeat answered within a lease duration; fenced, its rejoin
		// not landed yet) could read none of what it took, and the others
		// take a lease of its only after fencing it: every lease it took
		// would wait unread for that (the review of session 19, R19-2's
		// leftover). It takes nothing until a heartbeat lands. Offers
		// read meanwhile are cleared (takeOffers); a lease handed over to
		// its name stays in its name, which the others judge by its beat,
		// and takeShare takes it at once, over the share if need be, once
		// a heartbeat lands (HB6-L1; review of session 20).
		return 0, nil
	}
	var tries []*takeAttempt
	// The fences of this call, one per owner: a fence covers the lease
	// states read before it landed (the owner had not rejoined then), not
	// a lease its owner took after rejoining, which a fence remembered
	// from an earlier call would let this poller take from a live owner
	// that reads none of its lease items (the review of the heartbeat,
	// HB1). Every lease of ls was read before this call.
	fencedNow := map[string]bool{}
	for _, l := range ls {
		_, expired := p.available(l)
		// A drain fences a lease of its own name taken by another
		// incarnation like another owner's: it has no claim (HB6).
		if expired && (l.owner != p.cfg.Owner || p.cfg.Drain && p.foreign(l)) {
			ok, done := fencedNow[l.owner]
			if !done {
				ok = p.fence(ctx, l.owner)
				fencedNow[l.owner] = ok
			}
			if !ok {
				continue
			}
		}
		tries = append(tries, &takeAttempt{l: l, expired: expired})
	}
	sem := make(chan struct{}, renewParallel)
	var wg sync.WaitGroup
	for _, a := range tries {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			a.sent = time.Now() // the validity counts from the send time
			a.taken, a.err = p.store.take(ctx, a.l, p.cfg.Owner, p.inc, p.cfg.LeaseDuration)
			if a.err != nil && ctx.Err() == nil && !errors.Is(a.err, errWriteDeferred) {
				if cur, rerr := p.store.readLease(ctx, a.l.shard); rerr == nil {
					a.cur, a.reread = cur, true
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	var deferred map[string]bool
	for _, a := range tries {
		if p.applyTake(a) {
			n++
		} else if errors.Is(a.err, errWriteDeferred) || unknown(a) {
			if deferred == nil {
				deferred = map[string]bool{}
			}
			deferred[a.l.shard] = true
		}
	}
	return n, deferred
}

// unknown reports whether a's take failed with an outcome nobody told:
// no answer (not a failed condition) and no re-read. It may have landed:
// the lease is then in this poller's name and incarnation, held by
// nobody, and only a later take (of the offer left) or the share once
// listed reads it.
func unknown(a *takeAttempt) bool {
	return a.err != nil && !a.reread && !errors.Is(a.err, errConditionFailed) && !errors.Is(a.err, errWriteDeferred)
}

// applyTake records the outcome of a take: held, its answer lost but
// landed (the lease at seen + 1 in this owner's name), or not.
func (p *Poller) applyTake(a *takeAttempt) bool {
	l, taken, err := a.l, a.taken, a.err
	if err != nil && a.reread {
		// A failed condition or an unknown outcome: the lease at
		// seen + 1 in this owner's name and this process's incarnation
		// is this take, its answer lost (another process given the same
		// name writes its own: HB6).
		if cur := a.cur; cur.owner == p.cfg.Owner && cur.counter == l.counter+1 && cur.incarnation == p.inc {
			p.m.LeaseLosses.WithLabelValues(LossLostAnswer).Inc()
			p.log.Info("lease take landed, its answer lost", "shard", l.shard, "counter", cur.counter, "error", err.Error())
			taken, err = cur, nil
		} else {
			p.leases[l.shard] = cur
			p.observeLease(cur, time.Now())
		}
	}
	if err != nil {
		if !errors.Is(err, errConditionFailed) && !errors.Is(err, context.Canceled) && !errors.Is(err, errWriteDeferred) {
			p.log.Warn("taking lease failed", "shard", l.shard, "error", err.Error())
		}
		return false
	}
	event := LeaseAcquired
	if a.expired && (l.owner != p.cfg.Owner || p.foreign(l)) {
		event = LeaseTakenOver
	}
	p.m.LeaseEvents.WithLabelValues(event).Inc()
	p.log.Info("lease "+event, "shard", l.shard, "previous_owner", l.owner, "counter", taken.counter)
	p.leases[l.shard] = taken
	p.hold(taken, a.sent)
	return true
}

// fence makes sure owner, whose lease this poller is about to take over,
// can no longer extend its leases: a heartbeat owner's worker item is
// fenced at the beat this poller saw unchanged (claim H1), at every
// takeLeases call that takes one of its leases over; a poller that renews every lease needs no fence (its lease's
// counter is the condition). It reports whether the take may go on.
func (p *Poller) fence(ctx context.Context, owner string) bool {
	w, ok := p.workers[owner]
	if !ok || !w.heartbeat || !p.judgesByRegistry() {
		return true
	}
	if err := p.store.fence(ctx, owner, w.beat); err != nil {
		if errors.Is(err, errConditionFailed) {
			// It heartbeated since: alive; the next registry read says so.
			p.log.Info("a poller thought gone heartbeated; its leases are left to it", "owner", owner, "beat", w.beat)
			w.at = time.Now()
			p.workers[owner] = w
		} else if ctx.Err() == nil && !errors.Is(err, errWriteDeferred) {
			p.log.Warn("fencing a gone poller failed; its leases are taken at a later round", "owner", owner, "error", err.Error())
		}
		return false
	}
	if b, done := p.fenced[owner]; !done || b != w.beat {
		// Counted once per owner and beat (fenced again at each takeLeases
		// call: the same write at the same beat).
		p.fenced[owner] = w.beat
		p.m.LeaseEvents.WithLabelValues(LeaseFenced).Inc()
		p.log.Info("poller fenced: its heartbeat stopped for a lease duration; its leases are taken over", "owner", owner, "beat", w.beat)
	}
	return true
}

// renewsLeases reports whether this poller renews every lease it holds at
// each round: a drain, a poller in LeaseModeRenew, and a heartbeat poller
// while the registry shows a live poller that does not heartbeat.
func (p *Poller) renewsLeases() bool {
	return p.cfg.Drain || p.cfg.LeaseMode == LeaseModeRenew || p.compat.Load()
}

// judgesByRegistry reports whether this poller judges another owner's
// lease by the worker registry (a heartbeat owner's by its beat, fenced
// before the take: claim H1): every poller but a live one in
// LeaseModeRenew, which emulates the pollers before the heartbeat (the
// counter rule only). A drain judges by the registry whatever its
// LeaseMode: it never registers, so no heartbeat poller renews its leases
// for it (compat), and by the counter rule alone it took a live heartbeat
// owner's lease, whose counter never moves, a lease duration after its
// first read, with no fence: that owner read on beside it (the review of
// the late heartbeat, session 17, D1: `poller --drain` with
// LEDGER_LEASE_MODE=renew set for a rolling upgrade).
func (p *Poller) judgesByRegistry() bool { return p.cfg.Drain || p.cfg.LeaseMode != LeaseModeRenew }

// heartbeats reports whether this poller keeps its leases by its worker
// item's heartbeat.
func (p *Poller) heartbeats() bool { return !p.cfg.Drain && p.cfg.LeaseMode != LeaseModeRenew }

// validity is until when h's lease is this poller's. For a poller that
// renews every lease, its take's or last renewal's send time +
// LeaseDuration. For a heartbeat poller, its last landed heartbeat's
// (beatUntil), which extends every lease at once — and, while it renews
// every lease too (compat), the earlier of the two. Safe from any
// goroutine.
func (p *Poller) validity(h *holding) time.Time {
	own := fromMono(h.until.Load())
	if !p.heartbeats() {
		return own
	}
	beat := fromMono(p.beatUntil.Load())
	if !p.compat.Load() || own.After(beat) {
		return beat
	}
	return own
}

// setUntil sets h's own validity (validUntil, and until for the
// watchdog).
func (h *holding) setUntil(t time.Time) {
	h.validUntil = t
	h.until.Store(mono(t))
}

// epoch is the origin of the validities kept in atomics (beatUntil,
// holding.until): an instant with a monotonic clock reading, so that a
// validity stored as nanoseconds since it and read back (fromMono) is
// still measured on the monotonic clock. Stored as wall-clock Unix nanos
// (time.Unix) it lost that reading, and a wall clock stepped back by d
// (NTP, a VM's clock set after a resume) kept a reader d past its lease
// while the taker, measuring its lease duration on its monotonic clock,
// took it over (docs/exactly-once.md, "Review (adversarial, session 16):
// the worker heartbeat", HB3).
var epoch = time.Now()

// mono is t as nanoseconds since epoch, on the monotonic clock when t has
// a reading (every instant the poller makes from time.Now). Zero is
// "none": before any instant the poller measures.
func mono(t time.Time) int64 { return int64(t.Sub(epoch)) }

// fromMono is the instant n nanoseconds after epoch (mono's inverse),
// with a monotonic clock reading.
func fromMono(n int64) time.Time { return epoch.Add(time.Duration(n)) }

// watchdog cancels h's reader when its lease's validity ends (cancel), and
// returns when ctx (the reader's) ends first; a validity extended
// meanwhile (a heartbeat, a renewal) moves the deadline.
func (p *Poller) watchdog(ctx context.Context, h *holding, cancel context.CancelFunc) {
	for {
		d := time.Until(p.validity(h))
		if d <= 0 {
			cancel()
			return
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// hold records a lease just taken; its reader starts in startReaders.
func (p *Poller) hold(l lease, sent time.Time) {
	h := &holding{lease: l, stop: make(chan struct{})}
	p.held[l.shard] = h
	p.validate(h, sent)
}

// validate extends h's validity to sent + LeaseDuration: the lease's new
// counter was written by a request sent at sent, and no other poller takes
// it over before it has seen that counter unchanged for LeaseDuration.
func (p *Poller) validate(h *holding, sent time.Time) {
	h.renewed = sent
	h.setUntil(sent.Add(p.cfg.LeaseDuration))
}

// startReaders starts a reader for every held lease without one.
func (p *Poller) startReaders(ctx context.Context) {
	for id, h := range p.held {
		if h.running || h.lost || h.handoffTo != "" || time.Now().Before(h.retryAt) || !time.Now().Before(p.validity(h)) {
			continue
		}
		sh, ok := p.shard(id)
		if !ok {
			continue
		}
		start := TrimHorizon
		if cp := p.cps[id]; cp.seq == "" && cp.startAt == string(Latest) {
			start = Latest
		}
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		h.cancel = cancel
		h.stop = make(chan struct{})
		h.stopOnce = sync.Once{}
		go p.watchdog(rctx, h, cancel)
		h.running = true
		// A child of a shard this stream's consumers have read opens at its
		// own first record, so that records trimmed from its start are
		// seen (and counted) as lost rather than skipped unnoticed.
		parentRead := p.cps[sh.parent].exists || p.finishedKnown(sh.parent)
		atStart := start == TrimHorizon && sh.parent != "" && parentRead && sh.start != ""
		r := &reader{p: p, shard: sh, start: start, atStart: atStart, ctx: rctx, stop: h.stop, log: p.log.With("shard", id)}
		go func() { p.done <- r.run() }()
	}
}

func (p *Poller) shard(id string) (shard, bool) {
	for _, s := range p.shards {
		if s.id == id {
			return s, true
		}
	}
	return shard{}, false
}

// renewAll renews every held lease (renew). A renewal that finds another
// poller's write means the lease is lost: the reader is cancelled at once.
// A renewal that shows a hand-off request stops the reader gracefully; the
// lease goes to the asker once the batch in hand is committed.
func (p *Poller) renewAll(ctx context.Context) {
	p.lastRenew = time.Now()
	rctx := context.WithoutCancel(ctx)
	type result struct {
		id   string
		h    *holding
		l    lease
		sent time.Time
		err  error
	}
	var due []result
	p.checkPause()
	for id, h := range p.held {
		if h.lost {
			continue
		}
		if p.expired(h, time.Now()) {
			p.expire(id, h)
			continue
		}
		due = append(due, result{id: id, h: h})
	}
	if !p.renewsLeases() {
		// The heartbeat keeps them (registry): no lease item is written.
		return
	}
	// Renewals run concurrently (at most renewParallel at a time): one
	// after another, a poller holding hundreds of leases could not renew
	// them all within a lease's life (the fleet benchmark's 1,000 shards:
	// about 800 leases a poller expired over and over). Each touches only
	// its own holding; the results are applied below, in turn.
	sem := make(chan struct{}, renewParallel)
	var wg sync.WaitGroup
	for i := range due {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			due[i].l, due[i].sent, due[i].err = p.renew(rctx, due[i].id, due[i].h)
		}()
	}
	wg.Wait()
	for _, r := range due {
		id, h, l, sent, err := r.id, r.h, r.l, r.sent, r.err
		switch {
		case errors.Is(err, errLeaseTaken):
			h.lost = true
			p.m.LeaseEvents.WithLabelValues(LeaseLost).Inc()
			p.m.LeaseLosses.WithLabelValues(LossTaken).Inc()
			p.log.Warn("lease lost: another poller holds it; reader stopped", "shard", id, "error", err.Error())
			p.drop(id, h)
			continue
		case err != nil:
			p.log.Warn("renewing lease failed; will retry", "shard", id, "valid_for", time.Until(p.validity(h)).Round(time.Millisecond).String(), "error", err.Error())
			continue
		}
		h.lease = l
		p.leases[id] = l
		p.validate(h, sent)
		if l.pending != "" && l.pending != p.cfg.Owner && !p.cfg.Drain && !p.stopping && h.handoffTo == "" {
			h.handoffTo = l.pending
			p.log.Info("lease hand-off requested; finishing the batch in hand", "shard", id, "to", l.pending)
			if h.running {
				h.signalStop()
			} else {
				p.release(ctx, id, h)
			}
		}
	}
}

// stopReleases is how long after its shutdown timeout a stop's releases
// (and their offers) may go on, and the leave's own budget after them.
const stopReleases = 5 * time.Second

// renewParallel bounds the lease renewals a poller has in flight at once.
const renewParallel = 16

// errLeaseTaken means a renewal found another poller's write on the lease.
var errLeaseTaken = errors.New("lease taken by another poller")

// renew renews h's lease, retrying a renewal that fails for a retryable
// reason or with an unknown outcome while the lease is valid, for at most
// half a renewal interval (the next round goes on), so that one lease
// cannot hold the others up. A failed condition (a retry of an attempt
// that landed fails it too) is followed by a consistent re-read: the lease
// in this owner's name at the counter the renewal wrote is its own write,
// valid from the first attempt that could have written it
// (docs/exactly-once.md, "Leases"); any other write is another poller's
// (errLeaseTaken). It returns the lease as written and the send time its
// validity counts from.
func (p *Poller) renew(ctx context.Context, id string, h *holding) (lease, time.Time, error) {
	budget := time.Now().Add(p.cfg.renewInterval() / 2)
	// Within the lease's own validity: a heartbeat poller renewing in
	// compat keeps the lease while the heartbeat is late (expired).
	if v := fromMono(h.until.Load()); v.Before(budget) {
		budget = v
	}
	target := h.lease.counter + 1
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, p.cfg.LeaseDuration/3)
		sent := time.Now()
		l, err := p.store.renew(cctx, h.lease, p.cfg.LeaseDuration)
		cancel()
		if err == nil {
			return l, sent, nil
		}
		if h.unknownTo != target {
			// This attempt may have landed (an error: unknown outcome; a
			// failed condition: an SDK retry of it may have been refused by
			// its own first attempt).
			h.unknownTo, h.unknownSent = target, sent
		}
		if errors.Is(err, errConditionFailed) {
			rctx, cancel := context.WithTimeout(ctx, p.cfg.LeaseDuration/3)
			cur, rerr := p.store.readLease(rctx, id)
			cancel()
			switch {
			case rerr != nil:
				err = fmt.Errorf("%w; re-reading it: %w", err, rerr)
			case cur.owner == p.cfg.Owner && cur.counter == target && cur.incarnation == p.inc:
				p.m.LeaseLosses.WithLabelValues(LossLostAnswer).Inc()
				p.log.Info("lease renewal landed, its answer lost; lease kept", "shard", id, "counter", cur.counter)
				return cur, h.unknownSent, nil
			case cur.owner == p.cfg.Owner && cur.counter == h.lease.counter:
				// Unchanged: the condition cannot have failed on it; retry.
			default:
				return lease{}, sent, fmt.Errorf("%w: owner %q, counter %d (this poller's %d)", errLeaseTaken, cur.owner, cur.counter, h.lease.counter)
			}
		}
		wait := p.throttleBackoff(attempt)
		if !time.Now().Add(wait).Before(budget) {
			return lease{}, sent, fmt.Errorf("%d attempts: %w", attempt, err)
		}
		time.Sleep(wait)
	}
}

// expired reports whether h's lease may be another poller's at now
// without a fence of this one: for a poller that renews every lease, its
// own validity ended; for a heartbeat poller, only while it renews every
// lease too (compat: a renewing poller takes a lease whose counter it saw
// unchanged for a lease duration). A heartbeat poller's lease outlives
// its heartbeat's validity: nobody takes it before fencing this poller
// (claim H1), and a heartbeat that lands unfenced proves nobody did; its
// reader is stopped meanwhile (the watchdog) and started again once a
// heartbeat lands (checkPause; docs/exactly-once.md, "The worker
// heartbeat", "A late heartbeat").
func (p *Poller) expired(h *holding, now time.Time) bool {
	if p.heartbeats() && !p.compat.Load() {
		return false
	}
	return !now.Before(fromMono(h.until.Load()))
}

// checkPause notes, once a round, whether this heartbeat poller's
// validity has ended without a heartbeat landed (its readers stopped by
// their watchdogs, its leases kept: expired) or has come back (a
// heartbeat landed unfenced: its readers start again).
func (p *Poller) checkPause() {
	if !p.heartbeats() || len(p.held) == 0 && !p.paused {
		return
	}
	lapsed := !time.Now().Before(fromMono(p.beatUntil.Load()))
	switch {
	case lapsed && !p.paused:
		p.paused = true
		p.m.LeaseEvents.WithLabelValues(LeasePaused).Add(float64(len(p.held)))
		p.log.Warn("no heartbeat landed within the lease duration: reading stopped, leases kept until a heartbeat lands (or finds this poller fenced)", "leases", len(p.held))
	case !lapsed && p.paused:
		p.paused = false
		p.log.Info("a heartbeat landed: reading again", "leases", len(p.held))
	}
}

// expire stops the reader of a lease that could not be renewed in time.
func (p *Poller) expire(id string, h *holding) {
	h.lost = true
	p.m.LeaseEvents.WithLabelValues(LeaseExpired).Inc()
	p.m.LeaseLosses.WithLabelValues(LossExpired).Inc()
	p.log.Warn("lease expired before it could be renewed; reader stopped", "shard", id)
	p.drop(id, h)
}

// drop forgets a lease that is no longer this poller's, cancelling its
// reader; the reader's result still arrives and is ignored.
func (p *Poller) drop(id string, h *holding) {
	if h.running {
		p.m.ReaderRestarts.WithLabelValues(RestartLease).Inc()
	}
	if h.cancel != nil {
		h.cancel()
	}
	if !h.running {
		delete(p.held, id)
	}
}

// readerDone handles a reader's end.
func (p *Poller) readerDone(ctx context.Context, r readerResult) {
	if p.cfg.Drain {
		for _, after := range r.trims {
			p.trims = append(p.trims, DrainTrim{Shard: r.shard, After: after})
		}
	}
	h, ok := p.held[r.shard]
	if !ok {
		return
	}
	h.running = false
	if h.cancel != nil {
		h.cancel()
	}
	if r.err == nil || h.lost || errors.Is(r.err, errShardGone) || errors.Is(r.err, table.ErrCheckpointProtocol) {
		// Not this poller's to report any more (or nothing left to read).
		p.pm.IteratorAge.DeleteLabelValues(r.shard)
	}
	switch {
	case r.finished:
		p.log.Info("shard finished: read to its end", "shard", r.shard)
		cp := p.cps[r.shard]
		cp.finished = true
		p.cps[r.shard] = cp
		p.lastStop = time.Now()
		// Its children: looked up by CHILD_SHARDS at the next pass unless
		// the listing has them, also when the lease was lost as the reader
		// reached the end (it expired or was taken while the result waited
		// for the coordinator): nobody reads a finished shard again, so
		// nobody else looks its children up, and they waited for the next
		// listing of the whole stream (review, session 15).
		listed := p.childrenListed(r.shard)
		if !listed {
			p.lookup = append(p.lookup, r.shard)
		}
		if p.finishedNow == nil {
			p.finishedNow = map[string]bool{}
		}
		p.finishedNow[r.shard] = listed
		if h.lost {
			delete(p.held, r.shard)
			break
		}
		h.finished = true
		h.handoffTo = "" // nothing left to read: released, not handed over
		p.release(ctx, r.shard, h)
	case h.lost:
		delete(p.held, r.shard)
	case r.drained:
		p.drained[r.shard] = true
		p.lastStop = time.Now()
		p.release(ctx, r.shard, h)
	case errors.Is(r.err, table.ErrCheckpointProtocol):
		p.giveUp(r.shard, r.err)
		p.release(ctx, r.shard, h) // to the poller that asked for it, if any
	case p.stopping || h.handoffTo != "":
		p.release(ctx, r.shard, h)
	case errors.Is(r.err, errShardGone):
		p.log.Warn("shard is gone from the stream", "shard", r.shard, "error", r.err.Error())
		p.gone[r.shard] = true
		p.goneAt[r.shard] = time.Now()
		p.forceList = true
		p.release(ctx, r.shard, h)
	default:
		if r.err != nil {
			reason := RestartError
			if !time.Now().Before(p.validity(h)) {
				reason = RestartLease // cancelled at the end of the lease's validity
			}
			p.m.ReaderRestarts.WithLabelValues(reason).Inc()
			p.log.Error("shard reader failed; restarting it after a pause", "shard", r.shard, "error", r.err.Error())
		}
		h.retryAt = time.Now().Add(p.cfg.renewInterval())
	}
}

// giveUp records that the shard's checkpoint is fenced by another
// protocol than this version's (err wraps table.ErrCheckpointProtocol): this
// version commits nothing on it, ever, so its lease is released and the
// shard is not taken again by this process (givenUp), leaving it to a
// poller of that protocol (S25-F1). Logged once per shard at ERROR.
func (p *Poller) giveUp(id string, err error) {
	fence := int64(1) // a fence that cannot be read: fenced all the same
	var pe *table.CheckpointProtocolError
	if errors.As(err, &pe) {
		fence = pe.Fence
	}
	if p.protocolFenced == nil {
		p.protocolFenced = map[string]int64{}
	}
	if _, known := p.protocolFenced[id]; !known {
		p.log.Error("the shard's checkpoint is fenced by another protocol than this poller's: this version commits nothing on it; the lease is released and not taken again by this process (a poller of that protocol reads the shard; docs/runbook.md, \"Protocols\")",
			"shard", id, "protocol", fence, "this_protocol", table.Protocol, "error", err.Error())
	}
	p.protocolFenced[id] = fence
}

// givenUp reports whether this process gave the shard up for another
// protocol's fence (giveUp). The rule is for the process's life, not
// until a read shows the fence gone: only `ledgerctl unfence` (a
// rollback) removes a fence, and a restart of the poller after it reads
// the shard again (runbook, "Protocols"); a rule that re-reads would be
// as sound (a poller that takes a fenced shard commits nothing, its
// reader meets the fence and gives it up again) and only costs churn.
func (p *Poller) givenUp(id string) bool {
	_, ok := p.protocolFenced[id]
	return ok
}

// release gives a held lease up (to the poller that asked for it, if any)
// and forgets it. A release that fails leaves the lease to expire.
func (p *Poller) release(ctx context.Context, id string, h *holding) {
	delete(p.held, id)
	if h.lost {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if deadline, ok := ctx.Deadline(); ok && deadline.Before(time.Now().Add(5*time.Second)) {
		cctx = ctx // the caller's shorter budget (shutdown) applies
	}
	if err := p.store.release(cctx, h.lease, h.handoffTo, h.finished); err != nil {
		if errors.Is(err, errWriteDeferred) && !p.stopping {
			p.log.Debug("releasing the lease deferred by the pacer; this poller takes it back at its next round", "shard", id)
		} else {
			p.log.Warn("releasing lease failed; it will expire", "shard", id, "error", err.Error())
		}
		return
	}
	rel := h.lease
	rel.owner, rel.counter, rel.pending, rel.finished = h.handoffTo, rel.counter+1, "", h.finished
	p.leases[id] = rel
	if h.handoffTo != "" && !p.cfg.Drain {
		// Tell the new owner, which reads no lease but its own worker item
		// at its next round (a drain, the usual asker, reads every lease).
		if err := p.store.offer(cctx, h.handoffTo, id); err == nil {
			p.tell(h.handoffTo)
		} else if !errors.Is(err, errConditionFailed) {
			p.log.Warn("telling the new owner of a lease handed over failed; told again at the next round", "shard", id, "to", h.handoffTo, "error", err.Error())
			if p.untold == nil {
				p.untold = map[string]untold{}
			}
			p.untold[id] = untold{to: h.handoffTo, counter: rel.counter}
		}
	}
	if h.handoffTo != "" {
		p.m.LeaseEvents.WithLabelValues(LeaseHandedOff).Inc()
		p.log.Info("lease handed_off", "shard", id, "to", h.handoffTo)
		return
	}
	p.m.LeaseEvents.WithLabelValues(LeaseReleased).Inc()
	p.log.Info("lease released", "shard", id)
}

// shutdown stops every reader gracefully, keeps renewing while they commit
// what they hold (cancelling them after ShutdownTimeout), then releases
// the leases.
func (p *Poller) shutdown(ctx context.Context) {
	p.stopping = true
	p.ready.Store(false)
	superseded := p.superseded.Load() != nil
	switch {
	case superseded:
		// Another process of this owner name claimed the worker item: its
		// claim voids this one's heartbeats, and it takes these leases
		// once they stood unchanged for a lease duration after it. They
		// are dropped, not released or handed over: nothing of this
		// process's view is written any more (HB6).
		p.log.Warn("poller stopping: another process uses this owner name; dropping every lease", "leases", len(p.held))
		for id, h := range p.held {
			if h.lost {
				continue
			}
			h.lost = true
			p.m.LeaseEvents.WithLabelValues(LeaseLost).Inc()
			p.m.LeaseLosses.WithLabelValues(LossTaken).Inc()
			p.drop(id, h)
		}
	default:
		p.log.Info("poller stopping: committing what is in hand, then releasing leases", "leases", len(p.held))
		if !p.cfg.Drain {
			// Hand every lease over to the live pollers under their share,
			// rather than leave them to be found free at the others' sweeps.
			p.handOverAll()
		}
	}
	for _, h := range p.held {
		h.signalStop()
	}
	// The stop's paced writes (the releases and their offers, as each
	// reader ends and after) share one bound: the shutdown timeout and
	// stopReleases after the stop began. Each release's own 5 s bounded
	// only its turn, and one after another, paced at this poller's share
	// of the fleet's budget, the releases of more leases than that share
	// writes in a few seconds held the exit past the container's stop
	// timeout (review of session 23, S23-P2). A release whose turn comes
	// later is not made: its lease expires (and, once the leave lands,
	// is taken over after a fence).
	stopBy := time.Now().Add(p.cfg.ShutdownTimeout + stopReleases)
	bg := withPaceUntil(context.WithoutCancel(ctx), stopBy)
	hard := time.NewTimer(p.cfg.ShutdownTimeout)
	defer hard.Stop()
	tick := time.NewTicker(p.cfg.renewInterval())
	defer tick.Stop()
	for p.running() > 0 {
		select {
		case r := <-p.done:
			p.readerDone(bg, r)
		case <-tick.C:
			p.renewAll(bg) // the heartbeat goroutine goes on meanwhile
		case <-hard.C:
			p.log.Warn("shutdown timeout: abandoning the batches in hand", "readers", p.running())
			for _, h := range p.held {
				if h.cancel != nil {
					h.cancel()
				}
			}
		}
	}
	if !superseded && !p.cfg.Drain {
		// The children of the shards this poller finished and did not
		// look up or offer yet, its readers' ends during the stop among
		// them: looked up, registered and offered to the live pollers now
		// (stopKids), within what is left of the shutdown timeout, so
		// that the releases keep their own stopReleases.
		kidsBy := time.Now().Add(p.cfg.renewInterval() / 2)
		if end := stopBy.Add(-stopReleases); end.Before(kidsBy) {
			kidsBy = end
		}
		p.stopKids(bg, kidsBy)
	}
	// One budget for all releases, so that many leases on an unreachable
	// table cannot hold the exit back: unreleased leases simply expire.
	rctx, cancel := context.WithTimeout(bg, stopReleases)
	defer cancel()
	for id, h := range p.held {
		p.release(rctx, id, h)
	}
	if p.hbStop != nil {
		// Before the leave: a heartbeat after it would undo it.
		p.hbStop()
	}
	if !p.cfg.Drain && p.registryReads > 0 && !superseded {
		// The leave has a turn of its own past the releases' bound: it
		// lets the others take over at once what was not released.
		lctx, cancel := context.WithTimeout(withPaceUntil(context.WithoutCancel(ctx), time.Time{}), stopReleases)
		defer cancel()
		if err := p.store.leave(lctx, p.cfg.Owner, p.inc); err != nil {
			p.log.Warn("marking this poller left in the worker registry failed; the others count it gone after a lease duration", "error", err.Error())
		}
	}
	p.gauges()
	p.log.Info("poller stopped")
}

func (p *Poller) running() int {
	n := 0
	for _, h := range p.held {
		if h.running {
			n++
		}
	}
	return n
}

// unreadable counts the held leases this poller reads nothing of at now:
// its validity for them ended (a heartbeat poller paused, or fenced and
// not yet registered again; a renewing poller's renewal late), or dropped
// and not yet forgotten (lost, their readers ending). Counted from the
// validities, not from the pause noted once a round (checkPause): after
// a rejoin that failed, the pause was cleared and the leases the poller
// took again, each round, were counted read while their readers could
// not start, for as long as the rejoin failed (review, session 19,
// R19-2).
func (p *Poller) unreadable(now time.Time) int {
	n := 0
	for _, h := range p.held {
		if h.lost || !now.Before(p.validity(h)) {
			n++
		}
	}
	return n
}

// goodputWindow is how far back the goodput gauge looks.
const goodputWindow = time.Minute

// addCommitted counts the records of done (finished by a Process call)
// after cp, the checkpoint before the call: records this poller moved the
// checkpoint past, once each, whether committed, quarantined or without
// effect; records at or before cp (read again after a restart) are not
// goodput, and a commit whose answer was lost still counts once.
func (p *Poller) addCommitted(done []processor.Record, cp string) {
	n := 0
	for i := range done {
		if cp == "" || processor.CompareSequence(done[i].SequenceNumber, cp) > 0 {
			n++
		}
	}
	if n > 0 {
		p.committed.Add(int64(n))
		p.m.Committed.Add(float64(n))
	}
}

func (p *Poller) gauges() {
	p.m.LeasesHeld.Set(float64(len(p.held)))
	p.m.LeasesPaused.Set(float64(p.unreadable(time.Now())))
	p.heldN.Store(int64(len(p.held)))
	now := sample{at: time.Now(), n: p.committed.Load()}
	for len(p.goodput) > 1 && now.at.Sub(p.goodput[1].at) >= goodputWindow {
		p.goodput = p.goodput[1:]
	}
	if len(p.goodput) > 0 {
		if d := now.at.Sub(p.goodput[0].at).Seconds(); d > 0 {
			p.m.Goodput.Set(float64(now.n-p.goodput[0].n) / d)
		}
	}
	p.goodput = append(p.goodput, now)
	counts := map[string]int{"open": 0, "closed": 0, "finished": 0, "waiting": 0}
	elig := map[string]bool{}
	for _, s := range p.eligible() {
		elig[s.id] = true
	}
	fenced := 0 // given up (S25-F1), of the shards listed and not finished
	for _, s := range p.shards {
		if p.givenUp(s.id) && !p.finishedKnown(s.id) {
			fenced++
		}
		switch {
		case p.finishedKnown(s.id):
			counts["finished"]++
		case !elig[s.id] && !p.drainLeaves(s) && !p.gone[s.id] && !p.givenUp(s.id):
			// A shard given up for another protocol's fence (S25-F1) is
			// still open or closed, to be read: counted so, so that
			// LedgerShardUnread fires when no poller reads it.
			counts["waiting"]++
		case s.closed:
			counts["closed"]++
		default:
			counts["open"]++
		}
	}
	for state, n := range counts {
		p.m.Shards.WithLabelValues(state).Set(float64(n))
	}
	p.m.ProtocolFenced.Set(float64(fenced))
}
