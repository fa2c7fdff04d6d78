package poller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// readerResult is how a shard reader ended.
type readerResult struct {
	shard    string
	finished bool // the shard is closed, read to its end, and marked finished
	drained  bool // drain mode: read to the shard's current end, all committed
	err      error
	// trims are the positions this reader met a trim after (reader.trimmed),
	// whatever it ended with: a drain reports them (DrainLossError).
	trims []string
}

// errShardGone means the stream no longer has the shard (trimmed away) or
// no longer exists, as DescribeStream confirmed (reader.notFound).
var errShardGone = errors.New("shard no longer exists")

// reader reads one leased shard in order and hands its records to the
// processor as batches of at most Config.BatchRecords: the pages read while
// the shard is behind (full pages) or within the batching window
// (Config.BatchWindow), or while it resumes a half-committed batch that
// reaches past a shorter page, the records of that batch. That is what is
// in memory per shard, whatever the backlog, and all shards' together stay
// within the poller's budget (Config.MaxHeldRecords, budget.go).
type reader struct {
	p     *Poller
	shard shard
	start StartPosition // where to open when the shard has no checkpoint
	// atStart: without a checkpoint, open at the shard's starting sequence
	// number (AT_SEQUENCE_NUMBER) rather than TRIM_HORIZON, so that a
	// start trimmed away answers TrimmedDataAccessException: set for the
	// children of shards read before, whose every record was due.
	atStart bool
	log     *slog.Logger
	// ctx ends when the lease is lost or expires, or the shutdown's grace
	// is over: every call, commits included, is abandoned.
	ctx context.Context
	// stop asks for a graceful end: finish the batch in hand, move the
	// checkpoint, return.
	stop <-chan struct{}

	guard *processor.ShardGuard
	// carry holds the records read but not yet committed, handed over again
	// with the next page: pages gathered into one batch while the shard is
	// behind or within the batching window, or records that end before the
	// checkpoint's pending batch does (ErrIncompleteBatch). Set it with
	// setCarry (the held-records gauge follows it). since is when its first
	// record was read: the batching window counts from there.
	carry      []processor.Record
	carryBytes int64 // the carried records' SizeBytes
	since      time.Time
	// reserved is what this reader has taken from the poller's records
	// budget: the carried records, and while a read is in flight or a
	// batch is being committed, those too. incomplete: the records carried
	// end before a half-committed batch does (ErrIncompleteBatch), so the
	// reader must read on before it can commit them.
	reserved      int
	reservedBytes int // the same in the bytes budget: SizeBytes, a page's 1 MiB while it is read
	incomplete    bool
	// stale: the iterator is past records that were not processed (a
	// failed page whose reopen failed); reopen before reading again.
	stale bool
	held  string  // last record fully processed (committed, or with no effect)
	iter  *string // nil at the shard's end
	// pos is the sequence number the iterator reads after: the checkpoint
	// it was opened after ("" at the shard's start), then the last record
	// of each page read. A trim met by the iterator proves the records
	// after it lost (ShardGuard.Trimmed); an iterator reopened at
	// TRIM_HORIZON after a trim takes the trim point until it reads a
	// record.
	pos    string
	opened bool
	// inRow: empty pages in a row on the current iterator chain (each
	// read with the next iterator of the one before), the drain's count
	// toward DrainEmptyPages; an iterator opened anew (open, trimmed)
	// starts it again: a new iterator may answer empty pages before
	// records as the first did (S25-D1).
	inRow    int
	lastRead time.Time
	lastMove time.Time
	// trims are the positions this reader met trims after (trimmed), and
	// trimGuards the guard each was given to: handed to the coordinator
	// with its result (readerResult.trims), but for those a guard found
	// past (ShardGuard.TrimPassed: another consumer's checkpoint after the
	// trim point; a loss after it is a trim met by a read after it).
	trims      []string
	trimGuards []*processor.ShardGuard
}

func (r *reader) stopping() bool {
	select {
	case <-r.stop:
		return true
	default:
		return r.ctx.Err() != nil
	}
}

