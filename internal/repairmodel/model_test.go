package repairmodel

import (
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// img is an item's image: absent, a tombstone, or a transaction whose
// contribution to the one report of the model is value.
type img struct {
	present, tomb bool
	value         int
	changes       int  // the item's change count; 0: none
	probe         bool // written by a rebase's probe
	sig           int  // the writer's digest of value, tomb and changes (revision, finding 4); 0: none
	// invalid (second review, hole W-a): an attribute the fold reads and
	// the digest of revision 2 does not (entityType, createdAt, a figure's
	// type) makes the image no valid transaction: it contributes zero.
	invalid bool
	// compacting (second review, fix C-b): a compaction marked the tombstone.
	compacting bool
}

// sigOf is the digest the writer stores with every image it writes
// (docs/exactly-once.md, revised design, "S"): of the figures, the
// tombstone and the count. Any non-zero function of the three will do.
func sigOf(m img) int {
	t := 0
	if m.tomb {
		t = 1
	}
	return 1 + m.value*7919 + t*104729 + m.changes*1299709
}

// sigWholeOf is the digest the second review asks for (hole W-a): of every
// attribute of the item, so also of what makes it invalid.
func sigWholeOf(m img) int {
	if m.invalid {
		return sigOf(m) + 15485863
	}
	return sigOf(m)
}

// sigOK is the digest check as the world's design makes it: revision 2's
// (figures, tombstone, count) or, with the second review's fix, the whole
// image's.
func (w *world) sigOK(m img) bool {
	if w.second.sigWhole {
		return !m.present || m.sig == sigWholeOf(m)
	}
	return m.sigOK()
}

// signed is m as the writer (or rebucket, or the rebase's probe) writes it.
func signed(m img) img {
	m.sig = sigOf(m)
	return m
}

// sigOK: an absent image has nothing to check; a present one must carry
// the digest of what it holds.
func (m img) sigOK() bool { return !m.present || m.sig == sigOf(m) }

func (m img) contrib() int {
	if !m.present || m.tomb || m.invalid {
		return 0
	}
	return m.value
}

// record is one stream record of an item.
type record struct {
	key      int
	old, new img
}

// writerShaped: an INSERT with changes 1 or a MODIFY that steps changes by
// one (docs/exactly-once.md, "A. Every commit counts what it claims").
func (r record) writerShaped() bool {
	return r.new.present && r.new.changes == r.old.changes+1 && (r.old.present || r.new.changes == 1)
}

// writerShaped as the revised design classifies a record: its count steps
// by one and its new image carries a digest that matches (finding 4),
// unless the digest is switched off (mutations.noSig).
func (w *world) writerShaped(r record) bool {
	if w.isCompaction(r) {
		return true
	}
	return r.writerShaped() && (w.mut.noSig || w.sigOK(r.new))
}

// shard holds the records of the items mapped to it, in write order. The
// first readable of them can be read; cp is the checkpoint (records
// before it are claimed); pendTo > cp is a half-committed batch: either
// the branch's parts landed in an early group and its count is still to
// land (pendOpen: the branch is marked open), or the branch's parts and
// count landed together in a group before the last and only the
// checkpoint's move is still to land.
type shard struct {
	recs             []record
	readable, cp     int
	pendTo           int
	pendN, pendForgn int
	pendOpen         bool // the batch marked the branch open (its count is still to land)

	// Review additions (review_test.go): a standard-mode shard has no
	// checkpoint the repair can read; its runs leave markers keyed by their
	// first record (first index → end index), and trimmed records (before
	// index trimmed) are gone from the stream.
	std     bool
	markers map[int]int
	trimmed int
	// Revision (finding 1): every run's marker is written under its last
	// record too (last index → first index), so a run whose first record is
	// trimmed is still found by its end.
	endMarkers map[int]int
}

// mutations each remove one element of the design.
type mutations struct {
	countOnlyWhenReportChanges bool // a netting commit moves no count (finding 1's flaw)
	pinAfterTableRead          bool // R0 after R2 and R3
	noPin                      bool // R6 without its ConditionCheck
	ignorePendingBatch         bool // R3 takes a half-committed batch's records as pending
	hardDeletes                bool // another writer deletes items (the documented hole)

	// Each switches off one answer of the revised design to a finding of
	// the review (docs/exactly-once.md, "Review of the design"); with it
	// off, the review's scenario must go wrong again (revision_test.go).
	noEndMarkers           bool // finding 1: standard-mode markers keyed by a run's first record only
	looseProbe             bool // finding 2: any writer-shaped record with probe set counts as a probe
	noFence                bool // finding 3: a consumer of the previous version can still commit (and counts nothing)
	noSig                  bool // finding 4: no digest: a foreign write that keeps the count is taken for the writer's
	resetWithCurrentProbed bool // finding 7: B5 subtracts probed as it is when B5 lands, not as read at B4
}

type world struct {
	rng              *rand.Rand
	mut              mutations
	items            map[int]img
	nextKey          int
	shards           []*shard
	shardOf          map[int]int
	report           int
	applied, foreign int
	probed           int // probe records claimed: counted apart, so a rebase's pin holds while they commit
	foreignAck       int // foreign as of the last rebase
	open             int
	review           review      // review_test.go: deterministic commits and the fixes proposed
	uncounted        bool        // a commit by a consumer of the previous version is under way (revision_test.go)
	doneImg          map[int]img // the truth: each item's image as of its last record claimed (applied, or lost to a trim)

	// Second review (second_review_test.go).
	second   second
	rollup   int  // the tenant roll-up's share of the report: stage-1 deltas, and what repairs put
	parked   int  // parked deltas of the report (an old commit against a fenced head parks: hole F-a)
	retired  int  // the branch's retired count: compacted tombstones' counts (revision 2, [F10])
	rebasing bool // a rebase runs: compaction waits (revision 2, [F10])
	losses   int  // losses so far (fix L-a: a count every consumer that abandons records moves)
}

func newWorld(seed int64, mut mutations) *world {
	w := &world{rng: rand.New(rand.NewSource(seed)), mut: mut, items: map[int]img{}, shardOf: map[int]int{}, doneImg: map[int]img{}, review: defaultReview, second: defaultSecond}
	for range 8 {
		w.shards = append(w.shards, &shard{std: defaultStd, markers: map[int]int{}, endMarkers: map[int]int{}})
	}
	return w
}

func (w *world) write(key int, next img) {
	old := w.items[key]
	if next.present {
		w.items[key] = next
	} else {
		delete(w.items, key)
	}
	s, ok := w.shardOf[key]
	if !ok {
		s = w.rng.Intn(len(w.shards))
		w.shardOf[key] = s
	}
	w.shards[s].recs = append(w.shards[s].recs, record{key: key, old: old, new: next})
}

func (w *world) liveKeys() []int {
	var ks []int
	for k, m := range w.items {
		if !m.tomb {
			ks = append(ks, k)
		}
	}
	sort.Ints(ks)
	return ks
}

// createPct is the share of steps that create an item: low, so that few
// items get many changes and coincidences (an excess hiding a gap) occur.
var createPct = 3

// lossPct is the chance, at 3 steps in 100, of a loss (records trimmed
// before any consumer committed them): 0 unless a test sets it.
var lossPct = 0

// foreignEditPct and oldCommitPct (revision_test.go): the chance that a
// step meant for another writer edits an item keeping its count, and that
// a commit is made by a consumer of the previous version. 0 unless a test
// sets them.
var foreignEditPct, oldCommitPct = 0, 0

// step makes one random thing happen that is not the repair.
func (w *world) step() {
	switch r := w.rng.Intn(100); {
	case r < createPct: // create
		w.nextKey++
		w.write(w.nextKey, signed(img{present: true, value: 1 + w.rng.Intn(9), changes: 1}))
	case r < 35: // edit (often back to an earlier value: reverting edits)
		if ks := w.liveKeys(); len(ks) > 0 {
			k := ks[w.rng.Intn(len(ks))]
			m := w.items[k]
			m.value, m.changes, m.probe = 1+w.rng.Intn(3), m.changes+1, false
			w.write(k, signed(m))
		}
	case r < 40: // delete: a tombstone (or, second_review_test.go, a compaction)
		if compactPct > 0 && w.rng.Intn(100) < compactPct {
			w.compact()
			return
		}
		if ks := w.liveKeys(); len(ks) > 0 {
			k := ks[w.rng.Intn(len(ks))]
			m := w.items[k]
			w.write(k, signed(img{present: true, tomb: true, changes: m.changes + 1}))
		}
	case r < 42: // another writer's hard delete, or (revision_test.go) its edit that keeps the count
		if ks := w.liveKeys(); w.mut.hardDeletes && len(ks) > 0 {
			w.write(ks[w.rng.Intn(len(ks))], img{})
		} else if foreignEditPct > 0 && len(ks) > 0 && w.rng.Intn(100) < foreignEditPct {
			k := ks[w.rng.Intn(len(ks))]
			m := w.items[k]
			m.value = 1 + w.rng.Intn(3) // a console edit: same count, same (stale) digest
			w.write(k, m)
		}
	case r < 65: // a record becomes readable
		s := w.shards[w.rng.Intn(len(w.shards))]
		if s.readable < len(s.recs) {
			s.readable++
		}
	case r < 92: // a consumer commits on a shard
		if oldCommitPct > 0 && w.rng.Intn(100) < oldCommitPct { // (revision_test.go) one of the previous version
			w.oldCommit(w.shards[w.rng.Intn(len(w.shards))])
			return
		}
		half := 0
		if w.rng.Intn(3) == 0 {
			half = 1 + w.rng.Intn(2)
		}
		w.commit(w.shards[w.rng.Intn(len(w.shards))], half)
	case r < 97: // damage
		w.report += 1 + w.rng.Intn(3)
	default: // a loss: the readable records after a checkpoint trimmed before any commit
		if lossPct > 0 && w.rng.Intn(100) < lossPct {
			sh := w.shards[w.rng.Intn(len(w.shards))]
			if sh.pendTo <= sh.cp && sh.readable > sh.cp {
				for _, r := range sh.recs[sh.cp:sh.readable] {
					w.doneImg[r.key] = r.new
				}
				sh.cp = sh.readable
				w.losses++
			}
		}
	}
}

// commit claims readable records after the checkpoint: one run, or a
// batch whose report part lands now and whose count lands later (half).
func (w *world) commit(s *shard, half int) {
	if s.std {
		half = 0 // the standard-mode Lambda commits runs, never batches
	}
	if s.pendTo > s.cp { // finish the half-committed batch
		if s.pendOpen {
			w.applied += s.pendN
			w.foreign += s.pendForgn
			w.open--
		}
		s.cp, s.pendTo = s.pendTo, 0
		return
	}
	if s.readable <= s.cp {
		return
	}
	end := s.cp + 1 + w.rng.Intn(s.readable-s.cp)
	if w.review.commitAll {
		end = s.readable
	}
	if s.std && half == 0 {
		s.markers[s.cp] = end
		if !w.mut.noEndMarkers {
			s.endMarkers[end-1] = s.cp
		}
	}
	delta, n, f, pr := 0, 0, 0, 0
	for _, r := range s.recs[s.cp:end] {
		delta += r.new.contrib() - r.old.contrib()
		switch {
		case w.second.rebaseRetired && w.isCompaction(r): // fix C-a: counted apart, in neither A nor W
		case w.writerShaped(r) && r.new.probe && w.isProbe(r):
			pr++
		case w.writerShaped(r):
			n++
		default:
			f++
		}
		w.doneImg[r.key] = r.new
	}
	if w.uncounted { // a consumer of the previous version counts nothing
		n, f, pr = 0, 0, 0
	}
	w.probed += pr // probes change no figure: never part of a half batch's count
	switch {
	case w.uncounted && w.second.fenceParks: // the old code parks its part against a fenced head (hole F-a)
		w.parked += delta
	case w.uncounted:
		w.report += delta
	default:
		w.report += delta
		w.rollup += delta // stage 1: the roll-up delta rides in the same transaction
	}
	if w.mut.countOnlyWhenReportChanges && delta == 0 {
		n, f = 0, 0
	}
	switch half {
	case 1: // parts in an early group, count in a later one
		w.open++
		s.pendTo, s.pendN, s.pendForgn, s.pendOpen = end, n, f, true
		return
	case 2: // parts and count in one group before the last
		w.applied += n
		w.foreign += f
		s.pendTo, s.pendOpen = end, false
		return
	}
	w.applied += n
	w.foreign += f
	s.cp = end
}

func (w *world) target() int {
	t := 0
	for _, m := range w.doneImg {
		t += m.contrib()
	}
	return t
}

func (w *world) fold() int {
	t := 0
	for _, m := range w.items {
		t += m.contrib()
	}
	return t
}

// repair is one run of R0–R6, its steps interleaved with the world's by
// the caller: next returns false when the repair is over.
type repair struct {
	w      *world
	phase  int
	a, f   int
	pr     int
	pinned bool
	cursor int         // R2: the last key read
	c      map[int]int // R2: each key's change count as read
	t      map[int]img // R2: each key's image as read
	shard  int
	pend   map[int][]record // R3
	refuse string
	v      int

	retired    int // R2: the branch's retired count, read after the last page
	parkedRead int // R1: the parked deltas read (deleted by R6)
	losses     int // R0: the loss count (fix L-a)
}

func (w *world) newRepair() *repair {
	return &repair{w: w, cursor: -1, c: map[int]int{}, t: map[int]img{}, pend: map[int][]record{}}
}

func (r *repair) pin() bool {
	if r.w.open > 0 {
		r.refuse = "open"
		return false
	}
	r.a, r.f, r.pr, r.pinned, r.losses = r.w.applied, r.w.foreign, r.w.probed, true, r.w.losses
	if r.f != r.w.foreignAck {
		r.refuse = "foreign"
		return false
	}
	return true
}

// next does the repair's next step; it reports whether the repair goes on,
// and, when it wrote, whether the write was on target.
func (r *repair) next() (more, wrote, exact bool) {
	w := r.w
	switch r.phase {
	case 0: // R0
		r.phase = 1
		if !w.mut.pinAfterTableRead && !r.pin() {
			return false, false, false
		}
		if !w.second.r1AfterR3 { // R1 right after R0, before R3
			r.parkedRead = w.parked
		}
		return true, false, false
	case 1: // R2, a page of keys at a time, in key order, as a paginated Query
		var keys []int
		for k := range w.items {
			if k > r.cursor {
				keys = append(keys, k)
			}
		}
		sort.Ints(keys)
		n := min(len(keys), 1+w.rng.Intn(3))
		for _, k := range keys[:n] {
			m := w.items[k]
			if !w.mut.noSig && !w.sigOK(m) {
				r.refuse = "foreign in the table"
				return false, false, false
			}
			r.c[k], r.t[k] = m.changes, m
			r.cursor = k
		}
		if n == len(keys) {
			r.retired = w.retired // after the last page
			r.phase = 2
		}
		return true, false, false
	case 2: // R3, one shard at a time
		if w.second.noStream { // simplification S: no stream read; R4 then requires A = W
			r.phase = 3
			return true, false, false
		}
		s := w.shards[r.shard]
		r.shard++
		if s.pendTo > s.cp && !w.mut.ignorePendingBatch {
			r.refuse = "pending batch"
			return false, false, false
		}
		recs, unknown := w.pendingRecs(s)
		if unknown {
			r.refuse = "records of unknown state"
			return false, false, false
		}
		for _, rec := range recs {
			if !w.writerShaped(rec) {
				r.refuse = "foreign in flight"
				return false, false, false
			}
			if c, ok := r.c[rec.key]; ok && count(rec) <= c {
				r.pend[rec.key] = append(r.pend[rec.key], rec)
			}
		}
		if r.shard == len(w.shards) {
			r.phase = 3
		}
		return true, false, false
	case 3: // R0 late (mutation), R4, R5
		if w.mut.pinAfterTableRead && !r.pin() {
			return false, false, false
		}
		if w.second.r1AfterR3 { // R1 after R3: an order revision 2 does not rule out
			r.parkedRead = w.parked
		}
		total, p := r.retired, 0
		for k, c := range r.c {
			total += c
			ps := r.pend[k]
			for i, rec := range ps {
				if count(rec) != c-len(ps)+1+i {
					r.refuse = "not consecutive"
					return false, false, false
				}
			}
			p += len(ps)
			if len(ps) > 0 {
				r.v += ps[0].old.contrib()
			} else {
				r.v += r.t[k].contrib()
			}
		}
		if r.a+r.pr+p != total {
			r.refuse = "count"
			return false, false, false
		}
		r.phase = 4
		return true, false, false
	default: // R6
		if !w.mut.noPin && (w.applied != r.a || w.probed != r.pr || w.foreign != r.f || w.open > 0 || (w.second.pinLosses && w.losses != r.losses)) {
			r.refuse = "pin"
			return false, false, false
		}
		exact = r.v+w.parked-r.parkedRead == w.target() // report + parked = target
		if w.second.rollupNewMinusOld {                 // roll-up review, hole 4: the repair puts new − old
			w.rollup += r.v - w.report
		}
		w.report = r.v
		w.parked -= r.parkedRead
		return false, true, exact
	}
}

type tally struct {
	landed, wrong, final int
	foreign              int // the branch's foreign count at the end
	refused              map[string]int
	rollupOff            bool // after the drain, the roll-up's share differs from the fold (second review)
}

func run(seed int64, steps int, mut mutations) tally {
	w := newWorld(seed, mut)
	t := tally{refused: map[string]int{}}
	var rp *repair
	for range steps {
		if rp == nil && w.rng.Intn(10) == 0 {
			rp = w.newRepair()
		}
		if rp != nil && w.rng.Intn(2) == 0 {
			more, wrote, exact := rp.next()
			if wrote {
				t.landed++
				if !exact {
					t.wrong++
				}
			}
			if !more {
				if rp.refuse != "" {
					t.refused[rp.refuse]++
				}
				rp = nil
			}
			continue
		}
		w.step()
	}
	// Drain: everything readable and committed, then one repair alone.
	for _, s := range w.shards {
		s.readable = len(s.recs)
		for s.cp < len(s.recs) || s.pendTo > s.cp {
			w.commit(s, 0)
		}
	}
	rp = w.newRepair()
	for {
		more, wrote, exact := rp.next()
		if wrote && !exact {
			t.wrong++
		}
		if !more {
			break
		}
	}
	if w.report != w.fold() {
		t.final++
	}
	t.foreign = w.foreign
	t.rollupOff = w.rollup != w.fold()
	return t
}

func seeds(t *testing.T) []int64 {
	if v := os.Getenv("LEDGER_SEEDS"); v != "" {
		var out []int64
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("LEDGER_SEEDS: %v", err)
			}
			out = append(out, n)
		}
		return out
	}
	out := make([]int64, 300)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

