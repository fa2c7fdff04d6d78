package table

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file is the one owner of the shard checkpoint item
// (aggregates.CheckpointKey), the state the exactly-once argument rests on
// (docs/exactly-once.md): its layout, its decoding, and every write that
// changes it — the claims inside commit transactions (ClaimRun, ClaimGroup:
// processor.ShardGuard), and the moves outside them (AdvanceCheckpoint,
// MarkCheckpointStart: the poller; the guard-alone abandon transaction,
// AbandonTx, kept beside the loss item in abandon.go) — plus the read-only listing of a
// stream's checkpoints and leases (ReadStreamState) for the poller and
// ledgerctl lag; DecodeCheckpoint serves the guard and reconcile's
// in-flight check. Under its key it holds
//
//	entityType       CHECKPOINT
//	shardId          S
//	sequenceNumber   S, the last record committed; absent before the first
//	                 (the layout of protocol 3 and before). In the fenced
//	                 layout of protocol 4 (docs/exactly-once.md, "The
//	                 design: counted changes", F. The fence; "F as built
//	                 (session 25)") the map {fence: 4} instead, the
//	                 position in pos: every write of this version leaves
//	                 the item so (fencedMove), on condition of the position
//	                 read in either layout; a consumer of protocol 3 refuses
//	                 it, one of before cannot claim it
//	pos              S, a fenced checkpoint's position; absent before the
//	                 first record committed
//	countedTo        S, the position when this version first wrote the item
//	                 ("" for none): claims above it are all counting code's
//	updatedAt        S, RFC 3339, the last write
//	expiresAt        N, the last write + CoordinationRetention (TTL)
//	shardFinished    BOOL, the shard is closed and read to its end
//	startAt          S, LATEST: where a reader opened before the first commit
//	pendingTo, pendingNext, pendingGroups, pendingPlan, pendingDigest
//	                 a half-committed batch (prev, pendingTo]: groups before
//	                 pendingNext of pendingGroups are committed
//	                 (docs/exactly-once.md, "Batch commits")
//	migratedFrom     S, on a copy MigrateStreamState made: the updatedAt of
//	                 the ledger table's checkpoint it was copied from
//	migrationFence   S, on such a copy until the move is done (the ledger
//	                 table's checkpoint replaced by a tombstone): the ledger
//	                 table's name
//	lostAt           S, RFC 3339: when records of the shard were last
//	                 abandoned (trimmed, or given up by hand): AbandonTx
//	legacyTombstone  S, the ledger table's name, once a tombstone stands at
//	                 the shard's key of the layout before the coordination
//	                 table (FenceLegacyCheckpoint, releaseCopy): every
//	                 claim requires it
//
// Every move is a compare-and-set on sequenceNumber, never lands over a
// half-committed batch except the batch's own next group, and never lands
// on a fenced copy (fenceAbsent): a copy is not a checkpoint any consumer
// may claim until the migration has made sure that no consumer of the
// version before the coordination table can move the original any more.
// Every claim also requires legacyTombstone (tombstoned): no record is
// applied from a shard's checkpoint here while a consumer of that version
// could still claim the same shard from nothing in the ledger table
// (docs/exactly-once.md, "A shard's legacy tombstone").

// Attribute names of the checkpoint item besides the keys, entityType and
// updatedAt. sequenceNumber is also the run marker's and the quarantine
// item's; shardId also the lease's.
const (
	AttrSequenceNumber = "sequenceNumber"
	AttrShardID        = "shardId"
	attrShardFinished  = "shardFinished"
	attrStartAt        = "startAt"
	attrPendingTo      = "pendingTo"
	attrPendingNext    = "pendingNext"
	attrPendingGroups  = "pendingGroups"
	attrPendingPlan    = "pendingPlan"
	attrPendingDigest  = "pendingDigest"
	attrMigrationFence = "migrationFence"
	attrTombstoned     = "legacyTombstone"
	// AttrPos is a fenced checkpoint's position, attrFence the key of the
	// fence's protocol in its sequenceNumber map (protocol 4).
	AttrPos       = "pos"
	attrFence     = "fence"
	AttrCountedTo = "countedTo"
)

