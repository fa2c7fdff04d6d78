package table

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file holds the writes of step F's fences (docs/exactly-once.md,
// "F as built (session 25)") that are not a consumer's commit: the atomic
// fence of one report head (FenceHead, for the counted repair's R1 and the
// rebase's B1), the way back for a rollback below protocol 4 (UnfenceHead,
// UnfenceCheckpoint: ledgerctl unfence), and the flags item's protocol
// (RaiseProtocol: the consumers before their first write; LowerProtocol: ledgerctl
// unfence). The consumers' own writes fence as they go: checkpoints in
// checkpoint.go (fencedMove), heads in reportupdate.go (ReportUpdateWith).

// FenceHead is the UpdateItem that fences one report head of the old
// layout atomically: SET txCount = transactionCount, transactionCount =
// "v4" on condition attribute_type(transactionCount, N). It moves no
// figure, so it is exact whenever it lands; on a head already fenced, or
// without a count, or damaged, its condition fails and nothing changes.
func FenceHead(tableName string, k aggregates.Key) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: Key(k),
		UpdateExpression:          aws.String("SET #tc = #n, #n = :fv"),
		ConditionExpression:       aws.String("attribute_type(#n, :N)"),
		ExpressionAttributeNames:  map[string]string{"#tc": AttrTxCount, "#n": AttrTransactionCount},
		ExpressionAttributeValues: map[string]types.AttributeValue{":fv": S(HeadFence), ":N": S("N")},
	}
}

// UnfenceHead is the UpdateItem that puts one fenced report head back in
// the old layout (F-b's rollback): SET transactionCount = txCount (0 when
// absent) REMOVE txCount on condition transactionCount = "v4". Figures
// are kept; on a head of the old layout its condition fails and nothing
// changes.
func UnfenceHead(tableName string, k aggregates.Key) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: Key(k),
		UpdateExpression:          aws.String("SET #n = if_not_exists(#tc, :z) REMOVE #tc"),
		ConditionExpression:       aws.String("#n = :fv"),
		ExpressionAttributeNames:  map[string]string{"#tc": AttrTxCount, "#n": AttrTransactionCount},
		ExpressionAttributeValues: map[string]types.AttributeValue{":fv": S(HeadFence), ":z": Int(0)},
	}
}

// UnfenceCheckpoint is the UpdateItem that puts a checkpoint fenced by
// this protocol back in the old layout (F-b's rollback): SET
// sequenceNumber = pos REMOVE pos, countedTo on condition that it is
// still fenced by this protocol at pos; a checkpoint fenced before any
// position (pos "") loses its sequenceNumber, as the old layout has none
// then. The position is kept.
func UnfenceCheckpoint(tableName string, key aggregates.Key, pos string) *dynamodb.UpdateItemInput {
	names := map[string]string{"#seq": AttrSequenceNumber, "#pos": AttrPos, "#fv": attrFence, "#cto": AttrCountedTo}
	values := map[string]types.AttributeValue{":fv": Int(Protocol)}
	expr, cond := "REMOVE #seq, #pos, #cto", "#seq.#fv = :fv AND attribute_not_exists(#pos)"
	if pos != "" {
		values[":pos"] = S(pos)
		expr, cond = "SET #seq = :pos REMOVE #pos, #cto", "#seq.#fv = :fv AND #pos = :pos"
	}
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: Key(key),
		UpdateExpression: aws.String(expr), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}
}

// RaiseProtocol sets the flags item's protocol to p on condition that the
// item exists and its protocol is absent or lower (docs/exactly-once.md,
// "F as built (session 25)", the protocol flag: the consumers raise it
// before their first fence, so that an older ledgerctl refuses
// reconcile --repair from then on). raised says it wrote; a table at p or
// higher, or without a flags item, is left as it is (no write, no stream
// record). A protocol that is no integer is an error: nothing is written.
func RaiseProtocol(ctx context.Context, api FlagsAPI, tableName string, p int64) (raised bool, err error) {
	raised, _, err = RaiseProtocolOnFlags(ctx, api, tableName, p)
	return raised, err
}

// RaiseProtocolOnFlags is RaiseProtocol, and also says whether the flags
// item was there (always when raised): a consumer that found none raises
// again before its next write, since a flags item created later
// (ledgerctl flags set) has no protocol (docs/exactly-once.md, review of
// session 26, S26-P1).
func RaiseProtocolOnFlags(ctx context.Context, api FlagsAPI, tableName string, p int64) (raised, exists bool, err error) {
	_, err = api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: Key(aggregates.FlagsKey()),
		UpdateExpression:          aws.String("SET #p = :p"),
		ConditionExpression:       aws.String("attribute_exists(#pk) AND (attribute_not_exists(#p) OR (attribute_type(#p, :N) AND #p < :p))"),
		ExpressionAttributeNames:  map[string]string{"#p": AttrProtocol, "#pk": AttrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": Int(p), ":N": S("N")},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		f, gerr := GetFlags(ctx, api, tableName)
		if gerr != nil {
			return false, false, fmt.Errorf("raise the protocol to %d: %w", p, gerr)
		}
		if f.ProtocolDamaged {
			return false, true, fmt.Errorf("raise the protocol to %d: the flags item's %s is no integer", p, AttrProtocol)
		}
		return false, f.Exists, nil
	case err != nil:
		return false, false, fmt.Errorf("raise the protocol to %d: %w", p, err)
	}
	return true, true, nil
}

// LowerProtocol sets the flags item's protocol from `from` to `to` on
// condition that it is `from` (ledgerctl unfence: 4 to 3). lowered says
// it wrote; a protocol other than from is left as it is.
func LowerProtocol(ctx context.Context, api FlagsAPI, tableName string, from, to int64) (lowered bool, err error) {
	_, err = api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(tableName), Key: Key(aggregates.FlagsKey()),
		UpdateExpression:          aws.String("SET #p = :to"),
		ConditionExpression:       aws.String("#p = :from"),
		ExpressionAttributeNames:  map[string]string{"#p": AttrProtocol},
		ExpressionAttributeValues: map[string]types.AttributeValue{":from": Int(from), ":to": Int(to)},
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("lower the protocol from %d to %d: %w", from, to, err)
	}
	return true, nil
}