// wait sleeps d unless stopped or cancelled first; it reports whether the
// reader should go on.
func (r *reader) wait(d time.Duration) bool {
	if d <= 0 {
		return !r.stopping()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stop:
		return false
	case <-r.ctx.Done():
		return false
	}
}

// newGuard starts a fresh guard, committing each page as one batch, and
// drops the records carried (the caller reopens after the checkpoint, which
// is never past them: they are read again).
func (r *reader) newGuard() {
	r.guard = r.p.proc.ShardGuard(r.p.cfg.StreamARN, r.shard.id)
	r.guard.CommitBatches()
	r.setCarry(nil)
	r.incomplete = false
}

// setCarry sets the records carried to the next read, keeping
// ledger_poller_held_records and ledger_poller_held_bytes in step.
func (r *reader) setCarry(recs []processor.Record) {
	if d := len(recs) - len(r.carry); d != 0 {
		r.p.m.HeldRecords.Add(float64(d))
	}
	var size int64
	for i := range recs {
		size += recs[i].SizeBytes
	}
	if d := size - r.carryBytes; d != 0 {
		r.p.m.HeldBytes.Add(float64(d))
	}
	r.carry, r.carryBytes = recs, size
}

// settle gives back to the budgets what the reader took beyond the
// records it carries: the unused part of a page's limit, a committed batch.
func (r *reader) settle() { r.keep(len(r.carry), int(r.carryBytes)) }

// keep gives back to the budgets what the reader took beyond n records of
// size bytes. Bytes past what it took (a page larger than 1 MiB, which AWS
// does not answer) are counted past the budget.
func (r *reader) keep(n, size int) {
	if r.reserved > n {
		r.p.budget.give(r.reserved - n)
		r.reserved = n
	}
	switch {
	case r.reservedBytes > size:
		r.p.bytes.give(r.reservedBytes - size)
		r.reservedBytes = size
	case r.reservedBytes < size:
		r.p.bytes.force(size - r.reservedBytes)
		r.reservedBytes = size
	}
}

// take reserves the budget for a read of up to limit records and returns
// the read's limit: 0 when the reader should not read now. A reader that
// carries nothing waits for its turn; one that carries a batch takes only
// what is free at once with no one waiting, and otherwise gets 0 and
// commits what it carries first (so that the budget comes back); one that
// must read on to finish a half-committed batch takes its limit whatever
// the budget says.
//
// The read's 1 MiB of the bytes budget is taken the same way, after the
// records (a reader waiting for bytes holds no bytes, and no holder of
// bytes needs records to give them back); without it the records taken
// are given back.
func (r *reader) take(limit int) int {
	var got int
	switch {
	case r.incomplete:
		r.p.budget.force(limit)
		got = limit
	case len(r.carry) > 0:
		got = r.p.budget.tryTake(limit)
	default:
		got = r.p.budget.take(r.ctx, r.stop, limit)
	}
	if got == 0 {
		return 0
	}
	var bytes int
	switch {
	case r.incomplete:
		r.p.bytes.force(pageBytes)
		bytes = pageBytes
	case len(r.carry) > 0:
		bytes = r.p.bytes.tryTake(pageBytes)
	default:
		bytes = r.p.bytes.take(r.ctx, r.stop, pageBytes)
	}
	if bytes == 0 {
		r.p.budget.give(got)
		return 0
	}
	r.reserved += got
	r.reservedBytes += bytes
	return got
}

// idleWait waits after the n-th empty page in a row (no records carried):
// Poller.idleBackoff, growing past IdleBackoff only for an open shard
// outside a drain.
func (r *reader) idleWait(n int) {
	d := r.p.idleBackoff(n, !r.p.cfg.Drain && !r.shard.closed)
	if h := r.p.idleHook; h != nil {
		h(r.shard.id, n, d)
		return
	}
	r.wait(d)
}