// TestModel_CountedRepairLandsOnItsTargetUnderAnyInterleaving: over many
// seeds, every repair write holds the sum of the applied images'
// contributions (no change counted twice or lost), repairs do land while
// consumers and writers run, and after a drain one more repair is exact.
func TestModel_CountedRepairLandsOnItsTargetUnderAnyInterleaving(t *testing.T) {
	var landed int
	refused := map[string]int{}
	for _, seed := range seeds(t) {
		got := run(seed, 3000, mutations{})
		if got.wrong > 0 || got.final > 0 {
			t.Fatalf("seed %d: %d repair writes off target, final report wrong: %v", seed, got.wrong, got.final > 0)
		}
		landed += got.landed
		for k, n := range got.refused {
			refused[k] += n
		}
	}
	t.Logf("repair writes on target while running: %d; left alone: %v", landed, refused)
	if landed == 0 {
		t.Fatal("no repair ever landed while the world ran: the model proves nothing")
	}
}

// TestModel_ANettingCommitMustMoveTheCount: were the branch's count moved
// only by commits that change a report (finding 1's flaw, carried into the
// count), a commit whose records cancel would leave the count short for
// good: the drained, damaged report is then never repaired. With the count
// moved by every commit, the repair lands on target.
func TestModel_ANettingCommitMustMoveTheCount(t *testing.T) {
	for _, c := range []struct {
		mut  mutations
		want string // "" (on target) or the refusal
	}{{mutations{}, ""}, {mutations{countOnlyWhenReportChanges: true}, "count"}} {
		s := newScript(t, c.mut)
		s.put(0, 10)
		s.readable(0)
		s.commit(0, 0)
		s.put(0, 20)
		s.put(0, 10)
		s.readable(0)
		s.commit(0, 0)  // nets to zero
		s.w.report += 5 // damage
		wrote, exact, refused := s.repair(nil)
		switch {
		case c.want == "" && (!wrote || !exact):
			t.Errorf("design: wrote %v, on target %v, refused %q; want a write on target", wrote, exact, refused)
		case c.want != "" && (wrote || refused != c.want):
			t.Errorf("mutated: wrote %v, refused %q; want refused %q", wrote, refused, c.want)
		}
	}
}

