package table

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file is the guard-alone abandon transaction (docs/exactly-once.md,
// "Plan layout 6", the failure table's trim rows; "The design: counted
// changes", L-a) and the coordination table's loss item
// (aggregates.LossesKey):
//
//	entityType   LOSSES
//	losses       N, how many abandon transactions landed (every stream)
//	updatedAt    S, RFC 3339, the last one
//
// It never carries expiresAt: a change detector that TTL could take
// would reset to 0 and pin nothing.

// Attributes of the abandon transaction: lostAt on the checkpoint (the
// time of its last loss), lostAfter on the checkpoint (the sequence number
// its last counted loss lies after: the gap of trimmed records after it is
// counted once), losses on the loss item.
const (
	AttrLostAt    = "lostAt"
	AttrLostAfter = "lostAfter"
	AttrLosses    = "losses"
)

// Abandon is the state of a shard's checkpoint as read when its reader
// found the records after it trimmed (or an operator gives up a batch that
// cannot finish): Prev the sequence number it holds, Pending its
// half-committed batch (nil when none). After is the trim point: the
// sequence number the trim that started the abandon was met after (at or
// after Prev: ShardGuard.Trimmed); "" for an operator's abandon
// (`ledgerctl abandon-batch`), which met no trim. To is set for a shard
// without a checkpoint (Prev "", no pending batch) whose records up to To
// were trimmed (a tumbling window whose first record, To, was trimmed when
// it opened there): the abandon creates the checkpoint at To
// (docs/exactly-once.md, "Trims, session 24", T24-1, and its review,
// S24-T1); "" otherwise.
type Abandon struct {
	Shard   string
	Prev    string
	Pending *PendingBatch
	Now     time.Time
	After   string
	To      string
}

// creates reports whether a creates the checkpoint (To on a shard
// without one).
func (a Abandon) creates() bool { return a.Prev == "" && a.Pending == nil && a.To != "" }

// Target is where the checkpoint stands once the abandon landed: the
// pending batch's last record, To for a checkpoint it creates, or Prev.
func (a Abandon) Target() string {
	switch {
	case a.Pending != nil:
		return a.Pending.To
	case a.creates():
		return a.To
	}
	return a.Prev
}

// StreamRetention is how long DynamoDB Streams keeps a record (24 hours,
// fixed by AWS).
const StreamRetention = 24 * time.Hour

// CountAged reports whether the last count on cp (lostAt) is older than
// the stream's retention at now: every record readable when it was made
// has aged out since, so a trim met now may take records written after
// it, which that count does not cover (review session 23, S23-RT-3).
func (cp Checkpoint) CountAged(now time.Time) bool {
	at, err := time.Parse(time.RFC3339Nano, cp.LostAt)
	return err == nil && now.Sub(at) > StreamRetention
}

// LostAfter is the lostAfter the abandon writes: the position the gap it
// counts lies after (review session 23, S23-RT-1 and S23-RT-2). With a
// pending batch, its last record (the records after it up to the trim
// horizon are the same trim's), but "" for an operator's abandon: it met
// no trim, so it counts no gap after the batch. Without one, the trim
// point (After), or Prev when none is given: a second trim met after a
// later position than a counted one, with the checkpoint still at Prev
// (the reader read on and its records did not move the checkpoint), is
// another gap, counted on its own. A checkpoint it creates, To: every
// record up to it is in the gap, which goes on after it until a readable
// record (as CarryLoss leaves it).
func (a Abandon) LostAfter() string {
	switch {
	case a.creates():
		return a.To
	case a.Pending != nil && a.After == "":
		return ""
	case a.Pending != nil:
		return a.Pending.To
	case a.After != "":
		return a.After
	}
	return a.Prev
}

// AbandonTx is the guard-alone abandon transaction of the shard whose
// checkpoint is key in the coordination table coord: with a pending batch,
// SET sequenceNumber = pendingTo, lostAt = Now, lostAfter = pendingTo
// (an operator's: REMOVE lostAfter) REMOVE pending* on condition of the
// batch as read (sequenceNumber, pendingTo, pendingNext, pendingGroups);
// without one, SET lostAt = Now, lostAfter = L on condition
// sequenceNumber = Prev AND no pending batch AND (lostAfter <> L OR
// lostAt older than the retention), where L is the trim point
// (LostAfter); for a checkpoint it creates (To), the same with SET
// sequenceNumber = To, lostAfter = To on condition sequenceNumber absent
// (session 24, T24-1): the gap after a trim point is counted once, whoever meets
// it and however often, while its count is younger than the stream's
// retention (docs/exactly-once.md, session 23, T23-2, and its review,
// S23-RT-1 and S23-RT-3). Either also requires lostAt to differ from Now, so a lost
// answer's retry fails its condition and AbandonLanded recognises it: the
// loss item's ADD losses :1, in the same transaction, moves once (the
// SDK's client token makes a resend of the same input within 10 minutes a
// no-op too; the condition covers any other resend). Never on a
// migration's fenced copy. It applies no record, so it does not require
// the legacy tombstone (as AdvanceCheckpoint).
func AbandonTx(coord string, key aggregates.Key, a Abandon) *dynamodb.TransactWriteItemsInput {
	set, names, values := checkpointWrite(a.Shard, a.Now, "#shard", ":now")
	names["#lost"], names["#lsq"] = AttrLostAt, AttrLostAfter
	expr := "SET " + set + ", #lost = :now"
	if lsq := a.LostAfter(); lsq != "" {
		values[":lsq"] = S(lsq)
		expr += ", #lsq = :lsq"
	}
	// The checkpoint's position moves to the batch's end (a pending
	// batch), to To (a checkpoint it creates), or nowhere; either way the
	// item is left fenced (fencedMove: protocol 4).
	prev, to := a.Prev, ""
	switch {
	case a.creates():
		// No checkpoint yet (an item without a position, such as a
		// poller's start marker, is none): created at To.
		prev, to = "", a.LostAfter()
	case a.Pending != nil:
		to = a.Pending.To
	}
	cond, move := fencedMove(names, values, prev, to)
	if a.Pending != nil {
		// The batch's landed groups may be an older plan's, uncounted:
		// the first fence records its end as where counting began (review
		// of session 25, S25-F2; ClaimGroup).
		values[":cto"] = S(a.Pending.To)
	}
	expr += ", " + move
	if b := a.Pending; b != nil {
		names["#pn"], names["#pg"], names["#pp"], names["#pd"] = attrPendingNext, attrPendingGroups, attrPendingPlan, attrPendingDigest
		values[":to"], values[":pn"], values[":pg"] = S(b.To), Int(int64(b.Next)), Int(int64(b.Groups))
		expr += " REMOVE #pt, #pn, #pg, #pp, #pd"
		if a.LostAfter() == "" {
			expr += ", #lsq" // an operator's abandon counts no gap after the batch
		}
		cond += " AND #pt = :to AND #pn = :pn AND #pg = :pg"
	} else {
		// A count older than the retention covers no record trimmed now
		// that was written after it (review session 23, S23-RT-3).
		values[":aged"] = S(a.Now.UTC().Add(-StreamRetention).Format(time.RFC3339Nano))
		cond += " AND attribute_not_exists(#pt) AND (attribute_not_exists(#lsq) OR #lsq <> :lsq OR #lost < :aged)"
	}
	cond += " AND (attribute_not_exists(#lost) OR #lost <> :now)" + fenceAbsent
	pruneNames(names, expr, cond)
	now := S(a.Now.Format(time.RFC3339Nano))
	return &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{
				TableName: aws.String(coord), Key: Key(key),
				UpdateExpression: aws.String(expr), ConditionExpression: aws.String(cond),
				ExpressionAttributeNames: names, ExpressionAttributeValues: values,
			}},
			{Update: &types.Update{
				TableName: aws.String(coord), Key: Key(aggregates.LossesKey()),
				UpdateExpression:          aws.String("SET #et = :et, #ua = :now ADD #l :one"),
				ExpressionAttributeNames:  map[string]string{"#et": AttrEntityType, "#ua": AttrUpdatedAt, "#l": AttrLosses},
				ExpressionAttributeValues: map[string]types.AttributeValue{":et": S(aggregates.EntityLosses), ":now": now, ":one": Int(1)},
			}},
		},
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
	}
}