// fencedMove is the part of every checkpoint write of this version that
// leaves the item in the fenced layout of protocol 4 (docs/exactly-once.md,
// "F as built (session 25)"): cond is the term that the checkpoint is at
// prev ("" for no position) in either layout, set the SET terms that leave
// it fenced at to ("": where it is), with countedTo recorded by the first
// of them. It adds its placeholders (#seq, #pos, #fv, #cto; :fv, :fmap,
// :cto, and :prev, :last when given) to names and values.
func fencedMove(names map[string]string, values map[string]types.AttributeValue, prev, to string) (cond, set string) {
	names["#seq"], names["#pos"], names["#fv"], names["#cto"] = AttrSequenceNumber, AttrPos, attrFence, AttrCountedTo
	values[":fv"] = Int(Protocol)
	values[":fmap"] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{attrFence: Int(Protocol)}}
	values[":cto"] = S(prev)
	if prev == "" {
		cond = "(attribute_not_exists(#seq) OR (#seq.#fv = :fv AND attribute_not_exists(#pos)))"
	} else {
		values[":prev"] = S(prev)
		cond = "(#seq = :prev OR (#seq.#fv = :fv AND #pos = :prev))"
	}
	set = "#seq = :fmap, #cto = if_not_exists(#cto, :cto)"
	switch {
	case to != "":
		// :last, as the claims always named it (the benchmark's lag clock
		// reads a claim's :last).
		values[":last"] = S(to)
		set += ", #pos = :last"
	case prev != "":
		set += ", #pos = :prev"
	}
	return cond, set
}

// fenceAbsent is the term of every checkpoint claim's and move's condition
// that refuses a fenced copy (MigrateStreamState): #fence names
// migrationFence. Its cost is the bytes of the request alone, no read and
// no extra write: these 33 bytes of condition and the placeholder
// "#fence":"migrationFence" (25 bytes of JSON) per claim or move. DynamoDB
// charges a conditional write by the size of the item (the larger of before
// and after for an update), a failed condition like a write, and nothing
// for the expression (developer guide, "DynamoDB read and write
// operations", write operations); the attribute is absent from every item
// but a copy not yet released.
const fenceAbsent = " AND attribute_not_exists(#fence)"

// tombstoned is the term of every claim's condition (ClaimRun, ClaimGroup)
// that requires the checkpoint's legacyTombstone: the ledger table holds a
// tombstone at the shard's key of the layout before the coordination
// table, so no consumer of that version can claim the shard there
// (FenceLegacyCheckpoint). #lt names legacyTombstone. Like fenceAbsent, it
// costs the request's bytes only. The moves outside commits
// (AdvanceCheckpoint, MarkCheckpointStart) apply no record and do not
// require it.
const tombstoned = " AND attribute_exists(#lt)"

// ErrCheckpointFenced says that a shard's checkpoint is a copy
// MigrateStreamState made and has not released yet: the ledger table's
// checkpoint it was copied from may still move (a consumer of the version
// before the coordination table may still run), so no consumer may claim
// from the copy. A consumer that meets it commits nothing on the shard and
// tries again later; `ledgerctl coordination migrate` run to its end
// releases the copy.
var ErrCheckpointFenced = errors.New("the checkpoint is a copy `ledgerctl coordination migrate` has not released yet (its move from the ledger table is not done): nothing is committed on the shard until a run of the migration ends without error (docs/runbook.md, \"The coordination table\")")

