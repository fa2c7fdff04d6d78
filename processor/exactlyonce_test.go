package processor_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// seeds returns the seeds of the randomized tests: $LEDGER_SEEDS (comma
// separated) or a fixed set, so CI runs several and a failure can be replayed.
func seeds(t *testing.T) []uint64 {
	defaults := []uint64{1, 2, 3}
	if testing.Short() {
		defaults = defaults[:1]
	}
	seeds, err := ledgertest.Seeds(os.Getenv, defaults...)
	require.NoError(t, err)
	return seeds
}

// chaos injects faults into the env's transport: lost answers and dropped
// requests at random, and "crashes": after a countdown every call fails until
// the consumer restarts, as if the process died between two DynamoDB calls.
type chaos struct {
	mu        sync.Mutex
	rng       *rand.Rand
	lose      float64 // probability a write's answer is lost after it landed
	drop      float64 // probability a request fails before reaching DynamoDB
	countdown int     // calls until the crash; 0 = no crash armed
	crashed   bool
	injected  map[string]int
}

func (c *chaos) decide(op string) ledgertest.Fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return ledgertest.Drop
	}
	if c.countdown > 0 {
		if c.countdown--; c.countdown == 0 {
			c.crashed = true
			c.injected["crash"]++
			return ledgertest.Drop
		}
	}
	write := op == "TransactWriteItems" || op == "PutItem"
	switch r := c.rng.Float64(); {
	case write && r < c.lose:
		c.injected["lose_"+op]++
		return ledgertest.LoseAnswer
	case r < c.lose+c.drop:
		c.injected["drop"]++
		return ledgertest.Drop
	}
	return ledgertest.Pass
}

// armCrash makes the process "die" after a random number of calls.
func (c *chaos) armCrash(max int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.countdown = 1 + c.rng.IntN(max)
	c.crashed = false
}

// restart is the process coming back: calls work again.
func (c *chaos) restart() (crashed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	crashed = c.crashed
	c.crashed, c.countdown = false, 0
	return crashed
}

func TestExactlyOnce_RandomizedDeliveryWithFaults(t *testing.T) {
	for _, mode := range []string{"shard", "batch", "marker"} {
		for _, seed := range modeSeeds(t, mode) {
			t.Run(fmt.Sprintf("%s/seed=%d", mode, seed), func(t *testing.T) {
				ddbtest.Long(t)
				runRandomized(t, mode, seed)
			})
		}
	}
}

// defaultModeSeeds are the seeds each delivery mode runs when
// $LEDGER_SEEDS is not set: one per mode, the three seeds of seeds() shared
// out, so the package still runs each of them (a randomized run is minutes
// of DynamoDB Local CPU: nine of them alone took the package past CI's 27
// minutes on a loaded machine). Shard mode takes seed 2 because
// TestExactlyOnce_RandomizedDeliveryUnderAWSConflicts already runs shard
// mode (deliverShard) at seed 1, under AWS's conflicts besides the faults;
// batch mode is deliverShard with the poller's batches, at seed 3; marker
// mode (deliverMarker) at seed 1. $LEDGER_SEEDS runs every mode at each of
// its seeds, as before (LEDGER_SEEDS=1,2,3 is the old default).
var defaultModeSeeds = map[string]uint64{"shard": 2, "batch": 3, "marker": 1}

// modeSeeds returns the seeds of mode's randomized runs: $LEDGER_SEEDS
// when set, else seeds()'s first under -short, else defaultModeSeeds.
func modeSeeds(t *testing.T, mode string) []uint64 {
	if os.Getenv("LEDGER_SEEDS") != "" || testing.Short() {
		return seeds(t)
	}
	seed, ok := defaultModeSeeds[mode]
	require.True(t, ok, "no default seed for mode %q", mode)
	return []uint64{seed}
}

