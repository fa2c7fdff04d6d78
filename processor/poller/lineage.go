package poller

import (
	"context"
	"errors"
	"time"
)

// passOn is a hand-over whose shard this poller's own reader read to its
// end before the lease could go to its receiver (readerDone: released as
// finished, nothing left to read). One of the shard's children goes to the
// receiver instead, offered as the children of a finished shard are
// (offerKids), once they are registered (passOnKids). Without it the giver
// registered the children and took them itself while under its share: in
// the fleet benchmark's day of history 90% of the hand-overs to a joiner
// ended so, the joiner stayed 10–20% under its share until its own
// listing, and the move was planned again at every round with the same end
// (BENCHMARKS.md, "Session 23: the paced fleet"; docs/exactly-once.md, "A
// hand-over finished by the giver's reader (session 24)").
type passOn struct {
	to  string    // the receiver the lease was to go to
	at  time.Time // when the reader finished the shard: the entry's life starts
	kid string    // the child offered to to, once its offer was answered
	// tried is the child whose offer's outcome is unknown (an error that is
	// not a failed condition nor the pacer's deferral): the only one
	// offered again, and left to the
	// receiver by this poller's takes meanwhile (passedOn). Another child
	// chosen at the retry went to the receiver beside the first when that
	// one's offer had landed (a split: two leases for the one planned), and
	// the first, not left, was taken by this poller in the same pass (review
	// of session 24, S24-H2).
	tried string
}

// passingOn counts the entries whose child is not offered yet: each is a
// lease in transit, in this poller's held count (heldCount) and counted at
// its receiver in this poller's view (inFlight), as a lease whose
// handoffTo is set and whose reader has not ended.
func (p *Poller) passingOn(to string) int {
	n := 0
	for _, po := range p.lineage {
		if po.kid == "" && (to == "" || po.to == to) {
			n++
		}
	}
	return n
}

// heldCount is the held count this poller's worker writes report: the
// leases it holds and its hand-overs finished by its own reader whose
// child is not offered yet (passingOn), so that the fleet's sum does not
// drop while such a lease is in transit.
func (p *Poller) heldCount() int { return len(p.held) + p.passingOn("") }

// notePassOn records, at a reader's end that finished a shard whose lease
// was being handed to to, that one of the shard's children goes to to. Not
// while stopping (the stop hands its leases over, and the children are
// taken by the listed pollers' sweeps), not in a drain, and not to a
// poller that does not receive (a drain that asked for the lease reads no
// offers; a poller gone or never seen beating takes nothing handed to it).
func (p *Poller) notePassOn(parent, to string) {
	if to == "" || p.stopping || p.cfg.Drain || !p.workers[to].receives(p.cfg.LeaseDuration) {
		return
	}
	if p.lineage == nil {
		p.lineage = map[string]passOn{}
	}
	p.lineage[parent] = passOn{to: to, at: time.Now()}
}

// passOnKids offers, for each hand-over finished by this poller's reader,
// one child of its shard to its receiver, at the pass that knows the
// children (endPass, or a round's when the lookup waited): a child nobody
// holds, not finished. The child is taken out of the children this pass
// takes and offers itself (newKids), and this poller's takes skip it for
// the entry's life (passedOn). The receiver takes it as any offered child
// (takeOffers: its lease read, its parent finished, its own conditional
// write). An entry ends:
//   - once its child's offer is answered: the lease is then counted at the
//     receiver (its offers in its item; told in this poller's view) and no
//     more in this poller's held; kept, uncounted, as the child's name
//     until its life ends;
//   - when its receiver no longer receives (left, gone; also after its
//     child's offer was answered), or this poller stops, or the shard's
//     children are known and none is free (another poller took them, or
//     they are finished): nothing is passed on;
//   - at the end of its life, a lease duration after the shard finished
//     (children never known: a stream disabled, lookups refused; an offer
//     deferred or failed that long): the children are then taken or
//     offered as any other.
//
// An offer whose outcome is unknown (an error that is not a failed
// condition) keeps its entry, counted, for the next pass, which offers the
// same child again (tried; a second offer of it is the same member of the
// receiver's offers) and no other: once that child is held by anyone the
// entry ends. Meanwhile this poller's takes and offers leave it
// (passedOn). Children this poller's offers skip for the entry's life are
// dropped from unoffered: after it a free one is a sweep's, as any offered
// child the receiver did not take.
func (p *Poller) passOnKids(ctx context.Context) {
	for parent, po := range p.lineage {
		if p.stopping || p.cfg.Drain || time.Since(po.at) >= p.cfg.LeaseDuration {
			delete(p.lineage, parent)
			continue
		}
		if po.kid != "" {
			// Taken (by its receiver, or not); or its receiver no longer
			// receives (left, its beat stopped): this poller's takes no
			// longer leave the child to it, which otherwise waited for the
			// entry's life with nobody to take it (review of session 24,
			// S24-H3).
			if l := p.leases[po.kid]; l.owner != "" || l.finished || !p.workers[po.to].receives(p.cfg.LeaseDuration) {
				delete(p.lineage, parent)
			}
			continue
		}
		if !p.workers[po.to].receives(p.cfg.LeaseDuration) {
			delete(p.lineage, parent)
			continue
		}
		kid, known := "", false
		for _, s := range p.shards {
			if po.tried != "" && s.id != po.tried {
				continue // the child whose offer may have landed, and no other (S24-H2)
			}
			if s.parent != parent {
				continue
			}
			known = true
			_, mine := p.held[s.id]
			if l := p.leases[s.id]; mine || l.owner != "" || l.finished || p.finishedKnown(s.id) || p.gone[s.id] {
				continue
			}
			if kid == "" || s.id < kid {
				kid = s.id
			}
		}
		switch {
		case kid == "" && known:
			// Every child held or finished already; or the child whose
			// offer's outcome was unknown is: its offer landed and the
			// receiver took it, or someone else holds it.
			delete(p.lineage, parent)
			continue
		case kid == "":
			continue // not looked up yet: at a later pass
		}
		if err := p.store.offer(ctx, po.to, kid); err != nil {
			if errors.Is(err, errConditionFailed) {
				delete(p.lineage, parent) // the receiver's item is gone
			} else {
				if !errors.Is(err, errWriteDeferred) {
					po.tried = kid // it may have landed (a deferred one was not sent)
					p.lineage[parent] = po
				}
				if ctx.Err() == nil {
					p.writeFailed(err, "passing a child of a shard handed over on to its receiver failed; again at the next pass", "shard", kid, "to", po.to)
				}
			}
			continue
		}
		p.tell(po.to)
		delete(p.newKids, kid)
		delete(p.unoffered, kid)
		po.kid, po.tried = kid, ""
		p.lineage[parent] = po
		p.log.Info("a shard handed over was finished by this poller's reader; one of its children passed on to the receiver", "shard", parent, "child", kid, "to", po.to)
	}
}

// passedOn reports whether id is a child this poller offered to the
// receiver of a hand-over its reader finished (passOnKids), for the
// entry's life: its takes leave it to the receiver.
func (p *Poller) passedOn(id string) bool {
	for _, po := range p.lineage {
		if po.kid == id || po.tried == id {
			return true
		}
	}
	return false
}