// TestModel_AnotherWritersHardDeleteIsAlwaysDetected: a hard delete by
// another writer is the documented hole (docs/exactly-once.md, "Other
// writers than the writer"): a repair made while its REMOVE is not
// readable can miss its target. Whenever that happens, the branch's
// foreign count shows it by the end (the REMOVE, once committed, is
// counted), so the branch is named until a rebase.
func TestModel_AnotherWritersHardDeleteIsAlwaysDetected(t *testing.T) {
	wrong := 0
	for _, seed := range seeds(t) {
		got := run(seed, 3000, mutations{hardDeletes: true})
		if got.wrong > 0 && got.foreign == 0 {
			t.Fatalf("seed %d: %d repair writes off target and no foreign count", seed, got.wrong)
		}
		wrong += got.wrong
	}
	t.Logf("repair writes off target (each detected): %d", wrong)
}

// script is a world driven by hand: key k lives on shard k, and values
// are chosen so that a wrong base shows.
type script struct {
	t *testing.T
	w *world
}

func newScript(t *testing.T, mut mutations) *script {
	w := newWorld(1, mut)
	for k := range w.shards {
		w.shardOf[k] = k
	}
	return &script{t: t, w: w}
}

func (s *script) put(k, value int) {
	m := s.w.items[k]
	s.w.write(k, signed(img{present: true, value: value, changes: m.changes + 1}))
}