// runRandomized runs one randomized delivery; each of wrap changes the
// env first (the conflict tests put internal/ddbconflict in its path).
func runRandomized(t *testing.T, mode string, seed uint64, wrap ...func(*env)) {
	ctx := context.Background()
	e := newEnv(t)
	for _, w := range wrap {
		w(e)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	ch := &chaos{rng: rand.New(rand.NewPCG(seed, 11)), lose: 0.08, drop: 0.04, injected: map[string]int{}}
	e.faults.Decide = ch.decide
	w := ledgertest.NewWorkload(seed)
	w.Tombstones = true                // half the deletes are the writer's tombstones (MODIFY), half hard deletes (REMOVE)
	cals := ledgertest.TestCalendars() // branches in their own business calendars, one without a stamp
	w.Stamp = cals.Stamper()
	// Branches in two currencies and one without: the roll-ups are kept
	// per tenant and currency.
	w.Currency = func(tenant, branch string) string {
		return map[string]string{"north": "BRL", "south": "EUR"}[branch]
	}

	var all []processor.Record
	stats := map[string]int{}
	for phase := 0; phase < 2; phase++ {
		// Writes go on between phases; the second phase also sees the
		// consumers' own report and marker writes come back as records.
		require.NoError(t, w.Run(ctx, e.ddb, e.table, 1200))
		_, recs := e.records(t)
		fresh := recs[len(all):]
		all = recs
		switch mode {
		case "shard", "batch":
			deliverShard(t, e, rng, ch, all, len(all)-len(fresh), mode == "batch", stats)
		case "marker":
			deliverMarker(t, e, rng, ch, all, len(all)-len(fresh), stats)
		}
	}

	// Drain: a clean consumer goes over everything once more; all of it must
	// be recognised as committed.
	e.faults.Decide = nil
	p := e.processor(t, nil, e.faulty)
	var g processor.Guard = p.MarkerGuard()
	if mode != "marker" {
		g = p.ShardGuard(e.streamARN, shardOf(t, e))
	}
	if mode != "marker" {
		res, err := p.Process(ctx, g, all)
		require.NoError(t, err)
		assert.Equal(t, len(all), res.Committed)
		assert.Zero(t, res.Applied, "a full redelivery after the drain must apply nothing")
	}
	rs := e.requireReconciled(t)
	assert.Equal(t, w.Live(), rs.Transactions)
	// The roll-ups: Σ partials + unfolded delta items (the last phase's
	// commits put some no consumer has read yet) + parked shares = the
	// transactions by tenant, currency and period, and branches = the
	// branch reports whose count is not zero.
	ru := requireRollupsExact(t, e, true)
	assert.Positive(t, ru.partials, "the second phase folds the first phase's deltas")
	checked, bad, err := cals.Check(ctx, e.ddb, e.table)
	require.NoError(t, err)
	assert.Empty(t, bad, "every stamp as the independent oracle computes it")
	assert.Positive(t, checked)
	t.Logf("seed %d %s: %d records, %d live transactions (%d invalid); %d roll-up partials, %d delta items unfolded; workload %v; delivery %v; faults %v",
		seed, mode, len(all), rs.Transactions, rs.Invalid, ru.partials, ru.lane, w.Counts, stats, ch.injected)
}

// batchSize draws a batch size: mostly small batches (many cuts, many
// commits to break), sometimes large ones (many runs per batch).
func batchSize(rng *rand.Rand) int {
	if rng.IntN(4) == 0 {
		return 1 + rng.IntN(400)
	}
	return 1 + rng.IntN(40)
}

func shardOf(t *testing.T, e *env) string {
	shard, _ := e.records(t)
	return shard
}

// deliverMarker plays an event source mapping in front of a standard-mode
// Lambda: random batch sizes from its position; partial failures resume at
// the record the handler named; whole-batch failures (crashes) retry from the
// batch start; duplicate invocations of a delivered batch; rewinds to an
// earlier batch start (a lost ESM checkpoint) with longer or shorter batches.
func deliverMarker(t *testing.T, e *env, rng *rand.Rand, ch *chaos, recs []processor.Record, from int, stats map[string]int) {
	ctx := context.Background()
	p := e.processor(t, nil, e.faulty)
	pos := from
	starts := []int{}
	if from > 0 {
		starts = append(starts, from)
	}
	invoke := func(start, size int) (processor.Result, error) {
		end := min(start+size, len(recs))
		batch := append([]processor.Record(nil), recs[start:end]...)
		return p.Process(ctx, p.MarkerGuard(), batch)
	}
	for steps := 0; pos < len(recs); steps++ {
		require.Less(t, steps, 20000, "delivery does not progress")
		switch r := rng.IntN(100); {
		case r < 6 && len(starts) > 0:
			// Duplicate invocation of an already delivered batch; its
			// outcome is ignored by the ESM.
			s := starts[rng.IntN(len(starts))]
			_, _ = invoke(s, batchSize(rng))
			stats["duplicate_invocation"]++
			ch.restart()
			continue
		case r < 10 && len(starts) > 0:
			// The ESM lost its checkpoint and rewinds to an earlier start.
			pos = starts[rng.IntN(len(starts))]
			stats["rewind"]++
		case r < 16:
			ch.armCrash(12)
		}
		starts = append(starts, pos)
		size := batchSize(rng)
		res, err := invoke(pos, size)
		if ch.restart() {
			// The process died mid-invocation: the ESM retries the whole
			// batch, on a fresh process.
			stats["crash"]++
			p = e.processor(t, nil, e.faulty)
			continue
		}
		var be *processor.BatchError
		if err != nil && !errors.As(err, &be) {
			require.NoError(t, err)
		}
		if err != nil {
			stats["partial_failure"]++
		} else if res.Committed < min(size, len(recs)-pos) {
			stats["alias_redelivery"]++
		}
		pos += res.Committed
	}
}

// deliverShard plays one or two pollers over the shard: random batch cuts,
// restarts from any older position (with the origin the iterator was opened
// at), attempts to open after the checkpoint (which the guard must refuse),
// crashes between any two calls, and phases where two consumers read the
// same shard concurrently. With batches, every consumer commits whole
// batches (the poller's mode): a consumer handed records that end before a
// half-committed batch's last record is handed more (as the poller reads on),
// and, as the poller's reader does, now and then moves the checkpoint over
// the records it finished without effect (the consumers' own writes of the
// first phase come back as thousands of them: without the move, every
// restart would read them all again).
func deliverShard(t *testing.T, e *env, rng *rand.Rand, ch *chaos, recs []processor.Record, from int, batches bool, stats map[string]int) {
	ctx := context.Background()
	shard := shardOf(t, e)
	type consumer struct {
		p   *processor.Processor
		g   *processor.ShardGuard
		pos int
	}
	open := func(pos int) *consumer {
		p := e.processor(t, nil, e.faulty)
		if batches {
			// Small, differing limits: many groups per batch, reports split
			// into parts, and resumers whose configuration differs from the
			// plan stored with the pending batch.
			var err error
			p, err = processor.New(e.faulty, processor.Config{
				Table: e.table, BaseBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
				MaxItemsPerRun: 2 + rng.IntN(12), MaxEntriesPerItem: 1 + rng.IntN(4),
			}, nil)
			require.NoError(t, err)
		}
		c := &consumer{p: p, g: p.ShardGuard(e.streamARN, shard), pos: pos}
		if batches {
			c.g.CommitBatches()
		}
		if pos > 0 {
			c.g.SetOrigin(recs[pos-1].SequenceNumber)
		}
		return c
	}
	checkpointIndex := func() int {
		cp, err := e.processor(t, nil, nil).ShardGuard(e.streamARN, shard).Checkpoint(ctx)
		require.NoError(t, err)
		i := 0
		for i < len(recs) && cp != "" && processor.CompareSequence(recs[i].SequenceNumber, cp) <= 0 {
			i++
		}
		return i
	}
	c := open(from)
	need := 0 // a pending batch ends after this index
	short := false
	for steps := 0; ; steps++ {
		require.Less(t, steps, 20000, "delivery does not progress")
		if c.pos >= len(recs) {
			break
		}
		switch r := rng.IntN(100); {
		case r < 5:
			// Restart from an older position: the trim horizon or anywhere
			// at or before the checkpoint.
			c = open(rng.IntN(checkpointIndex() + 1))
			stats["restart_old"]++
		case r < 7:
			// Open after the checkpoint: records in between were never
			// read; the guard must refuse to commit.
			cp := checkpointIndex()
			if cp+2 < len(recs) {
				bad := open(cp + 2)
				_, err := bad.p.Process(ctx, bad.g, recs[bad.pos:min(bad.pos+10, len(recs))])
				require.ErrorIs(t, err, processor.ErrGap)
				stats["gap_refused"]++
			}
		case r < 10:
			// Two pollers on the shard at once, from the same checkpoint.
			cp := checkpointIndex()
			var wg sync.WaitGroup
			var failures atomic.Int64
			for i := 0; i < 2; i++ {
				wg.Add(1)
				go func(seed uint64) {
					defer wg.Done()
					lr := rand.New(rand.NewPCG(seed, 3))
					other := open(cp)
					need := 0
					for k := 0; k < 8 && other.pos < len(recs); k++ {
						end := min(max(other.pos+1+lr.IntN(200), need), len(recs))
						res, err := other.p.Process(ctx, other.g, recs[other.pos:end])
						other.pos += res.Committed
						if errors.Is(err, processor.ErrIncompleteBatch) {
							need = end + 1 + lr.IntN(100)
							continue
						}
						if err != nil {
							failures.Add(1)
							return
						}
					}
				}(rng.Uint64())
			}
			wg.Wait()
			stats["concurrent_pair"]++
			stats["concurrent_failures"] += int(failures.Load())
			c = open(checkpointIndex())
			continue
		case r < 16 || (batches && r < 26):
			ch.armCrash(12)
		}
		size := batchSize(rng)
		if short {
			// Resume a batch a crash may have left half committed with a
			// shorter read, as a poller with a smaller page would.
			size, short = 1+rng.IntN(3), false
		}
		end := min(max(c.pos+size, need), len(recs))
		res, err := c.p.Process(ctx, c.g, recs[c.pos:end])
		if ch.restart() {
			stats["crash"]++
			c = open(checkpointIndex())
			short = batches
			continue
		}
		need = 0
		if batches && err == nil && res.Committed == end-c.pos && !c.g.Pending() && rng.IntN(3) == 0 {
			// The poller's checkpoint move: everything after the checkpoint up
			// to the last record handed over is finished and had no effect.
			// A compare-and-set, never over a pending batch; then a reader
			// whose origin is the new checkpoint.
			cp, cerr := c.g.Checkpoint(ctx)
			require.NoError(t, cerr)
			if last := recs[end-1].SequenceNumber; cp != "" && processor.CompareSequence(last, cp) > 0 {
				_, uerr := e.ddb.UpdateItem(ctx, table.AdvanceCheckpoint(table.CoordinationTableName(e.table), aggregates.CheckpointKey(e.streamARN, shard), shard, cp, last, false, time.Now()))
				var ccf *ddbtypes.ConditionalCheckFailedException
				if errors.As(uerr, &ccf) {
					c = open(checkpointIndex()) // someone else moved it
					continue
				}
				require.NoError(t, uerr)
				stats["checkpoint_move"]++
				c = open(end)
				continue
			}
		}
		if errors.Is(err, processor.ErrIncompleteBatch) {
			require.True(t, batches, "only a batching guard has pending batches")
			need = end + 1 + rng.IntN(100)
			stats["incomplete_batch"]++
		} else if err != nil {
			var be *processor.BatchError
			require.ErrorAs(t, err, &be)
			stats["partial_failure"]++
		}
		c.pos += res.Committed
	}
}
