package table

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// This file is the flags item's layout: the application's settings
// singleton (aggregates.FlagsKey), created with writesEnabled true by
// CreateTable (putDefaultFlags), changed by ledgerctl flags (SetFlags) and
// read by the writer (GetFlags, cached). Under its key it holds
//
//	entityType     FLAGS
//	version        N, +1 per change: the condition of every SetFlags
//	updatedAt      S, RFC 3339
//	<name>         BOOL, one per flag (writesEnabled: the maintenance switch;
//	               tombstones: deletes leave tombstones)
//	protocol       N, the exactly-once protocol the table is at (absent: 3
//	               or before); the consumers of protocol 4 raise it at start,
//	               ledgerctl's replay and abandon-batch before they write
//	               (RaiseProtocol), ledgerctl unfence lowers it (LowerProtocol)

// Protocol is the exactly-once protocol this version speaks: 4. Protocol
// 3 is the layouts of the report head (transactionCount a number), the checkpoint
// (sequenceNumber a string) and the counts of step A. Protocol 4 is the
// fence of the counted repair (docs/exactly-once.md, "The design: counted
// changes", F. The fence): heads with txCount and transactionCount "v4",
// checkpoints with pos and sequenceNumber {fence: 4}. This version reads
// both layouts and writes protocol 4's (step F, "F as built (session
// 25)"); its ledgerctl refuses reconcile --repair and replay on a table
// whose flags say a higher protocol (AttrProtocol).
const Protocol = 4

// AttrProtocol is the flags item's protocol attribute (Flags.Protocol).
const AttrProtocol = "protocol"

// FlagWritesEnabled is the maintenance switch: mutations are served only
// while it is true.
const FlagWritesEnabled = "writesEnabled"

// FlagTombstones makes the writer's DELETE leave a tombstone (design.md,
// "Transaction") instead of deleting the item. Only consumers and
// ledgerctl that know tombstones (absent, aggregates.ErrDeleted) may read
// a table holding one: an older consumer takes a tombstone for an invalid
// transaction and quarantines every delete (the second review of issue
// 25, W-c). So the flag is off on a table created before tombstones
// until the operator sets it, once every consumer and ledgerctl runs a
// version that knows them (runbook, "Tombstones"); CreateTable sets it on
// a new table, which no older consumer reads.
const FlagTombstones = "tombstones"

// Flags is the application's settings singleton (SETTINGS#APP / FLAGS#V1).
// A missing item reads as Exists false and every flag false: writes
// disabled (fail closed).
type Flags struct {
	Exists    bool
	Version   int64
	UpdatedAt string
	// Values holds every boolean attribute of the item, writesEnabled
	// included.
	Values map[string]bool
	// Protocol is the item's protocol (0 when absent: protocol 3 or
	// before). ProtocolDamaged says it is there but no integer: a reader
	// must not take the table to be at its own protocol (fail closed).
	Protocol        int64
	ProtocolDamaged bool
}

// ProtocolAbove says why a tool of protocol own must not write under these
// flags: they name a higher protocol, or one that cannot be read. nil when
// the protocol is own's or lower.
func (f Flags) ProtocolAbove(own int64) error {
	switch {
	case f.ProtocolDamaged:
		return fmt.Errorf("the flags item's %s is no integer: this version (protocol %d) cannot tell the table's protocol", AttrProtocol, own)
	case f.Protocol > own:
		return fmt.Errorf("the table is at protocol %d (flags item), this version speaks protocol %d", f.Protocol, own)
	}
	return nil
}

// WritesEnabled reports the maintenance switch.
func (f Flags) WritesEnabled() bool { return f.Values[FlagWritesEnabled] }

// Tombstones reports whether deletes leave tombstones (FlagTombstones).
func (f Flags) Tombstones() bool { return f.Values[FlagTombstones] }

// String formats f for people, flags sorted by name.
func (f Flags) String() string {
	if !f.Exists {
		return "flags item missing (writes disabled)"
	}
	names := make([]string, 0, len(f.Values))
	for n := range f.Values {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "version %d, updated %s", f.Version, f.UpdatedAt)
	for _, n := range names {
		fmt.Fprintf(&b, "\n%s=%t", n, f.Values[n])
	}
	return b.String()
}

// FlagsAPI is the part of the DynamoDB API the flags functions use.
type FlagsAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// Attributes of the flags item that are not flags.
var flagsReserved = map[string]bool{AttrPK: true, AttrSK: true, AttrEntityType: true, AttrVersion: true, AttrUpdatedAt: true, AttrProtocol: true}

var flagName = regexp.MustCompile(`^[a-z][A-Za-z0-9]{0,63}$`)

// ValidateFlagName reports whether name can be a flag: lowerCamelCase ASCII,
// up to 64 characters, not one of the item's own attributes.
func ValidateFlagName(name string) error {
	if !flagName.MatchString(name) || flagsReserved[name] {
		return fmt.Errorf("flag name %q: want lowerCamelCase letters and digits (not PK, SK, entityType, version, updatedAt or protocol)", name)
	}
	return nil
}

