package table

import (
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file holds the writes of the rebase of one branch (docs/exactly-once.md,
// "B as built (session 26): the argument"): the pin (RebasePin, B1), the
// probe of one key (Probe, B2), the pinned update of the applied item that
// rides in every transaction of B5 (RebaseStep) and the abandon of a
// rebase (AbandonRebase). The steps themselves are processor.Rebase.

// RebasePin is B1: SET rebasing = id on the applied item of (tenant,
// branch) in the coordination table coord, on condition that no other
// rebase runs (attribute_not_exists(rebasing) OR rebasing = id: a retry,
// or the next round of the same rebase, accepts its own id), returning
// the whole item after the update: the counts the rebase pins.
func RebasePin(coord, tenant, branch, id string) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(coord), Key: Key(aggregates.AppliedKey(tenant, branch)),
		UpdateExpression:          aws.String("SET #rb = :id, #et = :et"),
		ConditionExpression:       aws.String("attribute_not_exists(#rb) OR #rb = :id"),
		ExpressionAttributeNames:  map[string]string{"#rb": AttrRebasing, "#et": AttrEntityType},
		ExpressionAttributeValues: map[string]types.AttributeValue{":id": S(id), ":et": S(aggregates.EntityApplied)},
		ReturnValues:              types.ReturnValueAllNew,
	}
}

// RebaseRepin is B1 of a round after the first: SET rebasing = id on
// condition that it is still id (the round before left it so), returning
// the whole item. A failed condition means the rebase was abandoned
// (ledgerctl reconcile --rebase --abandon) while it ran: it must stop,
// not pin again (review of step B, S26-B3).
func RebaseRepin(coord, tenant, branch, id string) *dynamodb.UpdateItemInput {
	in := RebasePin(coord, tenant, branch, id)
	in.ConditionExpression = aws.String("#rb = :id")
	return in
}

// AbandonRebase clears rebase id of (tenant, branch): REMOVE rebasing and
// SET epoch = epoch + 1 on condition rebasing = id, so that a B5 of that
// rebase still running can no longer land (its condition names the epoch
// it read). Its probes may still land: they change no figure and are
// counted under their own id.
func AbandonRebase(coord, tenant, branch, id string) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(coord), Key: Key(aggregates.AppliedKey(tenant, branch)),
		UpdateExpression:          aws.String("SET #ep = if_not_exists(#ep, :zero) + :one REMOVE #rb"),
		ConditionExpression:       aws.String("#rb = :id"),
		ExpressionAttributeNames:  map[string]string{"#rb": AttrRebasing, "#ep": AttrEpoch},
		ExpressionAttributeValues: map[string]types.AttributeValue{":id": S(id), ":zero": Int(0), ":one": Int(1)},
	}
}

// ProbeImage is the image the probe of item by rebase id leaves: item with
// probe = id, changes one more than item's (1 when item has none, or one
// that is no integer), and the sig of the result. The stream record of
// the probe is then a probe for the consumers (processor's countOf): the
// two images equal apart from changes, probe and sig, the count stepped as
// a probe steps it, the sig matching.
func ProbeImage(item map[string]types.AttributeValue, id string) map[string]types.AttributeValue {
	next := make(map[string]types.AttributeValue, len(item)+2)
	for name, v := range item {
		next[name] = v
	}
	c, _ := Changes(item)
	next[AttrProbe] = S(id)
	next[AttrChanges] = Int(c + 1)
	next[AttrSig] = SigAV(Sig(next))
	return next
}

// Probe is B2's write of item (as read, consistently) of the ledger table
// by rebase id: SET changes, probe and sig to ProbeImage's on condition
// that changes and sig are still as read (absent where the read had
// none), returning the image after the write. A failed condition means a
// write in between: read the key again and probe again.
func Probe(tableName string, item map[string]types.AttributeValue, id string) *dynamodb.UpdateItemInput {
	next := ProbeImage(item, id)
	names := map[string]string{"#ch": AttrChanges, "#probe": AttrProbe, "#sig": AttrSig}
	values := map[string]types.AttributeValue{":id": S(id), ":c1": next[AttrChanges], ":sig": next[AttrSig]}
	var cond []string
	for _, a := range []struct{ name, ph, value string }{{AttrChanges, "#ch", ":c"}, {AttrSig, "#sig", ":s"}} {
		if v, ok := item[a.name]; ok {
			cond = append(cond, a.ph+" = "+a.value)
			values[a.value] = v
		} else {
			cond = append(cond, "attribute_not_exists("+a.ph+")")
		}
	}
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: Key(KeyOf(item)),
		UpdateExpression:          aws.String("SET #ch = :c1, #probe = :id, #sig = :sig"),
		ConditionExpression:       aws.String(strings.Join(cond, " AND ") + " AND attribute_exists(PK)"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	}
}

