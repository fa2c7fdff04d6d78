package poller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// This file tells two live processes given one owner name apart
// (docs/exactly-once.md, review of the heartbeat, HB6). Each Poller has an
// incarnation, a random id drawn at New (never a time: clocks play no
// part). Its first worker-item write claims the item for it (sets the
// incarnation whatever the item says); every later write is conditional
// on the incarnation still being its own, and every lease it takes carries
// it. A process whose write is refused re-reads the item: another
// incarnation there means another process of its name claimed it since,
// and the older one stops (Run returns an *OwnerInUseError); the newer
// keeps running, and takes the older one's leases only once they have
// stood unchanged for a lease duration after its claim landed.

// ErrOwnerInUse is what an *OwnerInUseError matches with errors.Is.
var ErrOwnerInUse = errors.New("owner in use by another poller process")

// OwnerInUseError is Run's error when another live process given the same
// Config.Owner took this poller's worker item over (its claim landed after
// this poller's): this poller dropped every lease and stopped; the other
// keeps the name. A drain returns it when the registry shows a live poller
// of its own name. Owners must be unique among the live pollers and
// drains of a stream (docs/runbook.md, "Two pollers with one owner").
type OwnerInUseError struct {
	Owner  string // the owner name both use
	Mine   string // this process's incarnation
	Theirs string // the incarnation the item names now ("" for a drain that saw the beat move)
}

func (e *OwnerInUseError) Error() string {
	if e.Theirs == "" {
		return fmt.Sprintf("owner %q is in use by a live poller process (this drain's incarnation %s): owners must be unique; this process stopped", e.Owner, e.Mine)
	}
	return fmt.Sprintf("owner %q is in use by another poller process (incarnation %s; this one %s), which claimed the worker item after this one: owners must be unique; this process dropped its leases and stopped", e.Owner, e.Theirs, e.Mine)
}

// Unwrap makes errors.Is(err, ErrOwnerInUse) hold.
func (e *OwnerInUseError) Unwrap() error { return ErrOwnerInUse }

// newIncarnation draws a process's incarnation: 16 random hex digits.
func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24: it panics instead)
	return hex.EncodeToString(b[:])
}

// Incarnation is this poller's process id in the worker item and its
// lease items.
func (p *Poller) Incarnation() string { return p.inc }

// errRefused is a worker write whose condition failed and whose re-read
// showed no reason (the item as the condition wants it): its outcome is
// unknown, it is tried again.
var errRefused = errors.New("worker write refused, and the item re-read shows no reason")

// refused classifies a worker write of this process refused by its
// condition, from a consistent read of the item: another incarnation
// claimed it (once born, an *OwnerInUseError), it is fenced or deleted or,
// once born, re-created by a version without incarnations (errFenced: the
// rejoin), or none of those (errRefused: tried again; for a claim, which
// is conditional on the incarnation its sender read, another claim landed
// since the read: session 19's review of HB6, R1). The incarnation is
// looked at first: a fence on an item another process claimed is that
// process's.
func (s *store) refused(ctx context.Context, owner, inc string, born bool, cause error) error {
	item, err := s.readItem(ctx, aggregates.WorkerKey(s.streamARN, owner))
	if err != nil {
		return fmt.Errorf("%w; re-reading the worker item: %w", cause, err)
	}
	if item == nil {
		return fmt.Errorf("%w (the item is gone): %w", errFenced, cause)
	}
	w := table.DecodeWorker(item)
	switch {
	case born && w.Incarnation != "" && w.Incarnation != inc:
		return &OwnerInUseError{Owner: owner, Mine: inc, Theirs: w.Incarnation}
	case w.Fenced || born && w.Incarnation != inc:
		return fmt.Errorf("%w: %w", errFenced, cause)
	}
	// A claim (not born) refused by an unfenced item: another claim landed
	// since its read (table.ClaimedFrom); it is made again on a new read.
	return fmt.Errorf("%w: %w", errRefused, cause)
}

// supersede records that another process of this owner name claimed the
// worker item: the heartbeat stops, and Run drops every lease and returns
// err. The first error recorded is kept.
func (p *Poller) supersede(err *OwnerInUseError) {
	if p.superseded.CompareAndSwap(nil, err) {
		close(p.supersededC)
		p.log.Error("another poller process uses this owner name and claimed its worker item after this one: dropping every lease and stopping (owners must be unique)",
			"incarnation", err.Mine, "other_incarnation", err.Theirs)
	}
}

// supersededErr is the error Run returns once supersede was called.
func (p *Poller) supersededErr() error {
	if e := p.superseded.Load(); e != nil {
		return e
	}
	return nil
}

// foreign reports whether l names this poller's owner but was taken by
// another process (another incarnation: a previous life, or a live process
// given the same name). A lease without an incarnation (handed over to
// this name, which removes it, or taken by a version before incarnations)
// is not: it is taken at once, as before.
func (p *Poller) foreign(l lease) bool {
	return l.owner == p.cfg.Owner && l.incarnation != "" && l.incarnation != p.inc
}

// foreignExpired reports whether a live poller may take l, a lease of its
// own name taken by another incarnation: l was read with the same owner
// and counter at two reads a lease duration apart, the last a lease
// duration or more after this process's claim was answered. The other
// process's heartbeats fail from the claim on (its validity ends within a
// lease duration of it), and a renewing one's validity ends within a lease
// duration of its last renewal, which the unchanged counter puts before
// the first read. So neither reads the shard any more when this one takes
// it (the argument: docs/exactly-once.md, HB6).
func (p *Poller) foreignExpired(l lease) bool {
	o, seen := p.seen[l.shard]
	born := p.born.Load()
	return seen && born != 0 && o.owner == l.owner && o.counter == l.counter &&
		o.last.Sub(o.at) >= p.cfg.LeaseDuration && o.last.Sub(fromMono(born)) >= p.cfg.LeaseDuration
}
