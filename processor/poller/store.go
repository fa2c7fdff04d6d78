package poller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// Table is the part of the DynamoDB API the poller itself calls, for leases
// and checkpoint moves outside commits (the processor commits through its
// own client).
type Table interface {
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

var _ Table = (*dynamodb.Client)(nil)

// errConditionFailed means a lease or checkpoint write's condition failed:
// someone else changed the item first.
var errConditionFailed = errors.New("item changed by another poller")

// lease is a lease item as read or last written.
type lease struct {
	shard   string
	owner   string // "" when free
	counter int64
	pending string // "" when nobody asked for it
	exists  bool
	// parent and start describe the shard, when the item does (start
	// not "").
	parent, start string
	updated       time.Time // the item's last write
	finished      bool      // the release of the shard read to its end marked it (table.Lease.Finished)
	incarnation   string    // the process whose take wrote owner ("" when free, handed over, or older)
}

// row is the lease as the table holds it.
func (l lease) row() table.Lease {
	return table.Lease{Shard: l.shard, Owner: l.owner, Counter: l.counter, Pending: l.pending, Exists: l.exists, Parent: l.parent, Start: l.start, Incarnation: l.incarnation}
}

func leaseOf(l table.Lease) lease {
	return lease{shard: l.Shard, owner: l.Owner, counter: l.Counter, pending: l.Pending, exists: l.Exists, parent: l.Parent, start: l.Start, updated: l.Updated, finished: l.Finished, incarnation: l.Incarnation}
}

// checkpoint is the poller's view of a checkpoint item as read
// (table.Checkpoint).
type checkpoint struct {
	shard    string
	seq      string // "" when nothing was committed
	finished bool
	startAt  string
	pending  bool // a half-committed batch is on it
	exists   bool // the item exists (a consumer started on the shard)
	// read is when this poller read it (zero: it learned it otherwise:
	// a reader's end, or a listing of every checkpoint).
	read time.Time
}

func checkpointOf(c table.Checkpoint) checkpoint {
	return checkpoint{shard: c.Shard, seq: c.Seq, finished: c.Finished, startAt: c.StartAt, pending: c.Pending != nil, exists: true}
}

// store reads and writes one stream's lease and checkpoint items.
type store struct {
	api       Table
	table     string
	streamARN string
	// pace, when set, paces the writes to the lease and worker partitions
	// that keep no lease valid (updatePaced).
	pace *writePacer
	// raise, when set, says this version's protocol in the flags item
	// before the store's checkpoint writes, which fence
	// (processor.Processor.RaiseProtocol: at most once a minute per
	// processor once the flags item was found).
	raise func(context.Context) error
}

// beforeFence raises the protocol (store.raise) before a checkpoint
// write.
func (s *store) beforeFence(ctx context.Context) error {
	if s.raise == nil {
		return nil
	}
	if err := s.raise(ctx); err != nil {
		return fmt.Errorf("before the checkpoint write: %w", err)
	}
	return nil
}

func (s *store) now() time.Time { return time.Now() }

// readAll reads every lease and checkpoint of the stream with one
// consistent, paginated Query of the stream's partition.
func (s *store) readAll(ctx context.Context, shards []shard) (map[string]lease, map[string]checkpoint, error) {
	ids := make([]string, 0, len(shards))
	for _, sh := range shards {
		ids = append(ids, sh.id)
	}
	ls, cs, err := table.ReadStreamState(ctx, s.api, s.table, s.streamARN, ids)
	if err != nil {
		return nil, nil, err
	}
	leases, cps := make(map[string]lease, len(ls)), make(map[string]checkpoint, len(cs))
	for shard, l := range ls {
		leases[shard] = leaseOf(l)
	}
	for shard, c := range cs {
		cps[shard] = checkpointOf(c)
	}
	return leases, cps, nil
}

// readItem reads one item with a consistent read (a Query of its key, the
// only read the Table interface offers); nil when it does not exist.
func (s *store) readItem(ctx context.Context, k aggregates.Key) (map[string]ddbtypes.AttributeValue, error) {
	out, err := s.api.Query(ctx, &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("#pk = :pk AND #sk = :sk"),
		ExpressionAttributeNames:  map[string]string{"#pk": table.AttrPK, "#sk": table.AttrSK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": table.S(k.PK), ":sk": table.S(k.SK)},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", k.SK, err)
	}
	if len(out.Items) == 0 {
		return nil, nil
	}
	return out.Items[0], nil
}

// readLosses reads the loss item's count (consistently; table.LossesOf),
// retrying a failed read a few times.
func (s *store) readLosses(ctx context.Context) (int64, error) {
	item, err := s.readItemRetried(ctx, aggregates.LossesKey())
	if err != nil {
		return 0, err
	}
	return table.LossesOf(item)
}

// readAttempts bounds the re-reads after a write whose outcome is unknown.
const readAttempts = 3

// readItemRetried reads one item (consistently), retrying a failed read
// a few times.
func (s *store) readItemRetried(ctx context.Context, k aggregates.Key) (map[string]ddbtypes.AttributeValue, error) {
	var err error
	for i := 0; i < readAttempts && ctx.Err() == nil; i++ {
		var item map[string]ddbtypes.AttributeValue
		if item, err = s.readItem(ctx, k); err == nil {
			return item, nil
		}
		pause(ctx, i+1)
	}
	if err == nil {
		err = ctx.Err()
	}
	return nil, err
}

// readLease reads one lease (consistently), retrying a failed read a few
// times: it decides whether a write whose answer was lost landed.
func (s *store) readLease(ctx context.Context, shard string) (lease, error) {
	item, err := s.readItemRetried(ctx, aggregates.LeaseKey(s.streamARN, shard))
	if err != nil {
		return lease{}, err
	}
	return leaseOf(table.DecodeLease(shard, item)), nil
}

// readCheckpoint reads one checkpoint (consistently), retrying a failed
// read a few times.
func (s *store) readCheckpoint(ctx context.Context, shard string) (checkpoint, error) {
	item, err := s.readItemRetried(ctx, aggregates.CheckpointKey(s.streamARN, shard))
	if err != nil {
		return checkpoint{}, err
	}
	c, _ := table.DecodeCheckpoint(shard, item)
	cp := checkpointOf(c)
	cp.exists = item != nil
	return cp, nil
}

// writeAttempts bounds the attempts of a checkpoint move, start marker,
// release or request whose outcome stays unknown (renewals have their own
// budget: the lease's life).
const writeAttempts = 4

// pause waits before attempt n+1 of a store call: 20ms doubling, full
// jitter, at most 500ms; it returns early when ctx ends.
func pause(ctx context.Context, n int) {
	d := min(20*time.Millisecond<<min(n-1, 10), 500*time.Millisecond)
	_ = sleep(ctx, time.Duration(rand.Int64N(int64(d)+1)))
}

// updateItem runs in, an UpdateItem of the item under k, and translates a
// failed condition into errConditionFailed.
func (s *store) updateItem(ctx context.Context, what string, k aggregates.Key, in *dynamodb.UpdateItemInput) (map[string]ddbtypes.AttributeValue, error) {
	out, err := s.api.UpdateItem(ctx, in)
	return s.answer(what, k, out, err)
}

// updatePaced is updateItem for a write to part that keeps no lease valid
// (a take, a release, an offer, ...): it waits first for its turn of this
// poller's share of the fleet's write budget for the partition
// (writePacer), and reports what the write consumed to it. A turn past
// the round's deadline or ctx's is not waited for: the write is not sent,
// and the error wraps errWriteDeferred.
func (s *store) updatePaced(ctx context.Context, what string, part partition, k aggregates.Key, in *dynamodb.UpdateItemInput) (map[string]ddbtypes.AttributeValue, error) {
	if s.pace == nil {
		return s.updateItem(ctx, what, k, in)
	}
	key := k.PK + "\x00" + k.SK
	if err := s.pace.wait(ctx, part, key); err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, k.SK, err)
	}
	in.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
	out, err := s.api.UpdateItem(ctx, in)
	if out != nil && out.ConsumedCapacity != nil {
		s.pace.wrote(part, key, aws.ToFloat64(out.ConsumedCapacity.CapacityUnits))
	}
	return s.answer(what, k, out, err)
}

