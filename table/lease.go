package table

import (
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file is the lease item's layout (aggregates.LeaseKey): which poller
// reads a shard. The poller takes, renews, hands over and releases leases
// (processor/poller/store.go, with the conditions on leaseCounter that make
// them safe); ledgerctl lag shows their owners (ReadStreamState). Under its
// key it holds
//
//	entityType     LEASE
//	shardId        S
//	leaseOwner     S, the poller holding it; absent when free
//	leaseCounter   N, +1 per take, renewal and release
//	pendingOwner   S, a poller that asked for it
//	leaseExpiry    S, RFC 3339, informational: owner's clock + lease duration
//	parentShardId  S, the shard's parent ("" for none), and
//	startingSequenceNumber  S, its first sequence number: the shard as the
//	               stream listed it, so that pollers learn of new shards
//	               from the lease items (RegisterShard) between listings of
//	               the whole stream
//	shardFinished  BOOL, true once the shard was read to its end: set by
//	               the release that follows the checkpoint's own
//	               shardFinished, so that a poller learns a parent is
//	               finished from the leases it sweeps, without reading the
//	               checkpoint (docs/exactly-once.md, "Leases")
//	leaseIncarnation S, the random id of the process whose take wrote
//	               the current owner (every take sets it, every release
//	               removes it: a lease handed over or free has no reader),
//	               so that two processes given one owner name tell their
//	               takes apart (docs/exactly-once.md, review of the
//	               heartbeat, HB6); absent on leases taken by versions
//	               before it
//	updatedAt      S, RFC 3339
//	expiresAt      N, the last write + CoordinationRetention (TTL)

// Attribute names of the lease item besides the keys, entityType, updatedAt
// and shardId.
const (
	AttrLeaseOwner   = "leaseOwner"
	AttrLeaseCounter = "leaseCounter"
	AttrLeasePending = "pendingOwner"
	AttrLeaseExpiry  = "leaseExpiry"
	AttrLeaseParent  = "parentShardId"
	AttrLeaseStart   = "startingSequenceNumber"
	AttrLeaseDone    = "shardFinished"
	// AttrLeaseIncarnation is the taking process's id (HB6).
	AttrLeaseIncarnation = "leaseIncarnation"
)

// Lease is a lease item as read.
type Lease struct {
	Shard   string
	Owner   string // "" when free
	Counter int64
	Pending string // "" when nobody asked for it
	Exists  bool
	// Updated is the item's last write (zero when it does not say).
	Updated time.Time
	// Parent and Start describe the shard (its parent, "" for none, and its
	// first sequence number); Start is "" when the item does not say.
	Parent, Start string
	// Finished is true when the release of a shard read to its end wrote
	// it: the shard's checkpoint is finished (the checkpoint is marked
	// first). False says nothing: leases released before this mark existed,
	// or whose release failed, do not carry it.
	Finished bool
	// Incarnation is the id of the process whose take wrote Owner ("" for
	// a lease free, handed over, or taken by a version before it).
	Incarnation string
}

// DecodeLease reads the lease item of shard (nil: it does not exist).
func DecodeLease(shard string, item map[string]types.AttributeValue) Lease {
	l := Lease{Shard: shard, Exists: item != nil}
	l.Owner, _ = String(item, AttrLeaseOwner)
	l.Pending, _ = String(item, AttrLeasePending)
	l.Counter, _ = Int64(item, AttrLeaseCounter)
	l.Parent, _ = String(item, AttrLeaseParent)
	l.Start, _ = String(item, AttrLeaseStart)
	l.Finished = Flag(item, AttrLeaseDone)
	l.Incarnation, _ = String(item, AttrLeaseIncarnation)
	if ua, ok := String(item, AttrUpdatedAt); ok {
		l.Updated, _ = time.Parse(time.RFC3339Nano, ua)
	}
	return l
}

// leaseNames are the placeholders of the lease writes.
var leaseNames = map[string]string{
	"#o": AttrLeaseOwner, "#c": AttrLeaseCounter, "#p": AttrLeasePending, "#x": AttrLeaseExpiry,
	"#et": AttrEntityType, "#ua": AttrUpdatedAt, "#sh": AttrShardID,
	"#par": AttrLeaseParent, "#st": AttrLeaseStart, "#exp": AttrExpiresAt, "#fin": AttrLeaseDone,
	"#inc": AttrLeaseIncarnation,
}

var placeholder = regexp.MustCompile(`#[a-z]+`)

// leaseUpdate is the UpdateItem of the lease of shard: SET set, REMOVE
// remove, on condition cond, answering the item as written.
func leaseUpdate(tableName, streamARN, shard, set string, remove []string, cond string, values map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
	expr := "SET " + set
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	names := map[string]string{}
	for _, ph := range placeholder.FindAllString(expr+" "+cond, -1) {
		names[ph] = leaseNames[ph]
	}
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(tableName),
		Key:                       Key(aggregates.LeaseKey(streamARN, shard)),
		UpdateExpression:          aws.String(expr),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	}
}

