package table

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// A staging item (plan layout 6, docs/exactly-once.md "The staging item")
// holds, in the coordination table, the branch-count transitions the
// groups of a batch before a roll-up delta item's own group computed for
// it, until that group reads them back and deletes the item in the
// transaction that puts the delta:
//
//	PK = ROLLUPSTAGE#{stream label}#{shard}   SK = {to}#{tenant}#{currency}#{n}
//	B#{period}   N, one per period staged: the sum of the transitions
//	lastGroup    N, the group that wrote it last
//	expiresAt    N, the write's time + CoordinationRetention (TTL)
//
// Flat number attributes, not a map: an update adds to a period that is
// not there yet with if_not_exists, which a map member cannot do before
// its map exists.

// StagingPrefix starts the partition key of a shard's staging items.
const StagingPrefix = "ROLLUPSTAGE#"

const (
	attrStagedPrefix = "B#"
	attrLastGroup    = "lastGroup"
)

// StagingKey is the key of a staging item.
func StagingKey(pk, sk string) aggregates.Key { return aggregates.Key{PK: pk, SK: sk} }

// PutStaging is the first staging group's write (kfirst): the item whole,
// replacing whatever an earlier attempt at the same key left (S19-P6-1).
// staged maps a period's key (aggregates.Period.String) to its sum.
func PutStaging(coord string, k aggregates.Key, staged map[string]int64, group int, now time.Time) types.TransactWriteItem {
	item := map[string]types.AttributeValue{
		AttrPK: S(k.PK), AttrSK: S(k.SK), attrLastGroup: Int(int64(group)), AttrExpiresAt: coordinationExpiry(now),
	}
	for p, v := range staged {
		item[attrStagedPrefix+p] = Int(v)
	}
	return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(coord), Item: item}}
}

// UpdateStaging is a later staging group's write: each period's sum added
// to what is staged, lastGroup and expiresAt set. periods lists the
// periods in a fixed order (the plan's).
func UpdateStaging(coord string, k aggregates.Key, periods []string, staged map[string]int64, group int, now time.Time) types.TransactWriteItem {
	names := map[string]string{"#lg": attrLastGroup, "#exp": AttrExpiresAt}
	values := map[string]types.AttributeValue{":zero": Int(0), ":k": Int(int64(group)), ":exp": coordinationExpiry(now)}
	expr := "SET #lg = :k, #exp = :exp"
	for i, p := range periods {
		n, v := "#b"+strconv.Itoa(i), ":t"+strconv.Itoa(i)
		names[n], values[v] = attrStagedPrefix+p, Int(staged[p])
		expr += ", " + n + " = if_not_exists(" + n + ", :zero) + " + v
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(coord), Key: Key(k), UpdateExpression: aws.String(expr),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}}
}

// DeleteStaging is the delta group's delete of the staging item it read,
// on condition that the last group that wrote it is klast.
func DeleteStaging(coord string, k aggregates.Key, klast int) types.TransactWriteItem {
	return types.TransactWriteItem{Delete: &types.Delete{
		TableName: aws.String(coord), Key: Key(k),
		ConditionExpression:       aws.String("#lg = :klast"),
		ExpressionAttributeNames:  map[string]string{"#lg": attrLastGroup},
		ExpressionAttributeValues: map[string]types.AttributeValue{":klast": Int(int64(klast))},
	}}
}

// Staged is a staging item as read.
type Staged struct {
	LastGroup int
	Periods   map[string]int64 // by aggregates.Period.String
}

// DecodeStaging reads a staging item; nil item, nil result. A lastGroup
// or staged figure that is no integer is an error (damage).
func DecodeStaging(item map[string]types.AttributeValue) (*Staged, error) {
	if item == nil {
		return nil, nil
	}
	lg, ok := Int64(item, attrLastGroup)
	if !ok {
		return nil, fmt.Errorf("staging item: %s is not an integer", attrLastGroup)
	}
	s := &Staged{LastGroup: int(lg), Periods: map[string]int64{}}
	for name := range item {
		if p, ok := strings.CutPrefix(name, attrStagedPrefix); ok {
			v, ok := Int64(item, name)
			if !ok {
				return nil, fmt.Errorf("staging item: %s is not an integer", name)
			}
			s.Periods[p] = v
		}
	}
	return s, nil
}