// answer translates an UpdateItem's answer: a failed condition becomes
// errConditionFailed.
func (s *store) answer(what string, k aggregates.Key, out *dynamodb.UpdateItemOutput, err error) (map[string]ddbtypes.AttributeValue, error) {
	var ccf *ddbtypes.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil, fmt.Errorf("%s %s: %w", what, k.SK, errConditionFailed)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, k.SK, err)
	}
	return out.Attributes, nil
}

// take makes owner (its process incarnation inc) the lease's owner, from
// the state seen (a lease that does not exist, is free, expired, or owned
// by owner's previous life). The condition is the counter seen: any change
// since then (a renewal, a release, another taker) makes it fail with
// errConditionFailed.
func (s *store) take(ctx context.Context, seen lease, owner, inc string, duration time.Duration) (lease, error) {
	_, err := s.updatePaced(ctx, "take lease", leasePartition, aggregates.LeaseKey(s.streamARN, seen.shard),
		table.TakeLease(s.table, s.streamARN, seen.row(), owner, inc, duration, s.now()))
	if err != nil {
		return lease{}, err
	}
	return lease{shard: seen.shard, owner: owner, counter: seen.counter + 1, exists: true, parent: seen.parent, start: seen.start, incarnation: inc}, nil
}

// register puts a free lease for shard sh, which no lease exists for yet,
// describing it (table.RegisterShard); an existing lease is left as it is.
// It returns the lease as written, or ok false when it existed.
func (s *store) register(ctx context.Context, sh shard) (l lease, ok bool, err error) {
	attrs, err := s.updatePaced(ctx, "register shard", leasePartition, aggregates.LeaseKey(s.streamARN, sh.id),
		table.RegisterShard(s.table, s.streamARN, sh.id, sh.parent, sh.start, s.now()))
	if errors.Is(err, errConditionFailed) {
		return lease{}, false, nil
	}
	if err != nil {
		return lease{}, false, err
	}
	return leaseOf(table.DecodeLease(sh.id, attrs)), true, nil
}

