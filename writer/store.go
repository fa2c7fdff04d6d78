package writer

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// The writer's table operations, apart from HTTP: what each change writes
// and on which conditions, and what a failed condition means. Each item
// type the writer alone writes has one home here: the tenant
// (store_tenant.go), the branch (store_branch.go), the account and its
// email items (store_account.go), the owner items of unique values
// (store_owner.go), the idempotency record (store_idempotency.go); the
// transaction's item codec is in items.go, its changes in
// store_transaction.go. This file holds what they share. Handlers
// (tenants.go, branches.go, accounts.go, transactions.go) parse and
// validate a request, ask for a change and answer; a change and its
// explanations are in change.go.

// Attribute names the directory items share (status is also the
// idempotency record's: never the same item); each item's own attributes
// are declared in its home.
const (
	attrStatus    = "status"
	attrCreatedAt = "createdAt"
	attrName      = "name"
	attrGSI1PK    = table.AttrGSI1PK
	attrGSI1SK    = table.AttrGSI1SK
	attrGSI2PK    = table.AttrGSI2PK
	attrGSI2SK    = table.AttrGSI2SK
)

func boolAV(b bool) *ddbtypes.AttributeValueMemberBOOL {
	return &ddbtypes.AttributeValueMemberBOOL{Value: b}
}

func boolAttr(item map[string]ddbtypes.AttributeValue, name string) bool {
	v, ok := item[name].(*ddbtypes.AttributeValueMemberBOOL)
	return ok && v.Value
}

// putNew is the Put of item only where no item is (attribute_not_exists):
// how an id, an owned value or an address is taken.
func (s *Server) putNew(item map[string]ddbtypes.AttributeValue) ddbtypes.TransactWriteItem {
	return ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{
		TableName: &s.cfg.Table, Item: item,
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": attrPK},
	}}
}

// current returns old, the item as a failed condition returned it, or, when
// DynamoDB returned nothing, the item read again (nil when absent). A
// deleted transaction's tombstone is absent (live).
func (s *Server) current(ctx context.Context, k aggregates.Key, old map[string]ddbtypes.AttributeValue) (map[string]ddbtypes.AttributeValue, error) {
	if old != nil {
		return live(old), nil
	}
	item, err := s.getItem(ctx, k)
	return live(item), err
}

// live is item, or nil when it is a deleted transaction's tombstone
// (table.IsTombstone; only transaction items are ever one): every read of
// the API takes a tombstone for no item.
func live(item map[string]ddbtypes.AttributeValue) map[string]ddbtypes.AttributeValue {
	if table.IsTombstone(item) {
		return nil
	}
	return item
}

// getForChange reads the item at k that a change applies to, strongly
// consistent: nil and the 404 naming what when there is none (or a
// tombstone), nil and the
// 412 when the client named a version (expected > 0) and the item is at
// another.
func (s *Server) getForChange(ctx context.Context, k aggregates.Key, expected int64, what string) (map[string]ddbtypes.AttributeValue, *Problem, error) {
	item, err := s.getItem(ctx, k)
	if err != nil {
		return nil, nil, err
	}
	if item = live(item); item == nil {
		return nil, notFoundOf(what), nil
	}
	if v, _ := intAttr(item, attrVersion); expected > 0 && v != expected {
		return nil, s.versionConflict(v), nil
	}
	return item, nil, nil
}

// staleOrGone explains a failed version condition on the item at k from
// the item as it is: 404 naming what when it is gone, else 412 with its
// version.
func (s *Server) staleOrGone(k aggregates.Key, what string) onFail {
	return func(ctx context.Context, old map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
		item, err := s.current(ctx, k, old)
		if err != nil {
			return nil, false, err
		}
		if item == nil {
			return notFoundOf(what), false, nil
		}
		v, _ := intAttr(item, attrVersion)
		return s.versionConflict(v), false, nil
	}
}

// versionedUpdate is the Update of the item at k (what it is, for the
// 404) with u's sets and updatedAt and version set to the item's next, on
// condition that it is at version expected (staleOrGone explains).
func (s *Server) versionedUpdate(k aggregates.Key, what string, u *update, expected, version int64, updatedAt string) action {
	return action{item: u.nextVersion(&s.cfg.Table, k, expected, version, updatedAt), onFail: s.staleOrGone(k, what)}
}

// versionConflict counts a version conflict and is its 412: the item is at
// version current, not the one the client named or the request read.
func (s *Server) versionConflict(current int64) *Problem {
	s.metrics.VersionConflicts.Inc()
	return versionMismatch(current)
}

// getItem reads one item with a strongly consistent GetItem; nil when absent.
func (s *Server) getItem(ctx context.Context, k aggregates.Key) (map[string]ddbtypes.AttributeValue, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.cfg.Table, Key: keyAV(k), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, s.dynamoError("GetItem", err)
	}
	return out.Item, nil
}

// changedSinceRead explains a failed version condition on item, which
// exists and is otherwise as the change needs it: 412 when the client named
// a version (expected > 0), else the item changed since the request read
// it: read again.
func (s *Server) changedSinceRead(item map[string]ddbtypes.AttributeValue, expected int64) (*Problem, bool, error) {
	if expected > 0 {
		v, _ := intAttr(item, attrVersion)
		return s.versionConflict(v), false, nil
	}
	return nil, true, nil
}

// itemLayout is the layout the directory's versioned items (tenant,
// branch, account profile) share: the key, the entityType, string
// attributes, each held by a field of the value, and the version. Each
// item type declares its layout once (tenantLayout, branchLayout,
// profileLayout) and both encodes and decodes with it.
type itemLayout struct {
	key     aggregates.Key
	entity  string
	strings map[string]*string // attribute name → field
	version *int64
}

// encode is the item of l's value.
func (l itemLayout) encode() map[string]ddbtypes.AttributeValue {
	item := keyAV(l.key)
	item[attrEntityType] = strAV(l.entity)
	for attr, f := range l.strings {
		item[attr] = strAV(*f)
	}
	item[attrVersion] = intAV(*l.version)
	return item
}

// decode sets l's value's fields from item (zero where an attribute is
// missing or of another type).
func (l itemLayout) decode(item map[string]ddbtypes.AttributeValue) {
	for attr, f := range l.strings {
		*f, _ = stringAttr(item, attr)
	}
	*l.version, _ = intAttr(item, attrVersion)
}
