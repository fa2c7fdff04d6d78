package writer

import (
	"strconv"
	"strings"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// update builds an UpdateItem's SET clause with placeholder names, so
// attribute names never meet reserved words.
type update struct {
	sets    []string
	removes []string
	names   map[string]string
	values  map[string]ddbtypes.AttributeValue
}

func newUpdate() *update {
	return &update{names: map[string]string{}, values: map[string]ddbtypes.AttributeValue{}}
}

func (u *update) set(attr string, v ddbtypes.AttributeValue) *update {
	n := strconv.Itoa(len(u.names))
	u.names["#u"+n], u.values[":u"+n] = attr, v
	u.sets = append(u.sets, "#u"+n+" = :u"+n)
	return u
}

// remove removes attr from the item.
func (u *update) remove(attr string) *update {
	n := strconv.Itoa(len(u.names))
	u.names["#u"+n] = attr
	u.removes = append(u.removes, "#u"+n)
	return u
}

// patch sets attr, and *field, to v unless v is "" (the patch leaves the
// field as it is).
func (u *update) patch(attr string, field *string, v string) *update {
	if v != "" {
		*field = v
		u.set(attr, strAV(v))
	}
	return u
}

// nextVersion returns the Update of k with u's sets and updatedAt and
// version set to the item's next, on condition that it is at version
// expected.
func (u *update) nextVersion(table *string, k aggregates.Key, expected, version int64, updatedAt string) ddbtypes.TransactWriteItem {
	u.set(attrUpdatedAt, strAV(updatedAt)).set(attrVersion, intAV(version))
	return u.item(table, k, "#v = :expected", map[string]string{"#v": attrVersion}, map[string]ddbtypes.AttributeValue{":expected": intAV(expected)})
}

// item returns the Update of k with condition cond, whose placeholders are
// condNames and condValues (they must not start with #u or :u).
func (u *update) item(table *string, k aggregates.Key, cond string, condNames map[string]string, condValues map[string]ddbtypes.AttributeValue) ddbtypes.TransactWriteItem {
	expr := "SET " + strings.Join(u.sets, ", ")
	if len(u.removes) > 0 {
		expr += " REMOVE " + strings.Join(u.removes, ", ")
	}
	names := map[string]string{}
	values := map[string]ddbtypes.AttributeValue{}
	for n, a := range u.names {
		names[n] = a
	}
	for n, v := range u.values {
		values[n] = v
	}
	for n, a := range condNames {
		names[n] = a
	}
	for n, v := range condValues {
		values[n] = v
	}
	if len(values) == 0 {
		values = nil
	}
	return ddbtypes.TransactWriteItem{Update: &ddbtypes.Update{
		TableName: table, Key: keyAV(k), UpdateExpression: &expr, ConditionExpression: &cond,
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}}
}
