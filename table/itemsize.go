package table

import (
	"strings"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"
)

// This file is the billing rule for writes, as AWS documents it ("DynamoDB
// item sizes and formats", "Capacity unit consumption for write
// operations"):
//
//   - an item's size is the sum, over its attributes, of the UTF-8 length of
//     the attribute name plus the size of the value: a string's UTF-8
//     length; a number's 1 byte per two significant digits (leading and
//     trailing zeros trimmed) plus 1 (numberSize has the exact rule); a
//     binary's length; 1 for a Boolean or
//     null; a list or map 3 bytes plus its elements, each element 1 byte
//     more (a map's element also counts its key's length); a set the sum of
//     its members;
//   - a write consumes 1 write capacity unit (WCU) per started KB (1,024
//     bytes) of the larger of the item before and after it (an absent item
//     counting 0, and at least 1 WCU);
//   - inside TransactWriteItems every action consumes twice that;
//   - a conditional write whose condition fails still consumes, computed the
//     same way from the item as it is and as the write would have made it
//     (an assumption for cancelled transactions, whose billing AWS does not
//     spell out: every action of a cancelled transaction is billed like a
//     failed conditional write, twice).

// ItemSize returns an item's size in bytes by DynamoDB's rules.
func ItemSize(item map[string]ddbtypes.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueSize(v)
	}
	return n
}

func valueSize(v ddbtypes.AttributeValue) int {
	switch v := v.(type) {
	case *ddbtypes.AttributeValueMemberS:
		return len(v.Value)
	case *ddbtypes.AttributeValueMemberN:
		return numberSize(v.Value)
	case *ddbtypes.AttributeValueMemberB:
		return len(v.Value)
	case *ddbtypes.AttributeValueMemberBOOL, *ddbtypes.AttributeValueMemberNULL:
		return 1
	case *ddbtypes.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += len(k) + valueSize(e) + 1
		}
		return n
	case *ddbtypes.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += valueSize(e) + 1
		}
		return n
	case *ddbtypes.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *ddbtypes.AttributeValueMemberNS:
		n := 0
		for _, s := range v.Value {
			n += numberSize(s)
		}
		return n
	case *ddbtypes.AttributeValueMemberBS:
		n := 0
		for _, b := range v.Value {
			n += len(b)
		}
		return n
	}
	return 0
}

// numberSize is the size of a number: 1 byte per pair of significant
// decimal digits, the pairs aligned on the decimal point (base-100 digits,
// leading and trailing zero pairs trimmed), plus 1 byte, plus 1 more for a
// negative number; zero is 1 byte. This is the exact form of the
// documentation's "1 byte per two significant digits, plus 1", and what
// DynamoDB Local computes, byte for byte (TestItemSize_MatchesDynamoDBLocal).
func numberSize(s string) int {
	d, err := decimal.NewFromString(s)
	if err != nil {
		return len(s) // not a number DynamoDB would accept; never billed
	}
	if d.IsZero() {
		return 1
	}
	intPart, frac, _ := strings.Cut(d.Abs().String(), ".")
	if len(intPart)%2 == 1 {
		intPart = "0" + intPart
	}
	if len(frac)%2 == 1 {
		frac += "0"
	}
	digits := intPart + frac
	first, last := 0, len(digits)
	for first < last && digits[first:first+2] == "00" {
		first += 2
	}
	for last > first && digits[last-2:last] == "00" {
		last -= 2
	}
	n := (last-first)/2 + 1
	if d.IsNegative() {
		n++
	}
	return n
}

// WriteUnits is the WCU of one write of an item whose size goes from before
// to after bytes (0 for absent): 1 per started KB of the larger, at least 1.
func WriteUnits(before, after int) int {
	size := max(before, after)
	return max(1, (size+1023)/1024)
}