// readable makes every record of key k's shard written so far readable.
func (s *script) readable(k int) { s.w.shards[k].readable = len(s.w.shards[k].recs) }

// commit commits every readable record of key k's shard (half: see
// world.commit).
func (s *script) commit(k, half int) {
	sh := s.w.shards[k]
	if sh.readable > sh.cp {
		s.w.commit(sh, half)
	}
}

// repair runs one repair to its end, calling before[p] just before its
// phase p (0: R0, 1: R2, 2: R3, 3: R4 and R5, 4: R6); it returns whether
// it wrote, whether on target, and why it refused.
func (s *script) repair(before map[int]func()) (wrote, exact bool, refused string) {
	rp := s.w.newRepair()
	for {
		if f := before[rp.phase]; f != nil {
			delete(before, rp.phase)
			f()
		}
		more, w, e := rp.next()
		if w {
			wrote, exact = true, e
		}
		if !more {
			return wrote, exact, rp.refuse
		}
	}
}

// TestModel_Scenarios: each element of the design against the interleaving
// that needs it, written out by hand; with the element removed the repair
// writes off its target, with it the repair refuses (and, once the world is
// quiet, lands on target).
func TestModel_Scenarios(t *testing.T) {
	for _, c := range []struct {
		name string
		mut  mutations
		play func(s *script) (wrote, exact bool, refused string)
	}{
		{
			// The applied item's pin is read first. Key 0's edit is
			// committed after R2 read key 0 and before a late R0; key 1's
			// edit is not readable. A late pin counts key 0's second change
			// applied although R2 counted one, which hides key 1's gap.
			name: "the pin read after the table and stream",
			mut:  mutations{pinAfterTableRead: true},
			play: func(s *script) (bool, bool, string) {
				s.put(0, 10)
				s.put(1, 100)
				s.readable(0)
				s.readable(1)
				s.commit(0, 0)
				s.commit(1, 0)
				s.put(1, 200) // not readable
				return s.repair(map[int]func(){2: func() {
					s.put(0, 20)
					s.readable(0)
					s.commit(0, 0)
				}})
			},
		},
		{
			// A batch whose group holding key 0's part and the branch's
			// count landed, its checkpoint move not yet: its record is
			// applied and counted, and read as pending it hides key 1's gap.
			name: "a half-committed batch read as pending",
			mut:  mutations{ignorePendingBatch: true},
			play: func(s *script) (bool, bool, string) {
				s.put(0, 10)
				s.put(1, 100)
				s.readable(0)
				s.readable(1)
				s.commit(0, 0)
				s.commit(1, 0)
				s.put(0, 20)
				s.readable(0)
				s.commit(0, 2)
				s.put(1, 200) // not readable
				return s.repair(nil)
			},
		},
		{
			// No pin on the write: the edit that R3 read as pending (the
			// base is its old image, 10) is committed between R5 and R6, so
			// the target is 20 when the write lands.
			name: "no pin on the write",
			mut:  mutations{noPin: true},
			play: func(s *script) (bool, bool, string) {
				s.put(0, 10)
				s.readable(0)
				s.commit(0, 0)
				s.put(0, 20)
				s.readable(0)
				return s.repair(map[int]func(){4: func() { s.commit(0, 0) }})
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			wrote, exact, refused := c.play(newScript(t, c.mut))
			if !wrote || exact {
				t.Errorf("mutated: wrote %v, on target %v, refused %q; want a write off target", wrote, exact, refused)
			}
			wrote, exact, refused = c.play(newScript(t, mutations{}))
			if wrote {
				t.Errorf("design: wrote (on target %v); want a refusal", exact)
			}
			t.Logf("design: refused %q", refused)
		})
	}
}

