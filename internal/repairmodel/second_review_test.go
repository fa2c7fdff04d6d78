package repairmodel

import (
	"sort"
	"testing"
)

// The second adversarial review of the counted-changes design (issue 25,
// revision 2; docs/exactly-once.md, "Second review (adversarial, session
// 15)"). Each scenario below is a sequence revision 2 gets wrong (a write
// off target, or a branch refused for good) and asserts what the design
// must do; it is played on revision 2 as written (expected to go wrong)
// and with the fix the review proposes (a switch in second, expected to
// pass). The hole names (W-a, P-a, …) are the document's.

// second holds the fixes the second review proposes, and the two readings
// of revision 2 it attacks (r1AfterR3, rollupNewMinusOld, fenceParks
// describe revision 2 and what composes with it; the others are fixes).
type second struct {
	// sigWhole (fix W-a): the writer's digest covers every attribute of
	// the item, so an edit that makes the image invalid breaks it.
	sigWhole bool
	// fenceParks: what the previous version really does against a fenced
	// head (hole F-a, checked on DynamoDB Local by table's
	// TestSecondReview25_TheHeadFenceIsAValidationErrorThatTheOldCodeParks):
	// its commit is not cancelled; it parks the part's delta and lands,
	// counting nothing.
	fenceParks bool
	// r1AfterR3: R1 (the reports, their parked deltas) read after R3, an
	// order revision 2 does not rule out ("R0 must come before R1, R2 and
	// R3; R2 and R3 in either order").
	r1AfterR3 bool
	// rollupNewMinusOld: the branch repair puts new − old into the tenant
	// roll-up (the roll-up review's hole 4 fix), here with old exact (the
	// report as it is when the write lands).
	rollupNewMinusOld bool
	// rebaseRetired (fix C-a): a compaction adds the key's count c to
	// retired, its REMOVE is counted apart (in neither A nor W: it changes
	// nothing), and B5 resets retired with applied.
	rebaseRetired bool
	// markedCompaction (fix C-b): compaction first marks the tombstone
	// (a counted MODIFY) and only a REMOVE of a marked tombstone is taken
	// for a compaction's.
	markedCompaction bool
	// noStream (simplification S): ledgerctl reads no stream. A counted
	// repair requires A = W (every change of the branch applied: no record
	// pending, so no base but the table's), and the rebase waits until its
	// probes are claimed, by the probed count (its base is then every
	// key's probe image).
	noStream bool
	// pinLosses (fix L-a): a consumer that abandons records (a pending
	// batch trimmed, an iterator reopened at TRIM_HORIZON past a trim)
	// moves one global loss count in the coordination table in the same
	// write that abandons them; R0 and B1 read it, R6 and B5 pin it.
	pinLosses bool
}

var defaultSecond second

// compactPct, foreignTombPct: the chance, within a delete step, of a
// compaction instead, and of another writer deleting a tombstone; 0 unless
// a test sets them.
var compactPct, foreignTombPct = 0, 0

// count is the change count a record stands for: its new image's, or, for a
// REMOVE, one more than its old image's.
func count(r record) int {
	if r.new.present {
		return r.new.changes
	}
	return r.old.changes + 1
}

// isCompaction: a REMOVE whose old image is a tombstone with a matching
// digest is a compaction's (revision 2, [F10]); with fix C-b, only one of a
// tombstone compaction has marked.
func (w *world) isCompaction(r record) bool {
	if r.new.present || !r.old.present || !r.old.tomb || !w.sigOK(r.old) {
		return false
	}
	return !w.second.markedCompaction || r.old.compacting
}

// tombstones returns the tombstone keys whose records are all claimed
// (revision 2: compaction only of tombstones older than the stream's
// retention).
func (w *world) tombstones() []int {
	var ks []int
	for k, m := range w.items {
		if !m.tomb || m.compacting {
			continue
		}
		sh := w.shards[w.shardOf[k]]
		done := true
		for _, r := range sh.recs[sh.cp:] {
			if r.key == k {
				done = false
				break
			}
		}
		if done {
			ks = append(ks, k)
		}
	}
	sort.Ints(ks)
	return ks
}