// hold reports whether the records in hand, recs (the carried ones and the
// page of n records just read with limit), are kept for the next read
// rather than committed now: while the shard is behind (a full page) or the
// batching window is open, when the batch has room left. Nothing is held at
// a closed shard's end, on a stop, or by a drain that has caught up (an
// empty page).
func (r *reader) hold(recs []processor.Record, n, limit int) bool {
	cfg := &r.p.cfg
	if r.iter == nil || len(recs) >= cfg.BatchRecords || r.stopping() {
		return false
	}
	if n >= limit {
		return true // behind: read on
	}
	if cfg.BatchWindow <= 0 || (cfg.Drain && n == 0) {
		return false
	}
	return time.Since(r.since) < cfg.BatchWindow
}

// process hands recs to the processor and moves what is held up to the
// last record finished, all of recs when it returns nil.
func (r *reader) process(recs []processor.Record) error {
	before, _ := r.guard.Checkpoint(r.ctx) // loads what Process reads first anyway
	pr, err := r.p.proc.Process(r.ctx, r.guard, recs)
	r.p.addCommitted(recs[:pr.Committed], before)
	if err == nil {
		r.advanceHeld(recs[len(recs)-1].SequenceNumber)
		return nil
	}
	be := (*processor.BatchError)(nil)
	if errors.As(err, &be) && be.Index > 0 {
		r.advanceHeld(recs[be.Index-1].SequenceNumber)
	}
	return err
}

