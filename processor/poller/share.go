package poller

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/table"
)

// This file is a live poller's share-bounded pass (issue 23): what a pass
// reads grows with the leases the poller holds, not with the stream.
//
//   - The worker registry (table.HeartbeatWorker): each round the poller
//     writes its worker item (a heartbeat and the leases it holds) and reads
//     the stream's few worker items: fair share = leasable shards / live
//     workers, without reading every lease.
//   - Its own leases' state comes from its renewals' answers (ALL_NEW), not
//     from a read.
//   - The lease partition is swept a page per round (Config.LeaseScanPage
//     items), from where the last page ended, and read whole only at start:
//     it finds free and expired leases, finished shards and new shards
//     registered by the others.
//   - Checkpoints are read only for a decision: before taking a shard,
//     its own (is it finished?) and its parent's (is the parent finished?)
//     when neither the poller nor the parent's lease says so: a consistent
//     read of each key, not the stream's 16 checkpoint partitions.
//   - A reader's end does its shard's work only (endPass): look up and
//     register the children, take them while under the share, offer the
//     rest to a poller under it.
//   - Balance: a poller over its share hands the excess over gracefully
//     (the batch in hand committed first) to pollers under it, named in
//     their worker items' offers, which they take at once (the offer
//     watch: watchOffers) or at their next round; a
//     poller leaving hands all its leases over the same way. A poller takes
//     nothing before its second read of the registry, one round after it
//     registered, so that pollers starting together see each other first.

// workerView is what this poller knows of another poller from the
// registry.
type workerView struct {
	beat      int64
	held      int
	offers    int // shards in its item's offers: taken and not yet counted in held, or not taken yet
	left      bool
	heartbeat bool      // it keeps its leases by its beat (leaseMode = heartbeat)
	at        time.Time // first read with this beat
	last      time.Time // last read
	// moved is whether this poller has read its beat change; lastSent
	// is when the last read was sent. Cost only (counted), never a
	// lease's fate (live).
	moved    bool
	lastSent time.Time
	// renewsFrom is the answer time of the first read that showed it
	// renewing its leases (not leaseMode = heartbeat) after one that
	// showed it heartbeating, or of its first read: the counter rule
	// (available) counts from no earlier. A lease's counter standing
	// still while its owner heartbeated says nothing of the owner's
	// validity (review of session 20, S20-R1).
	renewsFrom time.Time
	// inc is the incarnation its item names: the process whose beat it
	// is (available, S20-R2).
	inc string
	// listing is whether its item announces its first listing under way;
	// acked, whether its item acknowledges this process's own
	// announcement (table.ListingKey): shareDescribe.
	listing bool
	acked   bool
}

// live reports whether w heartbeated within the last LeaseDuration, as
// seen on this poller's clock.
func (w workerView) live(d time.Duration) bool { return !w.left && w.last.Sub(w.at) < d }

// counted reports whether w counts among the pollers sharing the stream
// for cost: this poller's fair share of the leases, its part of the
// stream's DescribeStream rate, the pollers it offers and hands leases to.
// A worker first read with a beat it has not moved since counts only
// until a read sent d/2 after that first read: a live poller beats every
// d/3, so its beat moves within that window (d/6 left for a late write);
// an item left by a poller that crashed (kept WorkerRetention) stops
// counting there instead of a lease duration on (review of session 17,
// hole S17-D3). No other host's clock is read; whether a lease may be
// taken is still live's rule alone.
func (w workerView) counted(d time.Duration) bool {
	return w.live(d) && (w.moved || w.lastSent.Sub(w.at) < d/2)
}

// receives reports whether w may be offered a child or handed a lease at
// shutdown: live, and its beat seen moving. Counting a ghost for a while
// only slows this poller; a lease offered or handed to one waits for it
// to stop counting (review of the share-bounded pass, R2). balance's
// moves stay on counted (docs/exactly-once.md, S17-D3).
func (w workerView) receives(d time.Duration) bool { return w.live(d) && w.moved }

// sharePass is a live poller's round (renew set: the ticker's) or its first
// pass: renew, discover, heartbeat and read the registry, sweep a page of
// leases, balance, take offers and a share, start readers.
func (p *Poller) sharePass(ctx context.Context, renew bool) error {
	defer p.gauges()
	p.takesFrom = time.Time{}
	if renew {
		// Registered before the stream is listed: a listing throttled at
		// start (pollers starting together share DescribeStream's rate)
		// must not hide this poller from the others' share. The heartbeat
		// first: it keeps every lease this poller holds (renewAll then
		// only writes lease items while a poller that renews every lease
		// is live: compat).
		p.registry(ctx)
		if p.superseded.Load() != nil {
			return nil // another process of this name: Run stops (HB6)
		}
		p.renewAll(ctx)
		p.answerAsks(ctx)
		p.tellAgain(ctx)
	}
	if p.listed.IsZero() && p.newKids == nil {
		// The children this round's lookups register before the first
		// listing completes: taken by this poller (takeUnlisted).
		p.newKids = map[string]bool{}
		defer func() { p.newKids = nil }()
	}
	if ok, err := p.discover(ctx); err != nil {
		return err
	} else if !ok {
		if renew {
			p.takeUnlisted(ctx)
		}
		return nil
	}
	if p.cfg.StartPosition == Latest && !p.latestChecked {
		// A fresh start at LATEST is decided on every checkpoint of the
		// stream, once (the old pass).
		if !p.readAll(ctx) {
			return nil
		}
		p.latestChecked = true
	}
	p.sweep(ctx)
	p.learnShards()
	if !p.stopping {
		if renew {
			p.balance(ctx)
		}
		p.takeOffers(ctx, nil)
		if p.registryReads >= 2 {
			p.takeShare(ctx, nil)
		}
		if renew {
			p.offerLeft(ctx)
		}
		p.startReaders(ctx)
	}
	p.ready.Store(!p.stopping)
	return nil
}

// endPass is a live poller's work at a reader's end: the children of a
// finished shard are looked up and registered (discover), taken while this
// poller is under its share and offered to a poller under it otherwise; the
// readers that wait are started. Nothing else is read.
func (p *Poller) endPass(ctx context.Context) error {
	defer p.gauges()
	p.takesFrom = time.Time{}
	p.newKids = map[string]bool{}
	defer func() { p.newKids = nil }()
	if ok, err := p.discover(ctx); err != nil {
		return err
	} else if !ok {
		p.takeUnlisted(ctx)
		return nil
	}
	if p.stopping {
		return nil
	}
	p.listedKids(ctx)
	if len(p.newKids) > 0 {
		p.takeShare(ctx, p.newKids)
		if !p.cfg.Drain {
			p.offerKids(ctx, p.newKids)
		}
	}
	p.startReaders(ctx)
	return nil
}

// listedKids adds to newKids the children the listing has of the shards
// finished since the last endPass (finishedNow: a day of closed shards at
// start is this poller's work too, looked up or not), and registers those
// it did not look up (the listing had them) for the pollers whose
// listing is older; a drain registers none.
func (p *Poller) listedKids(ctx context.Context) {
	var listed []shard
	for _, s := range p.shards {
		if s.parent == "" {
			continue
		}
		if skipped, ok := p.finishedNow[s.parent]; ok {
			p.newKids[s.id] = true
			if skipped {
				listed = append(listed, s)
			}
		}
	}
	p.finishedNow = nil
	if len(listed) == 0 || p.cfg.Drain {
		return
	}
	known := make(map[string]bool, len(p.shards))
	for _, s := range p.shards {
		known[s.id] = true
	}
	p.registerChildren(ctx, listed, known)
}

// takeUnlisted is a live poller's take before its first listing of the
// stream completes (paced at its share of DescribeStream's rate: 71 pages
// at 7,000 shards and 8 pollers, about 71 s): it takes what the others
// handed it, and the children it registered itself of the shards it read
// to their end meanwhile, then starts their readers. Each lease item
// names its shard's parent and start, and the parent is read before the
// take (parentDone). A joiner took nothing for that long before, past the
// two lease durations within which balance must hold (the fleet benchmark
// at 1,000 shards: its first lease 75–85 s after it joined). Its
// children were neither taken nor offered (endPass goes on only once the
// stream is listed), and the others, at their share, left them unread
// until its listing completed: for good while DescribeStream refused it
// (docs/exactly-once.md, S20-J1). Not its share (takeShare needs the
// listing), not at LATEST (decided on every checkpoint first), not a
// drain's (pass), not while stopping.
func (p *Poller) takeUnlisted(ctx context.Context) {
	if p.stopping || p.cfg.Drain || p.cfg.StartPosition == Latest {
		return
	}
	p.takeOffers(ctx, p.newKids)
	p.startReaders(ctx)
}