// ProbedBy reports whether item is the image a probe of rebase id left
// that nothing has written over since: probe = id and its sig matching
// (every write of the writer, of rebucket and of compaction removes
// probe). For a lost answer: the probe landed.
func ProbedBy(item map[string]types.AttributeValue, id string) bool {
	p, _ := String(item, AttrProbe)
	return p == id && SigMatches(item)
}

// RebasePinned is what a rebase read of its branch's applied item at B1
// and B3 and pins in every transaction of B5.
type RebasePinned struct {
	Tenant, Branch, ID string
	// At holds applied, foreign, retired, epoch and open as B1 read them.
	At Applied
	// P4 is probed as B3's last read found it.
	P4 int64
}

// RebaseReset is what B5's last transaction sets on the applied item.
type RebaseReset struct {
	Sum   int64    // Σ of the probe images' changes
	Stale []string // open marks to remove (their batches are not pending)
	Now   string   // fencedAt, when absent (RFC 3339)
	// ProbeIDs are the probe ids whose counts (probedBy#<id>) the reset
	// removes: the rebase's id, and the ids it took after a probe whose
	// outcome was unknown (processor.Rebase, S26-B1); none: the rebase's.
	ProbeIDs []string
}

// RebaseStep is the update of the applied item that rides in transaction
// j (from 1) of B5: on condition that applied, foreign, retired and open
// are as read at B1, probed = P4, rebasing = ID and epoch = At.Epoch + j −
// 1, it sets epoch = At.Epoch + j. With reset (the last transaction) it
// also sets applied = Sum − P4, retired = 0, foreignAck = foreign,
// fencedAt (if absent) and rebased = ID, and removes rebasing, probedBy#<ID> and the stale
// open marks (docs/exactly-once.md, "B as built (session 26)").
func RebaseStep(coord string, pin RebasePinned, j int64, reset *RebaseReset) types.TransactWriteItem {
	names := map[string]string{"#a": AttrAppliedCount, "#f": AttrForeign, "#r": AttrRetired, "#p": AttrProbed,
		"#rb": AttrRebasing, "#ep": AttrEpoch, "#o": AttrOpen}
	values := map[string]types.AttributeValue{":id": S(pin.ID), ":p4": Int(pin.P4), ":ep1": Int(pin.At.Epoch + j)}
	var cond []string
	for _, c := range []struct {
		ph, value string
		n         int64
	}{{"#a", ":a", pin.At.Applied}, {"#f", ":f", pin.At.Foreign}, {"#r", ":r", pin.At.Retired}} {
		if c.n == 0 {
			cond = append(cond, fmt.Sprintf("(attribute_not_exists(%s) OR %s = %s)", c.ph, c.ph, c.value))
		} else {
			cond = append(cond, fmt.Sprintf("%s = %s", c.ph, c.value))
		}
		values[c.value] = Int(c.n)
	}
	if pin.P4 == 0 {
		cond = append(cond, "(attribute_not_exists(#p) OR #p = :p4)")
	} else {
		cond = append(cond, "#p = :p4")
	}
	cond = append(cond, "#rb = :id")
	if e := pin.At.Epoch + j - 1; e == 0 {
		cond = append(cond, "(attribute_not_exists(#ep) OR #ep = :ep)")
		values[":ep"] = Int(0)
	} else {
		cond = append(cond, "#ep = :ep")
		values[":ep"] = Int(e)
	}
	if len(pin.At.Open) == 0 {
		cond = append(cond, "attribute_not_exists(#o)")
	} else {
		cond = append(cond, "#o = :open")
		values[":open"] = &types.AttributeValueMemberSS{Value: pin.At.Open}
	}
	expr := "SET #ep = :ep1"
	if reset != nil {
		names["#fa"], names["#fat"], names["#rbd"] = AttrForeignAck, AttrFencedAt, AttrRebased
		values[":applied"], values[":zero"], values[":now"] = Int(reset.Sum-pin.P4), Int(0), S(reset.Now)
		expr += ", #a = :applied, #r = :zero, #fa = if_not_exists(#f, :zero), #fat = if_not_exists(#fat, :now), #rbd = :id REMOVE #rb"
		ids := reset.ProbeIDs
		if len(ids) == 0 {
			ids = []string{pin.ID}
		}
		for i, id := range ids {
			n := fmt.Sprintf("#pb%d", i)
			names[n] = ProbedByAttr(id)
			expr += ", " + n
		}
		if len(reset.Stale) > 0 {
			stale := append([]string(nil), reset.Stale...)
			sort.Strings(stale)
			expr += " DELETE #o :stale"
			values[":stale"] = &types.AttributeValueMemberSS{Value: stale}
		}
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(coord), Key: Key(aggregates.AppliedKey(pin.Tenant, pin.Branch)),
		UpdateExpression: aws.String(expr), ConditionExpression: aws.String(strings.Join(cond, " AND ")),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}}
}