// Counted reports whether cp's gap after its sequence number is already
// counted: no pending batch, and the last abandon (AbandonTx) left the
// checkpoint where it stands (lostAfter = sequenceNumber). An abandon
// without a pending batch there would fail its condition.
func (cp Checkpoint) Counted() bool {
	return cp.Pending == nil && cp.Seq != "" && cp.LostAfter == cp.Seq
}

// CarryLoss is the UpdateItem that moves the checkpoint of shard from prev
// to to over records known trimmed, inside the gap after prev that an
// abandon already counted (lostAfter = prev): SET sequenceNumber = to,
// lostAfter = to on condition sequenceNumber = prev AND lostAfter = prev
// AND no pending batch, never on a migration's fenced copy. The loss count
// does not move: the records carried over are the same gap's
// (docs/exactly-once.md, session 23, T23-3: a closed shard whose every
// record after the checkpoint was trimmed).
func CarryLoss(tableName string, key aggregates.Key, shard, prev, to string, now time.Time) *dynamodb.UpdateItemInput {
	set, names, values := checkpointWrite(shard, now, "#sh", ":ua")
	names["#lsq"] = AttrLostAfter
	at, move := fencedMove(names, values, prev, to)
	values[":to"] = S(to)
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: Key(key),
		UpdateExpression:          aws.String("SET " + move + ", " + set + ", #lsq = :to"),
		ConditionExpression:       aws.String(at + " AND #lsq = :prev AND attribute_not_exists(#pt)" + fenceAbsent),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
}

