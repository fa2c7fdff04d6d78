package processor

import (
	"strconv"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// Attribute names of the items the consumers write. The report item's
// layout is part of the table definition (table/report.go);
// sequenceNumber is the run marker's.
const (
	attrPK               = table.AttrPK
	attrSK               = table.AttrSK
	attrEntityType       = table.AttrEntityType
	attrPeriodType       = table.AttrPeriodType
	attrPeriodValue      = table.AttrPeriodValue
	attrTotalIncome      = table.AttrTotalIncome
	attrTotalExpense     = table.AttrTotalExpense
	attrTransactionCount = table.AttrTransactionCount
	attrUpdatedAt        = table.AttrUpdatedAt
	attrExpiresAt        = table.AttrExpiresAt
	attrSequenceNumber   = "sequenceNumber"
	// A shard checkpoint's pending batch (docs/exactly-once.md, "Batch
	// commits").
	attrPendingTo     = CheckpointPendingAttribute
	attrPendingNext   = "pendingNext"
	attrPendingGroups = "pendingGroups"
	attrPendingPlan   = "pendingPlan"
	attrPendingDigest = "pendingDigest"
	// Written by the poller's store (processor/poller/store.go): a closed
	// shard read to its end, and a checkpoint opened at LATEST before its
	// first commit.
	attrShardFinished = "shardFinished"
	attrStartAt       = "startAt"
)

// CheckpointPendingAttribute is the checkpoint item's attribute that exists
// while a batch is half committed; whoever else moves a checkpoint must
// require its absence.
const CheckpointPendingAttribute = "pendingTo"

// toImage converts a DynamoDB item to the domain's view of it: type tags for
// every attribute and the text of S and N values.
func toImage(item map[string]ddbtypes.AttributeValue) aggregates.Image {
	img := make(aggregates.Image, len(item))
	for name, v := range item {
		switch v := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			img[name] = aggregates.Attr{Type: "S", Value: v.Value}
		case *ddbtypes.AttributeValueMemberN:
			img[name] = aggregates.Attr{Type: "N", Value: v.Value}
		case *ddbtypes.AttributeValueMemberBOOL:
			img[name] = aggregates.Attr{Type: "BOOL", Value: strconv.FormatBool(v.Value)}
		case *ddbtypes.AttributeValueMemberM:
			img[name] = aggregates.Attr{Type: "M"}
		case *ddbtypes.AttributeValueMemberL:
			img[name] = aggregates.Attr{Type: "L"}
		case *ddbtypes.AttributeValueMemberB:
			img[name] = aggregates.Attr{Type: "B"}
		case *ddbtypes.AttributeValueMemberSS:
			img[name] = aggregates.Attr{Type: "SS"}
		case *ddbtypes.AttributeValueMemberNS:
			img[name] = aggregates.Attr{Type: "NS"}
		case *ddbtypes.AttributeValueMemberBS:
			img[name] = aggregates.Attr{Type: "BS"}
		case *ddbtypes.AttributeValueMemberNULL:
			img[name] = aggregates.Attr{Type: "NULL"}
		default:
			img[name] = aggregates.Attr{Type: "?"}
		}
	}
	return img
}

func stringAttr(item map[string]ddbtypes.AttributeValue, name string) (string, bool) {
	v, ok := item[name].(*ddbtypes.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return v.Value, true
}

func numberAV(d decimal.Decimal) *ddbtypes.AttributeValueMemberN {
	return &ddbtypes.AttributeValueMemberN{Value: d.String()}
}

func intAV(n int64) *ddbtypes.AttributeValueMemberN {
	return &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func strAV(s string) *ddbtypes.AttributeValueMemberS {
	return &ddbtypes.AttributeValueMemberS{Value: s}
}

func keyAV(k aggregates.Key) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{attrPK: strAV(k.PK), attrSK: strAV(k.SK)}
}