// watchOffers reads this poller's worker item every OfferWatch and hands
// the offers it shows to the coordinator (offerPass), until ctx ends. A
// lease handed over is read by nobody from its giver's release to its
// receiver's take; learnt from the heartbeat's answer, the take came at
// the round after it, up to two renewal intervals (13 s at 20 s leases)
// after the release: at 1,000 shards the steady state's slowest records
// were all on shards changing hands (BENCHMARKS.md, "Session 21: the
// hand-over is the steady state's tail"). Only a heartbeat poller
// watches (a poller renewing every lease writes its item, and reads the
// offers, every round; so does one in compat, whose takes its rounds
// renew) and only while it may take: born, neither fenced nor another
// process's name, its validity running (offerPass). The read is
// consistent: offers whose clear was answered before it was sent are not
// read again (one read in flight meanwhile may show them: offerPass
// finds them held, and clears them once more). An offer is a hint (claim
// H1): takeOffers reads each lease and takes it by its own conditional
// write, under every gate of takeLeases.
func (p *Poller) watchOffers(ctx context.Context) {
	t := time.NewTicker(p.cfg.OfferWatch)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !p.heartbeats() || p.compat.Load() || p.fencedOut.Load() || p.superseded.Load() != nil || p.born.Load() == 0 ||
			!time.Now().Before(fromMono(p.beatUntil.Load())) {
			continue
		}
		w, err := p.store.readWorker(ctx, p.cfg.Owner)
		if err != nil || w.Incarnation != p.inc {
			continue // an error: the heartbeat's answer brings the offers at the next round
		}
		if w.Offers = p.uncounted(w.Offers); len(w.Offers) == 0 {
			continue // none, or only those taken (the next heartbeat removes them)
		}
		select { // the newest offers replace those not taken yet
		case <-p.offered:
		default:
		}
		p.offered <- w.Offers
	}
}

// offerPass takes the offers the offer watch read, at once rather than at
// the next round, and starts their readers. It does nothing, and leaves
// the offers in the worker item for the round after the next heartbeat,
// where a take here would go wrong (the review of the offer watch,
// session 21):
//   - while stopping (the shutdown hands leases over, it takes none) or
//     superseded (HB6);
//   - while this poller's validity has ended (paused, or fenced before its
//     heartbeat learns it): takeLeases would refuse every take and the
//     offers be cleared untaken, where before the watch they waited in
//     the item for the heartbeat that ends the pause (S21-W1);
//   - at a LATEST start not yet decided (readAll): a take would read its
//     shard from its trim horizon, and a commit of it make the stream
//     look started (S21-W2; takeUnlisted's gate);
//   - while it renews every lease item (compat): its takes are held from
//     their send until the round that renews them, and the round bounds
//     its takes to half a renewal interval (takeTurn) so that they are
//     renewed in time; a pass between rounds started another wave before
//     that renewal (S21-W3; review of session 19, R19-3).
func (p *Poller) offerPass(ctx context.Context, offers []string) {
	switch {
	case p.stopping || p.superseded.Load() != nil:
		return
	case p.fencedOut.Load() || !time.Now().Before(fromMono(p.beatUntil.Load())):
		return
	case p.cfg.StartPosition == Latest && !p.latestChecked:
		return
	case p.renewsLeases():
		return
	}
	defer p.gauges()
	p.takesFrom = time.Time{}
	p.offers = offers
	p.takeOffers(ctx, nil)
	p.startReaders(ctx)
}

// registry keeps this poller registered and reads the stream's worker
// items (readRegistry). A heartbeat poller's heartbeats run on their own
// goroutine (heartbeater), so that a slow round (takes, listings, a
// loaded table) cannot starve the write every lease depends on; the
// first is written here, before the first read of the registry, and so is
// the rejoin after a fence. A poller that renews every lease writes its
// worker item here, each round, as before.
func (p *Poller) registry(ctx context.Context) {
	switch {
	case !p.heartbeats():
		// Claimed by this process's first write, conditional on its
		// incarnation after that (HB6).
		var oiu *OwnerInUseError
		_, taken := p.countedHeld()
		note := p.listingNote()
		if w, err := p.store.heartbeat(ctx, p.cfg.Owner, p.inc, len(p.held), taken, false, p.born.Load() != 0, note); errors.As(err, &oiu) {
			p.supersede(oiu)
			return
		} else if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("writing the worker item failed; retrying at the next round", "error", err.Error())
			}
		} else {
			p.ackLanded(note, w, time.Now())
			p.born.CompareAndSwap(0, mono(time.Now()))
			p.offersCounted(taken)
			p.offers, p.asks = w.Offers, w.Asks
		}
	case p.fencedOut.Load():
		p.rejoin(ctx)
	case p.hbStop == nil:
		p.beat(ctx)
		if p.beatUntil.Load() != 0 {
			hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			done := make(chan struct{})
			go func() { defer close(done); p.heartbeater(hctx) }()
			p.hbStop = func() { cancel(); <-done }
		}
	}
	p.hbMu.Lock()
	if w := p.hbAnswer; w != nil {
		p.offers, p.asks = w.Offers, w.Asks
		p.hbAnswer = nil
	}
	p.hbMu.Unlock()
	p.readRegistry(ctx)
}

// heartbeater writes this poller's heartbeat every renewal interval until
// ctx ends; after a fence refused one it waits for the coordinator's
// rejoin. A poller paused for pauseQuiet (no heartbeat answered within a
// lease duration of its send) heartbeats only once every quietProbe
// (silent).
func (p *Poller) heartbeater(ctx context.Context) {
	t := time.NewTicker(p.cfg.renewInterval())
	defer t.Stop()
	var last time.Time // the last beat's start
	quiet := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.ackNow:
			// A listing poller newly counted by this one's DescribeStream
			// rate (shareDescribe), acknowledged at once; or this one's
			// first listing done, its announcement removed at once.
		}
		if p.superseded.Load() != nil {
			return
		}
		if p.fencedOut.Load() {
			continue
		}
		now := time.Now()
		if p.silent(now, last) {
			if !quiet {
				quiet = true
				p.log.Warn("paused for two lease durations: heartbeating once every three, so that the others fence this poller and read its shards (its heartbeats may land unanswered)",
					"paused_for", now.Sub(fromMono(p.beatUntil.Load())).Round(time.Millisecond).String())
			}
			continue
		}
		quiet = false
		last = now
		p.beat(ctx)
	}
}

// pauseQuiet and quietProbe, in lease durations: a heartbeat poller whose
// validity ended pauseQuiet ago (paused: no heartbeat answered in time)
// writes its heartbeat only once every quietProbe.
const (
	pauseQuiet = 2
	quietProbe = 3
)

// silent reports whether the heartbeat due at now is skipped, last being
// the previous one's start: this poller has been paused for pauseQuiet
// lease durations and heartbeated within the last quietProbe. A paused
// poller's heartbeats may be landing unanswered (every answer later than
// a lease duration: a process starved of CPU, a response path that drops
// answers): its beat moves, so nobody fences it, while it reads nothing,
// and its shards were read by nobody for as long as that lasted (the
// review of the late heartbeat, session 17, L1). Silent, its beat stands
// still for quietProbe lease durations: long enough for the others' two
// reads a lease duration apart, so they fence it and take its leases
// over. The probe in between learns the fence (and the rejoin follows)
// or, unfenced and answered in time, ends the pause. Safety is not
// touched: a heartbeat skipped only shortens this poller's validity.
func (p *Poller) silent(now, last time.Time) bool {
	b := p.beatUntil.Load()
	if b == 0 || now.Sub(fromMono(b)) < pauseQuiet*p.cfg.LeaseDuration {
		return false
	}
	return now.Sub(last) < quietProbe*p.cfg.LeaseDuration
}