// TestModel_AHardDeleteHidesAGapUntilItsRecordCommits is the documented
// hole, written out: key 0 is hard-deleted by another writer (its REMOVE
// not readable) while key 1's edit is not readable either; the repair's
// count balances and it writes off target. Once the REMOVE commits, the
// foreign count names the branch, and counted repairs refuse it.
func TestModel_AHardDeleteHidesAGapUntilItsRecordCommits(t *testing.T) {
	s := newScript(t, mutations{})
	s.put(0, 10)
	s.put(1, 100)
	s.readable(0)
	s.readable(1)
	s.commit(0, 0)
	s.commit(1, 0)
	s.put(1, 200)       // not readable
	s.w.write(0, img{}) // another writer's DeleteItem, not readable
	wrote, exact, refused := s.repair(nil)
	if !wrote || exact {
		t.Fatalf("wrote %v, on target %v, refused %q: the hole is not what the document says", wrote, exact, refused)
	}
	s.readable(0)
	s.commit(0, 0)
	if s.w.foreign != 1 {
		t.Fatalf("foreign = %d after the REMOVE committed; want 1", s.w.foreign)
	}
	if wrote, _, refused := s.repair(nil); wrote || refused != "foreign" {
		t.Fatalf("after the REMOVE: wrote %v, refused %q; want refused as foreign", wrote, refused)
	}
}

