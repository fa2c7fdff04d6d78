package poller

import (
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
	return b.String()
}

// drainLoss is the loss a drain whose work is complete reports: the trims
// its readers met (p.trims, kept across reader restarts) and the shards
// still marked gone that it never finished; nil when there are none, and
// for a live poller.
func (p *Poller) drainLoss() error {
	if !p.cfg.Drain {
		return nil
	}
	e := &DrainLossError{Trims: slices.Clone(p.trims)}
	for _, id := range slices.Sorted(maps.Keys(p.gone)) {
		if p.gone[id] && !p.cps[id].finished {
			e.Gone = append(e.Gone, DrainGone{Shard: id, Checkpoint: p.cps[id].seq})
		}
	}
	if len(e.Trims) == 0 && len(e.Gone) == 0 {
		return nil
	}
	return e
}