// beat writes this poller's heartbeat: the write that keeps every lease
// it holds valid until its send time + LeaseDuration (docs/exactly-once.md,
// "The worker heartbeat", claim H1). A failed attempt (each given a lease
// duration) is retried with backoff until the leases' validity ends, and
// at least a renewal interval; one refused by a fence sets fencedOut (the
// coordinator drops every lease and rejoins). Safe from the heartbeat
// goroutine: it touches only atomics and hbAnswer.
func (p *Poller) beat(ctx context.Context) {
	budget := fromMono(p.beatUntil.Load())
	if min := time.Now().Add(p.cfg.renewInterval()); budget.Before(min) {
		budget = min
	}
	for attempt := 1; ; attempt++ {
		sent := time.Now()
		// A lease duration per attempt, not the validity left: the write
		// is conditional on no fence, so however late it lands it is safe,
		// and an answer within a lease duration of its send brings a
		// validity still to come. One cut shorter on a slow table is one
		// that may land unseen: the others see the beat move while this
		// poller, without the answer, stops reading (at load 20 on 2
		// cores, DynamoDB Local answered after more than the second left).
		// On its own goroutine a slow attempt holds nothing else up.
		cctx, cancel := context.WithTimeout(ctx, p.cfg.LeaseDuration)
		// After the claim (the first, or a claiming rejoin) landed,
		// conditional on the item existing (HB4) and still claimed by
		// this process (HB6). Before, a claim: its retry after a lost
		// answer is a claim too, never refused by the incarnation.
		held, taken := p.countedHeld()
		note := p.listingNote()
		w, err := p.store.heartbeat(cctx, p.cfg.Owner, p.inc, held, taken, true, p.born.Load() != 0, note)
		cancel()
		var oiu *OwnerInUseError
		if errors.As(err, &oiu) {
			p.supersede(oiu)
			return
		}
		if errors.Is(err, errFenced) {
			p.fencedOut.Store(true)
			return
		}
		if err == nil {
			p.offersCounted(taken)
			p.ackLanded(note, w, time.Now())
			p.beaten(w, sent)
			return
		}
		wait := p.throttleBackoff(attempt)
		if ctx.Err() != nil || !time.Now().Add(wait).Before(budget) {
			if ctx.Err() == nil {
				p.log.Warn("writing the worker item (the heartbeat keeping this poller's leases) failed; retrying at the next round", "attempts", attempt, "error", err.Error())
			}
			return
		}
		if attempt == 1 || attempt%10 == 0 {
			validFor := "none yet"
			if b := p.beatUntil.Load(); b != 0 {
				validFor = time.Until(fromMono(b)).Round(time.Millisecond).String()
			}
			p.log.Warn("writing the worker item (the heartbeat keeping this poller's leases) failed; retrying", "attempts", attempt, "valid_for", validFor, "error", err.Error())
		}
		time.Sleep(wait)
	}
}

// beaten applies a heartbeat that landed, sent at sent: every held lease
// valid until sent + LeaseDuration, and its answer (offers and asks) for
// the coordinator's next round. The first answered claim makes this
// process born: its later writes are conditional on its incarnation, and
// its wait for another incarnation's leases counts from now (HB6).
func (p *Poller) beaten(w table.Worker, sent time.Time) {
	p.born.CompareAndSwap(0, mono(time.Now()))
	until := mono(sent.Add(p.cfg.LeaseDuration))
	for {
		cur := p.beatUntil.Load()
		if until <= cur || p.beatUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	p.hbMu.Lock()
	p.hbAnswer = &w
	p.hbMu.Unlock()
}

// rejoin handles a heartbeat refused by a fence: another poller saw this
// one's beat unchanged for a lease duration and is taking its leases over,
// so its validity has ended (claim H1). Every lease is dropped (their
// readers cancelled; a commit in flight is refused by the checkpoint's
// condition if the new owner committed first) and the worker item is
// written again without the fence; leases are then taken anew, each by a
// conditional write on its counter.
func (p *Poller) rejoin(ctx context.Context) {
	p.log.Warn("this poller's heartbeat was fenced: another poller is taking its leases over; dropping every lease and registering again", "leases", len(p.held))
	p.beatUntil.Store(0)
	p.paused = false
	for id, h := range p.held {
		if h.lost {
			continue
		}
		h.lost = true
		p.m.LeaseEvents.WithLabelValues(LeaseLost).Inc()
		p.m.LeaseLosses.WithLabelValues(LossTaken).Inc()
		p.drop(id, h)
	}
	// No lease is held now: a heartbeat must not delete the offer of one
	// the fencer hands back (review of the givers' count, session 23).
	p.pruneTaken()
	sent := time.Now()
	// A process none of whose claims was answered (its first heartbeat
	// found a previous life's fence) claims the item; a born one rejoins
	// only an item no other process of its name claimed since (HB6).
	w, err := p.store.rejoin(ctx, p.cfg.Owner, p.inc, p.born.Load() == 0)
	var oiu *OwnerInUseError
	if errors.As(err, &oiu) {
		p.supersede(oiu)
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("registering again after the fence failed; retrying at the next round", "error", err.Error())
		}
		return
	}
	p.m.LeaseEvents.WithLabelValues(LeaseRejoined).Inc()
	p.beaten(w, sent)
	p.fencedOut.Store(false)
}

// readRegistry reads the stream's worker items: the other pollers, their
// beats, what they hold and whether they heartbeat; and whether a live one
// renews every lease (compat).
func (p *Poller) readRegistry(ctx context.Context) {
	sent := time.Now()
	ws, err := p.store.readWorkers(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("reading the worker registry failed; retrying at the next round", "error", err.Error())
		}
		return
	}
	now := time.Now()
	seen := make(map[string]bool, len(ws))
	compat := false
	for _, w := range ws {
		if w.Owner == "" || w.Owner == p.cfg.Owner && !p.cfg.Drain {
			continue
		}
		if w.Owner == p.cfg.Owner {
			// A drain never writes a worker item: one of its name whose
			// beat moves is another live process given the same name.
			// The drain stops rather than read its shards beside it; its
			// leases it judges by this item meanwhile (available, HB6).
			if v, ok := p.workers[w.Owner]; ok && v.beat != w.Beat && !w.Left {
				p.supersede(&OwnerInUseError{Owner: w.Owner, Mine: p.inc})
			}
		}
		seen[w.Owner] = true
		delete(p.absent, w.Owner)
		v, ok := p.workers[w.Owner]
		v.moved = ok && (v.moved || v.beat != w.Beat)
		if !ok || v.beat != w.Beat {
			v.at = now
		}
		v.lastSent = sent
		if !w.Heartbeat && (!ok || v.heartbeat) {
			v.renewsFrom = now
		}
		v.beat, v.held, v.offers, v.left, v.last, v.heartbeat, v.inc = w.Beat, w.Held, len(w.Offers), w.Left, now, w.Heartbeat, w.Incarnation
		v.listing, v.acked = w.Listing, slices.Contains(w.ListingSeen, table.ListingKey(p.cfg.Owner, p.inc))
		p.workers[w.Owner] = v
		if !w.Heartbeat && v.live(p.cfg.LeaseDuration) {
			compat = true
		}
	}
	for o := range p.workers {
		if !seen[o] {
			delete(p.workers, o)
			// Gone from the registry: its leases are judged by the rule
			// for owners outside it only once it has been absent for a
			// lease duration (available; HB4).
			if _, ok := p.absent[o]; !ok {
				p.absent[o] = now
			}
		}
	}
	for o, since := range p.absent {
		if now.Sub(since) > 3*p.cfg.LeaseDuration {
			// Absent long enough: the lease observation's own time rules
			// from now on (available).
			delete(p.absent, o)
		}
	}
	// An offer answered before this read was sent is in the receiver's
	// item as read: in its offers, or counted in its held.
	for o, ts := range p.told {
		kept := ts[:0]
		for _, at := range ts {
			if !at.Before(sent) {
				kept = append(kept, at)
			}
		}
		if _, ok := p.workers[o]; !ok || len(kept) == 0 {
			delete(p.told, o)
		} else {
			p.told[o] = kept
		}
	}
	if compat != p.compat.Load() && p.heartbeats() {
		if compat {
			p.log.Info("a live poller renews every lease: renewing every lease too (rolling upgrade)")
			// Valid as far as the heartbeat says until this round's
			// renewals land (assumption M1).
			beat := fromMono(p.beatUntil.Load())
			for _, h := range p.held {
				h.setUntil(beat)
			}
		} else {
			// A lease whose own validity ended while a renewing poller was
			// live may be that poller's now (its counter rule needs no
			// fence), and it may have handed it on as it left: dropped as
			// in compat (expired), before the heartbeat alone rules.
			// Without this a round stalled past a lease's own validity and
			// past the renewing poller's leave kept the lease and started
			// its reader again on the heartbeat's validity alone.
			now := time.Now()
			for id, h := range p.held {
				if !h.lost && !now.Before(fromMono(h.until.Load())) {
					p.expire(id, h)
				}
			}
			p.log.Info("every live poller heartbeats: leases kept by the heartbeat alone")
		}
	}
	p.compat.Store(compat)
	if p.heartbeats() && !compat && (p.unverified || !p.registrySent.IsZero() && sent.Sub(p.registrySent) >= p.cfg.LeaseDuration) {
		p.verifyHeld(ctx)
	}
	// The rate first, then the acknowledgements the next heartbeat
	// writes: an acknowledgement is a promise that the rate counts it.
	p.viewSent = sent
	p.shareDescribe()
	p.registrySent = sent
	p.registryAt = now
	p.registryReads++
	p.healthy.Store(now.UnixNano())
}