// Checkpoint is a checkpoint item as read.
type Checkpoint struct {
	Shard     string
	Seq       string // the last record committed; "" when none
	Finished  bool   // the shard is closed and read to its end
	StartAt   string // where a reader opened before the first commit; "" when not recorded
	UpdatedAt string // the last write, RFC 3339
	// LostAt is when records of the shard were last abandoned (the
	// guard-alone abandon transaction, AbandonTx), RFC 3339; "" never.
	LostAt string
	// LostAfter is the sequence number the last counted loss lies after
	// (AbandonTx, CarryLoss): equal to Seq while the gap after the
	// checkpoint is counted (Counted); "" never.
	LostAfter string
	// Fenced: the item is a migration's copy not released yet
	// (ErrCheckpointFenced); nothing may claim from it.
	Fenced bool
	// Tombstoned: the ledger table holds a tombstone at the shard's key of
	// the layout before the coordination table (legacyTombstone); without
	// it every claim fails until FenceLegacyCheckpoint has landed.
	Tombstoned bool
	// Pending is the half-committed batch; nil when none.
	Pending *PendingBatch
	// Fence is the protocol of a fenced checkpoint (sequenceNumber the map
	// {fence: N}); 0 in the old layout (protocol 3 and before). Pos holds
	// a fenced checkpoint's position: Seq is Pos for this version's fence
	// (N = Protocol), and "" for any other (a later protocol's, or one
	// that cannot be read: the guard refuses it, ErrCheckpointProtocol,
	// and every write conditions on fence = Protocol). CountedTo is the
	// position when this version first wrote the item ("" for none).
	Fence     int64
	Pos       string
	CountedTo string
}

// Position is the checkpoint's position for a reader that only reads
// (ledgerctl lag, reconcile's in-flight check): Pos on a fenced checkpoint
// (Fence), else Seq. A consumer of this version never commits from it.
func (c Checkpoint) Position() string {
	if c.Fence > 0 {
		return c.Pos
	}
	return c.Seq
}

// Foreign says the checkpoint is fenced by another protocol than this
// version's (a later one, or a fence that cannot be read): this version
// writes nothing on it.
func (c Checkpoint) Foreign() bool { return c.Fence != 0 && c.Fence != Protocol }

// ErrCheckpointProtocol says that a shard's checkpoint is fenced by
// another protocol than this version's (Checkpoint.Foreign): a consumer of
// this version commits nothing on the shard, ever; only a consumer of
// that protocol, or its `ledgerctl unfence` after a rollback, moves it
// (docs/exactly-once.md, second review, F-b).
var ErrCheckpointProtocol = errors.New("the checkpoint is fenced by a later protocol than this consumer's: nothing is committed on the shard by this version (roll forward, or unfence: docs/exactly-once.md, \"The design: counted changes\", F. The fence)")

// CheckpointProtocolError is ErrCheckpointProtocol naming the shard and the
// fence's protocol (errors.Is ErrCheckpointProtocol).
type CheckpointProtocolError struct {
	Shard string
	Fence int64
}

func (e *CheckpointProtocolError) Error() string {
	return fmt.Sprintf("shard %s: protocol %d, this version's %d: %v", e.Shard, e.Fence, Protocol, ErrCheckpointProtocol)
}

func (e *CheckpointProtocolError) Unwrap() error { return ErrCheckpointProtocol }

// PendingBatch is a half-committed batch (prev, To] whose groups before
// Next of Groups are committed; Plan and Digest identify how it was planned
// (processor's batch plan and plan digest).
type PendingBatch struct {
	To           string
	Next, Groups int
	Plan, Digest string
}

