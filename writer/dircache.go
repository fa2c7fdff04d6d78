package writer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// The status of tenants and branches on the transaction path, cached.
//
// Until issue 13 every transaction create carried ConditionChecks on its
// tenant's and its branch's items. On AWS two transactions that name one
// item, even as a ConditionCheck, cannot both be in flight (the later is
// cancelled with TransactionConflict), so all creates of a tenant passed
// through its one item: a busy tenant's creates serialised and turned into
// retries and 409s (internal/ddbconflict reproduces it locally). Now a create,
// change or delete of a transaction names only its own items (the
// transaction, the idempotency record) and learns whether its tenant and
// branch exist and are active from this cache, read with a strongly
// consistent GetItem at most once per DirectoryTTL per tenant and branch
// and process. What that changes, and what it does not:
//
//   - Suspension is honoured within DirectoryTTL (default 5 s) of its
//     commit, on every writer, instead of at once: a write whose request
//     reads the status later than that is refused. (A PATCH of a tenant or
//     branch through this process takes effect in it at once.)
//   - No transaction is ever left under a deleted branch, exactly as before:
//     a branch with its hasTransactions marker can never be deleted (the
//     delete is conditional on its absence, and the marker is never
//     removed), so a cached "marked" is true forever; a create that has not
//     seen the marker sets it in its own TransactWriteItems, with an Update
//     of the branch conditional on the branch being active, as before.
//     That Update is the only write of a create to a shared item, once per
//     branch. A branch without the marker is never cached (its first
//     creates read it until they see the marker, so a stale "not marked"
//     cannot make later creates set it again, and conflict, for a TTL),
//     and a create whose marker attempt did not commit waits, for a
//     bounded time, for the create that holds the branch to commit its
//     marker (awaitMarked) instead of conflicting with it again.
//   - Tenants are never deleted; a missing tenant or branch is never
//     cached (it may be created a moment later).
//   - The same reads give what stamps a transaction (issue 22): the
//     branch's calendar and its tenant's reportPeriods. A change of either
//     applies to the transactions written after it: at once through the
//     writer that commits it (its PATCH forgets the entry), within
//     DirectoryTTL on every other. A stored calendar or reportPeriods that
//     does not decode (damaged by hand) is kept as an error: the
//     branch's creates and changes fail (500, logged) rather than being
//     stamped with periods nobody chose; its deletes go on.
//   - And the branch's currency (issue 24, currency.go), stamped on each
//     transaction and the bound of its amount's fraction digits. It never
//     changes once the branch is marked, the only state in which it is
//     cached.

// directoryStatus is what the transaction path knows of a tenant or branch.
type directoryStatus struct {
	exists, active bool
	marked         bool                    // branches: hasTransactions
	calendar       aggregates.Calendar     // branches: the business calendar
	currency       string                  // branches: the currency, "" for none
	currencyErr    error                   // branches: the stored currency is not a valid code
	periods        []aggregates.PeriodType // tenants: reportPeriods
	changedAt      time.Time               // calendarChangedAt or reportPeriodsChangedAt
	damaged        error                   // the calendar or reportPeriods does not decode
	held           string                  // branches: the rebase holding its writes (table.AttrWriteHold), "" none
	expires        time.Time
}

type statusCache struct {
	ttl time.Duration // ≤ 0: read every time
	now func() time.Time

	mu      sync.Mutex
	entries map[aggregates.Key]directoryStatus
}

func newStatusCache(ttl time.Duration, now func() time.Time) *statusCache {
	return &statusCache{ttl: ttl, now: now, entries: map[aggregates.Key]directoryStatus{}}
}

// maxStatusEntries bounds the cache; past it, it starts afresh.
const maxStatusEntries = 100_000

// status returns the status of the item at k, from the cache or read.
// branch says k is a branch's: one without the marker is not cached.
func (s *Server) status(ctx context.Context, k aggregates.Key, branch bool) (directoryStatus, error) {
	c := s.statuses
	c.mu.Lock()
	e, ok := c.entries[k]
	c.mu.Unlock()
	if ok && c.now().Before(e.expires) {
		s.metrics.DirectoryCache.WithLabelValues("hit").Inc()
		return e, nil
	}
	s.metrics.DirectoryCache.WithLabelValues("miss").Inc()
	item, err := s.getItem(ctx, k)
	if err != nil {
		return directoryStatus{}, err
	}
	e = directoryStatus{exists: item != nil}
	if item != nil {
		st, _ := stringAttr(item, attrStatus)
		e.active = st == string(aggregates.StatusActive)
		e.marked = boolAttr(item, attrHasTransactions)
		changed := table.AttrReportPeriodsChangedAt
		if branch {
			changed = table.AttrCalendarChangedAt
			e.calendar, e.damaged = table.DecodeCalendar(item)
			e.currency, e.currencyErr = table.BranchCurrency(item)
			e.held, _ = stringAttr(item, table.AttrWriteHold)
		} else {
			e.periods, e.damaged = table.DecodeReportPeriods(item)
		}
		if at, ok := stringAttr(item, changed); ok {
			e.changedAt, _ = time.Parse(time.RFC3339Nano, at)
		}
	}
	if e.exists && c.ttl > 0 && (e.marked || !branch) {
		e.expires = c.now().Add(c.ttl)
		c.mu.Lock()
		if len(c.entries) >= maxStatusEntries {
			clear(c.entries)
		}
		c.entries[k] = e
		c.mu.Unlock()
	}
	return e, nil
}