// verifyHeld re-reads every lease this heartbeat poller holds and drops
// those no longer in its name at the counter it holds. Called at a
// registry read sent a lease duration or more after the previous one (or
// after a verification left leases unread): a poller that renews every
// lease (an old version in a rolling upgrade, --lease-mode renew) may
// have registered after the previous read, taken leases of this one by
// its counter rule (no fence: the heartbeat does not move a lease's
// counter) and left again, all unseen, so compat was never entered and
// nothing else would tell this poller: it read those shards beside their
// new owners for as long as it held them (the review of the late
// heartbeat, session 17, L2: a process stopped while an old poller came
// and went, whose heartbeat then landed unfenced). A registration the
// previous read did not show comes after that read's send, and such a
// poller takes nothing before a lease duration after it registered, so a
// read within a lease duration of the previous needs no verification.
func (p *Poller) verifyHeld(ctx context.Context) {
	ids := make([]string, 0, len(p.held))
	for id, h := range p.held {
		if !h.lost {
			ids = append(ids, id)
		}
	}
	p.unverified = false
	if len(ids) == 0 {
		return
	}
	// Within a renewal interval, so that a slow table cannot stretch the
	// round (a longer gap, another verification): what is not read by then
	// is read at the next registry read.
	vctx, cancel := context.WithTimeout(ctx, p.cfg.renewInterval())
	cur := p.store.readLeases(vctx, ids)
	cancel()
	now := time.Now()
	for _, id := range ids {
		h := p.held[id]
		l, ok := cur[id]
		if !ok {
			p.unverified = true // read again at the next registry read
			continue
		}
		if l.owner == p.cfg.Owner && l.counter == h.lease.counter {
			continue
		}
		if l.owner == p.cfg.Owner && h.unknownTo != 0 && l.counter == h.unknownTo && l.incarnation == p.inc {
			// A renewal made in compat whose answer was lost landed.
			h.lease = l
			continue
		}
		p.leases[id] = l
		p.observeLease(l, now)
		if h.lost {
			continue
		}
		h.lost = true
		p.m.LeaseEvents.WithLabelValues(LeaseLost).Inc()
		p.m.LeaseLosses.WithLabelValues(LossTaken).Inc()
		p.log.Warn("lease lost: taken while this poller could not read the registry (by a poller that renews every lease); reader stopped", "shard", id,
			"owner_now", l.owner, "counter", l.counter, "held_counter", h.lease.counter)
		p.drop(id, h)
	}
	if p.unverified {
		p.log.Warn("re-reading the leases held after a gap in the registry reads failed for some; read again at the next round")
	}
}

// answerAsks hands over the leases a drain asked for (its worker item's
// asks): each is re-read, and one whose pendingOwner names another poller
// goes to it after the batch in hand, as a renewal's answer would have
// said. Then the asks are cleared.
func (p *Poller) answerAsks(ctx context.Context) {
	if len(p.asks) == 0 {
		return
	}
	asks := p.asks
	p.asks = nil
	// Only the asks answered are cleared: one whose lease could not be
	// re-read stays for the next heartbeat's answer (the review of the
	// heartbeat, HB5: cleared, the drain that asked waited for good).
	answered := make([]string, 0, len(asks))
	for _, id := range asks {
		h, ok := p.held[id]
		if !ok || h.lost || h.handoffTo != "" || p.stopping {
			answered = append(answered, id)
			continue
		}
		l, err := p.store.readLease(ctx, id)
		if err != nil {
			continue
		}
		answered = append(answered, id)
		if l.owner != p.cfg.Owner || l.pending == "" || l.pending == p.cfg.Owner {
			continue
		}
		h.lease.pending = l.pending
		h.handoffTo = l.pending
		p.log.Info("lease hand-off requested; finishing the batch in hand", "shard", id, "to", l.pending)
		if h.running {
			h.signalStop()
		} else {
			p.release(ctx, id, h)
		}
	}
	if len(answered) == 0 {
		return
	}
	if err := p.store.clearAsks(ctx, p.cfg.Owner, answered); err != nil && ctx.Err() == nil {
		p.writeFailed(err, "clearing the asks answered failed; they are read again")
	}
}

// heldBy is what owner holds or was handed as far as this poller knows:
// its item's held count and offers as last read, and this poller's own
// hand-overs to it that the read could not show (inFlight). No lease
// handed to owner is left out (docs/exactly-once.md, "The givers'
// overshoot (session 23)"): an offer stays in owner's item until the
// heartbeat whose held counts its take removes it, and a giver's own
// count keeps a lease until its offer was answered.
func (p *Poller) heldBy(owner string) int {
	v := p.workers[owner]
	return v.held + v.offers + p.inFlight(owner)
}

// inFlight counts this poller's hand-overs to owner that its last
// registry read cannot show: the leases it holds that are to go to owner
// once their readers commit (handoffTo), the offers to owner answered
// after that read was sent (told), and the hand-overs whose offer write
// failed (untold: in owner's name, in no item).
func (p *Poller) inFlight(owner string) int {
	n := len(p.told[owner])
	for _, h := range p.held {
		if h.handoffTo == owner && !h.lost {
			n++
		}
	}
	for _, u := range p.untold {
		if u.to == owner {
			n++
		}
	}
	return n
}

// answered are the times offers were answered (told).
type answered []time.Time

// tell notes an offer to owner answered now: counted by inFlight until a
// registry read sent later shows it in owner's item.
func (p *Poller) tell(owner string) { p.told[owner] = append(p.told[owner], time.Now()) }

// countedHeld is the held count for this poller's next worker write, and
// the offers it took that the count includes: the write removes them from
// its offers (table.OffersCounted). Read together under countMu, so that
// every offer removed is one whose take the count includes.
func (p *Poller) countedHeld() (int, []string) {
	p.countMu.Lock()
	defer p.countMu.Unlock()
	var taken []string
	for id := range p.taken {
		taken = append(taken, id)
	}
	sort.Strings(taken)
	return int(p.heldN.Load()), taken
}

// offersCounted forgets the taken offers a worker write that landed
// removed.
func (p *Poller) offersCounted(taken []string) {
	if len(taken) == 0 {
		return
	}
	p.countMu.Lock()
	defer p.countMu.Unlock()
	for _, id := range taken {
		delete(p.taken, id)
	}
}

// pruneTaken forgets the taken offers whose leases this poller no longer
// holds (handed on, released, lost): left in its item, such an offer is
// read again and cleared as not its, or taken again when the lease was
// handed back to it meanwhile — which a heartbeat removing it would have
// hidden.
func (p *Poller) pruneTaken() {
	p.countMu.Lock()
	defer p.countMu.Unlock()
	for id := range p.taken {
		if h, mine := p.held[id]; !mine || h.lost {
			delete(p.taken, id)
		}
	}
}

// uncounted returns offers without those this poller took and its worker
// item still shows until a heartbeat removes them (countedHeld).
func (p *Poller) uncounted(offers []string) []string {
	p.countMu.Lock()
	defer p.countMu.Unlock()
	if len(p.taken) == 0 {
		return offers
	}
	var out []string
	for _, id := range offers {
		if !p.taken[id] {
			out = append(out, id)
		}
	}
	return out
}

// liveWorkers returns the other pollers counted live for cost (counted),
// by owner name.
func (p *Poller) liveWorkers() []string {
	var out []string
	for o, v := range p.workers {
		if v.counted(p.cfg.LeaseDuration) {
			out = append(out, o)
		}
	}
	sort.Strings(out)
	return out
}

// shareTarget is this poller's fair share: the leasable shards (those
// eligible as this poller knows them, or the leases the live pollers hold
// if more) over the live pollers, rounded up.
func (p *Poller) shareTarget() int {
	live := p.liveWorkers()
	sum := len(p.held)
	for _, o := range live {
		sum += p.heldBy(o)
	}
	n := max(len(p.eligible()), sum)
	return (n + len(live)) / (len(live) + 1)
}

// sweep reads the next page of the stream's lease partition (at start,
// all of it), remembering each lease but this poller's own (which its
// renewals' answers tell) and when it was seen in its state.
func (p *Poller) sweep(ctx context.Context) {
	whole := !p.swept
	for {
		ls, next, err := p.store.leasePage(ctx, p.sweepFrom, p.cfg.LeaseScanPage)
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("reading leases failed; retrying at the next round", "error", err.Error())
			}
			return
		}
		now := time.Now()
		for _, l := range ls {
			if h, mine := p.held[l.shard]; mine && !h.lost && l.owner == p.cfg.Owner && l.incarnation == p.inc {
				continue
			}
			p.leases[l.shard] = l
			p.observeLease(l, now)
		}
		p.sweepFrom = next
		if next == nil {
			p.swept = true
		}
		if !whole || next == nil || ctx.Err() != nil {
			return
		}
	}
}

