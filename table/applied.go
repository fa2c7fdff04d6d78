package table

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file is a branch's applied item, in the coordination table (no
// stream: its writes put no record into the stream the consumers read,
// and reconcile never meets it), under aggregates.AppliedKey
// (docs/exactly-once.md, "The design: counted changes"). Built so far:
//
//	entityType   APPLIED
//	retired      N, the stream records of the branch's compacted tombstones:
//	             each compaction adds the tombstone's changes + 1 (its REMOVE)
//
// and read: rebasing (S, set while a rebase of the branch runs; a
// compaction refuses then). The consumers' counts (applied, probed,
// foreign, open, epoch, …: step A) are theirs to add. The item never
// carries expiresAt: it lives as long as its branch, whatever the
// coordination table's TTL does to checkpoints and leases.

// Attributes of the applied item.
const (
	AttrRetired  = "retired"
	AttrRebasing = "rebasing"
)

// Applied is a branch's applied item as far as it is built.
type Applied struct {
	Exists   bool
	Retired  int64
	Rebasing string // "" when no rebase runs
}

// DecodeApplied reads an applied item (nil: none yet, every count 0). A
// count of another type than N is an error: the item is ledger's own, and
// a count nobody can read proves nothing.
func DecodeApplied(item map[string]types.AttributeValue) (Applied, error) {
	if item == nil {
		return Applied{}, nil
	}
	a := Applied{Exists: true}
	if _, present := item[AttrRetired]; present {
		var ok bool
		if a.Retired, ok = Int64(item, AttrRetired); !ok {
			return Applied{}, fmt.Errorf("applied item %s: %s is not an integer", KeyOf(item), AttrRetired)
		}
	}
	a.Rebasing, _ = String(item, AttrRebasing)
	return a, nil
}

// GetApplied reads branch (tenant, branch)'s applied item from the
// coordination table coord, strongly consistent.
func GetApplied(ctx context.Context, api interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}, coord, tenant, branch string) (Applied, error) {
	out, err := api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(coord),
		Key: Key(aggregates.AppliedKey(tenant, branch)), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Applied{}, fmt.Errorf("read the applied item of %s/%s: %w", tenant, branch, err)
	}
	return DecodeApplied(out.Item)
}

// CompactTombstone is the transaction that retires the tombstone at k, a
// transaction item of the ledger table read with changes c: a DeleteItem
// of it on condition that it is still that tombstone (changes = c AND
// attribute_exists(deletedAt)), and an update of its branch's applied
// item in the coordination table coord that adds c + 1 to retired (the
// tombstone's records and its REMOVE), on condition that no rebase of the
// branch runs. Either condition failing cancels both: nothing is retired
// that is not deleted, and the reverse.
func CompactTombstone(ledgerTable, coord string, k aggregates.Key, c int64) ([]types.TransactWriteItem, error) {
	tenant, branch, ok := aggregates.ParseTransactionPK(k.PK)
	if !ok {
		return nil, fmt.Errorf("compact %s: not a transaction key", k)
	}
	return []types.TransactWriteItem{
		{Delete: &types.Delete{
			TableName: aws.String(ledgerTable), Key: Key(k),
			ConditionExpression:       aws.String("#ch = :c AND attribute_exists(#del)"),
			ExpressionAttributeNames:  map[string]string{"#ch": AttrChanges, "#del": AttrDeletedAt},
			ExpressionAttributeValues: map[string]types.AttributeValue{":c": Int(c)},
		}},
		{Update: &types.Update{
			TableName: aws.String(coord), Key: Key(aggregates.AppliedKey(tenant, branch)),
			UpdateExpression:          aws.String("SET #r = if_not_exists(#r, :zero) + :n, #et = :et"),
			ConditionExpression:       aws.String("attribute_not_exists(#rb)"),
			ExpressionAttributeNames:  map[string]string{"#r": AttrRetired, "#et": AttrEntityType, "#rb": AttrRebasing},
			ExpressionAttributeValues: map[string]types.AttributeValue{":zero": Int(0), ":n": Int(c + 1), ":et": S(aggregates.EntityApplied)},
		}},
	}, nil
}
