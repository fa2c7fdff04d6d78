package table

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file holds the attribute-value helpers every item codec and every
// reader of items uses, once.

// Attribute names on (nearly) every item: its type and its last change.
const (
	AttrEntityType = "entityType"
	AttrUpdatedAt  = "updatedAt"
)

// S is a string attribute value.
func S(s string) *types.AttributeValueMemberS { return &types.AttributeValueMemberS{Value: s} }

// Int is a number attribute value holding n.
func Int(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// Num is a number attribute value holding d exactly.
func Num(d decimal.Decimal) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: d.String()}
}

// Bool is a Boolean attribute value.
func Bool(b bool) *types.AttributeValueMemberBOOL { return &types.AttributeValueMemberBOOL{Value: b} }

// Key is the primary key of the item stored under k, as a request's Key or
// the start of an item.
func Key(k aggregates.Key) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: S(k.PK), AttrSK: S(k.SK)}
}

// KeyOf reads an item's primary key; a key attribute that is missing or not
// a string reads as "".
func KeyOf(item map[string]types.AttributeValue) aggregates.Key {
	pk, _ := String(item, AttrPK)
	sk, _ := String(item, AttrSK)
	return aggregates.Key{PK: pk, SK: sk}
}

// String reads attribute name of item as a string; ok is false when it is
// missing or of another type.
func String(item map[string]types.AttributeValue, name string) (s string, ok bool) {
	v, ok := item[name].(*types.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return v.Value, true
}

// Int64 reads attribute name of item as an integer; ok is false when it is
// missing, of another type or not an integer.
func Int64(item map[string]types.AttributeValue, name string) (n int64, ok bool) {
	v, isN := item[name].(*types.AttributeValueMemberN)
	if !isN {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	return n, err == nil
}

// Flag reads attribute name of item as a Boolean; false when it is missing
// or of another type.
func Flag(item map[string]types.AttributeValue, name string) bool {
	v, ok := item[name].(*types.AttributeValueMemberBOOL)
	return ok && v.Value
}

// Image converts an item to the domain's view of it (aggregates.Image): the
// type tag of every attribute (S, N, BOOL, M, L, B, SS, NS, BS, NULL; "?"
// for anything else) and the text of S and N values, "true" or "false" for
// a BOOL. The domain validates transactions on it, so that a value of the
// wrong type is named by its type.
func Image(item map[string]types.AttributeValue) aggregates.Image {
	img := make(aggregates.Image, len(item))
	for name, v := range item {
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			img[name] = aggregates.Attr{Type: "S", Value: v.Value}
		case *types.AttributeValueMemberN:
			img[name] = aggregates.Attr{Type: "N", Value: v.Value}
		case *types.AttributeValueMemberBOOL:
			img[name] = aggregates.Attr{Type: "BOOL", Value: strconv.FormatBool(v.Value)}
		case *types.AttributeValueMemberM, *types.AttributeValueMemberL, *types.AttributeValueMemberB,
			*types.AttributeValueMemberSS, *types.AttributeValueMemberNS, *types.AttributeValueMemberBS,
			*types.AttributeValueMemberNULL:
			// The member type's name ends in its tag.
			img[name] = aggregates.Attr{Type: strings.TrimPrefix(fmt.Sprintf("%T", v), "*types.AttributeValueMember")}
		default:
			img[name] = aggregates.Attr{Type: "?"}
		}
	}
	return img
}