// errFenced means this poller's heartbeat failed on the fence another
// poller set taking its leases over (table.FenceWorker).
var errFenced = errors.New("fenced: another poller took this poller's leases over, or its worker item was deleted")

// heartbeat writes this poller's worker registry item, claimed by its
// incarnation inc (table.HeartbeatWorker; with hb, conditional on no
// fence; once born, a write after the claim: with hb,
// table.HeartbeatWorkerAgain, conditional on the item existing and still
// inc's; without, table.RenewWorkerAgain, on the item not claimed by
// another incarnation) and returns it as written: its offers and asks. A
// claim (not born) is made on a consistent read of the item: conditional
// on the incarnation it names (table.ClaimedFrom), or, when it names inc
// (a claim of this process landed, its answer lost), the write after the
// claim. A refused write is classified by a consistent read of the item (refused):
// errFenced (fenced, deleted), an *OwnerInUseError (another process of
// this name claimed it), or errRefused. The write also removes taken, the
// offers whose takes held counts, from the item's offers
// (table.OffersCounted), and says what note says of the stream's
// DescribeStream rate (table.ListingNote).
func (s *store) heartbeat(ctx context.Context, owner, inc string, held int, taken []string, hb, born bool, note listingNote) (table.Worker, error) {
	claim := false
	if !born {
		// A claim, made on the item as read now (table.ClaimedFrom): one
		// that lands late, after another process's claim, is refused. A
		// read naming this incarnation is a claim of this process that
		// landed, its answer lost: the write after the claim follows.
		seen, err := s.claimed(ctx, owner)
		if err != nil {
			return table.Worker{}, err
		}
		born, claim = seen == inc, seen != inc
		if claim {
			in := table.ClaimedFrom(table.ListingNote(table.OffersCounted(table.HeartbeatWorker(s.table, s.streamARN, owner, inc, held, hb, s.now()), taken), note.listing, note.seen), seen)
			attrs, err := s.updateItem(ctx, "heartbeat", aggregates.WorkerKey(s.streamARN, owner), in)
			if errors.Is(err, errConditionFailed) {
				return table.Worker{}, s.refused(ctx, owner, inc, false, err)
			}
			if err != nil {
				return table.Worker{}, err
			}
			return table.DecodeWorker(attrs), nil
		}
	}
	in := table.RenewWorkerAgain(s.table, s.streamARN, owner, inc, held, s.now())
	if hb {
		in = table.HeartbeatWorkerAgain(s.table, s.streamARN, owner, inc, held, s.now())
	}
	in = table.ListingNote(table.OffersCounted(in, taken), note.listing, note.seen)
	attrs, err := s.updateItem(ctx, "heartbeat", aggregates.WorkerKey(s.streamARN, owner), in)
	if errors.Is(err, errConditionFailed) {
		return table.Worker{}, s.refused(ctx, owner, inc, born, err)
	}
	if err != nil {
		return table.Worker{}, err
	}
	return table.DecodeWorker(attrs), nil
}