// balance hands leases this poller holds over to live pollers under their
// share, gracefully: each reader commits the batch in hand, then the lease
// goes to its new owner, named in its worker item's offers. The moves are
// planned from the registry, the same plan by every poller that reads the
// same registry (plan): one lease at a time from the poller holding the
// most (the first by name among equals) to the one holding the fewest,
// while the first holds over the ceiling of the share or the second under
// its floor and they are two or more apart; this poller makes the moves
// that start from it. Moving from above the floor to below it puts nobody
// else below it, so the moves settle (three pollers on four shards hold
// two, one and one).
func (p *Poller) balance(ctx context.Context) {
	if p.registryReads < 2 {
		return
	}
	var mine []*holding
	for _, h := range p.held {
		if !h.lost && !h.finished && h.handoffTo == "" {
			mine = append(mine, h)
		}
	}
	held := map[string]int{p.cfg.Owner: len(mine)}
	for _, o := range p.liveWorkers() {
		held[o] = p.heldBy(o)
	}
	hi := p.shareTarget()
	n := max(len(p.eligible()), sumOf(held))
	lo := n / len(held)
	if sumOf(held) < n {
		// Free leases are left as this poller sees them: a poller under
		// its floor takes those, and only a poller over the ceiling hands
		// any over (at a start, nobody hands over what it took while the
		// others were still taking). Past its first two lease durations,
		// though, the floor is that of the leases held: the free leases
		// this poller counts may be none to the poller under the floor
		// (shards finished or waiting for a parent as it knows them): at
		// 100 shards a joiner stayed at half its share for 50 s, each
		// giver at the ceiling, the plan seeing free leases and moving
		// nothing.
		lo = 0
		if p.registryReads >= 6 {
			lo = sumOf(held) / len(held)
		}
	}
	var to []string
	for _, m := range plan(held, lo, hi) {
		if m.from == p.cfg.Owner {
			to = append(to, m.to)
		}
	}
	if len(to) == 0 {
		return
	}
	// Idle readers first: they hold nothing to commit.
	sort.SliceStable(mine, func(i, j int) bool { return !mine[i].running && mine[j].running })
	for i, receiver := range to {
		if i >= len(mine) {
			break
		}
		h := mine[i]
		h.handoffTo = receiver // counted at receiver from now on (inFlight)
		p.log.Info("lease over the fair share; handing it over", "shard", h.lease.shard, "to", receiver, "share_floor", lo, "share_ceiling", hi)
		if h.running {
			h.signalStop()
		} else {
			p.release(ctx, h.lease.shard, h)
		}
	}
}