// compact hard-deletes a tombstone and adds its count to retired in the
// same transaction (revision 2, [F10]); with fix C-b, it marks it first.
// With foreignTombPct, another writer deletes a tombstone instead (no
// retired).
func (w *world) compact() {
	if w.rebasing {
		return
	}
	ks := w.tombstones()
	if len(ks) == 0 {
		return
	}
	k := ks[w.rng.Intn(len(ks))]
	if foreignTombPct > 0 && w.rng.Intn(100) < foreignTombPct {
		w.write(k, img{})
		return
	}
	w.compactKey(k)
}

func (w *world) compactKey(k int) {
	m := w.items[k]
	if w.second.markedCompaction {
		m.compacting, m.changes = true, m.changes+1
		m = signed(m)
		w.write(k, m)
	}
	w.write(k, img{})
	if w.second.rebaseRetired {
		w.retired += m.changes // fix C-a: the REMOVE is counted apart
		return
	}
	w.retired += m.changes + 1
}

// del is the writer's DELETE: a tombstone.
func (s *script) del(k int) {
	m := s.w.items[k]
	s.w.write(k, signed(img{present: true, tomb: true, changes: m.changes + 1}))
}

// Hole W-a. Revision 2's digest covers the figures, the stamp, the
// tombstone and the count; the fold also reads entityType, createdAt,
// currency and each attribute's type. A console edit that changes one of
// those (an amount retyped as a string with the same digits) keeps changes
// and sig, and makes the image invalid (contribution zero): R2 accepts it
// as the applied image.
func TestSecondReview_W_AnEditThatInvalidatesTheImageKeepsRevision2sDigest(t *testing.T) {
	play := func(sc second) (bool, bool, string, *script) {
		s := newScript(t, mutations{})
		s.w.second = sc
		s.put(0, 10)
		s.put(1, 100)
		s.readable(0)
		s.readable(1)
		s.commit(0, 0)
		s.commit(1, 0)
		s.w.report += 5 // damage
		m := s.w.items[0]
		m.invalid = true // another writer's edit: same count, same digest
		s.w.write(0, m)  // not readable
		wrote, exact, refused := s.repair(nil)
		return wrote, exact, refused, s
	}
	wrote, exact, refused, s := play(second{})
	if !wrote || exact {
		t.Errorf("revision 2: wrote %v, on target %v, refused %q; want a write off target (the hole)", wrote, exact, refused)
	}
	s.readable(0)
	s.commit(0, 0)
	t.Logf("revision 2: the repair wrote %d for a target of %d; once the edit commits the report holds %d, the table folds to %d (foreign %d)",
		s.w.report+10, 110, s.w.report, s.w.fold(), s.w.foreign)
	wrote, _, refused, _ = play(second{sigWhole: true})
	if wrote || refused != "foreign in the table" {
		t.Errorf("fix (digest of the whole item): wrote %v, refused %q; want refused as a foreign write in the table", wrote, refused)
	}
}

// Hole P-a. End-keyed markers are written by version 4 only. A standard-mode
// run committed by the previous version (during the rolling deploy, or
// before it) has a marker under its first record only; once that record is
// trimmed, its readable tail looks pending, as in the first review's hole 1
// — for up to the stream's retention after the upgrade, and the upgrade's
// own rebase (B4's "first pending record") runs in that window. The counts
// here are as the upgrade's rebase leaves them (every claimed record
// counted).
func TestSecondReview_P_APreviousVersionsRunHasNoEndMarker(t *testing.T) {
	play := func(rv review) (bool, bool, string) {
		s := stdScript(t, rv)
		s.w.shardOf[2] = 0 // keys 0 and 2 share shard 0
		s.put(0, 10)
		s.readable(0)
		s.commit(0, 0)
		s.put(1, 100)
		s.readable(1)
		s.commit(1, 0)
		s.put(2, 5)
		s.put(0, 20)
		s.readable(0)
		s.w.mut.noEndMarkers = true // the previous version's run: no end marker
		s.commit(0, 0)
		s.w.mut.noEndMarkers = false
		s.w.shards[0].trimmed = 2 // its first record trimmed, its last not yet
		s.put(1, 200)             // not readable yet
		return s.repair(nil)
	}
	wrote, exact, refused := play(review{commitAll: true})
	if !wrote || exact {
		t.Errorf("revision 2: wrote %v, on target %v, refused %q; want a write off target (the hole)", wrote, exact, refused)
	}
	wrote, exact, refused = play(review{commitAll: true, stdUnknownPrefix: true})
	if wrote && !exact {
		t.Errorf("fix (unknown prefix on a shard that holds runs of the previous version): wrote off target")
	}
	t.Logf("fix: wrote %v, refused %q", wrote, refused)
}

