package writer

import (
	"context"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// The directory: tenants, branches and accounts, and the integrity rules
// DynamoDB enforces for them. Every rule is a condition evaluated by
// DynamoDB inside the write that could break it, never a read followed by a
// write; reads only choose what to write and explain refusals.
//
// Uniqueness across the whole table. A normalised email address is owned by
// at most one account, a branch document number by at most one branch: each
// owned value has an owner item (EMAIL#{email} / UNIQUE, BRANCHDOC#{document}
// / UNIQUE) put with attribute_not_exists(PK) in the same TransactWriteItems
// as the item that takes the value, and deleted, on condition that it names
// that owner, in the same TransactWriteItems as the change that frees it
// (removing the address, changing the document, deleting the branch or
// account). Of concurrent requests for one value, DynamoDB lets exactly one
// transaction put the owner item; the others are cancelled with
// ConditionalCheckFailed on it and answer 409 having written nothing.
//
// Optimistic locking. Every tenant, branch and account item has a version,
// the ETag. A change is conditional on the version the client names in
// If-Match (412 otherwise), or, where If-Match is optional, on the version
// the request read. Every change to an account's emails increments the
// account's version in the same transaction, so an account's version
// identifies its whole item collection (profile and emails): a request that
// read the collection at version v and writes on condition version = v acts
// on exactly what it read.
//
// Transactions need an active tenant and branch. Creating, changing or
// deleting a transaction first checks that its tenant and its branch exist
// and are active, from a cache of their status (dircache.go: read at most
// once per DirectoryTTL, so that writes of one tenant share no item on
// AWS): a missing tenant or branch is 404, a suspended one 409, and a
// suspension is honoured within DirectoryTTL of its commit on every writer
// (at once in the writer that made it): a suspended tenant cannot rewrite
// its ledger. Reports stay readable.
//
// Deleting a branch. A branch's first transaction sets the branch's
// hasTransactions marker in the transaction's own TransactWriteItems (an
// Update, conditional on the branch being active). The delete is
// conditional on attribute_not_exists(hasTransactions). Both are conditions
// on the one branch item inside transactions, so they serialise: either the
// delete commits first and the create is cancelled (no branch), or the
// create commits first and the delete is refused (409
// branch-has-transactions). A later create, which has seen the marker,
// writes nothing to the branch: the marker is never removed, so a branch
// that has it can never be deleted. No create commits without the marker
// being set, by itself or before it, so no transaction is ever left under
// a deleted branch. A branch that has had transactions also has reports;
// suspending it is the way to stop it.
//
// A branch's currency. The same marker freezes it: a currency change is
// conditional on attribute_not_exists(hasTransactions), and the first
// create's marker Update on the currency the create read, so whichever
// commits first refuses the other (currency.go has the argument).

// A suspended tenant's directory. A tenant an admin suspended cannot
// change its own directory either: with its own token (not admin-scoped),
// creating, changing or deleting a branch (and so taking or freeing a
// document number), an account or an account's email addresses (and so
// reserving a verified address) is 409 tenant-suspended, whatever the
// request would change (directoryWrite). An admin's token still changes
// it. The status is read from the cache the transaction path uses
// (dircache.go), so the refusal starts within DirectoryTTL of the
// suspension on every writer (at once in the writer that made it), and the
// writes name no item they did not name before: a tenant's directory
// writes do not contend on its tenant item.
//
// Suspensions stay with whoever made them. A branch's suspension records
// who made it (suspendedBy: admin or tenant, aggregates.SuspensionBy): a
// tenant suspends and re-activates its own branch, but only an admin lifts
// an admin's suspension (403 suspended-by-admin). The check is made on the
// branch as read, and the change is conditional on that version, so a
// suspension committed meanwhile fails the change (412).

// directoryWrite is m, a change of tenant m.tenant's directory, refused
// with 409 tenant-suspended before anything is prepared when the request's
// token is not admin-scoped and the tenant is suspended. A tenant that does
// not exist is left to the change (404).
func (s *Server) directoryWrite(r *http.Request, m mutation) mutation {
	if claimsOf(r).Admin() {
		return m
	}
	prepare := m.prepare
	m.prepare = func(ctx context.Context) (*change, response, *Problem, error) {
		t, err := s.status(ctx, aggregates.TenantKey(m.tenant), false)
		if err != nil {
			return nil, response{}, nil, err
		}
		if t.exists && !t.active {
			return nil, response{}, problem(http.StatusConflict, ProblemTenantSuspended, "tenant "+m.tenant+
				" is suspended: its own tokens cannot change its branches, accounts or email addresses; an admin-scoped token can"), nil
		}
		return prepare(ctx)
	}
	return m
}

// Body field parsers of the directory.

// holderLookup is an admin lookup of the item holding a unique value, in
// any tenant: the value is the request's one query parameter; the index
// entries under its key name the candidates, and a strongly consistent
// read of each confirms that it still holds the value (the index lags the
// table).
type holderLookup struct {
	param string                                   // the query parameter
	check func(field, v string) (string, *Problem) // validates and normalises its value
	what  string                                   // what the 404 says is missing
	// index and indexPK are the index and its partition key attribute;
	// entryPK is the partition key of the value's entries.
	index, indexPK string
	entryPK        func(v string) string
	// confirm reads the candidate an index entry names and answers it if
	// it still holds v.
	confirm func(ctx context.Context, hit map[string]ddbtypes.AttributeValue, v string) (resp response, ok bool, err error)
}

// lookupHolder serves l: the first confirmed candidate (of at most 10
// entries), else 404.
func (s *Server) lookupHolder(w http.ResponseWriter, r *http.Request, l holderLookup) {
	q := r.URL.Query()
	if p := singleParams(q, map[string]bool{l.param: true}); p != nil {
		p.write(w)
		return
	}
	v, p := l.check(l.param, q.Get(l.param))
	if p != nil {
		p.write(w)
		return
	}
	out, err := s.api.Query(r.Context(), &dynamodb.QueryInput{
		TableName: &s.cfg.Table, IndexName: aws.String(l.index),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": l.indexPK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": strAV(l.entryPK(v))},
		Limit:                     aws.Int32(10),
	})
	if err != nil {
		s.fail(w, r, s.dynamoError("Query", err))
		return
	}
	for _, hit := range out.Items {
		resp, ok, err := l.confirm(r.Context(), hit, v)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if ok {
			resp.write(w, false)
			return
		}
	}
	notFoundOf(l.what).write(w)
}