func sumOf(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// move is one lease to hand over in a balance plan.
type move struct{ from, to string }

// plan returns the hand-overs that bring every owner of held within
// [lo, hi] where they can be: one lease at a time from the owner holding
// the most to the one holding the fewest (ties by name), while the most is
// above hi or the fewest below lo, and they are two or more apart.
func plan(held map[string]int, lo, hi int) []move {
	owners := make([]string, 0, len(held))
	n := make(map[string]int, len(held))
	for o, h := range held {
		owners = append(owners, o)
		n[o] = h
	}
	sort.Strings(owners)
	var moves []move
	for range sumOf(held) + 1 {
		most, fewest := owners[0], owners[0]
		for _, o := range owners[1:] {
			if n[o] > n[most] {
				most = o
			}
			if n[o] < n[fewest] {
				fewest = o
			}
		}
		if n[most]-n[fewest] < 2 || (n[most] <= hi && n[fewest] >= lo) {
			break
		}
		n[most]--
		n[fewest]++
		moves = append(moves, move{most, fewest})
	}
	return moves
}

// takeOffers takes the leases offered to this poller in its worker item
// (handed over to it, or children another poller left for it), then
// clears the offers it looked at. An offer is a hint: the lease item,
// read, decides. The reads (each offered lease, and its checkpoint when
// this poller has not read it) run concurrently, bounded by half a renewal
// interval, and so do the takes: at a join, a poller is handed a share of
// hundreds of leases at once (issue 23: balance within two lease
// durations at 1,000 shards), which one read after another took several
// rounds to take. What was not read stays offered for the next round.
//
// kids, when set, are children this poller registered itself, taken as
// offers are (takeUnlisted); they are in no worker item, so none is
// cleared, and one not read in time is left to the listing.
func (p *Poller) takeOffers(ctx context.Context, kids map[string]bool) {
	p.pruneTaken()
	if len(p.offers) == 0 && len(kids) == 0 {
		return
	}
	// Those it took already stay in its item until its next heartbeat.
	offers := p.uncounted(p.offers)
	p.offers = nil
	offered := make(map[string]bool, len(offers))
	for _, id := range offers {
		offered[id] = true
	}
	for id := range kids {
		if !offered[id] {
			offers = append(offers, id)
		}
	}
	var want, unread []string
	for _, id := range offers {
		if _, mine := p.held[id]; mine || p.finishedKnown(id) || p.givenUp(id) {
			continue
		}
		want = append(want, id)
		if _, read := p.cps[id]; !read {
			unread = append(unread, id)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, p.takeBound())
	var ls map[string]lease
	var cps map[string]checkpoint
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ls = p.store.readLeases(rctx, want) }()
	go func() { defer wg.Done(); cps = p.store.readCheckpoints(rctx, unread) }()
	wg.Wait()
	cancel()
	for id, cp := range cps {
		if _, read := p.cps[id]; !read {
			p.cps[id] = cp
		}
	}
	var done []string
	var take []lease
	keep := map[string]bool{} // offers whose reads failed: left offered
	// What became of each offer (ledger_poller_offers_total{outcome});
	// kids are not offers and are not counted.
	outcome := func(id, o string) {
		if offered[id] {
			p.m.Offers.WithLabelValues(o).Inc()
		}
	}
	for _, id := range offers {
		if _, mine := p.held[id]; !mine && p.givenUp(id) {
			// Given up for another protocol's fence (S25-F1): not this
			// version's to read.
			done = append(done, id)
			outcome(id, OfferNotIts)
			continue
		}
		l, read := ls[id]
		_, mine := p.held[id]
		if !read && !mine && !p.finishedKnown(id) {
			outcome(id, OfferLater)
			continue // not read in time: stays offered for the next round
		}
		done = append(done, id)
		if !read {
			outcome(id, OfferNotIts)
			continue
		}
		p.leases[id] = l
		p.observeLease(l, time.Now())
		if mine || l.finished || (l.owner != "" && l.owner != p.cfg.Owner) {
			outcome(id, OfferNotIts)
			continue
		}
		if free, _ := p.available(l); p.foreign(l) && !free {
			outcome(id, OfferNotIts)
			continue // another process of this name holds it (HB6)
		}
		sh, known := p.shard(id)
		if !known {
			if l.start == "" {
				outcome(id, OfferUnknownShard)
				continue // the next listing has it
			}
			sh = shard{id: id, parent: l.parent, start: l.start}
			p.shards = append(p.shards, sh)
		}
		// A checkpoint read that failed decides nothing: the offer stays,
		// for the next pass, as one whose lease was not read in time. An
		// offered child is in nobody's name, and its giver forgot it once
		// its offer landed: cleared untaken, it waited for a sweep, and a
		// joiner whose first listing has not completed makes none (review
		// of session 22, S22-H2).
		done, err := p.parentDone(ctx, sh)
		if err != nil && offered[id] {
			outcome(id, OfferLater)
			keep[id] = true
			continue
		}
		if !done {
			outcome(id, OfferParentUnfinished)
			continue
		}
		// The shard's own checkpoint, as takeShare reads it before a take:
		// its reader starts from it, and it carries a LATEST start's marker
		// that a shard handed over before its first commit must keep (the
		// review of the share-bounded pass, R5).
		_, cpRead := p.cps[id]
		finished := p.finishedKnown(id)
		if !cpRead && !finished && offered[id] {
			outcome(id, OfferLater)
			keep[id] = true
			continue
		}
		if !cpRead || finished {
			outcome(id, OfferCheckpointUnread)
			continue
		}
		take = append(take, l)
	}
	sent := take
	// The takes the write pacer did not send (their turn of this poller's
	// share of the fleet's budget came after the round's deadline) stay
	// offered, as those past the round's turns do: nothing was written.
	// Cleared, a lease handed over stayed in this poller's name unread,
	// and an offered child in nobody's, until this poller's share took it
	// (takeShare) — for a joiner whose first listing has not completed,
	// until it completed, for good while DescribeStream refused it (review
	// of session 23, S23-P1; the offers of S22-H1 and S22-H2).
	deferred := map[string]bool{}
	defer func() { // taken, or sent and not taken (the take gates, a failed condition, past this round's turns)
		for _, l := range sent {
			if _, held := p.held[l.shard]; held {
				outcome(l.shard, OfferTaken)
			} else if deferred[l.shard] {
				outcome(l.shard, OfferLater)
			} else {
				outcome(l.shard, OfferRefused)
			}
		}
	}()
	if p.renewsLeases() {
		// In turns (takeTurn); the offers not taken stay offered, for the
		// next round. In one call, waves of renewParallel on a slow table
		// outlasted the first wave's life (review, session 19, R19-3).
		for len(take) > 0 && ctx.Err() == nil && p.takeTurn() {
			n := min(len(take), renewParallel)
			_, d := p.takeLeases(ctx, take[:n])
			maps.Copy(deferred, d)
			take = take[n:]
		}
		left := make(map[string]bool, len(take))
		for _, l := range take {
			left[l.shard] = true
		}
		kept := done[:0]
		for _, id := range done {
			if !left[id] {
				kept = append(kept, id)
			}
		}
		done = kept
	} else {
		_, d := p.takeLeases(ctx, take)
		maps.Copy(deferred, d)
	}
	// The offers of the leases it holds now stay in its worker item until
	// the heartbeat whose held count includes them removes them
	// (countedHeld): held + offers, what the givers count of this poller,
	// never leaves them out (docs/exactly-once.md, "The givers' overshoot
	// (session 23)"). The rest are cleared now.
	cleared := done[:0]
	p.countMu.Lock()
	p.heldN.Store(int64(len(p.held)))
	for _, id := range done {
		if !offered[id] || keep[id] || deferred[id] {
			continue
		}
		if h, mine := p.held[id]; mine && !h.lost {
			p.taken[id] = true
			continue
		}
		cleared = append(cleared, id)
	}
	p.countMu.Unlock()
	done = cleared
	if len(done) == 0 {
		return
	}
	if err := p.store.clearOffers(ctx, p.cfg.Owner, done); err != nil && ctx.Err() == nil {
		p.writeFailed(err, "clearing the offers taken failed; they are read again")
	}
}

// parentDone reports whether s may be read as far as its parent goes (an
// error: the parent's checkpoint could not be read, nothing decided): it
// has none, the parent is not listed or gone, or it is known finished —
// if this poller does not know it, from a read of the parent's
// checkpoint. An offer names a shard whose parent its giver knew
// finished; the receiver does not take that on trust.
func (p *Poller) parentDone(ctx context.Context, s shard) (bool, error) {
	if s.parent == "" || p.finishedKnown(s.parent) || p.gone[s.parent] {
		return true, nil
	}
	if _, listed := p.shard(s.parent); !listed && !p.listed.IsZero() {
		return true, nil
	}
	// Listed, or no listing yet: a parent missing from a listing is gone
	// from the stream (trimmed), but before the first listing it is only
	// not known yet. Then its checkpoint says: finished, or not (a parent
	// whose checkpoint is gone too waits for the listing).
	cp, err := p.store.readCheckpoint(ctx, s.parent)
	if err != nil {
		return false, err
	}
	cp.read = time.Now()
	p.cps[s.parent] = cp
	return cp.finished, nil
}

// takeBound bounds a round's checkpoint reads before its takes, and its
// takes (a renewing poller's: also takeTurn). A poller holding no lease has nothing a long read can cost: a
// lease duration. A heartbeat poller's heartbeat runs on its own
// goroutine: a renewal interval. A poller that renews lease items in its
// rounds (the renewals wait for the round): half a renewal interval. Half
// an interval for a poller holding nothing starved a fleet: DynamoDB
// Local beside a loaded CI run answered none of 16 concurrent reads within
// 500 ms, round after round for five minutes, so two renewing pollers
// holding no lease never took one (reads cut at the bound all fail
// together). A renewing poller that holds leases can still take no more
// while its table answers slower than half an interval; the others, and
// any poller whose leases end, take the rest.
func (p *Poller) takeBound() time.Duration {
	switch {
	case len(p.held) == 0:
		return p.cfg.LeaseDuration
	case p.renewsLeases():
		return p.cfg.renewInterval() / 2
	}
	return p.cfg.renewInterval()
}

// takeShare takes free and expired leases up to this poller's share (of the
// shards in only, when set), for at most takeBound. Before
// a take it reads the checkpoints the decision needs, and only those: the
// shard's own when this poller has not read it (a finished shard is not
// taken), and its parent's when neither this poller nor the parent's lease
// knows the parent finished and nobody holds the parent's lease (a parent
// being read is not finished; one read within LeaseDuration and unfinished
// is not read again).
//
// A live poller's share does not bound its takes of the leases naming its
// owner name that it does not hold: another incarnation's (a previous
// life's, a superseded twin's) once foreignExpired holds, those without
// one (handed over to the name and not taken) and its own incarnation's
// (dropped at a fence or an expiry, or a release whose outcome it does not
// know) at once, as available says. It takes every one of them, and those
// first. Only it may take them once its beat moves (the other pollers
// judge a lease of its name by its beat), and balance plans from the held
// counts the worker items report, which count only what it holds: capped
// at its share, the rest were read by nobody, for good
// (docs/exactly-once.md, HB6-L1; S20-R3: its own leases left by a fencer
// whose takes failed before it rejoined). Once held they are counted, and
// balance hands the excess over.
func (p *Poller) takeShare(ctx context.Context, only map[string]bool) {
	target := p.shareTarget()
	if p.cfg.Drain {
		target = len(p.held) + len(p.shards) // a drain's share is the stream
	}
	listed := make(map[string]bool, len(p.shards))
	for _, s := range p.shards {
		listed[s.id] = true
	}
	var ready, blocked []shard
	own := map[string]bool{} // leases naming this owner that it does not hold (HB6-L1, S20-R3)
	for _, s := range p.shards {
		if only != nil && !only[s.id] {
			continue
		}
		if _, mine := p.held[s.id]; mine || p.finishedKnown(s.id) || p.gone[s.id] || p.givenUp(s.id) || p.drainLeaves(s) {
			continue
		}
		l := p.leaseOf(s)
		if free, _ := p.available(l); !free {
			continue
		}
		if l.owner == p.cfg.Owner && !p.cfg.Drain {
			own[s.id] = true
		}
		if s.parent == "" || !listed[s.parent] || p.finishedKnown(s.parent) || p.gone[s.parent] {
			ready = append(ready, s)
		} else {
			blocked = append(blocked, s)
		}
	}
	// Its name's leases over the share too: the share bounds the rest.
	target = max(target, len(p.held)+len(own))
	if len(p.held) >= target {
		return
	}
	rand.Shuffle(len(ready), func(i, j int) { ready[i], ready[j] = ready[j], ready[i] })
	rand.Shuffle(len(blocked), func(i, j int) { blocked[i], blocked[j] = blocked[j], blocked[i] })
	// Its name's leases first: read first, taken first.
	ownFirst := func(ss []shard) {
		sort.SliceStable(ss, func(i, j int) bool { return own[ss[i].id] && !own[ss[j].id] })
	}
	ownFirst(ready)
	ownFirst(blocked)
	want := target - len(p.held)
	// The reads a decision needs, for about twice the shards wanted, in one
	// concurrent batch.
	budget := 2*want + 16
	var reads []string
	asked := map[string]bool{}
	ask := func(id string) {
		if !asked[id] && len(reads) < budget {
			asked[id] = true
			reads = append(reads, id)
		}
	}
	fresh := func(id string) bool {
		cp, ok := p.cps[id]
		return ok && (cp.finished || cp.read.IsZero() || time.Since(cp.read) < p.cfg.LeaseDuration)
	}
	for _, s := range ready {
		if !fresh(s.id) {
			ask(s.id)
		}
	}
	for _, s := range blocked {
		if len(reads) >= budget {
			break
		}
		pl, ok := p.leases[s.parent]
		if _, mine := p.held[s.parent]; mine {
			continue
		}
		if ok && pl.owner != "" {
			if free, _ := p.available(pl); !free {
				continue // being read
			}
		}
		if !fresh(s.parent) {
			ask(s.parent)
		}
		if !fresh(s.id) {
			ask(s.id)
		}
	}
	bound := p.takeBound()
	if len(reads) > 0 {
		// Bounded like the takes.
		rctx, cancel := context.WithTimeout(ctx, bound)
		got := p.store.readCheckpoints(rctx, reads)
		cancel()
		if len(got) < len(reads) && ctx.Err() == nil {
			p.log.Warn("reading checkpoints before taking leases came back short; the rest are read at the next round", "asked", len(reads), "read", len(got), "within", bound.String())
		}
		for id, cp := range got {
			if old := p.cps[id]; old.finished {
				continue
			}
			p.cps[id] = cp
		}
	}
	until := time.Now().Add(bound)
	if next := p.lastRenew.Add(p.cfg.renewInterval()); only != nil && next.Before(until) {
		until = next // a reader's end does not hold up the next renewals
	}
	// The takes in concurrent batches (takeLeases), each no larger than
	// what the share still wants.
	var batch []lease
	order := append(ready, blocked...)
	ownFirst(order)
	for _, s := range order {
		if _, ok := p.cps[s.id]; !ok || p.finishedKnown(s.id) {
			continue // not read (past the batch), or finished
		}
		if s.parent != "" && listed[s.parent] && !p.finishedKnown(s.parent) && !p.gone[s.parent] {
			continue
		}
		l := p.leaseOf(s)
		if l.start == "" {
			// Taking it describes the shard in its lease item.
			l.parent, l.start = s.parent, s.start
		}
		batch = append(batch, l)
		if len(batch) < min(renewParallel, target-len(p.held)) {
			continue
		}
		if !p.takeTurn() {
			return
		}
		p.takeLeases(ctx, batch)
		batch = batch[:0]
		if len(p.held) >= target || ctx.Err() != nil || !time.Now().Before(until) {
			return
		}
	}
	if len(batch) > 0 && len(p.held) < target && p.takeTurn() {
		p.takeLeases(ctx, batch)
	}
}

// takeTurn reports whether a batch of takes may start now. A poller that
// renews lease items in its rounds (LeaseModeRenew, compat, a drain's
// reader ends) holds each lease it takes from the take's send and renews
// it at its next round, a renewal interval after this one ends: its round
// starts no batch later than half a renewal interval after its first
// (takesFrom, cleared at each pass), whatever it held before and
// whichever of takeOffers and takeShare takes. takeBound's lease
// duration for a poller holding nothing, and takeOffers' one call for
// every offer, let batches of takes on a slow table outlast the first
// ones' life: they expired before their first renewal (review, session
// 19, R19-1 and R19-3). A heartbeat poller's takes are kept by its
// heartbeat: always its turn.
func (p *Poller) takeTurn() bool {
	switch {
	case !p.renewsLeases():
		return true
	case p.takesFrom.IsZero():
		p.takesFrom = time.Now()
		return true
	}
	return time.Since(p.takesFrom) < p.cfg.renewInterval()/2
}

// leaseOf is s's lease as this poller last knew it (not existing, if it
// knows none).
func (p *Poller) leaseOf(s shard) lease {
	l, ok := p.leases[s.id]
	if !ok {
		l = lease{shard: s.id}
	}
	return l
}

// offerKids offers the children this poller registered and did not take
// to the live poller furthest under its share, as the registry last said.
func (p *Poller) offerKids(ctx context.Context, kids map[string]bool) {
	target := p.shareTarget()
	for id := range kids {
		if _, mine := p.held[id]; mine {
			continue
		}
		if l := p.leases[id]; l.owner != "" || l.finished {
			continue
		}
		best, bestHeld := "", target
		for _, o := range p.liveWorkers() {
			if h := p.heldBy(o); h < bestHeld && p.workers[o].receives(p.cfg.LeaseDuration) {
				best, bestHeld = o, h
			}
		}
		if best == "" {
			// Nobody under the share as the registry says, or nobody seen
			// beating yet: offered again at the next rounds (offerLeft).
			// The sweeps of a listed poller under its share find it too;
			// a joiner not listed yet has none (S21-W4).
			p.keepUnoffered(id)
			continue
		}
		if err := p.store.offer(ctx, best, id); err != nil {
			if !errors.Is(err, errConditionFailed) && ctx.Err() == nil {
				p.writeFailed(err, "offering a child shard failed; offered again at the next round", "shard", id, "to", best)
				p.keepUnoffered(id)
			}
			continue
		}
		delete(p.unoffered, id)
		p.tell(best)
	}
}

// stopKids is a graceful stop's discovery (shutdown, once the readers
// have stopped; not a drain's, not a superseded process's): the children
// of the shards this poller finished and did not look up yet (p.lookup,
// its readers' ends during the stop among them), those a listing had
// (finishedNow) and those it registered and neither took nor offered
// (p.unoffered) are looked up, registered and offered to the live
// pollers (offerAtStop), until until. Before, a stop dropped them: the
// other pollers look up only the children of the shards they finish
// themselves, so these waited for someone's next listing of the whole
// stream (DiscoverInterval, 5 minutes), and a rolling deploy did that at
// every stop that met a shard's end (issue 23, the fleet run of session
// 28: 39 records of one child unread for over 2.5 minutes). The offers
// are hints (claim H1): each receiver takes by its own conditional
// write, under every gate of takeLeases, after reading the parent
// finished (parentDone). What does not fit (a lookup throttled or past
// until, a stream that does not filter by parent, no live receiver, a
// write that failed) is logged and left to the next listing, as before.
func (p *Poller) stopKids(ctx context.Context, until time.Time) {
	if len(p.lookup) == 0 && len(p.finishedNow) == 0 && len(p.unoffered) == 0 {
		return
	}
	kctx, cancel := context.WithDeadline(withPaceUntil(ctx, until), until)
	defer cancel()
	p.newKids = map[string]bool{}
	p.unregistered = map[string]bool{}
	defer func() { p.newKids, p.unregistered = nil, nil }()
	if len(p.lookup) > 0 && !p.noFilter {
		p.lookupChildrenUntil(kctx, until) // registers the children found (registerChildren), in newKids
	}
	// Every child of a shard finished since the last endPass is to be
	// offered; those the listing had are registered as endPass registers
	// them.
	p.listedKids(kctx)
	kids := maps.Clone(p.newKids)
	maps.Copy(kids, p.unoffered)
	// A child whose registration did not land (refused, deferred by the
	// pacer, past the bound) has no lease item: its receiver, whose
	// listing predates it, could only clear the offer as unknown_shard,
	// and the stop counted it offered (review of session 28, S28-K1). It
	// is left to the next listing, and said so.
	for id := range p.unregistered {
		delete(kids, id)
	}
	offered, left := p.offerAtStop(kctx, kids)
	if offered > 0 {
		p.log.Info("stopping: the children of the shards finished offered to the live pollers", "children", offered)
	}
	if lookups := len(slices.Compact(slices.Sorted(slices.Values(p.lookup)))); lookups > 0 || left > 0 || len(p.unregistered) > 0 {
		p.log.Warn("stopping: children of the shards finished left to the next listing of the stream",
			"shards_not_looked_up", lookups, "children_not_registered", len(p.unregistered), "children_not_offered", left, "no_shard_filter", p.noFilter)
	}
}

// offerAtStop offers each of kids that nobody holds to a live poller, at
// a stop: every other poller that receives is a receiver (after this
// poller's leave every other's share rises), the one holding the fewest
// as this poller counts them, with what this stop hands it (heldBy:
// the leases handed over, handOverAll, and the offers told). It returns
// the children offered and those it could not offer.
func (p *Poller) offerAtStop(ctx context.Context, kids map[string]bool) (offered, left int) {
	var live []string
	for _, o := range p.liveWorkers() {
		if p.workers[o].receives(p.cfg.LeaseDuration) {
			live = append(live, o)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(kids)) {
		if _, mine := p.held[id]; mine {
			continue // a lease this stop hands over or releases
		}
		if l := p.leases[id]; l.owner != "" || l.finished || p.finishedKnown(id) || p.gone[id] {
			continue
		}
		for {
			if len(live) == 0 || ctx.Err() != nil {
				left++
				break
			}
			best := live[0]
			for _, o := range live[1:] {
				if p.heldBy(o) < p.heldBy(best) {
					best = o
				}
			}
			err := p.store.offer(ctx, best, id)
			if errors.Is(err, errConditionFailed) {
				// best's item is gone or left: the next receiver.
				live = slices.DeleteFunc(live, func(o string) bool { return o == best })
				continue
			}
			if err != nil {
				p.writeFailed(err, "stopping: offering a child shard failed; left to the next listing", "shard", id, "to", best)
				left++
				break
			}
			delete(p.unoffered, id)
			p.tell(best)
			offered++
			break
		}
	}
	return offered, left
}

func (p *Poller) keepUnoffered(id string) {
	if p.unoffered == nil {
		p.unoffered = map[string]bool{}
	}
	p.unoffered[id] = true
}

// offerLeft is a round's second try at the children this poller
// registered and could neither take nor offer (offerKids): those nobody
// holds yet are taken while this poller is under its share and offered
// otherwise. Without it such a child waited for a sweep, and a joiner
// whose first listing has not completed sweeps nothing: a holder at its
// share that registered a child before it saw the joiner's beat move (so
// before it could offer it one) left the child unread until the joiner's
// listing completed — for good while DescribeStream refused it (session
// 21, S21-W4: TestReviewS20J1_…/splits). A child held, finished, gone or
// another poller's is dropped from the set.
func (p *Poller) offerLeft(ctx context.Context) {
	if len(p.unoffered) == 0 || p.stopping || p.cfg.Drain {
		return
	}
	for id := range p.unoffered {
		_, mine := p.held[id]
		if l := p.leases[id]; mine || l.owner != "" || l.finished || p.finishedKnown(id) || p.gone[id] {
			delete(p.unoffered, id)
		}
	}
	if len(p.unoffered) == 0 {
		return
	}
	left := maps.Clone(p.unoffered)
	p.takeShare(ctx, left)
	for id := range left {
		if _, mine := p.held[id]; mine {
			delete(p.unoffered, id)
			delete(left, id)
		}
	}
	p.offerKids(ctx, left)
}

// untold is a lease handed over whose offer write failed: its receiver
// and the counter the release wrote.
type untold struct {
	to      string
	counter int64
}

// tellAgain offers again, at each round, the leases this poller handed
// over whose offer write failed (release). The receiver takes the leases
// of its name that it is not offered only at its share (takeShare), once
// its first listing has completed, and nobody else takes them while its
// beat moves: a joiner whose listing was refused left such a lease read
// by nobody, for good while DescribeStream refused it (review of
// session 22, S22-H1). Dropped once the write goes through (or finds the
// receiver's item gone or left), once the receiver is not live, and once
// this poller knows the lease moved on (another owner or counter, from a
// sweep). One offer write per such lease and round, until one lands.
func (p *Poller) tellAgain(ctx context.Context) {
	for id, u := range p.untold {
		if l := p.leases[id]; l.owner != u.to || l.counter != u.counter || !p.workers[u.to].live(p.cfg.LeaseDuration) {
			delete(p.untold, id)
			continue
		}
		err := p.store.offer(ctx, u.to, id)
		if err != nil && !errors.Is(err, errConditionFailed) {
			if ctx.Err() == nil {
				p.writeFailed(err, "telling the new owner of a lease handed over failed; told again at the next round", "shard", id, "to", u.to)
			}
			continue
		}
		delete(p.untold, id)
		if err == nil {
			p.tell(u.to)
		}
	}
}

// handOverAll names, for each lease this poller holds, the live poller
// furthest under its share to hand it over to at shutdown (none: it is
// released free).
func (p *Poller) handOverAll() {
	var live []string
	for _, o := range p.liveWorkers() {
		if p.workers[o].receives(p.cfg.LeaseDuration) {
			live = append(live, o)
		}
	}
	if len(live) == 0 {
		return
	}
	held := make(map[string]int, len(live))
	for _, o := range live {
		held[o] = p.heldBy(o)
	}
	for _, h := range p.held {
		if h.lost || h.finished || h.handoffTo != "" {
			continue
		}
		best := live[0]
		for _, o := range live[1:] {
			if held[o] < held[best] {
				best = o
			}
		}
		h.handoffTo = best
		held[best]++
	}
}

// sweepState is where the lease sweep goes on from.
type sweepState = map[string]ddbtypes.AttributeValue

// listingNote is what this poller's next worker write says of the
// stream's DescribeStream rate (docs/exactly-once.md, "The first
// listing's share of DescribeStream"): whether its first listing is
// under way (a heartbeat poller's only: its weight needs the heartbeat's
// validity), and the listing pollers whose announcement its rate counts,
// as its coordinator published them after setting that rate
// (shareDescribe), with that publication's generation (ackLanded). Safe
// from the heartbeat goroutine.
func (p *Poller) listingNote() listingNote {
	n := listingNote{listing: p.heartbeats() && !p.listedOnce.Load()}
	p.ackMu.Lock()
	n.seen, n.gen = p.ackSeen, p.ackGen
	p.ackMu.Unlock()
	return n
}

// listingNote is a worker write's part in sharing DescribeStream's rate
// (table.ListingNote); gen is the publication its seen came from.
type listingNote struct {
	listing bool
	seen    []string
	gen     uint64
}

// ackHold is an acknowledgement this poller's worker item may carry: gen,
// the last publication that included it; until, zero while a write may
// carry it, else when this poller's rate stops counting it (S27-J3).
type ackHold struct {
	gen   uint64
	until time.Time
}

// grantFor is how long a lister's grant lasts after the send of the
// registry read that showed every acknowledgement, and how long an
// acknowledger counts a lister after the answer of the write that
// removed its acknowledgement (S27-J3): the read that granted came before
// that write landed, so the count outlasts the grant. Longer than a
// renewal interval (a round reads the registry once per interval).
func (p *Poller) grantFor() time.Duration { return p.cfg.LeaseDuration / 2 }

// ackLanded applies a worker write of this poller that landed, answered
// at at, whose note n was published at generation n.gen and whose item,
// as written, acknowledges w.ListingSeen: an acknowledgement published
// before n.gen and not in the item is no longer carried, and is counted
// for grantFor more (S27-J3). Safe from the heartbeat goroutine.
func (p *Poller) ackLanded(n listingNote, w table.Worker, at time.Time) {
	p.ackMu.Lock()
	defer p.ackMu.Unlock()
	for k, h := range p.ackHeld {
		if h.until.IsZero() && h.gen < n.gen && !slices.Contains(w.ListingSeen, k) {
			p.ackHeld[k] = ackHold{gen: h.gen, until: at.Add(p.grantFor())}
		}
	}
}

// shareDescribe sets this poller's share of the stream's DescribeStream
// rate from its last read of the worker registry, then publishes the
// listing pollers that share counts for its next heartbeat to
// acknowledge (claim 2 of "The first listing's share of DescribeStream":
// the rate first). Another poller weighs listingWeight while its item
// announces its first listing and it is live (its beat moved within a
// lease duration: counted or not, so that a granted lister, whose
// heartbeat's validity runs, is never left out), 1 while counted (S17-D3),
// 0 otherwise; and an acknowledgement this poller's item may still carry
// weighs listingWeight besides, until grantFor after the write that
// removed it landed (S27-J3: a promise kept until its removal is known
// and the grants it made have ended). This poller weighs listingWeight
// only while its own first listing is under way and every other live
// poller's item acknowledged its announcement, and only while its
// heartbeat's validity runs and, when another's acknowledgement was
// needed, for grantFor after the send of the read that showed them
// (describeBudget.valid); 1 otherwise. A drain reads the registry too
// (its pass) and counts the others as a live poller does, weighing itself
// 1 (it writes no worker item: it announces and acknowledges nothing);
// before its first read it has the whole rate (review of session 27,
// S27-J2: the whole rate always, beside a listing fleet's).
func (p *Poller) shareDescribe() {
	d := p.cfg.LeaseDuration
	granted := p.heartbeats() && !p.listedOnce.Load()
	acks := false // another's acknowledgement needed
	total := 0.0
	var seen []string
	for o, w := range p.workers {
		live := w.live(d)
		switch {
		case live && w.listing:
			total += listingWeight
			seen = append(seen, table.ListingKey(o, w.inc))
		case w.counted(d):
			total++
		}
		if live {
			acks = true
			if !w.acked {
				granted = false
			}
		}
	}
	sort.Strings(seen)
	now := time.Now()
	p.ackMu.Lock()
	for k, h := range p.ackHeld {
		if !h.until.IsZero() && !now.Before(h.until) {
			delete(p.ackHeld, k)
			continue
		}
		if _, counted := slices.BinarySearch(seen, k); !counted {
			total += listingWeight // still acknowledged, or lately
		}
	}
	p.ackMu.Unlock()
	self := 1.0
	valid := p.validUntil
	if granted {
		self = listingWeight
		if acks {
			end := p.viewSent.Add(p.grantFor())
			valid = func() time.Time {
				if v := p.validUntil(); v.Before(end) {
					return v
				}
				return end
			}
		}
	}
	p.describe.share(self, self+total, valid)
	if p.cfg.Drain {
		return // no worker item: nothing to acknowledge
	}
	p.ackMu.Lock()
	old := p.ackSeen
	p.ackGen++
	p.ackSeen = seen
	for _, k := range seen {
		p.ackHeld[k] = ackHold{gen: p.ackGen}
	}
	p.ackMu.Unlock()
	if !sortedSubset(seen, old) {
		// A lister newly counted: acknowledged by a heartbeat now, not at
		// the next renewal interval (one more worker write per poller per
		// listing poller that appears).
		select {
		case p.ackNow <- struct{}{}:
		default:
		}
	}
}

// sortedSubset reports whether every element of a (sorted) is in b
// (sorted).
func sortedSubset(a, b []string) bool {
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			return false
		}
	}
	return true
}

// validUntil is when this poller's heartbeat validity ends (the epoch
// when none).
func (p *Poller) validUntil() time.Time { return fromMono(p.beatUntil.Load()) }