// Hole R-a. The roll-up review's hole 4 makes the branch repair put new − old
// into the tenant roll-up. Under counted changes the roll-up's share of a
// report is exactly what the consumers applied (stage 1 rides in the same
// transactions), which is the repair's target, whatever damage the report
// item took: new − old carries the damage into the roll-up. Here old is even
// exact (the report as the write finds it).
func TestSecondReview_R_ARepairsRollupDeltaCarriesTheDamageIntoTheRollup(t *testing.T) {
	for _, c := range []struct {
		name string
		sc   second
		want bool // the roll-up equal to the fold after the repair
	}{{"hole 4's new − old", second{rollupNewMinusOld: true}, false}, {"fix: no roll-up delta for a counted repair's difference", second{}, true}} {
		s := newScript(t, mutations{})
		s.w.second = c.sc
		s.put(0, 10)
		s.put(1, 100)
		s.readable(0)
		s.readable(1)
		s.commit(0, 0)
		s.commit(1, 0)
		s.w.report += 5 // damage to the branch report item only
		wrote, exact, refused := s.repair(nil)
		if !wrote || !exact {
			t.Fatalf("%s: wrote %v, on target %v, refused %q; want a write on target", c.name, wrote, exact, refused)
		}
		if got := s.w.rollup == s.w.fold(); got != c.want {
			t.Errorf("%s: roll-up %d, fold %d; want equal %v", c.name, s.w.rollup, s.w.fold(), c.want)
		}
	}
}

// TestSecondReview_R_Randomized: hole R-a at random (damage, counted
// repairs while the world runs, a drain and a last repair): with new − old
// the roll-up ends off the fold wherever a repair healed damage.
func TestSecondReview_R_Randomized(t *testing.T) {
	defer func(s second) { defaultSecond = s }(defaultSecond)
	for _, c := range []struct {
		name string
		sc   second
	}{{"hole 4's new − old", second{rollupNewMinusOld: true}}, {"fix", second{}}} {
		defaultSecond = c.sc
		off, landed := 0, 0
		for _, seed := range seeds(t) {
			got := run(seed, 3000, mutations{})
			if got.wrong > 0 || got.final > 0 {
				t.Fatalf("%s, seed %d: a branch repair off target", c.name, seed)
			}
			landed += got.landed
			if got.rollupOff {
				off++
			}
		}
		t.Logf("%s: %d repair writes; roll-up off the fold after the drain in %d of %d seeds", c.name, landed, off, len(seeds(t)))
		if c.sc == (second{}) && off > 0 {
			t.Errorf("fix: roll-up off in %d seeds", off)
		}
	}
}