// claimed is the incarnation owner's worker item names now ("" for none,
// or no item), read consistently: what a claim is conditional on.
func (s *store) claimed(ctx context.Context, owner string) (string, error) {
	w, err := s.readWorker(ctx, owner)
	if err != nil {
		return "", fmt.Errorf("reading the worker item before claiming it: %w", err)
	}
	return w.Incarnation, nil
}

// readWorker reads owner's worker item (consistent); absent, the zero
// Worker.
func (s *store) readWorker(ctx context.Context, owner string) (table.Worker, error) {
	item, err := s.readItem(ctx, aggregates.WorkerKey(s.streamARN, owner))
	if err != nil || item == nil {
		return table.Worker{}, err
	}
	return table.DecodeWorker(item), nil
}

// rejoin clears the fence on this poller's worker item with a heartbeat
// claimed by inc (table.RejoinWorker), after it dropped every lease it
// held, on a consistent read of the item: conditional on the fence that
// read shows (table.RejoinedFrom), and for a process not born yet (claim)
// a claim on the incarnation it names (table.ClaimedFrom; refused:
// errRefused, made again at the next round); a born process's rejoin
// stops it when the read or the refusal shows another incarnation (an
// *OwnerInUseError).
func (s *store) rejoin(ctx context.Context, owner, inc string, claim bool) (table.Worker, error) {
	// On the item as read now: conditional on the fence it shows (a late
	// rejoin must not lift a later fence: table.RejoinedFrom) and, for a
	// claim, on the incarnation it names (table.ClaimedFrom).
	item, err := s.readItem(ctx, aggregates.WorkerKey(s.streamARN, owner))
	if err != nil {
		return table.Worker{}, fmt.Errorf("reading the worker item before rejoining: %w", err)
	}
	seen := ""
	if item != nil {
		seen = table.DecodeWorker(item).Incarnation
	}
	if !claim && seen != "" && seen != inc {
		return table.Worker{}, &OwnerInUseError{Owner: owner, Mine: inc, Theirs: seen}
	}
	claim = claim && seen != inc
	in := table.RejoinWorker(s.table, s.streamARN, owner, inc, claim, s.now())
	if claim {
		in = table.ClaimedFrom(in, seen)
	}
	in = table.RejoinedFrom(in, item)
	attrs, err := s.updateItem(ctx, "rejoin", aggregates.WorkerKey(s.streamARN, owner), in)
	if errors.Is(err, errConditionFailed) {
		// A claim refused is retried (another claim landed since the
		// read); a rejoin after the claim refused by another incarnation
		// stops the process.
		return table.Worker{}, s.refused(ctx, owner, inc, !claim, err)
	}
	if err != nil {
		return table.Worker{}, err
	}
	return table.DecodeWorker(attrs), nil
}

// fence marks owner's worker item fenced at beat (table.FenceWorker):
// errConditionFailed when owner heartbeated since. An attempt with an
// unknown outcome is tried again (a repeat at the same beat succeeds).
func (s *store) fence(ctx context.Context, owner string, beat int64) error {
	for i := 1; ; i++ {
		_, err := s.updatePaced(ctx, "fence worker", workerPartition, aggregates.WorkerKey(s.streamARN, owner),
			table.FenceWorker(s.table, s.streamARN, owner, beat))
		if err == nil || errors.Is(err, errConditionFailed) || errors.Is(err, errWriteDeferred) || ctx.Err() != nil || i >= writeAttempts {
			return err
		}
		pause(ctx, i)
	}
}

// ask tells owner (its worker item's asks) that a drain asked for the
// lease of shard.
func (s *store) ask(ctx context.Context, owner, shard string) error {
	_, err := s.updatePaced(ctx, "ask worker", workerPartition, aggregates.WorkerKey(s.streamARN, owner), table.AskWorker(s.table, s.streamARN, owner, shard))
	return err
}

// clearAsks removes shards from owner's asks.
func (s *store) clearAsks(ctx context.Context, owner string, shards []string) error {
	_, err := s.updatePaced(ctx, "clear asks", workerPartition, aggregates.WorkerKey(s.streamARN, owner), table.ClearAsks(s.table, s.streamARN, owner, shards))
	return err
}

