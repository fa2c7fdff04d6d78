package writer

import (
	"context"
	"sync"
	"time"

	"github.com/ledger-dev/ledger/table"
)

// flagCache serves the flags to the request path: read with GetItem at most
// once per ttl (once per errTTL after a failed read), one read at a time.
// It fails closed: a missing item means writes disabled, and an unreadable
// one is an error, upon which mutations are refused.
type flagCache struct {
	api     table.FlagsAPI
	table   string
	ttl     time.Duration
	errTTL  time.Duration
	timeout time.Duration
	now     func() time.Time
	metrics *Metrics

	refresh sync.Mutex // held while reading the item: one read at a time

	mu    sync.Mutex
	entry flagEntry
}

// get returns the cached flags, reading them when the cache has expired.
func (c *flagCache) get(ctx context.Context) (table.Flags, error) {
	if e, ok := c.cached(); ok {
		return e.flags, e.err
	}
	c.refresh.Lock()
	defer c.refresh.Unlock()
	if e, ok := c.cached(); ok { // another request read it meanwhile
		return e.flags, e.err
	}
	// The read outlives a cancelled request: its result serves the others.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	f, err := table.GetFlags(rctx, c.api, c.table)
	ttl := c.ttl
	switch {
	case err != nil:
		ttl = c.errTTL
		c.metrics.FlagsReads.WithLabelValues("error").Inc()
	case !f.Exists:
		c.metrics.FlagsReads.WithLabelValues("missing").Inc()
	default:
		c.metrics.FlagsReads.WithLabelValues("ok").Inc()
	}
	c.mu.Lock()
	c.entry = flagEntry{flags: f, err: err, expires: c.now().Add(ttl)}
	c.mu.Unlock()
	return f, err
}

// flagEntry is one read of the flags: its result and when it expires.
type flagEntry struct {
	flags   table.Flags
	err     error
	expires time.Time
}

func (c *flagCache) cached() (flagEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entry.expires.IsZero() || !c.now().Before(c.entry.expires) {
		return flagEntry{}, false
	}
	return c.entry, true
}