// run reads the shard until its end, a stop, a drain's catch-up, the loss
// of the lease or too many failures.
func (r *reader) run() (res readerResult) {
	res.shard = r.shard.id
	cfg := &r.p.cfg
	r.log.Info("shard reader started")
	r.p.budget.join()
	r.p.bytes.join()
	defer func() {
		r.log.Info("shard reader stopped", "finished", res.finished, "drained", res.drained, "held", r.held, "error", errString(res.err))
		for i, g := range r.trimGuards {
			if !g.TrimPassed() {
				res.trims = append(res.trims, r.trims[i])
			}
		}
		r.setCarry(nil) // not committed: read again after the checkpoint
		r.keep(0, 0)
		r.p.budget.leave()
		r.p.bytes.leave()
	}()
	r.newGuard()
	r.lastMove = time.Now()
	// empty: empty pages in a row (the idle backoff's n; r.inRow is the
	// same on the current iterator chain).
	failures, empty := 0, 0
	fail := func(reason string, err error) bool {
		if errors.Is(err, table.ErrCheckpointProtocol) {
			// Fenced by another protocol: no retry moves it (S25-F1); the
			// reader ends and the poller gives the lease up (readerDone).
			res.err = err
			return false
		}
		failures++
		if failures > cfg.MaxReadFailures {
			res.err = fmt.Errorf("shard %s: %d failures in a row: %w", r.shard.id, failures, err)
			return false
		}
		r.log.Warn("shard read failed; backing off", "reason", reason, "failures", failures, "error", err.Error())
		return r.wait(r.p.throttleBackoff(failures))
	}
	for err := r.open(); err != nil; err = r.open() {
		// A failed open (a faulted read) is retried, not a reader restart.
		if errors.Is(err, errShardGone) || !fail("open", err) {
			if res.err == nil {
				res.err = err
			}
			return res
		}
	}
	failures = 0
	// commit processes recs (the records carried and the page of n just
	// read; n < 0: no page, the carried records are committed early to
	// give the budget back). It reports whether the reader goes on.
	commit := func(recs []processor.Record, n int) bool {
		defer r.settle()
		if err := r.process(recs); err != nil {
			if r.ctx.Err() != nil {
				res.err = r.ctx.Err()
				return false
			}
			be := (*processor.BatchError)(nil)
			if errors.As(err, &be) && errors.Is(err, processor.ErrIncompleteBatch) {
				// A half-committed batch reaches past this page (a retry or a
				// takeover read a shorter one): read on, keeping the records.
				r.setCarry(recs[be.Index:])
				r.incomplete = true
				if n == 0 {
					r.wait(r.p.idleBackoff(empty, false))
				}
				return true
			}
			if errors.Is(err, table.ErrCheckpointFenced) {
				// The checkpoint became a migration's fenced copy under
				// this reader (a rerun of `ledgerctl coordination migrate`
				// replaced a copy an earlier version left unfenced): drop
				// what is carried and open again once it is released.
				if err := r.reopen(ResetFailure, false); err != nil && !fail("reopen", err) {
					return false
				}
				return true
			}
			reason := ResetFailure
			r.stale = true
			if errors.Is(err, processor.ErrGap) {
				reason = ResetGap
				r.log.Warn("checkpoint is behind the iterator; reopening after it", "error", err.Error())
			} else if !fail("process", err) {
				return false
			}
			if err := r.reopen(reason, reason != ResetGap); err != nil && !fail("reopen", err) {
				return false
			}
			return true
		}
		r.incomplete = false
		if err := r.maybeMove(); err != nil {
			res.err = err
			return false
		}
		return true
	}
	for {
		r.settle()
		if r.stopping() {
			res.err = r.finish()
			return res
		}
		if r.stale {
			// A reopen after a failed page failed too: the iterator is past
			// that page, so read nothing with it. Checked before the shard's
			// end: a closed shard's last page comes with a nil iterator, and
			// a failed page with a nil iterator is not the end (issue 12).
			if err := r.reopen(ResetFailure, true); err != nil && !fail("reopen", err) {
				return res
			}
			continue
		}
		if r.iter == nil {
			// Read to the end, and every record read was processed: the
			// stale flag covers a failed page, and no records are carried
			// (the last page is never carried; an incomplete batch cannot
			// reach past a closed shard's end).
			if len(r.carry) > 0 {
				res.err = fmt.Errorf("shard %s: at its end with %d records not committed", r.shard.id, len(r.carry))
				return res
			}
			res.err = r.move(true)
			if errors.Is(res.err, processor.ErrGap) {
				// After a trim, another consumer moved the checkpoint past
				// the trim point: whether records after it were lost is
				// for a read after it to say, not this one's end.
				res.err = nil
				if err := r.reopen(ResetGap, false); err != nil && !fail("reopen", err) {
					return res
				}
				continue
			}
			res.finished = res.err == nil
			return res
		}
		if !r.wait(time.Until(r.lastRead.Add(cfg.MinReadInterval))) {
			continue
		}
		limit := cfg.MaxRecords // no read takes the batch past BatchRecords
		if room := cfg.BatchRecords - len(r.carry); room > 0 && room < limit {
			limit = room
		}
		// The page's limit comes out of the poller's records budget: a
		// smaller page when only part of it is free.
		if limit = r.take(limit); limit == 0 {
			if len(r.carry) > 0 && !r.stopping() {
				// Other shards wait for budget: commit the batch in hand
				// rather than read on, giving its records back.
				recs := r.carry
				r.setCarry(nil)
				if !commit(recs, -1) {
					return res
				}
			}
			continue // stopping: handled at the top
		}
		r.lastRead = time.Now()
		out, err := r.p.streams.GetRecords(r.ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: r.iter, Limit: aws.Int32(int32(limit))})
		if err != nil {
			r.settle() // nothing read: only the records carried stay reserved
			var expired *streamtypes.ExpiredIteratorException
			var trimmed *streamtypes.TrimmedDataAccessException
			var notFound *streamtypes.ResourceNotFoundException
			if r.ctx.Err() == nil && errors.As(err, &notFound) {
				// Gone only when the stream confirms it; otherwise a
				// failed read like any other (below).
				err = r.notFound("read", err)
			}
			switch {
			case r.ctx.Err() != nil:
				res.err = r.ctx.Err()
				return res
			case errors.As(err, &expired):
				r.p.m.Reads.WithLabelValues("error").Inc()
				r.log.Info("shard iterator expired; reopening after the checkpoint", "held", r.held)
				reason := ResetExpired
				if errors.Is(r.flush(), processor.ErrGap) { // what is held is committed first: not read twice
					reason = ResetGap
				}
				if err := r.reopen(reason, reason != ResetGap); err != nil && !fail("reopen", err) {
					return res
				}
			case errors.As(err, &trimmed):
				r.p.m.Reads.WithLabelValues("error").Inc()
				_ = r.flush() // the records held were read before the trim: commit them, not lose them with it
				if err := r.trimmed(err, r.pos); err != nil && !fail("reopen", err) {
					return res
				}
			case errors.Is(err, errShardGone):
				r.p.m.Reads.WithLabelValues("error").Inc()
				res.err = err
				return res
			case isThrottle(err):
				r.p.m.Reads.WithLabelValues("throttled").Inc()
				r.p.pm.Throttles.WithLabelValues("GetRecords").Inc()
				r.p.pm.Retries.WithLabelValues("GetRecords", "throttle").Inc()
				if !fail("throttled", err) {
					return res
				}
			default:
				r.p.m.Reads.WithLabelValues("error").Inc()
				r.p.pm.Retries.WithLabelValues("GetRecords", "error").Inc()
				if !fail("error", err) {
					return res
				}
				if failures < 3 {
					// A read changes nothing and an iterator can be read
					// again until it expires: retry it, keeping the records
					// carried for the batch.
					continue
				}
				// The iterator may be what is wrong: open a new one.
				if err := r.reopen(ResetFailure, true); err != nil && !fail("reopen", err) {
					return res
				}
			}
			continue
		}
		failures = 0
		r.iter = out.NextShardIterator
		if n := len(out.Records); n > 0 && out.Records[n-1].Dynamodb != nil {
			r.pos = aws.ToString(out.Records[n-1].Dynamodb.SequenceNumber)
		}
		pageSize := 0
		for i := range out.Records {
			if sr := out.Records[i].Dynamodb; sr != nil {
				pageSize += int(aws.ToInt64(sr.SizeBytes))
			}
		}
		r.keep(len(r.carry)+len(out.Records), int(r.carryBytes)+pageSize) // the page's unused limit goes back
		if len(out.Records) == 0 && len(r.carry) == 0 {
			r.p.m.Reads.WithLabelValues("empty").Inc()
			r.p.pm.IteratorAge.WithLabelValues(r.shard.id).Set(0)
			if r.iter == nil {
				continue // the shard's end: handled at the top
			}
			if cfg.Drain && !r.shard.closed && !r.guard.Pending() && r.inRow+1 >= cfg.DrainEmptyPages {
				// An open shard's current end, taken as reached after
				// DrainEmptyPages empty pages in a row on one iterator
				// chain (AWS: an empty page may come before records; D2,
				// S25-D1). A closed shard is read on to its end (no next
				// iterator): an empty page inside it is not one.
				res.err = r.move(false)
				res.drained = res.err == nil
				return res
			}
			if err := r.maybeMove(); err != nil {
				res.err = err
				return res
			}
			empty++
			r.inRow++
			r.idleWait(empty)
			continue
		}
		// Records in hand: this page's, after those carried.
		if len(out.Records) == 0 {
			r.p.m.Reads.WithLabelValues("empty").Inc()
			empty++
			r.inRow++
		} else {
			empty, r.inRow = 0, 0
			r.p.m.Reads.WithLabelValues("records").Inc()
			r.p.m.RecordsRead.Add(float64(len(out.Records)))
		}
		if len(r.carry) == 0 {
			r.since = r.lastRead // the batching window opens at this read
		}
		recs := slices.Grow(r.carry, len(out.Records)) // carried records are only ever handed over again: grow them in place
		r.setCarry(nil)
		for i := range out.Records {
			recs = append(recs, processor.FromStream(out.Records[i], cfg.StreamARN))
		}
		if t := recs[len(recs)-1].ApproximateCreation; !t.IsZero() {
			r.p.pm.IteratorAge.WithLabelValues(r.shard.id).Set(max(0, time.Since(t).Seconds()))
		}
		if r.hold(recs, len(out.Records), limit) {
			// Behind (a full page) or within the batching window, and the
			// batch has room: read on, fold more records into one commit.
			r.setCarry(recs)
			if len(out.Records) == 0 {
				// Caught up: wait for more, but not past the window.
				r.wait(min(r.p.idleBackoff(empty, false), time.Until(r.since.Add(cfg.BatchWindow))))
			}
			continue
		}
		if !commit(recs, len(out.Records)) {
			return res
		}
	}
}

