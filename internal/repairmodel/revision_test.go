package repairmodel

import "testing"

// The revised design (docs/exactly-once.md, "Repairing while consumers
// run", revision 2) answers each finding of the review. The review's
// scenarios (review_test.go) pass on it; here each answer is switched off
// in turn (a field of mutations) and the review's scenario must go wrong
// again, so that the model shows each answer is what closes its hole.

// Finding 1: without end-keyed markers, a standard-mode run whose first
// record is trimmed looks pending.
func TestRevision_Finding1_WithoutEndMarkersTheTrimmedRunLooksPending(t *testing.T) {
	play := func(mut mutations) (bool, bool, string) {
		s := newScript(t, mut)
		s.w.review = review{commitAll: true}
		for _, sh := range s.w.shards {
			sh.std, sh.markers, sh.endMarkers = true, map[int]int{}, map[int]int{}
		}
		s.w.shardOf[2] = 0
		s.put(0, 10)
		s.readable(0)
		s.commit(0, 0)
		s.put(1, 100)
		s.readable(1)
		s.commit(1, 0)
		s.put(2, 5)
		s.put(0, 20)
		s.readable(0)
		s.commit(0, 0)
		s.w.shards[0].trimmed = 2
		s.put(1, 200) // not readable yet
		return s.repair(nil)
	}
	if wrote, exact, refused := play(mutations{noEndMarkers: true}); !wrote || exact {
		t.Errorf("end markers off: wrote %v, on target %v, refused %q; want the hole (a write off target)", wrote, exact, refused)
	}
	wrote, exact, refused := play(mutations{})
	if wrote {
		t.Errorf("revised design: wrote (on target %v); want a refusal", exact)
	}
	t.Logf("revised design: refused %q", refused)
}

// Finding 1 at random: standard-mode shards whose trim horizon passes
// through committed runs. The revised design: no write off target. End
// markers off: the review's count of writes off target comes back.
func TestRevision_Finding1_Randomized(t *testing.T) {
	defer func(r review, s bool) { defaultReview, defaultStd = r, s }(defaultReview, defaultStd)
	defaultStd, defaultReview = true, review{}
	for _, c := range []struct {
		name string
		mut  mutations
	}{{"revised design", mutations{}}, {"end markers off", mutations{noEndMarkers: true}}} {
		landed, wrong := 0, 0
		refused := map[string]int{}
		for _, seed := range seeds(t) {
			got := runStd(seed, 3000, c.mut)
			landed += got.landed
			wrong += got.wrong
			for k, n := range got.refused {
				refused[k] += n
			}
		}
		t.Logf("%s: %d repair writes, %d off target; left alone: %v", c.name, landed, wrong, refused)
		if c.mut == (mutations{}) && wrong > 0 {
			t.Errorf("%s: %d repair writes off target", c.name, wrong)
		}
		if c.mut == (mutations{}) && landed == 0 {
			t.Errorf("%s: no repair landed", c.name)
		}
	}
}

// Finding 2: with any probe-flagged record counted as a probe, the
// writer's delete after a probe slips past the rebase's pin.
func TestRevision_Finding2_ALooseProbeCountLetsADeleteThrough(t *testing.T) {
	play := func(mut mutations) (wrote, exact bool, refused string) {
		s := newScript(t, mut)
		s.w.review = review{commitAll: true}
		s.put(0, 10)
		s.readable(0)
		s.commit(0, 0)
		b := s.w.newRebase()
		b.next() // B1
		b.next() // B2
		m := s.w.items[0]
		s.w.write(0, signed(img{present: true, tomb: true, changes: m.changes + 1, probe: m.probe}))
		s.readable(0)
		s.commit(0, 0)
		for {
			more, w, e := b.next()
			if w {
				wrote, exact = true, e
			}
			if !more {
				return wrote, exact, b.refuse
			}
		}
	}
	if wrote, exact, refused := play(mutations{looseProbe: true}); !wrote || exact {
		t.Errorf("loose probe: wrote %v, on target %v, refused %q; want the hole", wrote, exact, refused)
	}
	wrote, exact, refused := play(mutations{})
	if wrote && !exact {
		t.Error("revised design: wrote off target")
	}
	t.Logf("revised design: wrote %v, on target %v, refused %q", wrote, exact, refused)
}