// DecodeCheckpoint reads the checkpoint item of shard (nil: none). An error
// says the pending batch is malformed; the checkpoint is decoded all the
// same, with Pending naming at least its last record.
func DecodeCheckpoint(shard string, item map[string]types.AttributeValue) (Checkpoint, error) {
	c := Checkpoint{Shard: shard, Finished: Flag(item, attrShardFinished)}
	c.Seq, _ = String(item, AttrSequenceNumber)
	if m, ok := item[AttrSequenceNumber].(*types.AttributeValueMemberM); ok {
		// The fenced layout: the fence's protocol (1 when it cannot be
		// read: fenced all the same) and the position in pos.
		c.Fence = 1
		if n, ok := Int64(m.Value, attrFence); ok && n > 0 {
			c.Fence = n
		}
		c.Pos, _ = String(item, AttrPos)
		c.CountedTo, _ = String(item, AttrCountedTo)
		if c.Fence == Protocol {
			c.Seq = c.Pos
		}
	}
	c.StartAt, _ = String(item, attrStartAt)
	c.UpdatedAt, _ = String(item, AttrUpdatedAt)
	c.LostAt, _ = String(item, AttrLostAt)
	c.LostAfter, _ = String(item, AttrLostAfter)
	_, c.Fenced = item[attrMigrationFence]
	_, c.Tombstoned = item[attrTombstoned]
	to, ok := String(item, attrPendingTo)
	if !ok {
		return c, nil
	}
	c.Pending = &PendingBatch{To: to}
	num := func(name string) (int, error) {
		v, ok := item[name].(*types.AttributeValueMemberN)
		if !ok {
			return 0, fmt.Errorf("pending batch without %s", name)
		}
		return strconv.Atoi(v.Value)
	}
	var err error
	if c.Pending.Next, err = num(attrPendingNext); err != nil {
		return c, err
	}
	if c.Pending.Groups, err = num(attrPendingGroups); err != nil {
		return c, err
	}
	c.Pending.Plan, _ = String(item, attrPendingPlan)
	c.Pending.Digest, _ = String(item, attrPendingDigest)
	return c, nil
}

// Valid reports whether the pending batch's progress is possible: a group
// after the first and before the last is next.
func (b *PendingBatch) Valid() error {
	if b.Next < 1 || b.Next >= b.Groups {
		return fmt.Errorf("pending batch at group %d of %d", b.Next, b.Groups)
	}
	return nil
}

// checkpointWrite is the part of every checkpoint write that says who wrote
// it and when (now as the caller's clock gives it). Claims name the shard
// and the time #shard and :now; the moves outside commits (advance, mark
// start) #sh and :ua, which tests injecting faults recognise them by. Its
// names include #fence, which every write's condition uses (fenceAbsent).
func checkpointWrite(shard string, now time.Time, shardPH, nowPH string) (set string, names map[string]string, values map[string]types.AttributeValue) {
	return "#et = :et, #ua = " + nowPH + ", " + shardPH + " = :" + shardPH[1:] + ", #exp = :exp",
		map[string]string{"#et": AttrEntityType, "#ua": AttrUpdatedAt, shardPH: AttrShardID, "#pt": attrPendingTo, "#exp": AttrExpiresAt, "#fence": attrMigrationFence},
		map[string]types.AttributeValue{":et": S(aggregates.EntityCheckpoint), nowPH: S(now.Format(time.RFC3339Nano)), ":" + shardPH[1:]: S(shard), ":exp": coordinationExpiry(now)}
}

// ClaimRun is the transaction action that moves the checkpoint of shard
// (under key) from prev ("" for none) to last: the guard of a commit of one
// run. It fails its condition when the checkpoint is elsewhere or holds a
// half-committed batch (only that batch's own last group moves it), or is
// a migration's fenced copy, or lacks its legacy tombstone
// (FenceLegacyCheckpoint).
func ClaimRun(tableName string, key aggregates.Key, shard, prev, last string, now time.Time) types.TransactWriteItem {
	set, names, values := checkpointWrite(shard, now, "#shard", ":now")
	at, move := fencedMove(names, values, prev, last)
	cond := at + " AND attribute_not_exists(#pt)" + fenceAbsent + tombstoned
	names["#lt"] = attrTombstoned
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(tableName), Key: Key(key),
		UpdateExpression: aws.String("SET " + move + ", " + set), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}}
}

// GroupClaim is group K of the N groups of the batch (Prev, To] planned as
// Plan with digest Digest.
type GroupClaim struct {
	Shard        string
	K, N         int
	Prev, To     string
	Plan, Digest string
	Now          time.Time
}

