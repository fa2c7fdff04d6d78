package writer

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// Owner items, the uniqueness guard ("Uniqueness across the whole table"
// in directory.go): the email owner (aggregates.EmailOwnerKey) names the
// account holding a verified address, the document owner
// (aggregates.DocumentOwnerKey) the branch holding a document number. The
// item is put, on attribute_not_exists, in the transaction that takes the
// value and deleted, on condition that it names the holder, in the
// transaction that frees it.

// owner is the owner item of a unique value: the item at key names the
// holder of value, an account or a branch of tenant.
type owner struct {
	key                aggregates.Key
	entity             string // its entityType
	valueAttr, value   string
	tenant             string
	holderKind         string // "account" or "branch", for errors
	holderAttr, holder string
}

// emailOwner is the owner item of address, held by the account.
func emailOwner(tenant, account, address string) owner {
	return owner{key: aggregates.EmailOwnerKey(address), entity: aggregates.EntityEmailOwner,
		valueAttr: attrEmail, value: address, tenant: tenant, holderKind: "account", holderAttr: attrAccount, holder: account}
}

// documentOwner is the owner item of document, held by the branch.
func documentOwner(tenant, branch, document string) owner {
	return owner{key: aggregates.DocumentOwnerKey(document), entity: aggregates.EntityDocumentOwner,
		valueAttr: attrDocument, value: document, tenant: tenant, holderKind: "branch", holderAttr: attrBranch, holder: branch}
}

// ownerPut takes the value for its holder, only if no one holds it: taken
// answers when someone does.
func (s *Server) ownerPut(o owner, now string, taken *Problem) action {
	item := keyAV(o.key)
	item[attrEntityType] = strAV(o.entity)
	item[o.valueAttr] = strAV(o.value)
	item[attrTenant] = strAV(o.tenant)
	item[o.holderAttr] = strAV(o.holder)
	item[attrCreatedAt] = strAV(now)
	return action{item: s.putNew(item), onFail: refuse(taken)}
}

// ownerDelete frees the value, on condition that its holder holds it. The
// holder held it when the request read it, and the change is conditional
// on the holder's version read: its failing is a broken invariant (an
// error).
func (s *Server) ownerDelete(o owner) action {
	return action{
		item: ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{
			TableName: &s.cfg.Table, Key: keyAV(o.key),
			ConditionExpression:       aws.String("#t = :t AND #h = :h"),
			ExpressionAttributeNames:  map[string]string{"#t": attrTenant, "#h": o.holderAttr},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":t": strAV(o.tenant), ":h": strAV(o.holder)},
		}},
		onFail: broken("%s %s/%s: the owner item of %s does not name it", o.holderKind, o.tenant, o.holder, o.value),
	}
}
