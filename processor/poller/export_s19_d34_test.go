package poller

import "context"

// Round runs one of p's rounds as Run's ticker does (review, session 19):
// the registry read, the leases renewed, discovery when due.
func Round(ctx context.Context, p *Poller) error { return p.pass(ctx, true) }

// StopHeartbeat stops the heartbeat goroutine p's first round started (a
// test driving p's rounds without Run).
func StopHeartbeat(p *Poller) {
	if p.hbStop != nil {
		p.hbStop()
		p.hbStop = nil
	}
}