// ClaimGroup is the transaction action of a batch's group (the table in
// docs/exactly-once.md, "Batch commits"): every group requires the
// checkpoint at Prev; the first requires no pending batch (a trimmed
// batch is given up by AbandonTx first) and, unless it is also the last,
// records the batch as pending; a middle group requires the batch with
// itself next and moves next on; the last moves the checkpoint to To and
// clears the batch. No group lands on a migration's fenced copy, nor on a
// checkpoint without its legacy tombstone (FenceLegacyCheckpoint).
func ClaimGroup(tableName string, key aggregates.Key, c GroupClaim) types.TransactWriteItem {
	set, names, values := checkpointWrite(c.Shard, c.Now, "#shard", ":now")
	names["#pn"], names["#pg"], names["#pp"], names["#pd"] = attrPendingNext, attrPendingGroups, attrPendingPlan, attrPendingDigest
	to := ""
	if c.K == c.N-1 {
		to = c.To
	}
	at, move := fencedMove(names, values, c.Prev, to)
	if c.K > 0 {
		// Groups before K landed already, by an earlier version: a batch
		// of plan layout 4 or before is finished uncounted (processor's
		// planLayout), so on an old-layout item the first fence records
		// the batch's end, not its start, as where counting began (review
		// of session 25, S25-F2). On a fenced item countedTo is kept.
		values[":cto"] = S(c.To)
	}
	set = "SET " + move + ", " + set
	remove := ""
	cond := at
	if c.K == 0 {
		cond += " AND attribute_not_exists(#pt)"
	} else {
		cond += " AND #pt = :to AND #pn = :k AND #pd = :digest"
		values[":to"], values[":k"], values[":digest"] = S(c.To), Int(int64(c.K)), S(c.Digest)
	}
	switch {
	case c.K == c.N-1:
		if c.K > 0 {
			remove = " REMOVE #pt, #pn, #pg, #pp, #pd"
		}
	case c.K == 0:
		set += ", #pt = :to, #pn = :next, #pg = :n, #pp = :plan, #pd = :digest"
		values[":to"], values[":next"], values[":n"], values[":plan"] = S(c.To), Int(1), Int(int64(c.N)), S(c.Plan)
		values[":digest"] = S(c.Digest)
	default:
		set += ", #pn = :next"
		values[":next"] = Int(int64(c.K + 1))
	}
	cond += fenceAbsent + tombstoned
	names["#lt"] = attrTombstoned
	expr := set + remove
	pruneNames(names, expr, cond)
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(tableName), Key: Key(key),
		UpdateExpression: aws.String(expr), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}}
}

// pruneNames drops the placeholders no expression uses (DynamoDB refuses
// unused ones).
func pruneNames(names map[string]string, exprs ...string) {
	for ph := range names {
		used := false
		for _, e := range exprs {
			used = used || strings.Contains(e, ph)
		}
		if !used {
			delete(names, ph)
		}
	}
}

// AdvanceCheckpoint is the UpdateItem that moves the checkpoint of shard
// from prev ("" for none) to seq outside a commit, with the same
// compare-and-set as a claim (for records that were all processed and had
// no effect, so nothing committed them). finished also marks the shard as
// read to its end; seq may then be "" (the checkpoint stays at prev). It
// never lands over a half-committed batch (its last group moves it) nor on
// a migration's fenced copy. The answer holds the item as written
// (ALL_NEW).
func AdvanceCheckpoint(tableName string, key aggregates.Key, shard, prev, seq string, finished bool, now time.Time) *dynamodb.UpdateItemInput {
	set, names, values := checkpointWrite(shard, now, "#sh", ":ua")
	at, move := fencedMove(names, values, prev, seq)
	set = move + ", " + set
	if finished {
		set += ", #fin = :fin"
		names["#fin"] = attrShardFinished
		values[":fin"] = Bool(true)
		values[":exp"] = finishedExpiry(now)
	}
	cond := at + " AND attribute_not_exists(#pt)" + fenceAbsent
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: Key(key),
		UpdateExpression: aws.String("SET " + set), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		ReturnValues: types.ReturnValueAllNew,
	}
}