// AbandonLanded reports whether cp, read consistently after an abandon
// transaction of a whose answer was lost or whose condition failed, shows
// that transaction landed: lostAt = Now. lostAt is written by abandon
// transactions only, each with its own instant, and every claim leaves it
// as it is, so it proves the landing even when another consumer moved the
// checkpoint on from a.Target() before the re-read (review session 22,
// S22-AB-1: the position alone called that "not landed").
func AbandonLanded(cp Checkpoint, a Abandon) bool {
	return cp.LostAt != "" && cp.LostAt == a.Now.Format(time.RFC3339Nano)
}

// AbandonStands reports whether cp is still the state a was read from
// (the abandon neither landed nor was overtaken by another consumer).
// Without a pending batch the state read is a gap not counted yet: one
// another consumer's abandon counted meanwhile (lostAfter = LostAfter) is
// overtaken, not standing, so that the condition failure it causes is
// answered "not landed" rather than retried as an error.
func AbandonStands(cp Checkpoint, a Abandon) bool {
	if cp.Seq != a.Prev {
		return false
	}
	if a.Pending == nil {
		return cp.Pending == nil && (cp.LostAfter != a.LostAfter() || cp.CountAged(a.Now))
	}
	return cp.Pending != nil && cp.Pending.To == a.Pending.To && cp.Pending.Next == a.Pending.Next && cp.Pending.Groups == a.Pending.Groups
}

// GetLosses reads the loss item's count from the coordination table coord,
// strongly consistent (0 when no loss was ever counted).
func GetLosses(ctx context.Context, api interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}, coord string) (int64, error) {
	out, err := api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord),
		Key: Key(aggregates.LossesKey()), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, fmt.Errorf("read the loss item: %w", err)
	}
	return LossesOf(out.Item)
}

// LossesOf decodes the loss item's count (0 for no item: no loss was
// ever counted).
func LossesOf(item map[string]types.AttributeValue) (int64, error) {
	if item == nil {
		return 0, nil
	}
	n, ok := Int64(item, AttrLosses)
	if !ok {
		return 0, fmt.Errorf("the loss item's %s is not an integer", AttrLosses)
	}
	return n, nil
}