// leave marks this poller's worker item left; a poller never registered
// has nothing to mark, and one whose item another process of its name
// claimed leaves it alone.
func (s *store) leave(ctx context.Context, owner, inc string) error {
	_, err := s.updatePaced(ctx, "leave", workerPartition, aggregates.WorkerKey(s.streamARN, owner), table.LeaveWorker(s.table, s.streamARN, owner, inc, s.now()))
	if errors.Is(err, errConditionFailed) {
		return nil
	}
	return err
}

// offer tells poller to (its worker item's offers) that the lease of shard
// is for it to take.
func (s *store) offer(ctx context.Context, to, shard string) error {
	_, err := s.updatePaced(ctx, "offer lease", workerPartition, aggregates.WorkerKey(s.streamARN, to), table.OfferLease(s.table, s.streamARN, to, shard))
	return err
}

// clearOffers removes shards from owner's offers.
func (s *store) clearOffers(ctx context.Context, owner string, shards []string) error {
	_, err := s.updatePaced(ctx, "clear offers", workerPartition, aggregates.WorkerKey(s.streamARN, owner), table.ClearOffers(s.table, s.streamARN, owner, shards))
	return err
}

// readWorkers reads the stream's worker registry.
func (s *store) readWorkers(ctx context.Context) ([]table.Worker, error) {
	return table.ReadWorkers(ctx, s.api, s.table, s.streamARN)
}

// leasePage reads one page of the stream's lease partition from start.
func (s *store) leasePage(ctx context.Context, start map[string]ddbtypes.AttributeValue, limit int) ([]lease, map[string]ddbtypes.AttributeValue, error) {
	ls, next, err := table.ReadLeasePage(ctx, s.api, s.table, s.streamARN, start, int32(limit))
	if err != nil {
		return nil, nil, err
	}
	out := make([]lease, len(ls))
	for i, l := range ls {
		out[i] = leaseOf(l)
	}
	return out, next, nil
}

// readCheckpoints reads the checkpoints of shards, each with a consistent
// read of its key (at most readParallel at once): the checkpoints a
// decision needs, not the stream's checkpoint partitions. A checkpoint
// that could not be read is left out.
func (s *store) readCheckpoints(ctx context.Context, shards []string) map[string]checkpoint {
	return readEach(ctx, shards, func(ctx context.Context, id string) (checkpoint, error) {
		cp, err := s.readCheckpoint(ctx, id)
		cp.read = time.Now()
		return cp, err
	})
}

// readLeases reads the leases of shards, each with a consistent read of
// its key (at most readParallel at once). A lease that could not be read
// is left out.
func (s *store) readLeases(ctx context.Context, shards []string) map[string]lease {
	return readEach(ctx, shards, s.readLease)
}