// finish ends the reader gracefully: it commits the records it holds (the
// batching window's, or full pages gathered while behind), then moves the
// checkpoint over what it finished. Records it cannot commit now (the
// commit failed, or they end before a pending batch does) are left: the
// checkpoint is not past them, so they are read again.
func (r *reader) finish() error {
	_ = r.flush()
	if err := r.ctx.Err(); err != nil {
		return err
	}
	return r.move(false)
}

// flush commits the records carried, if any, before the reader stops or
// reopens its iterator. What it cannot commit is dropped: the checkpoint is
// not past it, so it is read again. After a gap (the checkpoint is behind
// this reader's records: someone reset it) nothing is held, so that no move
// follows. It returns the commit's error.
func (r *reader) flush() error {
	if len(r.carry) == 0 || r.ctx.Err() != nil {
		return nil
	}
	recs := r.carry
	r.setCarry(nil)
	err := r.process(recs)
	switch {
	case err == nil, r.ctx.Err() != nil, errors.Is(err, processor.ErrIncompleteBatch): // a pending batch is finished by whoever reads on
	case errors.Is(err, processor.ErrGap):
		r.held = ""
	default:
		r.log.Warn("committing the records held failed; they will be read again after the checkpoint", "records", len(recs), "error", err.Error())
	}
	return err
}

