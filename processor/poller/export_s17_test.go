package poller

import (
	"context"
	"time"
)

// FirstPass runs p's first round as Run does (review, session 17): the
// listing forced, the leases renewed and the registry read.
func FirstPass(ctx context.Context, p *Poller) error {
	p.forceList = true
	return p.pass(ctx, true)
}

// NextRound is how long p waits for its next round after the last.
func NextRound(p *Poller) time.Duration { return p.nextRound() }