// rebase is one run of B1–B5 (docs/exactly-once.md, "The rebase"), its
// steps interleaved with the world's by the caller.
type rebase struct {
	w      *world
	phase  int
	a, f   int
	probes map[int]int // key → its probe's change count
	waits  int
	v, sum int
	p4     int // probed as read at B4, after the bases (review fix)
	refuse string
	pB1    int // probed as read at B1 (simplification S: B3 waits on the count)
	losses int // the loss count at B1 (fix L-a)
}

func (w *world) newRebase() *rebase { return &rebase{w: w, probes: map[int]int{}} }

// probeAt finds key k's probe record in its shard.
func (b *rebase) probeAt(k int) (*shard, int) {
	sh := b.w.shards[b.w.shardOf[k]]
	for i, r := range sh.recs {
		if r.key == k && r.new.probe && r.new.changes == b.probes[k] {
			return sh, i
		}
	}
	panic(fmt.Sprintf("probe of key %d not in its shard", k))
}

func (b *rebase) next() (more, wrote, exact bool) {
	w := b.w
	defer func() { w.rebasing = more }()
	switch b.phase {
	case 0: // B1: the pin
		if w.open > 0 {
			b.refuse = "open"
			return false, false, false
		}
		b.a, b.f, b.phase, b.pB1, b.losses = w.applied, w.foreign, 1, w.probed, w.losses
		return true, false, false
	case 1: // B2: probe every key, tombstones included
		for k, m := range w.items {
			m.changes, m.probe = m.changes+1, true
			w.write(k, signed(m))
			b.probes[k] = m.changes
		}
		b.phase = 2
		return true, false, false
	case 2: // B3: wait until every probe record is readable
		if w.second.noStream { // simplification S: until every probe is claimed, by the count
			if w.probed-b.pB1 < len(b.probes) {
				if b.waits++; b.waits > 300 {
					b.refuse = "probe not claimed"
					return false, false, false
				}
				return true, false, false
			}
			b.phase = 3
			return true, false, false
		}
		for k := range b.probes {
			if sh, i := b.probeAt(k); sh.readable <= i {
				if b.waits++; b.waits > 300 {
					b.refuse = "probe not readable"
					return false, false, false
				}
				return true, false, false
			}
		}
		b.phase = 3
		return true, false, false
	case 3: // B4: the base of every probed key
		for _, sh := range w.shards {
			if sh.pendTo > sh.cp && !w.second.noStream {
				b.refuse = "pending batch"
				return false, false, false
			}
		}
		for k := range b.probes {
			sh, i := b.probeAt(k)
			base := sh.recs[i].new // the probe is claimed: nothing after it is (the pin)
			for _, r := range sh.recs[sh.cp:max(sh.cp, i+1)] {
				if w.second.noStream {
					break // every probe is claimed: its image is the base
				}
				if r.key == k { // the first pending record of k, up to its probe
					base = r.old
					break
				}
			}
			b.v += base.contrib()
			b.sum += base.changes
		}
		b.p4 = w.probed
		b.phase = 4
		return true, false, false
	default: // B5: write, pinned, and reset the count
		if w.applied != b.a || w.foreign != b.f || w.open > 0 || (w.second.pinLosses && w.losses != b.losses) {
			b.refuse = "pin"
			return false, false, false
		}
		exact = b.v == w.target()
		w.report = b.v
		w.applied = b.sum - b.p4
		if w.second.rebaseRetired { // second review, hole C-a: the compacted keys' counts leave with them
			w.retired = 0
		}
		if w.mut.resetWithCurrentProbed && !w.review.resetWithProbedAtB4 {
			w.applied = b.sum - w.probed
		}
		w.foreignAck = b.f
		return false, true, exact
	}
}