// Hole F-a. The head fence does not cancel the previous version's commit:
// its update of a fenced head is a ValidationError naming the head, which
// that version parks (docs/exactly-once.md, "Parked deltas"), and the rest
// of its commit, the claim included, lands, counting nothing. With R1 read
// after R3, a record R3 read as pending is claimed by such a commit before
// R1, R1 reads its parked delta, R4 balances (the count never moved), R5
// takes the record's old image as the base and R6 deletes the parked delta:
// the change is gone for good. With R1 before R3 (fix: stated), the parked
// delta R6 leaves in place is exactly the change its base lacks.
func TestSecondReview_F_TheFenceParksAndAParkedDeltaReadAfterR3IsLost(t *testing.T) {
	play := func(sc second) (bool, bool, string, *script) {
		s := newScript(t, mutations{})
		s.w.second = sc
		s.put(0, 10)
		s.readable(0)
		s.commit(0, 0)
		s.put(0, 20)
		s.readable(0) // pending, readable
		wrote, exact, refused := s.repair(map[int]func(){3: func() {
			if !s.w.oldCommit(s.w.shards[0]) { // the previous version claims it, parking its delta
				t.Fatal("the old commit did not land")
			}
		}})
		return wrote, exact, refused, s
	}
	wrote, exact, refused, s := play(second{fenceParks: true, r1AfterR3: true})
	if !wrote || exact {
		t.Errorf("R1 after R3: wrote %v, on target %v, refused %q; want a write off target (the hole)", wrote, exact, refused)
	}
	t.Logf("R1 after R3: report %d + parked %d; target %d", s.w.report, s.w.parked, s.w.target())
	wrote, exact, refused, s = play(second{fenceParks: true})
	if wrote && !exact {
		t.Errorf("R1 before R3: wrote off target (report %d + parked %d; target %d)", s.w.report, s.w.parked, s.w.target())
	}
	t.Logf("R1 before R3: wrote %v, refused %q; report %d + parked %d = target %d", wrote, refused, s.w.report, s.w.parked, s.w.target())
	if wrote, _, refused := s.repair(nil); wrote || refused != "count" {
		t.Errorf("after the parked commit: wrote %v, refused %q; want refused by the count (rebase)", wrote, refused)
	}
}

// Hole C-a. Compaction moves a tombstone's count into retired (and its
// REMOVE's into applied). B5 resets applied to the sum over the keys it
// probed, which leaves the compacted keys out, and keeps retired: from then
// on W = Σ c + retired exceeds A by retired and every counted repair of the
// branch refuses, and every later rebase leaves it so: refused for good.
func TestSecondReview_C_ARebaseLeavesRetiredBehind(t *testing.T) {
	for _, c := range []struct {
		name string
		sc   second
		want string // the counted repair after the rebase: "" (lands on target) or the refusal
	}{{"revision 2", second{}, "count"}, {"fix: B5 resets retired", second{rebaseRetired: true}, ""}} {
		s := newScript(t, mutations{})
		s.w.second = c.sc
		s.put(0, 10)
		s.del(0)
		s.put(1, 100)
		for k := range 2 {
			s.readable(k)
			s.commit(k, 0)
		}
		s.w.compactKey(0)
		s.readable(0)
		s.commit(0, 0)
		s.w.report += 3
		if wrote, exact, refused := s.repair(nil); !wrote || !exact {
			t.Fatalf("%s: counted repair after the compaction: wrote %v, on target %v, refused %q", c.name, wrote, exact, refused)
		}
		b := s.w.newRebase() // an upgrade, a loss, a foreign write: any rebase
		for {
			more, wrote, exact := b.next()
			if wrote && !exact {
				t.Fatalf("%s: the rebase wrote off target", c.name)
			}
			if !more {
				break
			}
			for k := range s.w.shards {
				s.readable(k)
				s.commit(k, 0)
			}
		}
		if b.refuse != "" {
			t.Fatalf("%s: the rebase refused %q", c.name, b.refuse)
		}
		s.w.report += 3
		wrote, exact, refused := s.repair(nil)
		switch {
		case c.want == "" && (!wrote || !exact):
			t.Errorf("%s: counted repair after the rebase: wrote %v, on target %v, refused %q; want a write on target", c.name, wrote, exact, refused)
		case c.want != "" && (wrote || refused != c.want):
			t.Errorf("%s: counted repair after the rebase: wrote %v, refused %q; want refused %q", c.name, wrote, refused, c.want)
		}
		t.Logf("%s: after the rebase applied %d, probed %d, retired %d: wrote %v, refused %q", c.name, s.w.applied, s.w.probed, s.w.retired, wrote, refused)
	}
}

