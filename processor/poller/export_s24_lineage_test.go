package poller

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// The review of the lineage hand-over (session 24): a giver driven round
// by round (FirstPass, Round), its readers' ends handled one at a time in
// the test's order, each as Run handles it.

var (
	keptMu sync.Mutex
	kept   = map[*Poller]map[string]readerResult{}
)

// AwaitReaderEnds waits up to timeout until the readers of shards have
// ended, keeping their results for EndReader (Run not running: nobody else
// reads them).
func AwaitReaderEnds(p *Poller, shards []string, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		keptMu.Lock()
		m := kept[p]
		if m == nil {
			m = map[string]readerResult{}
			kept[p] = m
		}
		var missing []string
		for _, s := range shards {
			if _, ok := m[s]; !ok {
				missing = append(missing, s)
			}
		}
		keptMu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case r := <-p.done:
			keptMu.Lock()
			m[r.shard] = r
			keptMu.Unlock()
		case <-deadline:
			return fmt.Errorf("readers of %v did not end within %s", missing, timeout)
		}
	}
}

// EndReader handles the kept end of shard's reader as Run does: readerDone,
// then a round (renew: the renewals were due) or a reader's end pass.
func EndReader(ctx context.Context, p *Poller, shard string, renew bool) error {
	keptMu.Lock()
	r, ok := kept[p][shard]
	delete(kept[p], shard)
	keptMu.Unlock()
	if !ok {
		return fmt.Errorf("no end of %s's reader kept", shard)
	}
	rc := p.round(ctx)
	p.readerDone(rc, r)
	if renew {
		return p.pass(rc, true)
	}
	return p.endPass(rc)
}

// StopDriven stops a poller driven round by round: the kept reader ends are
// handled, then the stop Run makes.
func StopDriven(ctx context.Context, p *Poller) {
	keptMu.Lock()
	rs := kept[p]
	delete(kept, p)
	keptMu.Unlock()
	for _, r := range rs {
		p.readerDone(ctx, r)
	}
	p.shutdown(ctx)
}

// HandingOver is, for each lease p holds that balance is handing over, its
// receiver.
func HandingOver(p *Poller) map[string]string {
	out := map[string]string{}
	for id, h := range p.held {
		if h.handoffTo != "" && !h.lost {
			out[id] = h.handoffTo
		}
	}
	return out
}

// Receives reports whether p sees owner receiving (live, its beat moving).
func Receives(p *Poller, owner string) bool {
	return p.workers[owner].receives(p.cfg.LeaseDuration)
}

// PassedOn is, for each entry of p's lineage, the child offered (or whose
// offer's outcome is unknown) by parent.
func PassedOn(p *Poller) map[string]string {
	out := map[string]string{}
	for parent, po := range p.lineage {
		out[parent] = po.kid + po.tried
	}
	return out
}

// Unoffered is the children p would offer again at its rounds (offerLeft).
func Unoffered(p *Poller) []string {
	var out []string
	for id := range p.unoffered {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
