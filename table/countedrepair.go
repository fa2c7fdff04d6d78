package table

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file holds the pinned write of the counted repair of one branch
// (docs/exactly-once.md, "R as built (session 26): the argument"): the
// update of the branch's applied item that rides in every transaction of
// R6. The steps themselves are processor.CountedRepair.

// AttrRepaired (S) on the applied item is the token of the counted
// repair's transaction that last landed ("<id>/<round>/<j>/e<epoch>": R6
// sets it with the epoch it names): a lost answer of that transaction is
// told by it from another writer that moved the epoch as far. Not the id
// alone (S26-R1): the id is left there by the repair's transaction
// before, which an abandon's epoch step would then pass for the next one;
// and the epoch in it (S27-R3), since an id given twice would repeat
// "<id>/<round>/<j>", while each epoch value is set by one write only.
const AttrRepaired = "repaired"

// RepairPinned is what a counted repair read of its branch's applied item
// at R0 (and retired after R2) and pins in every transaction of R6.
type RepairPinned struct {
	Tenant, Branch string
	// ID is the transaction's token (AttrRepaired): the repair's id, its
	// round, the transaction's number and the epoch it sets.
	ID string
	// At holds applied, probed, foreign, foreignAck and epoch as R0 read
	// them and retired as read after R2.
	At Applied
}

// CountedRepairStep is the update of the applied item that rides in
// transaction j (from 1) of R6: SET epoch = At.Epoch + j, repaired = ID on
// condition that applied, probed, foreign, retired and foreignAck are as
// pinned (foreignAck = foreign: R0 refused otherwise), epoch = At.Epoch +
// j − 1, fencedAt exists, and neither open nor rebasing.
func CountedRepairStep(coord string, pin RepairPinned, j int64) types.TransactWriteItem {
	names := map[string]string{"#ep": AttrEpoch, "#rp": AttrRepaired, "#fat": AttrFencedAt, "#o": AttrOpen, "#rb": AttrRebasing}
	values := map[string]types.AttributeValue{":id": S(pin.ID), ":ep1": Int(pin.At.Epoch + j)}
	var cond []string
	for i, c := range []struct {
		name string
		n    int64
	}{{AttrAppliedCount, pin.At.Applied}, {AttrProbed, pin.At.Probed}, {AttrForeign, pin.At.Foreign},
		{AttrRetired, pin.At.Retired}, {AttrForeignAck, pin.At.ForeignAck}, {AttrEpoch, pin.At.Epoch + j - 1}} {
		ph, v := fmt.Sprintf("#c%d", i), fmt.Sprintf(":c%d", i)
		if c.name == AttrEpoch {
			ph = "#ep" // one placeholder per name
		}
		names[ph], values[v] = c.name, Int(c.n)
		if c.n == 0 {
			cond = append(cond, fmt.Sprintf("(attribute_not_exists(%s) OR %s = %s)", ph, ph, v))
		} else {
			cond = append(cond, fmt.Sprintf("%s = %s", ph, v))
		}
	}
	cond = append(cond, "attribute_exists(#fat)", "attribute_not_exists(#o)", "attribute_not_exists(#rb)")
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(coord), Key: Key(aggregates.AppliedKey(pin.Tenant, pin.Branch)),
		UpdateExpression:          aws.String("SET #ep = :ep1, #rp = :id"),
		ConditionExpression:       aws.String(strings.Join(cond, " AND ")),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}}
}