// Hole C-b. A REMOVE of a tombstone whose digest matches is counted as a
// compaction's, so another writer's delete of a tombstone (a console
// clean-up of "deleted rows") is the hard-delete hole with no foreign count:
// while its REMOVE is unreadable its key's count is missing from W and can
// hide as many unreadable records of other keys; once committed it moves
// applied, never foreign, so the alarm revision 2 names for hard deletes
// never fires (only R4's excess names it). Fix C-b (compaction marks the
// tombstone first; only a marked tombstone's REMOVE is a compaction's)
// makes it foreign, as any hard delete: detected after, as documented.
func TestSecondReview_C_AnotherWritersDeleteOfATombstoneIsNeverForeign(t *testing.T) {
	for _, c := range []struct {
		name        string
		sc          second
		wantForeign int
	}{{"revision 2", second{}, 0}, {"fix: marked compaction", second{markedCompaction: true}, 1}} {
		s := newScript(t, mutations{})
		s.w.second = c.sc
		s.put(0, 10)
		s.del(0) // changes 2
		s.put(1, 100)
		for k := range 2 {
			s.readable(k)
			s.commit(k, 0)
		}
		s.put(1, 200)
		s.put(1, 300)       // two records of key 1, not readable
		s.w.write(0, img{}) // another writer deletes the tombstone: not readable
		wrote, exact, refused := s.repair(nil)
		if !wrote || exact {
			t.Errorf("%s: wrote %v, on target %v, refused %q; want the hard-delete hole (a write off target)", c.name, wrote, exact, refused)
		}
		s.readable(0)
		s.commit(0, 0)
		if s.w.foreign != c.wantForeign {
			t.Errorf("%s: foreign = %d after the REMOVE committed; want %d", c.name, s.w.foreign, c.wantForeign)
		}
		t.Logf("%s: foreign %d, applied %d after the REMOVE", c.name, s.w.foreign, s.w.applied)
	}
}

// rebaseWorld is TestModel_RebaseAfterLossesAndCountedRepairsLandOnTarget's
// world (losses, rebases and counted repairs at random, a drain, a last
// rebase, damage and a last counted repair), with compactions: it returns
// the writes, those off target, and the last repair's refusal.
func rebaseWorld(seed int64) (writes, wrong int, last string) {
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
			if wrote {
				writes++
				if !exact {
					wrong++
				}
			}
			if !more {
				cur = nil
			}
			continue
		}
		w.step()
	}
	w.rebasing = false
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
			wrong++
		}
		if !more {
			break
		}
		drain()
	}
	if b.refuse != "" {
		return writes, wrong, "rebase: " + b.refuse
	}
	w.report += 7
	rp := w.newRepair()
	for {
		more, wrote, exact := rp.next()
		if wrote && !exact {
			wrong++
		}
		if !more {
			break
		}
	}
	if rp.refuse == "" && w.report != w.fold() {
		wrong++
	}
	return writes, wrong, rp.refuse
}

// TestSecondReview_C_CompactionRandomized: compaction at random beside
// losses, rebases and counted repairs. After a rebase of a branch that has
// had compactions the last counted repair refuses "count" for good; with
// fix C-a none does. (Revision 2 also writes off target across a loss,
// hole L-a, at seeds 2169 and 2215 of 3,000: fix L-a is on with C-a.)
func TestSecondReview_C_CompactionRandomized(t *testing.T) {
	defer func(s second, c, l int) { defaultSecond, compactPct, lossPct = s, c, l }(defaultSecond, compactPct, lossPct)
	compactPct, lossPct = 30, 40
	for _, c := range []struct {
		name string
		sc   second
	}{{"revision 2", second{}}, {"fixes C-a and L-a", second{rebaseRetired: true, pinLosses: true}}} {
		defaultSecond = c.sc
		writes, wrong := 0, 0
		refused := map[string]int{}
		for _, seed := range seeds(t) {
			n, bad, last := rebaseWorld(seed)
			writes += n
			wrong += bad
			if last != "" {
				refused[last]++
			}
		}
		t.Logf("%s: %d writes while running, %d off target; last counted repair after the last rebase refused: %v (of %d seeds)", c.name, writes, wrong, refused, len(seeds(t)))
		if c.sc.pinLosses && wrong > 0 { // revision 2 has L-a's writes off target beyond 2,000 seeds
			t.Errorf("%s: %d writes off target", c.name, wrong)
		}
		if c.sc.rebaseRetired && len(refused) > 0 {
			t.Errorf("%s: refused after a rebase: %v", c.name, refused)
		}
	}
}

