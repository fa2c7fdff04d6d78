package poller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
)

// Table is the part of the DynamoDB API the poller itself calls, for leases
// and checkpoint moves outside commits (the processor commits through its
// own client).
type Table interface {
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

var _ Table = (*dynamodb.Client)(nil)

// Attribute names of lease and checkpoint items. The checkpoint's
// sequenceNumber, entityType, updatedAt and shardId are the ones
// processor.ShardGuard writes inside commits.
const (
	attrPK             = "PK"
	attrSK             = "SK"
	attrEntityType     = "entityType"
	attrUpdatedAt      = "updatedAt"
	attrShardID        = "shardId"
	attrSequenceNumber = "sequenceNumber"
	attrFinished       = "shardFinished" // checkpoint: the shard is closed and read to its end
	attrStartAt        = "startAt"       // checkpoint without sequence number: where to open (LATEST)
	attrOwner          = "leaseOwner"
	attrCounter        = "leaseCounter"
	attrPending        = "pendingOwner" // a poller that asked for the lease
	attrLeaseExpiry    = "leaseExpiry"  // informational: owner's clock + lease duration
)

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
}

// checkpoint is a checkpoint item as read.
type checkpoint struct {
	shard    string
	seq      string // "" when nothing was committed
	finished bool
	startAt  string
	pending  bool // a half-committed batch is on it
}

// store reads and writes one stream's lease and checkpoint items.
type store struct {
	api       Table
	table     string
	streamARN string
}

func (s *store) now() time.Time { return time.Now() }

func (s *store) pk() string { return aggregates.LeaseKey(s.streamARN, "").PK }

func keyOf(k aggregates.Key) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{attrPK: str(k.PK), attrSK: str(k.SK)}
}

