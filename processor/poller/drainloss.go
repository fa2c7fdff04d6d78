package poller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrDrainLost is what a drain's Run returns (errors.Is) when its work is
// complete but it met records it could not commit: records trimmed by the
// stream's retention before it reached them, or a shard gone from the
// stream before it was finished. The records are lost to the reports until
// `ledgerctl reconcile --repair` (docs/exactly-once.md, "The drain's
// promise"). `poller --drain` exits 4 on it.
var ErrDrainLost = errors.New("drain complete, but records readable at its start were lost to the reports")

// DrainLossError names what a drain met that it could not commit. Run
// returns it only for a drain, only when its work is otherwise complete
// (every shard finished, left or gone), and only when no other error ended
// the run.
type DrainLossError struct {
	// Trims are the trims the drain's readers met (each a
	// TrimmedDataAccessException: the records after After, up to the first
	// readable one, are lost to every consumer), whether or not another
	// consumer had counted the gap already (lostAt, LOSSES): either way the
	// drain did not commit them.
	Trims []DrainTrim
	// Gone are the shards the stream no longer had when the drain went to
	// read them, unfinished: their records after Checkpoint, if any, are
	// lost.
	Gone []DrainGone
	// Counted is how far the loss count (the LOSSES item every consumer
	// moves once per gap it meets: ledger_records_trimmed) moved during
	// the drain, by any consumer, this drain's readers included: a gap
	// another consumer counted (the shard's live owner, a stale one) may
	// hold records readable at the drain's start that the drain never
	// met, the owner's checkpoint having moved past them (review of
	// session 24, S24-L2).
	Counted int64
}

// DrainTrim is one trim a drain met on a shard.
type DrainTrim struct {
	Shard string
	After string // the sequence number the trim was met after; "" when nothing of the shard had been read or committed
}

// DrainGone is a shard gone from the stream before the drain finished it.
type DrainGone struct {
	Shard      string
	Checkpoint string // its checkpoint when the drain last read it; "" when nothing was committed
}

func (e *DrainLossError) Is(target error) bool { return target == ErrDrainLost }

func (e *DrainLossError) Error() string {
	var b strings.Builder
	b.WriteString(ErrDrainLost.Error())
	b.WriteString(" until `ledgerctl reconcile --repair`:")
	if len(e.Trims) > 0 {
		shards := map[string][]string{}
		var order []string
		for _, t := range e.Trims {
			if _, ok := shards[t.Shard]; !ok {
				order = append(order, t.Shard)
			}
			after := t.After
			if after == "" {
				after = "its start"
			}
			shards[t.Shard] = append(shards[t.Shard], after)
		}
		fmt.Fprintf(&b, " %d trim(s) met on %d shard(s) (records lost after the positions named:", len(e.Trims), len(order))
		for i, s := range order {
			if i > 0 {
				b.WriteString(";")
			}
			fmt.Fprintf(&b, " %s after %s", s, strings.Join(shards[s], ", "))
		}
		b.WriteString(")")
	}
	if len(e.Gone) > 0 {
		if len(e.Trims) > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %d shard(s) gone from the stream before the drain finished them (records lost after the checkpoint named:", len(e.Gone))
		for i, g := range e.Gone {
			if i > 0 {
				b.WriteString(";")
			}
			cp := g.Checkpoint
			if cp == "" {
				cp = "none"
			}
			fmt.Fprintf(&b, " %s checkpoint %s", g.Shard, cp)
		}
		b.WriteString(")")
	}
	if e.Counted > 0 {
		if len(e.Trims) > 0 || len(e.Gone) > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %d gap(s) of trimmed records counted during the drain by the consumers (the loss count, ledger_records_trimmed; this drain's trims included): records readable at its start may be among them", e.Counted)
	}
	return b.String()
}

// drainLoss is the loss a drain whose work is complete reports: the trims
// its readers met (p.trims, kept across reader restarts), the shards
// still marked gone that it never finished, and how far the loss count
// moved since its start (readLossesAtStart); nil when there are none, and
// for a live poller. A count it cannot read again (at the start or now)
// is logged and left out.
func (p *Poller) drainLoss(ctx context.Context) error {
	if !p.cfg.Drain {
		return nil
	}
	e := &DrainLossError{Trims: slices.Clone(p.trims)}
	for _, id := range slices.Sorted(maps.Keys(p.gone)) {
		if p.gone[id] && !p.cps[id].finished {
			e.Gone = append(e.Gone, DrainGone{Shard: id, Checkpoint: p.cps[id].seq})
		}
	}
	if p.lossesRead {
		if n, err := p.store.readLosses(ctx); err != nil {
			p.log.Warn("reading the loss count at the drain's end failed: gaps other consumers counted during the drain are not reported", "error", err.Error())
		} else if n > p.losses {
			e.Counted = n - p.losses
		}
	}
	if len(e.Trims) == 0 && len(e.Gone) == 0 && e.Counted == 0 {
		return nil
	}
	return e
}

// readLossesAtStart reads the loss count at a drain's start (before its
// first listing), for drainLoss: a gap counted during the drain by any
// consumer may hold records readable at its start that its own readers
// never met (another consumer read on past them; review of session 24,
// S24-L2). A read that fails is logged: that drain does not report the
// count.
func (p *Poller) readLossesAtStart(ctx context.Context) {
	n, err := p.store.readLosses(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("reading the loss count at the drain's start failed: gaps other consumers count during the drain will not be reported", "error", err.Error())
		}
		return
	}
	p.losses, p.lossesRead = n, true
}
