package table_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

func TestImage_TagsEveryAttributeByItsType(t *testing.T) {
	img := table.Image(map[string]types.AttributeValue{
		"s": table.S("x"), "n": table.Int(7), "t": table.Bool(true),
		"m": &types.AttributeValueMemberM{}, "l": &types.AttributeValueMemberL{}, "b": &types.AttributeValueMemberB{},
		"ss": &types.AttributeValueMemberSS{}, "ns": &types.AttributeValueMemberNS{}, "bs": &types.AttributeValueMemberBS{},
		"null": &types.AttributeValueMemberNULL{Value: true}, "unknown": &types.UnknownUnionMember{Tag: "X"}, "nil": nil,
	})
	assert.Equal(t, aggregates.Image{
		"s": {Type: "S", Value: "x"}, "n": {Type: "N", Value: "7"}, "t": {Type: "BOOL", Value: "true"},
		"m": {Type: "M"}, "l": {Type: "L"}, "b": {Type: "B"}, "ss": {Type: "SS"}, "ns": {Type: "NS"}, "bs": {Type: "BS"},
		"null": {Type: "NULL"}, "unknown": {Type: "?"}, "nil": {Type: "?"},
	}, img)
}