// TestModel_RebaseAfterLossesAndCountedRepairsLandOnTarget: records are
// lost to trims now and then (the count falls short for good, and counted
// repairs refuse), rebases and counted repairs run at random moments:
// every write lands on its target, and after a drain a rebase and then a
// counted repair are exact.
func TestModel_RebaseAfterLossesAndCountedRepairsLandOnTarget(t *testing.T) {
	defer func(p int) { lossPct = p }(lossPct)
	lossPct = 40
	rebases, repairs := 0, 0
	for _, seed := range seeds(t) {
		w := newWorld(seed, mutations{})
		type stepper interface{ next() (bool, bool, bool) }
		var cur stepper
		for range 3000 {
			if cur == nil && w.rng.Intn(10) == 0 {
				if w.rng.Intn(3) == 0 {
					cur = w.newRebase()
				} else {
					cur = w.newRepair()
				}
			}
			if cur != nil && w.rng.Intn(2) == 0 {
				more, wrote, exact := cur.next()
				if wrote && !exact {
					t.Fatalf("seed %d: a %T wrote off target", seed, cur)
				}
				if wrote {
					if _, ok := cur.(*rebase); ok {
						rebases++
					} else {
						repairs++
					}
				}
				if !more {
					cur = nil
				}
				continue
			}
			w.step()
		}
		drain := func() {
			for _, s := range w.shards {
				s.readable = len(s.recs)
				for s.cp < len(s.recs) || s.pendTo > s.cp {
					w.commit(s, 0)
				}
			}
		}
		drain()
		b := w.newRebase()
		for {
			more, wrote, exact := b.next()
			if wrote && !exact {
				t.Fatalf("seed %d: the final rebase wrote off target", seed)
			}
			if !more {
				break
			}
			drain() // the probes become readable and are committed
		}
		if b.refuse != "" {
			t.Fatalf("seed %d: the final rebase refused: %s", seed, b.refuse)
		}
		w.report += 7 // damage after the rebase: a counted repair heals it
		rp := w.newRepair()
		for {
			more, wrote, exact := rp.next()
			if wrote && !exact {
				t.Fatalf("seed %d: the final repair wrote off target", seed)
			}
			if !more {
				break
			}
		}
		if w.report != w.fold() {
			t.Fatalf("seed %d: drained report %d, fold %d (refused: %q)", seed, w.report, w.fold(), rp.refuse)
		}
	}
	t.Logf("rebases on target while running: %d; counted repairs: %d", rebases, repairs)
	if rebases == 0 || repairs == 0 {
		t.Fatal("no rebase or no counted repair landed while the world ran")
	}
}