// LossesAsRead is the ConditionCheck that the loss item of the
// coordination table coord still holds n (absent for 0): a loss counted
// anywhere since it was read cancels the transaction (the second review,
// L-a).
func LossesAsRead(coord string, n int64) types.TransactWriteItem {
	cc := &types.ConditionCheck{TableName: aws.String(coord), Key: Key(aggregates.LossesKey()),
		ExpressionAttributeNames: map[string]string{"#l": AttrLosses}}
	if n == 0 {
		cc.ConditionExpression = aws.String("attribute_not_exists(#l) OR #l = :n")
	} else {
		cc.ConditionExpression = aws.String("#l = :n")
	}
	cc.ExpressionAttributeValues = map[string]types.AttributeValue{":n": Int(n)}
	return types.TransactWriteItem{ConditionCheck: cc}
}

// NotPending is the ConditionCheck that the checkpoint at key (coordination
// table coord) holds no pending batch ending at any of tos (1 to 99): the
// batches of open marks of that shard are finished or abandoned. One
// check per checkpoint, however many marks name it (a transaction holds
// one action per item). A checkpoint gone (TTL) passes.
func NotPending(coord string, key aggregates.Key, tos ...string) types.TransactWriteItem {
	values := map[string]types.AttributeValue{}
	var in []string
	for i, to := range tos {
		v := fmt.Sprintf(":to%d", i)
		values[v] = S(to)
		in = append(in, v)
	}
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(coord), Key: Key(key),
		ConditionExpression:       aws.String("attribute_not_exists(#pt) OR NOT (#pt IN (" + strings.Join(in, ", ") + "))"),
		ExpressionAttributeNames:  map[string]string{"#pt": attrPendingTo},
		ExpressionAttributeValues: values,
	}}
}

// ClearFencedAt removes fencedAt from the applied item at key (ledgerctl
// unfence: a branch is no longer rebased after the fence once the fences
// are gone), on condition that it holds one.
func ClearFencedAt(coord string, key aggregates.Key) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(coord), Key: Key(key),
		UpdateExpression:         aws.String("REMOVE #fat"),
		ConditionExpression:      aws.String("attribute_exists(#fat)"),
		ExpressionAttributeNames: map[string]string{"#fat": AttrFencedAt},
	}
}

// AttrWriteHold (S) on a branch's directory item holds the id of the
// rebase that holds the branch's writes (ledgerctl reconcile --rebase
// --hold): the writer refuses the branch's transaction writes (503) while
// it sees it, through its directory cache (DirectoryTTL). A timing-based
// hold, for liveness only: the rebase's pin keeps it exact whether or not
// every writer has seen the hold (docs/exactly-once.md, "B as built").
const AttrWriteHold = "writeHold"

// HoldBranch sets the write hold id on branch (tenant, branch)'s directory
// item, on condition that the branch exists and no other hold is set.
func HoldBranch(tableName, tenant, branch, id string) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: Key(aggregates.BranchKey(tenant, branch)),
		UpdateExpression:          aws.String("SET #h = :id"),
		ConditionExpression:       aws.String("attribute_exists(PK) AND (attribute_not_exists(#h) OR #h = :id)"),
		ExpressionAttributeNames:  map[string]string{"#h": AttrWriteHold},
		ExpressionAttributeValues: map[string]types.AttributeValue{":id": S(id)},
	}
}

// ReleaseBranch removes the write hold id from branch (tenant, branch), on
// condition that it is still that hold.
func ReleaseBranch(tableName, tenant, branch, id string) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: Key(aggregates.BranchKey(tenant, branch)),
		UpdateExpression:          aws.String("REMOVE #h"),
		ConditionExpression:       aws.String("#h = :id"),
		ExpressionAttributeNames:  map[string]string{"#h": AttrWriteHold},
		ExpressionAttributeValues: map[string]types.AttributeValue{":id": S(id)},
	}
}
