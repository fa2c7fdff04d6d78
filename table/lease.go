package table

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// This file is the lease item's layout (aggregates.LeaseKey): which poller
// reads a shard. The poller takes, renews, hands over and releases leases
// (processor/poller/store.go, with the conditions on leaseCounter that make
// them safe); ledgerctl lag shows their owners (ReadStreamState). Under its
// key it holds
//
//	entityType     LEASE
//	shardId        S
//	leaseOwner     S, the poller holding it; absent when free
//	leaseCounter   N, +1 per take, renewal and release
//	pendingOwner   S, a poller that asked for it
//	leaseExpiry    S, RFC 3339, informational: owner's clock + lease duration
//	updatedAt      S, RFC 3339

// Attribute names of the lease item besides the keys, entityType, updatedAt
// and shardId.
const (
	AttrLeaseOwner   = "leaseOwner"
	AttrLeaseCounter = "leaseCounter"
	AttrLeasePending = "pendingOwner"
	AttrLeaseExpiry  = "leaseExpiry"
)

// Lease is a lease item as read.
type Lease struct {
	Shard   string
	Owner   string // "" when free
	Counter int64
	Pending string // "" when nobody asked for it
	Exists  bool
}

// DecodeLease reads the lease item of shard (nil: it does not exist).
func DecodeLease(shard string, item map[string]types.AttributeValue) Lease {
	l := Lease{Shard: shard, Exists: item != nil}
	l.Owner, _ = String(item, AttrLeaseOwner)
	l.Pending, _ = String(item, AttrLeasePending)
	l.Counter, _ = Int64(item, AttrLeaseCounter)
	return l
}
