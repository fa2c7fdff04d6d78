package poller_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/streamemu"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/table"
)

// pagesRead is the emulation with a note of every shard a GetRecords
// answered a page of (records or not): the shards a reader read.
type pagesRead struct {
	*streamemu.Stream
	mu   sync.Mutex
	read map[string]bool
}

func (p *pagesRead) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	out, err := p.Stream.GetRecords(ctx, in, opts...)
	if err == nil {
		if id, ok := streamemu.IteratorShard(aws.ToString(in.ShardIterator)); ok {
			p.mu.Lock()
			p.read[id] = true
			p.mu.Unlock()
		}
	}
	return out, err
}

func (p *pagesRead) wasRead(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.read[id]
}

// Issue 23's "a drain while shards keep closing (it exits, having read
// every child)": for the drain's whole life a shard closes every 20–50 ms
// (a split for 40% of them while fewer than 8 are open, a roll
// otherwise), and records are written for its first 5 seconds. The drain
// exits within 2 minutes; every record readable at its start is committed
// (docs/exactly-once.md, "The drain's promise"); every shard it finished
// is committed to its last record; and a final drain (nothing closing)
// leaves 0 report differences and no child committed before its parent
// finished. "Having read every child" means, under the drain's horizon,
// every child holding a record readable at its start: the children of a
// shard that closed under the drain (after a listing of the drain showed
// it open) were made after its start and hold only later records, left to
// the live pollers or the next drain.
//
// Before issue 23's fix the drain waited forever for the children of a
// shard it had read to an empty page and saw closed; with session 22's
// (that shard and its children read) it exited only once a listing showed
// no such close, which on a loaded machine took until the closes paused
// (the final CI of session 22: 789 closes in 2 minutes, no exit), so the
// closes went on for the drain's first 20 s only, every 100–200 ms. With
// the horizon the drain takes about a second here: the closes come every
// 20–50 ms to meet it.
func TestPoller_EmulatedDrainExitsWhileShardsKeepClosing(t *testing.T) {
	drainWhileClosing(t, streamemu.Config{Shards: 3, Seed: 237}, nil, 20*time.Millisecond, 50*time.Millisecond, 8, 0, 3)
}