// readEach reads the item of each shard with read, at most readParallel
// at once, and returns those read without error by shard.
func readEach[T any](ctx context.Context, shards []string, read func(context.Context, string) (T, error)) map[string]T {
	out := make(map[string]T, len(shards))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, readParallel)
	for _, id := range shards {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			v, err := read(ctx, id)
			if err != nil {
				return
			}
			mu.Lock()
			out[id] = v
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// readParallel bounds the checkpoint reads a poller has in flight at once.
const readParallel = 16

// renew bumps the counter of a lease owner holds. It returns the lease as
// written, with pending set when another poller asked for it.
func (s *store) renew(ctx context.Context, l lease, duration time.Duration) (lease, error) {
	attrs, err := s.updateItem(ctx, "renew lease", aggregates.LeaseKey(s.streamARN, l.shard),
		table.RenewLease(s.table, s.streamARN, l.row(), duration, s.now()))
	if err != nil {
		return lease{}, err
	}
	next := l
	next.counter++
	next.pending = table.DecodeLease(l.shard, attrs).Pending
	return next, nil
}

// release gives up a lease l.owner holds: to nobody (the lease becomes
// free) or, when to is set, straight to the poller that asked for it. A
// failed attempt is followed by a re-read: the lease at counter + 1 with
// the intended owner means it landed (its answer was lost); an attempt
// that did not land is tried again, a few times.
func (s *store) release(ctx context.Context, l lease, to string, finished bool) error {
	for i := 1; ; i++ {
		err := s.releaseOnce(ctx, l, to, finished)
		if err == nil || ctx.Err() != nil || errors.Is(err, errWriteDeferred) {
			return err
		}
		cur, rerr := s.readLease(ctx, l.shard)
		if rerr == nil && cur.exists && cur.counter == l.counter+1 && cur.owner == to {
			return nil
		}
		if errors.Is(err, errConditionFailed) || i >= writeAttempts {
			return err
		}
		pause(ctx, i)
	}
}

func (s *store) releaseOnce(ctx context.Context, l lease, to string, finished bool) error {
	_, err := s.updatePaced(ctx, "release lease", leasePartition, aggregates.LeaseKey(s.streamARN, l.shard),
		table.ReleaseLease(s.table, s.streamARN, l.row(), to, finished, s.now()))
	return err
}

// request asks the owner of l to hand it over to requester. It does not
// change the counter, so it neither renews nor expires the lease. A failed
// attempt is followed by a re-read: pendingOwner = requester on the lease
// as seen means it landed.
func (s *store) request(ctx context.Context, l lease, requester string) error {
	_, err := s.updatePaced(ctx, "request lease", leasePartition, aggregates.LeaseKey(s.streamARN, l.shard),
		table.RequestLease(s.table, s.streamARN, l.row(), requester))
	if err == nil || ctx.Err() != nil || errors.Is(err, errWriteDeferred) {
		return err
	}
	if cur, rerr := s.readLease(ctx, l.shard); rerr == nil && cur.owner == l.owner && cur.counter == l.counter && cur.pending == requester {
		return nil
	}
	return err
}

// advance moves a shard's checkpoint from prev ("" for none) to seq outside
// a commit, with the same compare-and-set as processor.ShardGuard: used
// when the records in (prev, seq] were all processed and had no effect, so
// nothing committed them. finished also marks the shard as read to its end
// (seq may then equal prev). It fails with errConditionFailed when the
// checkpoint is no longer prev. A failed attempt is followed by a re-read:
// the checkpoint at seq (finished when asked), with no pending batch, means
// the move landed, its answer lost, or a commit reached the same record
// (sequence numbers are unique: the chain is at the same place either
// way); an attempt that did not land is tried again, a few times.
func (s *store) advance(ctx context.Context, shard, prev, seq string, finished bool) error {
	want := seq
	if want == "" {
		want = prev
	}
	for i := 1; ; i++ {
		err := s.advanceOnce(ctx, shard, prev, seq, finished)
		if err == nil || ctx.Err() != nil {
			return err
		}
		cp, rerr := s.readCheckpoint(ctx, shard)
		if rerr == nil && cp.seq == want && !cp.pending && (cp.finished || !finished) {
			return nil
		}
		if errors.Is(err, errConditionFailed) || i >= writeAttempts {
			return err
		}
		pause(ctx, i)
	}
}

func (s *store) advanceOnce(ctx context.Context, shard, prev, seq string, finished bool) error {
	if err := s.beforeFence(ctx); err != nil {
		return err
	}
	k := aggregates.CheckpointKey(s.streamARN, shard)
	_, err := s.updateItem(ctx, "move checkpoint", k, table.AdvanceCheckpoint(s.table, k, shard, prev, seq, finished, s.now().UTC()))
	return err
}

// markStart records, for a shard nothing was read from yet, where its
// reader opens (LATEST), so that a restart before the first checkpoint
// opens there again. closed shards are marked finished instead: a fresh
// LATEST start skips what the stream held before it.
// An attempt with an unknown outcome is tried again (a few times): the
// repeat of one that landed fails its condition, which the caller accepts
// (a checkpoint exists).
func (s *store) markStart(ctx context.Context, shard string, closed bool) error {
	if closed {
		return s.advance(ctx, shard, "", "", true)
	}
	for i := 1; ; i++ {
		err := s.markStartOnce(ctx, shard)
		if err == nil || errors.Is(err, errConditionFailed) || ctx.Err() != nil || i >= writeAttempts {
			return err
		}
		pause(ctx, i)
	}
}

func (s *store) markStartOnce(ctx context.Context, shard string) error {
	if err := s.beforeFence(ctx); err != nil {
		return err
	}
	k := aggregates.CheckpointKey(s.streamARN, shard)
	_, err := s.updateItem(ctx, "mark start", k, table.MarkCheckpointStart(s.table, k, shard, string(Latest), s.now().UTC()))
	return err
}