// Hole O-a. Revision 2 says the digest stops "a restore of one item". It
// does not: an item restored from a backup (or copied back from an export)
// is an image the writer once wrote, digest and all, with a lower count.
// R2 accepts it; its lowered count is the documented hard-delete class (an
// excess in A that hides as many unreadable records elsewhere), detected
// only once its record commits (foreign: its count does not step by one).
func TestSecondReview_O_ARestoredItemCarriesItsOwnDigest(t *testing.T) {
	for _, sc := range []second{{}, {sigWhole: true}} {
		s := newScript(t, mutations{})
		s.w.second = sc
		s.put(0, 10)
		older := s.w.items[0] // the backup's image
		s.put(0, 20)
		s.put(1, 100)
		for k := range 2 {
			s.readable(k)
			s.commit(k, 0)
		}
		s.put(1, 200)       // not readable
		s.w.write(0, older) // the restore: not readable
		wrote, exact, refused := s.repair(nil)
		if !wrote || exact {
			t.Errorf("digest %+v: wrote %v, on target %v, refused %q; want a write off target (the restore passes R2)", sc, wrote, exact, refused)
		}
		s.readable(0)
		s.commit(0, 0)
		if s.w.foreign != 1 {
			t.Errorf("digest %+v: foreign %d after the restore committed; want 1 (detected after)", sc, s.w.foreign)
		}
	}
}

// TestSecondReview_S_WithoutTheStream: simplification S against every
// randomized world of the model: counted repairs and rebases that read no
// stream (A = W; probes waited for by their count) stay on target, with
// the losses, compactions, previous-version commits (fenced) and kept-count
// edits of the other tests, and the hard-delete hole where it was.
func TestSecondReview_S_WithoutTheStream(t *testing.T) {
	defer func(s second, c, l, f, o int, r review, st bool) {
		defaultSecond, compactPct, lossPct, foreignEditPct, oldCommitPct, defaultReview, defaultStd = s, c, l, f, o, r, st
	}(defaultSecond, compactPct, lossPct, foreignEditPct, oldCommitPct, defaultReview, defaultStd)
	for _, sc := range []second{{}, {noStream: true, rebaseRetired: true, sigWhole: true, pinLosses: true}} {
		defaultSecond = sc
		name := "revision 2"
		if sc.noStream {
			name = "simplification S (with fixes C-a, W-a, L-a)"
		}
		var landed, wrong, hard, std, stdWrong int
		refused := map[string]int{}
		for _, seed := range seeds(t) {
			foreignEditPct, oldCommitPct = 30, 5
			got := run(seed, 3000, mutations{})
			foreignEditPct, oldCommitPct = 0, 0
			landed += got.landed
			wrong += got.wrong
			for k, n := range got.refused {
				refused[k] += n
			}
			h := run(seed, 3000, mutations{hardDeletes: true})
			if h.wrong > 0 && h.foreign == 0 {
				t.Errorf("%s, seed %d: a hard delete's write off target with no foreign count", name, seed)
			}
			hard += h.wrong
			defaultStd = true
			g := runStd(seed, 3000, mutations{})
			defaultStd = false
			std += g.landed
			stdWrong += g.wrong
		}
		t.Logf("%s: counted repairs %d landed, %d off target (left alone: %v); hard deletes: %d off target; standard mode with trims: %d landed, %d off target",
			name, landed, wrong, refused, hard, std, stdWrong)
		if wrong > 0 || stdWrong > 0 {
			t.Errorf("%s: writes off target", name)
		}
		compactPct, lossPct = 30, 40
		writes, bad := 0, 0
		last := map[string]int{}
		for _, seed := range seeds(t) {
			n, b, l := rebaseWorld(seed)
			writes += n
			bad += b
			if l != "" {
				last[l]++
			}
		}
		compactPct, lossPct = 0, 0
		t.Logf("%s: losses, compactions, rebases and repairs: %d writes, %d off target; last repair after the last rebase refused: %v", name, writes, bad, last)
		if sc.noStream && bad > 0 { // revision 2 has L-a's beyond 2,000 seeds
			t.Errorf("%s: %d rebase or repair writes off target", name, bad)
		}
		if sc.noStream && len(last) > 0 {
			t.Errorf("%s: refused after the last rebase: %v", name, last)
		}
	}
}