func (r *reader) advanceHeld(seq string) {
	if r.held == "" || processor.CompareSequence(seq, r.held) > 0 {
		r.held = seq
	}
}

// open opens an iterator: after the checkpoint (declared as the guard's
// origin), else at the shard's start position. A checkpoint that is a
// migration's fenced copy is waited for (released).
func (r *reader) open() error {
	cp, err := r.released()
	if err != nil {
		return err
	}
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(r.p.cfg.StreamARN), ShardId: aws.String(r.shard.id)}
	if cp != "" {
		in.ShardIteratorType = streamtypes.ShardIteratorTypeAfterSequenceNumber
		in.SequenceNumber = aws.String(cp)
		r.guard.SetOrigin(cp)
		r.advanceHeld(cp)
	} else {
		in.ShardIteratorType = streamtypes.ShardIteratorType(r.start)
		if r.atStart {
			in.ShardIteratorType, in.SequenceNumber = streamtypes.ShardIteratorTypeAtSequenceNumber, aws.String(r.shard.start)
		}
		r.guard.SetOrigin("") // binding only if no other reader creates the checkpoint first
	}
	out, err := r.p.streams.GetShardIterator(r.ctx, in)
	var refused smithy.APIError
	var trimmedStart *streamtypes.TrimmedDataAccessException
	if r.atStart && in.SequenceNumber != nil && cp == "" && errors.As(err, &refused) && !errors.As(err, &trimmedStart) {
		// Any refusal but "trimmed" (ValidationException,
		// InvalidArgumentException, a 5xx, …): open at TRIM_HORIZON, as
		// before, so that a stream that does not take its shards' starting
		// sequence numbers as positions still has the shard read (only a
		// trimmed start goes uncounted), rather than the same refused open
		// retried for as long as the lease is held.
		r.log.Info("opening at the shard's starting sequence number refused; opening at TRIM_HORIZON", "error", err.Error())
		r.atStart = false
		in.ShardIteratorType, in.SequenceNumber = streamtypes.ShardIteratorTypeTrimHorizon, nil
		out, err = r.p.streams.GetShardIterator(r.ctx, in)
	}
	var trimmed *streamtypes.TrimmedDataAccessException
	var notFound *streamtypes.ResourceNotFoundException
	switch {
	case errors.As(err, &trimmed):
		return r.trimmed(err, cp)
	case errors.As(err, &notFound):
		return r.notFound("open", err)
	case err != nil:
		return fmt.Errorf("open shard %s %s: %w", r.shard.id, in.ShardIteratorType, err)
	}
	r.iter, r.pos = out.ShardIterator, cp
	r.opened, r.stale, r.inRow = true, false, 0
	r.log.Debug("shard iterator opened", "type", string(in.ShardIteratorType), "after", cp)
	return nil
}