func stamp(t time.Time) *types.AttributeValueMemberS { return S(t.UTC().Format(time.RFC3339Nano)) }

// TakeLease makes owner (the process incarnation, when not "") the owner
// of the lease seen (one that does not exist, is free, expired, or owned
// by owner's previous life), for duration from now. The condition is the
// counter seen: any change since (a renewal, a release, another taker)
// makes it fail.
func TakeLease(tableName, streamARN string, seen Lease, owner, incarnation string, duration time.Duration, now time.Time) *dynamodb.UpdateItemInput {
	cond := "attribute_not_exists(#c)"
	values := map[string]types.AttributeValue{
		":o": S(owner), ":next": Int(seen.Counter + 1), ":x": stamp(now.Add(duration)),
		":et": S(aggregates.EntityLease), ":ua": stamp(now), ":exp": coordinationExpiry(now), ":sh": S(seen.Shard),
	}
	if seen.Exists {
		cond = "#c = :seen"
		values[":seen"] = Int(seen.Counter)
	}
	set := "#o = :o, #c = :next, #x = :x, #et = :et, #ua = :ua, #sh = :sh, #exp = :exp"
	remove := []string{"#p"}
	if incarnation != "" {
		set += ", #inc = :inc"
		values[":inc"] = S(incarnation)
	} else {
		remove = append(remove, "#inc")
	}
	if seen.Start != "" {
		set += ", #par = :par, #st = :st"
		values[":par"], values[":st"] = S(seen.Parent), S(seen.Start)
	}
	return leaseUpdate(tableName, streamARN, seen.Shard, set, remove, cond, values)
}

// RegisterShard puts a free lease for a shard no lease exists for yet,
// with the shard's parent and first sequence number: how the poller that
// finished a parent tells the others about its children without their
// listing the whole stream. It fails when the lease exists.
func RegisterShard(tableName, streamARN, shard, parent, start string, now time.Time) *dynamodb.UpdateItemInput {
	return leaseUpdate(tableName, streamARN, shard, "#c = :zero, #et = :et, #ua = :ua, #exp = :exp, #sh = :sh, #par = :par, #st = :st", nil, "attribute_not_exists(#c)",
		map[string]types.AttributeValue{
			":zero": Int(0), ":et": S(aggregates.EntityLease), ":ua": stamp(now), ":exp": coordinationExpiry(now), ":sh": S(shard), ":par": S(parent), ":st": S(start),
		})
}

// RenewLease bumps the counter of lease l, on condition that l.Owner still
// holds it at l.Counter. The answer's pendingOwner names a poller that
// asked for it.
func RenewLease(tableName, streamARN string, l Lease, duration time.Duration, now time.Time) *dynamodb.UpdateItemInput {
	return leaseUpdate(tableName, streamARN, l.Shard, "#c = :next, #x = :x, #ua = :ua, #exp = :exp", nil, "#o = :o AND #c = :c",
		map[string]types.AttributeValue{
			":o": S(l.Owner), ":c": Int(l.Counter), ":next": Int(l.Counter + 1),
			":x": stamp(now.Add(duration)), ":ua": stamp(now), ":exp": coordinationExpiry(now),
		})
}

// ReleaseLease gives up lease l, held by l.Owner at l.Counter: to nobody
// (the lease becomes free) or, when to is set, straight to that poller.
// The lease of a shard read to its end (finished) is marked shardFinished
// (the caller marks the checkpoint finished first) and expires after
// FinishedRetention. Either way the lease's incarnation is removed: the
// giver's reader has stopped and the receiver has not taken it yet.
func ReleaseLease(tableName, streamARN string, l Lease, to string, finished bool, now time.Time) *dynamodb.UpdateItemInput {
	set := "#c = :next, #ua = :ua, #exp = :exp"
	remove := []string{"#p", "#inc"}
	values := map[string]types.AttributeValue{
		":o": S(l.Owner), ":c": Int(l.Counter), ":next": Int(l.Counter + 1), ":ua": stamp(now), ":exp": coordinationExpiry(now),
	}
	if finished {
		values[":exp"] = finishedExpiry(now)
		set += ", #fin = :fin"
		values[":fin"] = Bool(true)
	}
	if to != "" {
		set += ", #o = :to"
		values[":to"] = S(to)
	} else {
		remove = append(remove, "#o", "#x")
	}
	return leaseUpdate(tableName, streamARN, l.Shard, set, remove, "#o = :o AND #c = :c", values)
}

// RequestLease asks the owner of lease l to hand it over to requester. It
// does not change the counter, so it neither renews nor expires the lease;
// it fails when someone asked already.
func RequestLease(tableName, streamARN string, l Lease, requester string) *dynamodb.UpdateItemInput {
	return leaseUpdate(tableName, streamARN, l.Shard, "#p = :r", nil, "#o = :o AND #c = :c AND attribute_not_exists(#p)",
		map[string]types.AttributeValue{":r": S(requester), ":o": S(l.Owner), ":c": Int(l.Counter)})
}