// MarkCheckpointStart is the UpdateItem that records, for a shard nothing
// was committed from yet, where its reader opened (startAt), so that a
// restart before the first commit opens there again. It fails its
// condition once the checkpoint has a sequence number, and on a
// migration's fenced copy.
func MarkCheckpointStart(tableName string, key aggregates.Key, shard, startAt string, now time.Time) *dynamodb.UpdateItemInput {
	set, names, values := checkpointWrite(shard, now, "#sh", ":ua")
	names["#st"] = attrStartAt
	values[":st"] = S(startAt)
	delete(names, "#pt")
	at, move := fencedMove(names, values, "", "")
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: Key(key),
		UpdateExpression: aws.String("SET " + move + ", " + set + ", #st = :st"), ConditionExpression: aws.String(at + fenceAbsent),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		ReturnValues: types.ReturnValueAllNew,
	}
}

// LegacyCheckpointKey is where a shard's checkpoint was in the ledger
// table before the coordination table (partition STREAM#{stream ARN},
// LegacyStreamState): where MigrateStreamState and FenceLegacyCheckpoint
// leave a tombstone.
func LegacyCheckpointKey(streamARN, shard string) aggregates.Key {
	return aggregates.Key{PK: aggregates.LeasePK(streamARN), SK: aggregates.CheckpointKey(streamARN, shard).SK}
}

// FenceLegacyCheckpoint is the transaction that must land before the first
// claim of shard's checkpoint in the coordination table coord (every claim
// requires its mark: tombstoned). Its first action marks the checkpoint
// (legacyTombstone = ledgerTable; entityType, shardId, updatedAt and
// expiresAt only where absent), on condition that it is not a migration's
// fenced copy; its second puts a tombstone (movedTo, pendingTo MIGRATED,
// expiresAt: the migration's, see tombstone) at the shard's key in the
// ledger table (LegacyCheckpointKey), on condition that nothing is there
// or a tombstone is. So the mark exists only while a tombstone stands
// there: a consumer of the version before the coordination table can no
// longer claim the shard from nothing in the ledger table, and once such
// a consumer has, the transaction fails (FenceError: ErrLegacyStreamState)
// and no claim of this version lands. Every SET is if_not_exists: sent
// again over a fenced shard it changes neither item, and a write that
// changes nothing makes no stream record (docs/exactly-once.md, "A
// shard's legacy tombstone").
func FenceLegacyCheckpoint(ledgerTable, coord, streamARN, shard string, now time.Time) *dynamodb.TransactWriteItemsInput {
	exp := coordinationExpiry(now)
	return &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{
				TableName: aws.String(coord), Key: Key(aggregates.CheckpointKey(streamARN, shard)),
				UpdateExpression: aws.String("SET #lt = :ledger, #et = if_not_exists(#et, :et), #sh = if_not_exists(#sh, :sh), " +
					"#ua = if_not_exists(#ua, :ua), #exp = if_not_exists(#exp, :exp)"),
				ConditionExpression: aws.String("attribute_not_exists(#fence)"),
				ExpressionAttributeNames: map[string]string{
					"#lt": attrTombstoned, "#et": AttrEntityType, "#sh": AttrShardID, "#ua": AttrUpdatedAt,
					"#exp": AttrExpiresAt, "#fence": attrMigrationFence,
				},
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":ledger": S(ledgerTable), ":et": S(aggregates.EntityCheckpoint), ":sh": S(shard),
					":ua": S(now.Format(time.RFC3339Nano)), ":exp": exp,
				},
			}},
			{Update: &types.Update{
				TableName: aws.String(ledgerTable), Key: Key(LegacyCheckpointKey(streamARN, shard)),
				UpdateExpression: aws.String("SET #moved = if_not_exists(#moved, :coord), #pt = if_not_exists(#pt, :mig), " +
					"#exp = if_not_exists(#exp, :exp)"),
				ConditionExpression: aws.String("attribute_not_exists(#pk) OR attribute_exists(#moved)"),
				ExpressionAttributeNames: map[string]string{
					"#moved": attrMovedTo, "#pt": attrPendingTo, "#exp": AttrExpiresAt, "#pk": AttrPK,
				},
				ExpressionAttributeValues: map[string]types.AttributeValue{":coord": S(coord), ":mig": S(migratedPending), ":exp": exp},
			}},
		},
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	}
}