// released reads the shard's checkpoint, waiting while it is a copy
// `ledgerctl coordination migrate` has not released yet
// (table.ErrCheckpointFenced): the checkpoint it was copied from may still
// move, so this reader neither reads nor commits, and keeps its lease (no
// other poller could claim from the copy either). It reads the checkpoint
// again after each wait, the idle backoff up to MaxIdleBackoff (each read
// counts ledger_aggregate_conflicts_total{reason="migration_fence"}), and
// returns the fence's error only when the reader stops first.
func (r *reader) released() (string, error) {
	for n := 1; ; n++ {
		cp, err := r.guard.Checkpoint(r.ctx)
		if !errors.Is(err, table.ErrCheckpointFenced) {
			if n > 1 && err == nil {
				r.log.Info("the migration released the shard's checkpoint; reading after it", "checkpoint", cp)
			}
			return cp, err
		}
		if n == 1 {
			r.log.Warn("the shard's checkpoint is a copy `ledgerctl coordination migrate` has not released yet: nothing is read or committed on the shard until a run of the migration ends without error; waiting",
				"error", err.Error())
		}
		if !r.wait(r.p.idleBackoff(n, true)) {
			return "", err
		}
	}
}

// trimmed handles TrimmedDataAccessException met after sequence number
// after (the iterator's position): the records after it are older than the
// stream's retention and gone for every consumer. The reader reopens at
// TRIM_HORIZON with a guard that has no origin and knows the trim point
// (ShardGuard.Trimmed: the gap is accepted, and counted, only while the
// checkpoint is at or before it); records at or before the checkpoint are
// still dropped by the guard. The reports are then short of the lost
// records until `ledgerctl reconcile --repair`.
func (r *reader) trimmed(cause error, after string) error {
	r.p.m.Resets.WithLabelValues(ResetTrimmed).Inc()
	r.log.Error("stream records were trimmed before they were read: they are lost to every consumer; reopening at TRIM_HORIZON; run `ledgerctl reconcile --repair` to restore the reports",
		"held", r.held, "after", after, "error", cause.Error())
	r.newGuard()
	r.guard.Trimmed(after)
	r.trims, r.trimGuards = append(r.trims, after), append(r.trimGuards, r.guard)
	out, err := r.p.streams.GetShardIterator(r.ctx, &dynamodbstreams.GetShardIteratorInput{
		StreamArn: aws.String(r.p.cfg.StreamARN), ShardId: aws.String(r.shard.id), ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon,
	})
	if err != nil {
		var notFound *streamtypes.ResourceNotFoundException
		if errors.As(err, &notFound) {
			return r.notFound("open at TRIM_HORIZON", err)
		}
		return fmt.Errorf("open shard %s at TRIM_HORIZON: %w", r.shard.id, err)
	}
	// The iterator reads from the trim horizon, past after: a trim met by
	// it before it returns a record was met after after too.
	r.iter, r.pos = out.ShardIterator, after
	r.opened, r.stale, r.inRow = true, false, 0
	return nil
}

// notFound checks a ResourceNotFoundException of op on the shard with
// DescribeStream (processor.ShardGone): it wraps errShardGone only when the
// stream no longer exists or no longer lists the shard. Otherwise (the
// stream lists it, or could not be asked) it is an ordinary failure, retried
// with backoff: one answer is no proof, and a shard given up is never read
// again by this poller while it is marked gone.
func (r *reader) notFound(op string, err error) error {
	gone, derr := processor.ShardGone(r.ctx, r.p.streams, r.p.cfg.StreamARN, r.shard.id)
	switch {
	case derr != nil:
		return fmt.Errorf("%s shard %s: %w (whether the stream still has it is unknown: %w)", op, r.shard.id, err, derr)
	case gone:
		return fmt.Errorf("shard %s: %w: %w", r.shard.id, errShardGone, err)
	}
	r.log.Warn("shard not found, yet the stream lists it; retrying", "op", op, "error", err.Error())
	return fmt.Errorf("%s shard %s: not found, yet the stream still lists it: %w", op, r.shard.id, err)
}

