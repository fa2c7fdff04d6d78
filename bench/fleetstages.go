package bench

import (
	"sort"
	"time"
)

// lagStamp is a record's times before its commit: written (its
// updatedAt) and first read by a poller.
type lagStamp struct {
	wrote, read time.Time
}

// lagSample is a committed record's times: written, first read, committed,
// and when its shard was first read by any poller (zero: never before the
// commit, which cannot be).
type lagSample struct {
	wrote, read, committed, shardRead time.Time
	shard                             string
}

// shardEnded notes that a reader got shard's end (a page without a next
// iterator): the parent's end its children wait for.
func (l *fleetLag) shardEnded(shard string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.ended[shard]; !ok {
		l.ended[shard] = at
	}
}

// LagStages splits the fleet's write → commit lag (issue 23: "lag: p99
// from write to commit at a steady rate … within the batching window plus
// 2 s") by where the time went and by phase.
//
//   - Steady state is the records written after SteadyFrom: the first
//     second at which the fleet's leases covered 90% of the open shards
//     (FleetResult.FirstAllLeased), plus one lease duration's settling
//     (20 s): before it, a write may wait for its shard's first lease or
//     for the walk of a day's closed shards at start. With no such second,
//     there is no steady state (SteadyN 0).
//   - Unread shard: records written before any poller had read their
//     shard (a shard not leased yet, or a child whose parent was not
//     finished): their write → first read is the wait for a reader.
//   - Read: write → first read of the record (the reader's poll, and
//     the wait for a reader); commit: first read → commit (the batching
//     window, the held-records budget, the commit itself).
type LagStages struct {
	SteadyFrom float64 // seconds from the start of the writes; -1: never
	// All records: write → read and read → commit, p50 and p99.
	ReadP50, ReadP99, CommitP50, CommitP99 float64
	// Start-up (written before SteadyFrom) and steady state.
	StartN, SteadyN                  int
	StartP99                         float64
	SteadyP50, SteadyP99             float64
	SteadyReadP99, SteadyCommitP99   float64
	UnreadN                          int     // written before their shard's first read
	UnreadP99                        float64 // their write → commit
	UnreadSteadyN                    int     // of them, written in the steady state
	UnreadSteadyWaitP99, UnreadMaxAt float64 // their write → shard's first read; the latest such write, seconds from the start
	// Caught up: the records written once the start's walk was over, after
	// both SteadyFrom and WalkedAt, the second a reader got the end of the
	// last shard that was closed when the writes began (a day's history:
	// until then the fleet's readers are behind by construction, and a
	// new record in an open shard waits for its ancestors' ends; -1: some
	// such shard's end was never got by the live fleet, and there is no
	// caught-up state). The lag target is a steady rate's, which
	// this is; SteadyP99 keeps the walk's tail.
	WalkedAt                           float64
	CaughtUpN                          int
	CaughtUpP50, CaughtUpP99           float64
	CaughtUpReadP99, CaughtUpCommitP99 float64
	// Of the records written before their shard's first read, those whose
	// shard's parent had not ended when they were written: the wait for
	// the parent's end (the lineage: the parent's reader reaching it),
	// then from the parent's end to the shard's first read (the child's
	// discovery, lease and reader start), p50 and p99. UnreadNoParent is
	// the rest: a shard whose parent had ended (or that has none in the
	// stream) and was still unread (waiting for a lease).
	UnreadBehindParent, UnreadNoParent                           int
	ParentWaitP50, ParentWaitP99, AfterParentP50, AfterParentP99 float64
	NoParentWaitP50, NoParentWaitP99                             float64
	// The steady state's slow records (write → commit over TailOver),
	// each put in the first class that explains it: Commit, its first
	// read → commit the larger part; Unseen, read past (a GetRecords on
	// its shard sent a second or more after its write answered without
	// it: the stream's visibility, DynamoDB Local's or the emulation's);
	// Reopened, an iterator on its shard opened between its write and its
	// first read (the lease changed hands, or the reader reopened); Gap,
	// none of these (no GetRecords on the shard for that long: the
	// reader's backoff, throttling, a slow coordinator). TailGapP50/P99
	// are the Gap and Reopened records' longest pause between two reads of
	// their shard around the write. Tail is the worst of them, for the
	// JSON.
	TailOver                                             float64
	TailN, TailCommit, TailUnseen, TailReopened, TailGap int
	TailGapP50, TailGapP99                               float64
	Tail                                                 []TailRecord `json:",omitempty"`
}