// FenceError names why FenceLegacyCheckpoint's transaction for shard of
// streamARN was cancelled: ErrLegacyStreamState when the ledger table
// holds a checkpoint of the shard that is not a tombstone (a consumer of
// the version before the coordination table claimed it), and
// ErrCheckpointFenced when the coordination table's checkpoint is a
// migration's copy not released yet; any other error is wrapped as it is.
// Both named errors are final for the transaction: sending it again
// changes nothing until an operator acts (`ledgerctl coordination
// migrate`).
func FenceError(streamARN, shard string, err error) error {
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		code := func(i int) string {
			if i < len(tce.CancellationReasons) {
				return aws.ToString(tce.CancellationReasons[i].Code)
			}
			return ""
		}
		// A fenced copy's original is still in the ledger table until the
		// migration's tombstone: both fail, and the copy says more.
		switch {
		case code(0) == "ConditionalCheckFailed":
			return fmt.Errorf("shard %s: %w", shard, ErrCheckpointFenced)
		case code(1) == "ConditionalCheckFailed":
			return fmt.Errorf("stream %s, shard %s: the ledger table holds the shard's checkpoint: %w", streamARN, shard, ErrLegacyStreamState)
		}
	}
	return fmt.Errorf("stream %s, shard %s: put the legacy tombstone: %w", streamARN, shard, err)
}

// ReadStreamState reads every lease and checkpoint of a stream from the
// coordination table coord, by shard id: a consistent, paginated Query of
// the stream's lease partition, then of the checkpoint partitions
// (aggregates.CheckpointBuckets) that hold a checkpoint of a shard in
// shards or with a lease, concurrently. shards nil reads every checkpoint
// partition.
func ReadStreamState(ctx context.Context, api dynamodb.QueryAPIClient, coord, streamARN string, shards []string) (map[string]Lease, map[string]Checkpoint, error) {
	leasePrefix := strings.TrimSuffix(aggregates.LeaseKey(streamARN, "x").SK, "x")
	cpPrefix := strings.TrimSuffix(aggregates.CheckpointKey(streamARN, "x").SK, "x")
	leases, cps := map[string]Lease{}, map[string]Checkpoint{}
	err := queryAll(ctx, api, coord, aggregates.LeasePK(streamARN), func(item map[string]types.AttributeValue) {
		if sk, _ := String(item, AttrSK); strings.HasPrefix(sk, leasePrefix) {
			l := DecodeLease(strings.TrimPrefix(sk, leasePrefix), item)
			leases[l.Shard] = l
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read leases of %s: %w", streamARN, err)
	}
	buckets := map[int]bool{}
	for _, s := range shards {
		buckets[aggregates.CheckpointBucket(s)] = true
	}
	for s := range leases {
		buckets[aggregates.CheckpointBucket(s)] = true
	}
	if shards == nil {
		for b := range aggregates.CheckpointBuckets {
			buckets[b] = true
		}
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	for b := range buckets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got []Checkpoint
			err := queryAll(ctx, api, coord, aggregates.CheckpointPK(streamARN, b), func(item map[string]types.AttributeValue) {
				if sk, _ := String(item, AttrSK); strings.HasPrefix(sk, cpPrefix) {
					// A malformed pending batch is the guard's to report;
					// the listing shows what is there.
					c, _ := DecodeCheckpoint(strings.TrimPrefix(sk, cpPrefix), item)
					got = append(got, c)
				}
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			for _, c := range got {
				cps[c.Shard] = c
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("read checkpoints of %s: %w", streamARN, errors.Join(errs...))
	}
	return leases, cps, nil
}

// queryAll reads a partition of table with consistent reads, page by page.
func queryAll(ctx context.Context, api dynamodb.QueryAPIClient, tableName, pk string, each func(map[string]types.AttributeValue)) error {
	p := dynamodb.NewQueryPaginator(api, &dynamodb.QueryInput{
		TableName:                 aws.String(tableName),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": AttrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(pk)},
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, item := range out.Items {
			each(item)
		}
	}
	return nil
}