// GetFlags reads the flags singleton with a strongly consistent GetItem.
func GetFlags(ctx context.Context, api FlagsAPI, tableName string) (Flags, error) {
	out, err := api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &tableName, Key: Key(aggregates.FlagsKey()), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Flags{}, fmt.Errorf("get flags: %w", err)
	}
	return decodeFlags(out.Item), nil
}

func decodeFlags(item map[string]types.AttributeValue) Flags {
	if item == nil {
		return Flags{Values: map[string]bool{}}
	}
	f := Flags{Exists: true, Values: map[string]bool{}}
	f.Version, _ = Int64(item, AttrVersion)
	f.UpdatedAt, _ = String(item, AttrUpdatedAt)
	if _, present := item[AttrProtocol]; present {
		n, ok := Int64(item, AttrProtocol)
		f.Protocol, f.ProtocolDamaged = n, !ok
	}
	for name, v := range item {
		if b, ok := v.(*types.AttributeValueMemberBOOL); ok && !flagsReserved[name] {
			f.Values[name] = b.Value
		}
	}
	return f
}

// FlagsConflictError is SetFlags' error when the flags item is not at the
// expected version: someone else changed it. Nothing was written.
type FlagsConflictError struct {
	Expected int64
	Current  Flags
}

func (e *FlagsConflictError) Error() string {
	if !e.Current.Exists {
		return fmt.Sprintf("flags changed concurrently: expected version %d, but the item is missing", e.Expected)
	}
	return fmt.Sprintf("flags changed concurrently: expected version %d, found version %d", e.Expected, e.Current.Version)
}

// SetFlags sets the given flags on the singleton with one UpdateItem guarded
// by a version condition: it applies only if the item is at version expected
// (0: only if the item does not exist, which creates it). The version is
// incremented and updatedAt set; other flags are left as they are. A lost
// race returns a *FlagsConflictError carrying the current flags; nothing is
// overwritten. It returns the flags as written.
func SetFlags(ctx context.Context, api FlagsAPI, tableName string, set map[string]bool, expected int64, now time.Time) (Flags, error) {
	if len(set) == 0 {
		return Flags{}, errors.New("set flags: no flags given")
	}
	names := map[string]string{"#v": AttrVersion, "#ua": AttrUpdatedAt, "#et": AttrEntityType}
	values := map[string]types.AttributeValue{
		":next": Int(expected + 1),
		":ua":   S(now.UTC().Format(time.RFC3339Nano)),
		":et":   S(aggregates.EntityFlags),
	}
	assign := []string{"#v = :next", "#ua = :ua", "#et = :et"}
	keys := make([]string, 0, len(set))
	for name := range set {
		keys = append(keys, name)
	}
	sort.Strings(keys)
	for i, name := range keys {
		if err := ValidateFlagName(name); err != nil {
			return Flags{}, fmt.Errorf("set flags: %w", err)
		}
		n, v := "#f"+strconv.Itoa(i), ":f"+strconv.Itoa(i)
		names[n] = name
		values[v] = &types.AttributeValueMemberBOOL{Value: set[name]}
		assign = append(assign, n+" = "+v)
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                           &tableName,
		Key:                                 Key(aggregates.FlagsKey()),
		UpdateExpression:                    aws.String("SET " + strings.Join(assign, ", ")),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if expected == 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(PK)")
	} else {
		in.ConditionExpression = aws.String("#v = :expected")
		values[":expected"] = Int(expected)
	}
	out, err := api.UpdateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		cur := decodeFlags(ccf.Item)
		if ccf.Item == nil && expected != 0 {
			// No old image: the item is missing, or the service did not
			// return it; read to tell.
			if cur, err = GetFlags(ctx, api, tableName); err != nil {
				return Flags{}, fmt.Errorf("set flags: condition failed; %w", err)
			}
		}
		return Flags{}, &FlagsConflictError{Expected: expected, Current: cur}
	}
	if err != nil {
		return Flags{}, fmt.Errorf("set flags: %w", err)
	}
	return decodeFlags(out.Attributes), nil
}

// putDefaultFlags writes the flags singleton with writes enabled and
// tombstones on, unless a flags item already exists.
func putDefaultFlags(ctx context.Context, api TableAPI, name string, now time.Time) error {
	item := Key(aggregates.FlagsKey())
	item[AttrEntityType] = S(aggregates.EntityFlags)
	item[FlagWritesEnabled] = Bool(true)
	item[FlagTombstones] = Bool(true)
	item[AttrVersion] = Int(1)
	item[AttrUpdatedAt] = S(now.UTC().Format(time.RFC3339))
	_, err := api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                aws.String(name),
		Item:                     item,
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": AttrPK},
	})
	var ccf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &ccf) {
		return fmt.Errorf("put default flags: %w", err)
	}
	return nil
}