// drainWhileClosing runs a drain on the stream cfg describes (before, if
// set, acts on it first) while a shard closes every gapMin–gapMax (a split for 40%
// of closes while fewer than maxOpen are open), for closeFor from the
// start (0: for the drain's whole life), and checks what the drain did:
// at least minMet shards it finished, or read and saw closed.
func drainWhileClosing(t *testing.T, cfg streamemu.Config, before func(*emuEnv), gapMin, gapMax time.Duration, maxOpen int, closeFor time.Duration, minMet int) {
	ctx := context.Background()
	seed := cfg.Seed
	e := newEmuEnv(t, seed, cfg)
	e.write(t, 300) // enough for the drain to meet a few closes
	require.NoError(t, e.s.Sync(ctx))
	if before != nil {
		before(e)
	}

	stopClosing := make(chan struct{})
	closerDone := make(chan int)
	go func() {
		rng := rand.New(rand.NewPCG(seed, 1))
		closes := 0
		defer func() { closerDone <- closes }()
		var until <-chan time.Time
		if closeFor > 0 {
			until = time.After(closeFor)
		}
		for {
			select {
			case <-until:
				<-stopClosing
				return
			case <-stopClosing:
				return
			case <-time.After(gapMin + time.Duration(rng.Int64N(int64(gapMax-gapMin)+1))):
			}
			var open []string
			for _, sh := range e.s.Shards() {
				if !sh.Closed {
					open = append(open, sh.ID)
				}
			}
			if len(open) == 0 {
				continue
			}
			split := len(open) < maxOpen && rng.Float64() < 0.4
			if _, err := e.s.Close(open[rng.IntN(len(open))], split); err == nil {
				closes++
			}
		}
	}()
	writesDone := make(chan error, 1)
	go func() {
		// The workload is the writer's alone until it stops.
		until := time.Now().Add(5 * time.Second)
		for time.Now().Before(until) {
			if err := e.w.Run(ctx, e.ddb, e.table, 10); err != nil {
				writesDone <- err
				return
			}
		}
		writesDone <- nil
	}()

	reads := &pagesRead{Stream: e.s, read: map[string]bool{}}
	tp := e.poller(t, "drain", reads, func(c *poller.Config) { c.Drain, c.LeaseDuration = true, 30*time.Second })
	// The records readable when the drain starts: what it promises to
	// have committed when it exits (docs/exactly-once.md, "The drain's
	// promise"). Taken in by the emulation (Sync) before Run: readable.
	require.NoError(t, e.s.Sync(ctx))
	atStart := e.s.History()
	from := time.Now()
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	runErr := tp.Run(dctx)
	took := time.Since(from)
	timedOut := dctx.Err() != nil
	cancel()
	close(stopClosing)
	closes := <-closerDone
	require.NoError(t, <-writesDone)
	require.NoError(t, runErr)
	listed := e.s.Shards()
	_, cps, err := table.ReadStreamState(ctx, e.ddb, table.CoordinationTableName(e.table), e.stream.arn, nil)
	require.NoError(t, err)
	if timedOut {
		// What drainComplete waits for: a listed shard neither finished
		// nor read by the drain. The first 20 of them.
		waiting := 0
		for _, sh := range listed {
			if cps[sh.ID].Finished || reads.wasRead(sh.ID) {
				continue
			}
			if waiting++; waiting <= 20 {
				t.Logf("waiting for shard %s (parent %s, parent finished %v): closed=%v endServed=%v records=%d read=%v",
					sh.ID, sh.Parent, cps[sh.Parent].Finished, sh.Closed, sh.EndServed, sh.Records, reads.wasRead(sh.ID))
			}
		}
		t.Fatalf("the drain did not exit within 2m while shards kept closing (%d closes; %d of %d shards neither finished nor read)",
			closes, waiting, len(listed))
	}
	t.Logf("drain exited after %s; %d shards closed under it, %d in the stream; %d DescribeStream calls", took.Round(10*time.Millisecond), closes, len(listed), e.s.Calls("DescribeStream"))

	// The drain's promise: every record readable at its start is
	// committed (its shard's checkpoint at or past it).
	readAtStart := map[string]bool{} // shards holding a record readable at the start
	missed := 0
	for _, h := range atStart {
		readAtStart[h.Shard] = true
		cp, ok := cps[h.Shard]
		if !ok || processor.CompareSequence(cp.Seq, h.Seq) < 0 {
			if missed++; missed <= 5 {
				t.Errorf("record %s of shard %s, readable at the drain's start, is not committed (checkpoint %q, finished %v)", h.Seq, h.Shard, cp.Seq, cp.Finished)
			}
		}
	}
	assert.Zero(t, missed, "records readable at the drain's start and not committed (of %d)", len(atStart))

	last := map[string]string{}
	for _, h := range e.s.History() {
		last[h.Shard] = h.Seq
	}
	children := map[string][]string{}
	for _, sh := range listed {
		children[sh.ID] = sh.Children
	}
	finished, closedUnder := 0, 0
	for _, sh := range listed {
		cp, ok := cps[sh.ID]
		if ok && !cp.Finished && sh.Closed && reads.wasRead(sh.ID) {
			closedUnder++ // read by the drain to an empty page, closed since
		}
		if !ok || !cp.Finished {
			continue
		}
		finished++
		assert.True(t, sh.EndServed, "finished shard %s was read to its end", sh.ID)
		if last[sh.ID] != "" {
			assert.GreaterOrEqual(t, processor.CompareSequence(cp.Seq, last[sh.ID]), 0, "finished shard %s committed to its last record %s", sh.ID, last[sh.ID])
		}
		// "Having read every child" (issue 23), under the drain's
		// horizon: every child of a shard it finished that holds a
		// record readable at its start. A child made after the start (of
		// a shard that closed under the drain) holds only later records:
		// left to the live pollers or the next drain.
		for _, k := range children[sh.ID] {
			if readAtStart[k] {
				assert.True(t, reads.wasRead(k), "child %s of the finished shard %s, with records readable at the drain's start, was read by it", k, sh.ID)
			}
		}
	}
	// The test is one only if the closes met the drain: shards it
	// finished or read to an empty page closed under it.
	t.Logf("%d shards finished by the drain, %d read by it to an empty page and closed since; %d records readable at its start", finished, closedUnder, len(atStart))
	require.GreaterOrEqual(t, finished+closedUnder, minMet, "shards the drain finished or read and saw closed")
	require.GreaterOrEqual(t, closes, 10, "shards closed under the drain")
	e.finish(t, nil)
}

// A drain while a listing takes longer than the gap between two closes (a
// finding of session 22): 60 closed shards before the drain and pages of
// one shard, a listing of ~70–160 pages at 10 DescribeStream calls a
// second (7–16 s) against a close every 1–1.5 s for the drain's whole
// life. Session 22's drain exited only after a listing made since its last
// reader's end showed no shard it had read to an empty page closed since:
// every listing found one, the drain read its end and its children and
// listed again, and in 2 minutes it never exited (95 closes, 159 shards;
// on that code this test still fails so, checked in session 23: 96
// closes, no exit). At the fleet benchmark's 1,000 shards with a day of
// history (about 7,000 shards listed, 70 pages of 100: 7 s at AWS's rate;
// a close every ~0.6 s at compression 24) the same condition held: the
// likely cause of its final drain not finishing in 5 minutes. With the
// drain's horizon (docs/exactly-once.md, "The drain's promise") it exits
// after one listing past its last reader's end, every record readable at
// its start committed, those in the lineage of the shards closed before
// it included.
func TestPoller_EmulatedDrainExitsWhenListingsOutlastTheGapBetweenCloses(t *testing.T) {
	// Records in the closed shards' lineage too (every tenth close): the
	// children of shards closed before the drain hold records readable at
	// its start, which it must read.
	manyClosed := func(e *emuEnv) {
		for i := range 60 {
			for _, sh := range e.s.Shards() {
				if !sh.Closed {
					_, err := e.s.Close(sh.ID, false)
					require.NoError(t, err)
					break
				}
			}
			if i%10 == 9 {
				e.write(t, 10)
				require.NoError(t, e.s.Sync(context.Background()))
			}
		}
	}
	drainWhileClosing(t, streamemu.Config{Shards: 4, Seed: 239, ListPage: 1, Limits: streamemu.Limits{DescribeStreamPerSecond: 10}},
		manyClosed, time.Second, 1500*time.Millisecond, 4, 0, 5)
}