// Hole L-a. A loss (a pending batch abandoned after a trim, an iterator
// reopened at TRIM_HORIZON past a trim) claims records without committing
// or counting them. Between R0 and R6 it is invisible to the pin: a record
// of a key R2 did not see (created after R2), lost before R6, is in the
// target (the later records of its key will be applied on top of its
// image) and not in the repair's figures. Found by the model's own
// randomized test (TestModel_RebaseAfterLossesAndCountedRepairsLandOnTarget)
// at seed 2215, beyond the 1,000 seeds revision 2 ran. The repair's write
// is no worse than the loss alone (the count stays short afterwards and
// names the branch), but the claim "every write holds its target" is false
// across a loss. Fix L-a: every consumer that abandons records moves a
// global loss count (coordination table) in the same write; R0/B1 read
// it, R6/B5 pin it.
func TestSecondReview_L_ALossBetweenR0AndR6IsInvisibleToThePin(t *testing.T) {
	for _, c := range []struct {
		name string
		sc   second
	}{{"revision 2", second{}}, {"fix L-a", second{pinLosses: true}}} {
		s := newScript(t, mutations{})
		s.w.second = c.sc
		s.put(1, 100)
		s.readable(1)
		s.commit(1, 0)
		s.w.report += 2 // damage
		wrote, exact, refused := s.repair(map[int]func(){2: func() {
			s.put(2, 8) // created after R2
			s.readable(2)
			sh := s.w.shards[2] // trimmed before any commit: lost
			for _, r := range sh.recs[sh.cp:sh.readable] {
				s.w.doneImg[r.key] = r.new
			}
			sh.cp = sh.readable
			s.w.losses++
		}})
		switch {
		case c.sc.pinLosses && wrote:
			t.Errorf("%s: wrote (on target %v); want refused by the pin", c.name, exact)
		case !c.sc.pinLosses && (!wrote || exact):
			t.Errorf("%s: wrote %v, on target %v, refused %q; want a write off target (the hole)", c.name, wrote, exact, refused)
		}
		t.Logf("%s: wrote %v, on target %v, refused %q; report %d, target %d", c.name, wrote, exact, refused, s.w.report, s.w.target())
	}
}

// TestSecondReview_F_UnderSR1MustComeBeforeR2: hole F-a under
// simplification S. With no R3, R1 read after R2 can meet the parked delta
// of a record written after R2 read its key and claimed by the previous
// version (which counts nothing): R4's A = W holds, R5's base is the
// image R2 read, and R6 deletes the parked delta. With R1 between R0 and
// R2 it cannot see such a delta, and report + parked stays the target.
func TestSecondReview_F_UnderSR1MustComeBeforeR2(t *testing.T) {
	for _, c := range []struct {
		name   string
		sc     second
		wantOK bool
	}{{"R1 after R2", second{noStream: true, fenceParks: true, r1AfterR3: true}, false}, {"R1 before R2", second{noStream: true, fenceParks: true}, true}} {
		s := newScript(t, mutations{})
		s.w.second = c.sc
		s.put(0, 10)
		s.readable(0)
		s.commit(0, 0)
		s.w.report += 4 // damage
		wrote, exact, refused := s.repair(map[int]func(){3: func() {
			s.put(0, 20) // written after R2 read key 0
			s.readable(0)
			if !s.w.oldCommit(s.w.shards[0]) {
				t.Fatal("the old commit did not land")
			}
		}})
		if !wrote {
			t.Fatalf("%s: refused %q; want a write", c.name, refused)
		}
		if exact != c.wantOK {
			t.Errorf("%s: on target %v; want %v (report %d + parked %d, target %d)", c.name, exact, c.wantOK, s.w.report, s.w.parked, s.w.target())
		}
		t.Logf("%s: report %d + parked %d, target %d", c.name, s.w.report, s.w.parked, s.w.target())
	}
}