// forget drops the cached status of the item at k: this process changed it.
func (s *Server) forget(k aggregates.Key) {
	s.statuses.mu.Lock()
	delete(s.statuses.entries, k)
	s.statuses.mu.Unlock()
}

// activeBranch is what the transaction path knows of an active branch.
type activeBranch struct {
	marked bool // the branch has its hasTransactions marker
	// calendar stamps the branch's transactions: its calendar and its
	// tenant's period types; calendarErr, when the stored calendar or
	// reportPeriods does not decode, wraps errCalendarDamaged.
	calendar    table.BranchCalendar
	calendarErr error
	// currency is the branch's currency, "" for none: stamped on its
	// transactions, and the bound of their amounts' fraction digits;
	// currencyErr, when the stored currency is not a valid code, wraps
	// errCurrencyDamaged.
	currency    string
	currencyErr error
}

// stamp stamps t with the branch's calendar (Transaction.stamp) and
// currency; a damaged calendar or currency is the error, an amount with
// more fraction digits than the currency has the 422 naming amount.
func (a activeBranch) stamp(t *Transaction) (*Problem, error) {
	if err := errors.Join(a.calendarErr, a.currencyErr); err != nil {
		return nil, err
	}
	if p := checkAmountCurrency(t.Amount, a.currency); p != nil {
		return p, nil
	}
	t.Currency = a.currency
	return t.stamp(a.calendar)
}

// activeBranch checks, from the cache, that tenant and branch exist and are
// active: a 404 or 409 otherwise.
func (s *Server) activeBranch(ctx context.Context, tenant, branch string) (activeBranch, *Problem, error) {
	t, err := s.status(ctx, aggregates.TenantKey(tenant), false)
	if err != nil {
		return activeBranch{}, nil, err
	}
	switch {
	case !t.exists:
		return activeBranch{}, notFoundOf("tenant " + tenant + " (create it first: POST /v1/tenants)"), nil
	case !t.active:
		return activeBranch{}, tenantSuspended(tenant), nil
	}
	b, err := s.status(ctx, aggregates.BranchKey(tenant, branch), true)
	if err != nil {
		return activeBranch{}, nil, err
	}
	switch {
	case !b.exists:
		return activeBranch{}, branchNotFound(tenant, branch), nil
	case !b.active:
		return activeBranch{}, branchSuspended(branch), nil
	case b.held != "":
		// A rebase holds the branch's writes (ledgerctl reconcile --rebase
		// --hold): liveness only, seen within DirectoryTTL.
		s.metrics.WritesRefused.WithLabelValues("held").Inc()
		return activeBranch{}, problem(http.StatusServiceUnavailable, ProblemWritesDisabled,
			"writes to branch "+branch+" are held while it is rebased (hold "+b.held+"); reads are served").withHeader("Retry-After", "10"), nil
	}
	a := activeBranch{marked: b.marked, currency: b.currency, calendar: table.BranchCalendar{Calendar: b.calendar, Periods: t.periods, ChangedAt: b.changedAt}}
	if t.changedAt.After(a.calendar.ChangedAt) {
		a.calendar.ChangedAt = t.changedAt
	}
	if err := errors.Join(b.damaged, t.damaged); err != nil {
		a.calendarErr = fmt.Errorf("tenant %s, branch %s: %w: %w", tenant, branch, errCalendarDamaged, err)
	}
	if b.currencyErr != nil {
		a.currencyErr = fmt.Errorf("tenant %s, branch %s: %w: %w", tenant, branch, errCurrencyDamaged, b.currencyErr)
	}
	return a, nil, nil
}

// Waiting for a branch's marker (awaitMarked): reads, with the pause
// between them doubling from markPollFirst to markPollMax, at most
// markPolls of them (about 2.5 s in all).
const (
	markPolls     = 16
	markPollFirst = 10 * time.Millisecond
	markPollMax   = 200 * time.Millisecond
)

// awaitMarked is called by a create whose attempt to set the branch's
// hasTransactions marker did not commit: another transaction held the
// branch item, most likely another first create setting the marker. It
// reads the branch (strongly consistent, not from the cache) until the
// marker is there, the branch is gone or not active, or markPolls reads
// have been made; the create then prepares again from what it read, so it
// sets the marker itself only if no one else did. A create that tried
// again at once would conflict with the holder for as long as it is in
// flight, and be answered 409 after maxCommitAttempts.
func (s *Server) awaitMarked(ctx context.Context, tenant, branch string) error {
	k := aggregates.BranchKey(tenant, branch)
	s.forget(k)
	pause := markPollFirst
	for i := 1; ; i++ {
		b, err := s.status(ctx, k, true)
		if err != nil || !b.exists || !b.active || b.marked || i == markPolls {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, markPollMax)
	}
}

func tenantSuspended(tenant string) *Problem {
	return problem(http.StatusConflict, ProblemTenantSuspended,
		"tenant "+tenant+" is suspended: its transactions cannot be created, changed or deleted; they and its reports stay readable")
}

// branchNotFound is the 404 of a transaction under a branch that does not
// exist.
func branchNotFound(tenant, branch string) *Problem {
	return notFoundOf("branch " + branch + " of tenant " + tenant + " (create it first: POST /v1/tenants/" + tenant + "/branches)")
}

func branchSuspended(branch string) *Problem {
	return problem(http.StatusConflict, ProblemBranchSuspended,
		"branch "+branch+" is suspended: its transactions cannot be created, changed or deleted; they and its reports stay readable")
}