// TailRecord is one slow steady-state record: its shard, when it was
// written (seconds from the start), its write → first read and first
// read → commit, its class, and the reads of its shard around it.
type TailRecord struct {
	Shard            string
	At, Read, Commit float64
	Class            string
	// ReadsBefore is the GetRecords on its shard answered in the second
	// before its write; ReadsBetween those sent after its write that
	// answered without it before its first read; ReaderGap the longest
	// pause between two answered
	// GetRecords of the shard in that span (with its edges); Opens the
	// iterators opened on it in that span.
	ReadsBefore, ReadsBetween, Opens int
	ReaderGap                        float64
}

// tailOver is the lag over which a steady-state record is traced: the
// target at the poller's default batching window (1 s plus 2 s).
const tailOver = 3.0

// tailKeep is how many of the slowest records the result lists.
const tailKeep = 40

// steadySettle is how long after the fleet first leased 90% of the open
// shards the steady state is taken to start (cmd/poller's lease duration).
const steadySettle = 20 * time.Second

// stageFigures computes the LagStages of the records committed so far;
// start is the start of the writes, leased the seconds after it at which
// 90% of the open shards were first leased (-1: never), closedAtStart the
// shards already closed when the writes began (the history to walk).
func (l *fleetLag) stageFigures(start time.Time, leased float64, parents map[string]string, closedAtStart []string) LagStages {
	l.mu.Lock()
	samples := append([]lagSample(nil), l.stages...)
	ended := make(map[string]time.Time, len(l.ended))
	for k, v := range l.ended {
		ended[k] = v
	}
	calls := make(map[string][]readCall, len(l.calls))
	for k, v := range l.calls {
		calls[k] = v[:len(v):len(v)]
	}
	opens := make(map[string][]time.Time, len(l.opens))
	for k, v := range l.opens {
		opens[k] = v[:len(v):len(v)]
	}
	l.mu.Unlock()
	var parentWait, afterParent, noParent []float64
	st := LagStages{SteadyFrom: -1, UnreadMaxAt: -1}
	var steadyFrom time.Time
	if leased >= 0 {
		steadyFrom = start.Add(time.Duration(leased*float64(time.Second)) + steadySettle)
		st.SteadyFrom = steadyFrom.Sub(start).Seconds()
	}
	var caughtUp time.Time // zero: never
	st.WalkedAt = 0
	for _, id := range closedAtStart {
		e, ok := ended[id]
		if !ok {
			st.WalkedAt = -1
			break
		}
		st.WalkedAt = max(st.WalkedAt, e.Sub(start).Seconds())
	}
	if st.WalkedAt >= 0 && !steadyFrom.IsZero() {
		caughtUp = start.Add(time.Duration(st.WalkedAt * float64(time.Second)))
		if caughtUp.Before(steadyFrom) {
			caughtUp = steadyFrom
		}
	}
	var read, commit, startLag, steady, steadyRead, steadyCommit, unread, unreadWait []float64
	var caught, caughtRead, caughtCommit []float64
	var tail []TailRecord
	for _, s := range samples {
		r, c := s.read.Sub(s.wrote).Seconds(), s.committed.Sub(s.read).Seconds()
		read, commit = append(read, r), append(commit, c)
		inSteady := !steadyFrom.IsZero() && !s.wrote.Before(steadyFrom)
		if !caughtUp.IsZero() && !s.wrote.Before(caughtUp) {
			caught, caughtRead, caughtCommit = append(caught, r+c), append(caughtRead, r), append(caughtCommit, c)
		}
		if inSteady {
			steady, steadyRead, steadyCommit = append(steady, r+c), append(steadyRead, r), append(steadyCommit, c)
			if r+c > tailOver {
				tail = append(tail, traceTail(s, start, calls[s.shard], opens[s.shard]))
			}
		} else {
			startLag = append(startLag, r+c)
		}
		if s.wrote.Before(s.shardRead) {
			unread = append(unread, r+c)
			if inSteady {
				unreadWait = append(unreadWait, s.shardRead.Sub(s.wrote).Seconds())
			}
			st.UnreadMaxAt = max(st.UnreadMaxAt, s.wrote.Sub(start).Seconds())
			pe, ok := ended[parents[s.shard]]
			if parent := parents[s.shard]; parent != "" && (!ok || pe.After(s.wrote)) {
				if !ok || pe.After(s.shardRead) {
					pe = s.shardRead // the parent's end not seen by a reader (trimmed, or read by the drain)
				}
				parentWait = append(parentWait, pe.Sub(s.wrote).Seconds())
				afterParent = append(afterParent, s.shardRead.Sub(pe).Seconds())
			} else {
				noParent = append(noParent, s.shardRead.Sub(s.wrote).Seconds())
			}
		}
	}
	st.ReadP50, st.ReadP99 = quantile(read, 0.50), quantile(read, 0.99)
	st.CommitP50, st.CommitP99 = quantile(commit, 0.50), quantile(commit, 0.99)
	st.StartN, st.StartP99 = len(startLag), quantile(startLag, 0.99)
	st.SteadyN, st.SteadyP50, st.SteadyP99 = len(steady), quantile(steady, 0.50), quantile(steady, 0.99)
	st.SteadyReadP99, st.SteadyCommitP99 = quantile(steadyRead, 0.99), quantile(steadyCommit, 0.99)
	st.CaughtUpN, st.CaughtUpP50, st.CaughtUpP99 = len(caught), quantile(caught, 0.50), quantile(caught, 0.99)
	st.CaughtUpReadP99, st.CaughtUpCommitP99 = quantile(caughtRead, 0.99), quantile(caughtCommit, 0.99)
	st.UnreadN, st.UnreadP99 = len(unread), quantile(unread, 0.99)
	st.UnreadSteadyN, st.UnreadSteadyWaitP99 = len(unreadWait), quantile(unreadWait, 0.99)
	st.UnreadBehindParent, st.UnreadNoParent = len(parentWait), len(noParent)
	st.ParentWaitP50, st.ParentWaitP99 = quantile(parentWait, 0.50), quantile(parentWait, 0.99)
	st.AfterParentP50, st.AfterParentP99 = quantile(afterParent, 0.50), quantile(afterParent, 0.99)
	st.NoParentWaitP50, st.NoParentWaitP99 = quantile(noParent, 0.50), quantile(noParent, 0.99)
	st.TailOver, st.TailN = tailOver, len(tail)
	var gaps []float64
	for _, t := range tail {
		switch t.Class {
		case "commit":
			st.TailCommit++
		case "unseen":
			st.TailUnseen++
		case "reopened":
			st.TailReopened++
			gaps = append(gaps, t.ReaderGap)
		default:
			st.TailGap++
			gaps = append(gaps, t.ReaderGap)
		}
	}
	st.TailGapP50, st.TailGapP99 = quantile(gaps, 0.50), quantile(gaps, 0.99)
	sort.Slice(tail, func(i, j int) bool { return tail[i].Read+tail[i].Commit > tail[j].Read+tail[j].Commit })
	st.Tail = tail[:min(len(tail), tailKeep)]
	return st
}