// Finding 3: without the fence, a consumer of the previous version commits
// a pending record between R3 and R6 unseen by the pin.
func TestRevision_Finding3_WithoutTheFenceAnOldConsumerBeatsThePin(t *testing.T) {
	play := func(mut mutations) (bool, bool, string) {
		s := newScript(t, mut)
		s.w.review = review{commitAll: true}
		s.put(0, 10)
		s.readable(0)
		s.commit(0, 0)
		s.put(0, 20)
		s.readable(0)
		return s.repair(map[int]func(){4: func() { s.w.oldCommit(s.w.shards[0]) }})
	}
	if wrote, exact, refused := play(mutations{noFence: true}); !wrote || exact {
		t.Errorf("no fence: wrote %v, on target %v, refused %q; want the hole", wrote, exact, refused)
	}
	wrote, exact, refused := play(mutations{})
	if wrote && !exact {
		t.Error("revised design: wrote off target")
	}
	t.Logf("revised design: wrote %v, on target %v, refused %q", wrote, exact, refused)
}

// Finding 4: without the digest, a console edit that keeps the count is
// taken as applied.
func TestRevision_Finding4_WithoutTheDigestAKeptCountFoolsR2(t *testing.T) {
	play := func(mut mutations) (bool, bool, string) {
		s := newScript(t, mut)
		s.w.review = review{commitAll: true}
		s.put(0, 10)
		s.readable(0)
		s.commit(0, 0)
		m := s.w.items[0]
		m.value = 50
		s.w.write(0, m)
		return s.repair(nil)
	}
	if wrote, exact, refused := play(mutations{noSig: true}); !wrote || exact {
		t.Errorf("no digest: wrote %v, on target %v, refused %q; want the hole", wrote, exact, refused)
	}
	wrote, exact, refused := play(mutations{})
	if wrote {
		t.Errorf("revised design: wrote (on target %v); want a refusal", exact)
	}
	t.Logf("revised design: refused %q", refused)
}

// Findings 3 and 4 at random: consumers of the previous version try to
// commit now and then, and another writer edits items keeping their
// counts. The revised design never writes off target. With the fence or
// the digest off the figures are logged only: at random the first
// uncounted commit or committed foreign edit makes every later repair
// refuse (the count falls short, foreign moves), so the hole shows in the
// hand-written scenarios above rather than here.
func TestRevision_Findings3And4_Randomized(t *testing.T) {
	defer func(a, b int) { oldCommitPct, foreignEditPct = a, b }(oldCommitPct, foreignEditPct)
	for _, c := range []struct {
		name      string
		mut       mutations
		old, edit int
		design    bool
	}{
		{"revised design, old consumers", mutations{}, 5, 0, true},
		{"revised design, kept-count edits", mutations{}, 0, 30, true},
		{"fence off, old consumers", mutations{noFence: true}, 5, 0, false},
		{"digest off, kept-count edits", mutations{noSig: true}, 0, 30, false},
	} {
		oldCommitPct, foreignEditPct = c.old, c.edit
		landed, wrong := 0, 0
		refused := map[string]int{}
		for _, seed := range seeds(t) {
			got := run(seed, 3000, c.mut)
			landed += got.landed
			wrong += got.wrong
			for k, n := range got.refused {
				refused[k] += n
			}
		}
		t.Logf("%s: %d repair writes, %d off target; left alone: %v", c.name, landed, wrong, refused)
		if c.design && wrong > 0 {
			t.Errorf("%s: %d writes off target", c.name, wrong)
		}

	}
}

// Finding 7: B5 subtracting the probed count of its own moment leaves the
// count short for good after probes committed between B4 and B5.
func TestRevision_Finding7_SubtractingTheCurrentProbedLeavesTheCountShort(t *testing.T) {
	play := func(mut mutations) (bool, bool, string) {
		s := newScript(t, mut)
		s.w.review = review{commitAll: true}
		s.put(0, 10)
		s.put(1, 100)
		s.readable(0)
		s.readable(1)
		s.commit(0, 0)
		s.commit(1, 0)
		b := s.w.newRebase()
		b.next()
		b.next()
		s.readable(0)
		s.readable(1)
		b.next()
		b.next()
		s.commit(0, 0)
		s.commit(1, 0)
		if _, w, e := b.next(); !w || !e {
			t.Fatalf("B5 did not land on target (refused %q)", b.refuse)
		}
		s.w.report += 3
		return s.repair(nil)
	}
	if wrote, _, refused := play(mutations{resetWithCurrentProbed: true}); wrote || refused != "count" {
		t.Errorf("current probed: wrote %v, refused %q; want the hole (refused by the count for good)", wrote, refused)
	}
	if wrote, exact, refused := play(mutations{}); !wrote || !exact {
		t.Errorf("revised design: wrote %v, on target %v, refused %q; want a write on target", wrote, exact, refused)
	}
}

// The rebase's randomized test with every answer on (the defaults) is
// TestModel_RebaseAfterLossesAndCountedRepairsLandOnTarget; with finding
// 2's and 6's answers off it must still land on target (they are about a
// writer's delete during a probe and liveness), and the count may fall
// short: this only logs.