// TestModel_ALossIsRefusedByCountingAndHealedByARebase: a record trimmed
// before any commit leaves the count short: counted repairs refuse it for
// good; a rebase lands on target, resets the count, and counted repairs
// land again.
func TestModel_ALossIsRefusedByCountingAndHealedByARebase(t *testing.T) {
	s := newScript(t, mutations{})
	s.put(0, 10)
	s.put(1, 100)
	s.readable(0)
	s.readable(1)
	s.commit(0, 0)
	s.commit(1, 0)
	s.put(0, 20)
	s.readable(0)
	sh := s.w.shards[0]
	s.w.doneImg[0] = sh.recs[sh.cp].new // trimmed before any commit: lost
	sh.cp = sh.readable
	s.w.report += 3 // damage
	if wrote, _, refused := s.repair(nil); wrote || refused != "count" {
		t.Fatalf("counted repair after a loss: wrote %v, refused %q; want refused by the count", wrote, refused)
	}
	b := s.w.newRebase()
	for {
		more, wrote, exact := b.next()
		if wrote && !exact {
			t.Fatal("the rebase wrote off target")
		}
		if !more {
			break
		}
		for k := range s.w.shards {
			s.readable(k)
			s.commit(k, 0)
		}
	}
	if b.refuse != "" || s.w.report != s.w.fold() {
		t.Fatalf("rebase refused %q; report %d, fold %d", b.refuse, s.w.report, s.w.fold())
	}
	s.w.report += 3
	if wrote, exact, refused := s.repair(nil); !wrote || !exact {
		t.Fatalf("counted repair after the rebase: wrote %v, on target %v, refused %q", wrote, exact, refused)
	}
}

// oldCommit is a commit by a consumer of the previous version (a rolling
// deploy, an invocation of the old code still running, a rollback): it
// claims and applies records and counts nothing. The revised design fences
// such code out (docs/exactly-once.md, revised design, "F"): its commit is
// refused, and oldCommit reports false. With mutations.noFence it lands.
func (w *world) oldCommit(s *shard) bool {
	if !w.mut.noFence && !w.second.fenceParks {
		return false
	}
	w.uncounted = true
	defer func() { w.uncounted = false }()
	w.commit(s, 0)
	return true
}