func str(s string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: s} }
func num(n int64) ddbtypes.AttributeValue {
	return &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func getS(item map[string]ddbtypes.AttributeValue, name string) string {
	if v, ok := item[name].(*ddbtypes.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// readAll reads every lease and checkpoint of the stream with one
// consistent, paginated Query of the stream's partition.
func (s *store) readAll(ctx context.Context) (map[string]lease, map[string]checkpoint, error) {
	leases, cps := map[string]lease{}, map[string]checkpoint{}
	leasePrefix := strings.TrimSuffix(aggregates.LeaseKey(s.streamARN, "x").SK, "x")
	cpPrefix := strings.TrimSuffix(aggregates.CheckpointKey(s.streamARN, "x").SK, "x")
	var start map[string]ddbtypes.AttributeValue
	for {
		out, err := s.api.Query(ctx, &dynamodb.QueryInput{
			TableName:                 &s.table,
			KeyConditionExpression:    aws.String("#pk = :pk"),
			ExpressionAttributeNames:  map[string]string{"#pk": attrPK},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": str(s.pk())},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("read leases and checkpoints of %s: %w", s.streamARN, err)
		}
		for _, item := range out.Items {
			sk := getS(item, attrSK)
			switch {
			case strings.HasPrefix(sk, leasePrefix):
				l := leaseOf(strings.TrimPrefix(sk, leasePrefix), item)
				leases[l.shard] = l
			case strings.HasPrefix(sk, cpPrefix):
				c := checkpointOf(strings.TrimPrefix(sk, cpPrefix), item)
				cps[c.shard] = c
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return leases, cps, nil
		}
		start = out.LastEvaluatedKey
	}
}

func leaseOf(shard string, item map[string]ddbtypes.AttributeValue) lease {
	l := lease{shard: shard, owner: getS(item, attrOwner), pending: getS(item, attrPending), exists: true}
	if n, ok := item[attrCounter].(*ddbtypes.AttributeValueMemberN); ok {
		l.counter, _ = strconv.ParseInt(n.Value, 10, 64)
	}
	return l
}

func checkpointOf(shard string, item map[string]ddbtypes.AttributeValue) checkpoint {
	c := checkpoint{shard: shard, seq: getS(item, attrSequenceNumber), startAt: getS(item, attrStartAt)}
	if b, ok := item[attrFinished].(*ddbtypes.AttributeValueMemberBOOL); ok {
		c.finished = b.Value
	}
	_, c.pending = item[processor.CheckpointPendingAttribute]
	return c
}

// readItem reads one item with a consistent read (a Query of its key, the
// only read the Table interface offers); nil when it does not exist.
func (s *store) readItem(ctx context.Context, k aggregates.Key) (map[string]ddbtypes.AttributeValue, error) {
	out, err := s.api.Query(ctx, &dynamodb.QueryInput{
		TableName:                 &s.table,
		KeyConditionExpression:    aws.String("#pk = :pk AND #sk = :sk"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#sk": attrSK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": str(k.PK), ":sk": str(k.SK)},
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

// readAttempts bounds the re-reads after a write whose outcome is unknown.
const readAttempts = 3

// readLease reads one lease (consistently), retrying a failed read a few
// times: it decides whether a write whose answer was lost landed.
func (s *store) readLease(ctx context.Context, shard string) (lease, error) {
	var err error
	for i := 0; i < readAttempts && ctx.Err() == nil; i++ {
		var item map[string]ddbtypes.AttributeValue
		if item, err = s.readItem(ctx, aggregates.LeaseKey(s.streamARN, shard)); err == nil {
			if item == nil {
				return lease{shard: shard}, nil
			}
			return leaseOf(shard, item), nil
		}
		pause(ctx, i+1)
	}
	if err == nil {
		err = ctx.Err()
	}
	return lease{}, err
}

// readCheckpoint reads one checkpoint (consistently), retrying a failed
// read a few times.
func (s *store) readCheckpoint(ctx context.Context, shard string) (checkpoint, error) {
	var err error
	for i := 0; i < readAttempts && ctx.Err() == nil; i++ {
		var item map[string]ddbtypes.AttributeValue
		if item, err = s.readItem(ctx, aggregates.CheckpointKey(s.streamARN, shard)); err == nil {
			return checkpointOf(shard, item), nil
		}
		pause(ctx, i+1)
	}
	if err == nil {
		err = ctx.Err()
	}
	return checkpoint{}, err
}

// writeAttempts bounds the attempts of a checkpoint move, start marker,
// release or request whose outcome stays unknown (renewals have their own
// budget: the lease's life).
const writeAttempts = 4

// pause waits before attempt n+1 of a store call: 20ms doubling, full
// jitter, at most 500ms; it returns early when ctx ends.
func pause(ctx context.Context, n int) {
	d := min(20*time.Millisecond<<min(n-1, 10), 500*time.Millisecond)
	t := time.NewTimer(time.Duration(rand.Int64N(int64(d) + 1)))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// update runs one conditional UpdateItem and translates a failed condition
// into errConditionFailed.
func (s *store) update(ctx context.Context, what string, k aggregates.Key, set string, remove []string, cond string,
	names map[string]string, values map[string]ddbtypes.AttributeValue) (map[string]ddbtypes.AttributeValue, error) {
	expr := "SET " + set
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.table,
		Key:                       keyOf(k),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnValues:              ddbtypes.ReturnValueAllNew,
	})
	var ccf *ddbtypes.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil, fmt.Errorf("%s %s: %w", what, k.SK, errConditionFailed)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, k.SK, err)
	}
	return out.Attributes, nil
}

var leaseNames = map[string]string{
	"#o": attrOwner, "#c": attrCounter, "#p": attrPending, "#x": attrLeaseExpiry,
	"#et": attrEntityType, "#ua": attrUpdatedAt, "#sh": attrShardID,
}

var placeholder = regexp.MustCompile(`#[a-z]+`)

// names returns the lease placeholders the expressions use.
func names(exprs ...string) map[string]string {
	out := map[string]string{}
	for _, e := range exprs {
		for _, ph := range placeholder.FindAllString(e, -1) {
			out[ph] = leaseNames[ph]
		}
	}
	return out
}

// take makes owner the lease's owner, from the state seen (a lease that
// does not exist, is free, expired, or owned by owner's previous life).
// The condition is the counter seen: any change since then (a renewal, a
// release, another taker) makes it fail with errConditionFailed.
func (s *store) take(ctx context.Context, seen lease, owner string, duration time.Duration) (lease, error) {
	now := s.now()
	next := lease{shard: seen.shard, owner: owner, counter: seen.counter + 1, exists: true}
	set := "#o = :o, #c = :next, #x = :x, #et = :et, #ua = :ua, #sh = :sh"
	cond := "attribute_not_exists(#c)"
	values := map[string]ddbtypes.AttributeValue{
		":o": str(owner), ":next": num(next.counter), ":x": str(now.Add(duration).UTC().Format(time.RFC3339Nano)),
		":et": str(aggregates.EntityLease), ":ua": str(now.UTC().Format(time.RFC3339Nano)), ":sh": str(seen.shard),
	}
	if seen.exists {
		cond = "#c = :seen"
		values[":seen"] = num(seen.counter)
	}
	_, err := s.update(ctx, "take lease", aggregates.LeaseKey(s.streamARN, seen.shard), set, []string{"#p"}, cond, names(set, "#p", cond), values)
	if err != nil {
		return lease{}, err
	}
	return next, nil
}

// renew bumps the counter of a lease owner holds. It returns the lease as
// written, with pending set when another poller asked for it.
func (s *store) renew(ctx context.Context, l lease, duration time.Duration) (lease, error) {
	now := s.now()
	next := l
	next.counter++
	set := "#c = :next, #x = :x, #ua = :ua"
	cond := "#o = :o AND #c = :c"
	attrs, err := s.update(ctx, "renew lease", aggregates.LeaseKey(s.streamARN, l.shard), set, nil, cond, names(set, cond),
		map[string]ddbtypes.AttributeValue{
			":o": str(l.owner), ":c": num(l.counter), ":next": num(next.counter),
			":x": str(now.Add(duration).UTC().Format(time.RFC3339Nano)), ":ua": str(now.UTC().Format(time.RFC3339Nano)),
		})
	if err != nil {
		return lease{}, err
	}
	next.pending = getS(attrs, attrPending)
	return next, nil
}

// release gives up a lease l.owner holds: to nobody (the lease becomes
// free) or, when to is set, straight to the poller that asked for it. A
// failed attempt is followed by a re-read: the lease at counter + 1 with
// the intended owner means it landed (its answer was lost); an attempt
// that did not land is tried again, a few times.
func (s *store) release(ctx context.Context, l lease, to string) error {
	for i := 1; ; i++ {
		err := s.releaseOnce(ctx, l, to)
		if err == nil || ctx.Err() != nil {
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

func (s *store) releaseOnce(ctx context.Context, l lease, to string) error {
	set := "#c = :next, #ua = :ua"
	remove := []string{"#p"}
	values := map[string]ddbtypes.AttributeValue{
		":o": str(l.owner), ":c": num(l.counter), ":next": num(l.counter + 1), ":ua": str(s.now().UTC().Format(time.RFC3339Nano)),
	}
	if to != "" {
		set += ", #o = :to"
		values[":to"] = str(to)
	} else {
		remove = append(remove, "#o", "#x")
	}
	cond := "#o = :o AND #c = :c"
	_, err := s.update(ctx, "release lease", aggregates.LeaseKey(s.streamARN, l.shard), set, remove, cond,
		names(set, strings.Join(remove, ", "), cond), values)
	return err
}

// request asks the owner of l to hand it over to requester. It does not
// change the counter, so it neither renews nor expires the lease. A failed
// attempt is followed by a re-read: pendingOwner = requester on the lease
// as seen means it landed.
func (s *store) request(ctx context.Context, l lease, requester string) error {
	set := "#p = :r"
	cond := "#o = :o AND #c = :c AND attribute_not_exists(#p)"
	_, err := s.update(ctx, "request lease", aggregates.LeaseKey(s.streamARN, l.shard), set, nil, cond, names(set, cond),
		map[string]ddbtypes.AttributeValue{":r": str(requester), ":o": str(l.owner), ":c": num(l.counter)})
	if err == nil || ctx.Err() != nil {
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
	now := s.now().UTC().Format(time.RFC3339Nano)
	set := []string{"#et = :et", "#ua = :ua", "#sh = :sh"}
	nm := map[string]string{"#et": attrEntityType, "#ua": attrUpdatedAt, "#sh": attrShardID, "#seq": attrSequenceNumber}
	values := map[string]ddbtypes.AttributeValue{":et": str(aggregates.EntityCheckpoint), ":ua": str(now), ":sh": str(shard)}
	if seq != "" {
		set = append(set, "#seq = :seq")
		values[":seq"] = str(seq)
	}
	if finished {
		set = append(set, "#fin = :fin")
		nm["#fin"] = attrFinished
		values[":fin"] = &ddbtypes.AttributeValueMemberBOOL{Value: true}
	}
	cond := "attribute_not_exists(#seq)"
	if prev != "" {
		cond = "#seq = :prev"
		values[":prev"] = str(prev)
	}
	// Never over a half-committed batch: its last group moves it.
	cond += " AND attribute_not_exists(#pt)"
	nm["#pt"] = processor.CheckpointPendingAttribute
	_, err := s.update(ctx, "move checkpoint", aggregates.CheckpointKey(s.streamARN, shard), strings.Join(set, ", "), nil, cond, nm, values)
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
	now := s.now().UTC().Format(time.RFC3339Nano)
	_, err := s.update(ctx, "mark start", aggregates.CheckpointKey(s.streamARN, shard), "#et = :et, #ua = :ua, #sh = :sh, #st = :st", nil,
		"attribute_not_exists(#seq)",
		map[string]string{"#et": attrEntityType, "#ua": attrUpdatedAt, "#sh": attrShardID, "#st": attrStartAt, "#seq": attrSequenceNumber},
		map[string]ddbtypes.AttributeValue{":et": str(aggregates.EntityCheckpoint), ":ua": str(now), ":sh": str(shard), ":st": str(string(Latest))})
	return err
}