// traceTail classifies one slow record by the reads of its shard (calls,
// in the order answered) and the iterators opened on it (opens).
func traceTail(s lagSample, start time.Time, calls []readCall, opens []time.Time) TailRecord {
	r, c := s.read.Sub(s.wrote).Seconds(), s.committed.Sub(s.read).Seconds()
	t := TailRecord{Shard: s.shard, At: s.wrote.Sub(start).Seconds(), Read: r, Commit: c}
	// The reads sent from the write on and answered by the first read
	// (its time is taken after the answer that returned the record): the
	// last of them returned it, the others answered without it. The
	// reader's pauses in [wrote, read]: between the last answer before
	// the write and the next send, and so on.
	var between []readCall
	last := time.Time{}
	for _, k := range calls {
		switch {
		case k.answered.Before(s.wrote):
			if !k.answered.Before(s.wrote.Add(-time.Second)) {
				t.ReadsBefore++
			}
			last = k.answered
			continue
		case k.answered.After(s.read):
			continue
		}
		if !k.sent.Before(s.wrote) {
			between = append(between, k)
		}
		if !last.IsZero() {
			t.ReaderGap = max(t.ReaderGap, k.sent.Sub(last).Seconds())
		}
		last = k.answered
	}
	if len(between) > 0 {
		between = between[:len(between)-1] // the read that returned it
	}
	t.ReadsBetween = len(between)
	for _, k := range between {
		if k.sent.Sub(s.wrote) >= time.Second {
			t.Class = "unseen"
		}
	}
	for _, o := range opens {
		if o.After(s.wrote) && !o.After(s.read) {
			t.Opens++
		}
	}
	switch {
	case c >= r:
		t.Class = "commit"
	case t.Class == "unseen":
	case t.Opens > 0:
		t.Class = "reopened"
	default:
		t.Class = "gap"
	}
	return t
}

// quantile is the nearest-rank q-quantile of v (0 when empty), as
// lagClock's percentiles.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// describeCounts sums the pollers' DescribeStream calls by kind and outcome
// (ledger_stream_describe_stream_total{kind,outcome}), keyed "kind/outcome".
func describeCounts(pollers []*fleetPoller) map[string]int {
	out := map[string]int{}
	for _, p := range pollers {
		mfs, err := p.reg.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != "ledger_stream_describe_stream_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				var kind, outcome string
				for _, lp := range m.GetLabel() {
					switch lp.GetName() {
					case "kind":
						kind = lp.GetValue()
					case "outcome":
						outcome = lp.GetValue()
					}
				}
				out[kind+"/"+outcome] += int(m.GetCounter().GetValue())
			}
		}
	}
	return out
}