// reopen opens a new iterator after the checkpoint, first moving the
// checkpoint up to what is held when move is set. After a gap (the
// checkpoint is behind where this reader's records started: someone reset
// it) nothing is moved: the records after the checkpoint are read again.
func (r *reader) reopen(reason string, move bool) error {
	r.p.m.Resets.WithLabelValues(reason).Inc()
	if move {
		if err := r.move(false); err != nil {
			return err
		}
	} else {
		r.held = ""
	}
	r.newGuard()
	// Until open succeeds the old iterator is past the records just
	// dropped: reading on with it would commit over the gap.
	r.stale = true
	return r.open()
}

func (r *reader) maybeMove() error {
	if time.Since(r.lastMove) < r.p.cfg.CheckpointInterval {
		return nil
	}
	return r.move(false)
}

// move brings the checkpoint up to the last record processed, when records
// after the committed checkpoint had no effect and so were never committed;
// finished also marks the shard as read to its end. The write is the
// checkpoint's compare-and-set (from the value this reader's guard holds),
// so a reader whose checkpoint someone else moved changes nothing and gets
// an error. Afterwards the reader's guard starts from the new checkpoint.
func (r *reader) move(finished bool) error {
	r.lastMove = time.Now()
	if !r.opened {
		return nil
	}
	ctx := r.ctx
	// After a trim, the abandon transaction comes first: at a closed
	// shard's end with no record after the trim, no Process call sends it.
	cp, err := r.guard.AbandonTrimmed(ctx)
	if errors.Is(err, processor.ErrGap) && !finished {
		// The checkpoint is past the trim point (another consumer's): the
		// trimmed guard stays, and its next Process call reopens after it.
		return nil
	}
	if err != nil {
		return err
	}
	seq := r.held
	if seq == "" || processor.CompareSequence(seq, cp) <= 0 {
		if !finished {
			return nil
		}
		seq = cp
	}
	if err := r.p.store.advance(ctx, r.shard.id, cp, seq, finished); err != nil {
		return fmt.Errorf("shard %s: %w", r.shard.id, err)
	}
	r.p.m.Checkpoints.Inc()
	r.newGuard()
	if seq != "" {
		r.guard.SetOrigin(seq)
	}
	return nil
}

// isThrottle reports a throttled call, or the SDK's client-side retry quota
// running out (which only happens after repeated failures).
func isThrottle(err error) bool {
	var qe *ratelimit.QuotaExceededError
	if errors.As(err, &qe) {
		return true
	}
	var le *streamtypes.LimitExceededException
	if errors.As(err, &le) {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "ThrottlingException", "Throttling", "ProvisionedThroughputExceededException", "RequestLimitExceeded", "LimitExceededException":
			return true
		}
	}
	return false
}

// throttleBackoff is the wait after the n-th failure in a row: exponential
// from ThrottleBackoff, capped at MaxThrottleBackoff, with full jitter.
func (p *Poller) throttleBackoff(n int) time.Duration {
	d := p.cfg.ThrottleBackoff << min(n-1, 20)
	if d <= 0 || d > p.cfg.MaxThrottleBackoff {
		d = p.cfg.MaxThrottleBackoff
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// idleBackoff is the wait after the n-th empty page in a row:
// MinReadInterval (at least 50ms) doubling up to IdleBackoff, the fast
// interval; with grow, doubling on from there up to MaxIdleBackoff, each
// wait past IdleBackoff drawn in [3/4, 1] of its step so that shards idle
// since the same moment do not poll in step.
func (p *Poller) idleBackoff(n int, grow bool) time.Duration {
	fast, top := p.cfg.IdleBackoff, p.cfg.IdleBackoff
	if grow {
		top = max(p.cfg.MaxIdleBackoff, fast)
	}
	d := min(max(p.cfg.MinReadInterval, 50*time.Millisecond), fast)
	for i := 1; i < n && d < top; i++ {
		limit := top
		if d < fast {
			limit = fast
		}
		d = min(2*d, limit)
	}
	if d > fast {
		d = max(fast, d-time.Duration(rand.Int64N(int64(d/4)+1)))
	}
	return d
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
