package writer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
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

// Attribute names of directory items (status is attrStatus, as on
// idempotency records: never the same item).
const (
	attrName            = "name"
	attrDocument        = "document"
	attrHasTransactions = "hasTransactions"
	attrAccount         = "accountId"
	attrFirstName       = "firstName"
	attrLastName        = "lastName"
	attrRole            = "role"
	attrEmail           = "email"
	attrEmailCount      = "emailCount"
	attrIsPrimary       = "isPrimary"
	attrIsVerified      = "isVerified"
	attrVerifiedAt      = "verifiedAt"
	attrGSI1PK          = table.AttrGSI1PK
	attrGSI1SK          = table.AttrGSI1SK
	attrGSI2PK          = table.AttrGSI2PK
	attrGSI2SK          = table.AttrGSI2SK
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

// owner is the owner item of a unique value ("Uniqueness across the whole
// table" above): the item at key names the holder of value, an account or
// a branch of tenant.
type owner struct {
	key                aggregates.Key
	entity             string // its entityType
	valueAttr, value   string
	tenant             string
	holderAttr, holder string
}

// ownerPut takes the value for its holder: only if no one holds it.
func (s *Server) ownerPut(o owner, now string) ddbtypes.TransactWriteItem {
	item := keyAV(o.key)
	item[attrEntityType] = strAV(o.entity)
	item[o.valueAttr] = strAV(o.value)
	item[attrTenant] = strAV(o.tenant)
	item[o.holderAttr] = strAV(o.holder)
	item[attrCreatedAt] = strAV(now)
	return s.putNew(item)
}

// ownerDelete frees the value, on condition that its holder holds it.
func (s *Server) ownerDelete(o owner) ddbtypes.TransactWriteItem {
	return ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{
		TableName: &s.cfg.Table, Key: keyAV(o.key),
		ConditionExpression:       aws.String("#t = :t AND #h = :h"),
		ExpressionAttributeNames:  map[string]string{"#t": attrTenant, "#h": o.holderAttr},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":t": strAV(o.tenant), ":h": strAV(o.holder)},
	}}
}

// branchMark is the branch's part of its first transaction's create (the
// only time a create writes to a shared item): an Update setting the
// hasTransactions marker, on condition that the branch is active (so it
// exists: a branch deleted meanwhile cancels the create).
func (s *Server) branchMark(tenant, branch string) ddbtypes.TransactWriteItem {
	return ddbtypes.TransactWriteItem{Update: &ddbtypes.Update{
		TableName: &s.cfg.Table, Key: keyAV(aggregates.BranchKey(tenant, branch)),
		UpdateExpression:          aws.String("SET #has = :true"),
		ConditionExpression:       aws.String("#st = :active"),
		ExpressionAttributeNames:  map[string]string{"#st": attrStatus, "#has": attrHasTransactions},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":active": strAV(string(aggregates.StatusActive)), ":true": boolAV(true)},
	}}
}

// current returns old, the item as a failed condition returned it, or, when
// DynamoDB returned nothing, the item read again (nil when absent).
func (s *Server) current(ctx context.Context, k aggregates.Key, old map[string]ddbtypes.AttributeValue) (map[string]ddbtypes.AttributeValue, error) {
	if old != nil {
		return old, nil
	}
	return s.getItem(ctx, k)
}

// branchNotActive explains a create whose branchMark failed: the branch is
// gone (404) or suspended (409), or active again (retry).
func (s *Server) branchNotActive(ctx context.Context, tenant, branch string, old map[string]ddbtypes.AttributeValue) (p *Problem, retry bool, err error) {
	item, err := s.current(ctx, aggregates.BranchKey(tenant, branch), old)
	if err != nil {
		return nil, false, err
	}
	if item == nil {
		return notFoundOf("branch " + branch + " of tenant " + tenant + " (create it first: POST /v1/tenants/" + tenant + "/branches)"), false, nil
	}
	if st, _ := stringAttr(item, attrStatus); st != string(aggregates.StatusActive) {
		return branchSuspended(branch), false, nil
	}
	return nil, true, nil
}

// notFoundOf is a 404 naming what is missing.
func notFoundOf(what string) *Problem {
	return problem(http.StatusNotFound, ProblemNotFound, "no such "+what)
}

// staleOrGone explains a failed version condition on the item at k from
// the item as it is: 404 when it is gone, else 412 with its version.
func (s *Server) staleOrGone(ctx context.Context, k aggregates.Key, old map[string]ddbtypes.AttributeValue, what string) (*Problem, bool, error) {
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

// versionConflict counts a version conflict and is its 412: the item is at
// version current, not the one the client named or the request read.
func (s *Server) versionConflict(current int64) *Problem {
	s.metrics.VersionConflicts.Inc()
	return versionMismatch(current)
}

// getForChange reads the item at k that a change applies to, strongly
// consistent: nil and the 404 naming what when there is none, nil and the
// 412 when the client named a version (expected > 0) and the item is at
// another.
func (s *Server) getForChange(ctx context.Context, k aggregates.Key, expected int64, what string) (map[string]ddbtypes.AttributeValue, *Problem, error) {
	item, err := s.getItem(ctx, k)
	if err != nil {
		return nil, nil, err
	}
	if item == nil {
		return nil, notFoundOf(what), nil
	}
	if v, _ := intAttr(item, attrVersion); expected > 0 && v != expected {
		return nil, s.versionConflict(v), nil
	}
	return item, nil, nil
}

// requireIfMatch reads the If-Match a PATCH must carry: 428 without it, 400
// for "*".
func requireIfMatch(r *http.Request) (int64, *Problem) {
	expected, present, wildcard, p := parseIfMatch(r)
	switch {
	case p != nil:
		return 0, p
	case !present:
		p = problem(http.StatusPreconditionRequired, ProblemPreconditionRequired, `this change needs If-Match with the version to change, as the ETag gives it: If-Match: "3"`)
		p.Field = "If-Match"
		return 0, p
	case wildcard:
		return 0, fieldProblem("If-Match", `give a version, not "*"`)
	}
	return expected, nil
}

// mutationRequest runs the checks every mutating request with a body shares
// and returns its Idempotency-Key and body: the key (required when
// keyRequired), the content type and the body. On a problem it has
// answered and ok is false.
func (s *Server) mutationRequest(w http.ResponseWriter, r *http.Request, keyRequired bool, what string) (key string, body []byte, ok bool) {
	key, p := parseIdempotencyKey(r)
	if p == nil && key == "" && keyRequired {
		p = problem(http.StatusBadRequest, ProblemIdempotencyKeyRequired, "creating "+what+" needs an Idempotency-Key header (a fresh UUID per request, reused on retries)")
		p.Field = "Idempotency-Key"
	}
	if p == nil {
		p = requireJSON(r, r.Method == http.MethodPatch)
	}
	if p == nil {
		body, p = readBody(w, r, s.cfg.MaxBodyBytes)
	}
	if p != nil {
		p.write(w)
		return "", nil, false
	}
	return key, body, true
}

// patchRequest runs the checks a PATCH of a directory item shares after its
// path: If-Match (required, requireIfMatch), then mutationRequest's. On a
// problem it has answered and ok is false.
func (s *Server) patchRequest(w http.ResponseWriter, r *http.Request) (expected int64, key string, body []byte, ok bool) {
	expected, p := requireIfMatch(r)
	if p != nil {
		p.write(w)
		return 0, "", nil, false
	}
	key, body, ok = s.mutationRequest(w, r, false, "")
	return expected, key, body, ok
}

// decodePatchFields decodes the body of a PATCH that sets fields: an object
// of some of them (decodeObject), none null (they cannot be removed), at
// least one.
func decodePatchFields(body []byte, fields ...string) (map[string]json.RawMessage, *Problem) {
	allowed := make(map[string]bool, len(fields))
	for _, f := range fields {
		allowed[f] = true
	}
	m, p := decodeObject(body, allowed)
	if p == nil {
		p = notNull(m, fields...)
	}
	if p == nil && len(m) == 0 {
		p = problem(http.StatusBadRequest, ProblemInvalidJSON, "the patch changes nothing: name at least one field")
	}
	return m, p
}

// deleteRequest runs the checks a DELETE shares after its path: If-Match
// (optional: expected is 0 without it or for "*", any version) and the
// Idempotency-Key. On a problem it has answered and ok is false.
func (s *Server) deleteRequest(w http.ResponseWriter, r *http.Request) (expected int64, key string, ok bool) {
	expected, _, _, p := parseIfMatch(r)
	if p == nil {
		key, p = parseIdempotencyKey(r)
	}
	if p != nil {
		p.write(w)
		return 0, "", false
	}
	return expected, key, true
}

// Body field parsers of the directory.

func parseIDField(field string, raw json.RawMessage) (string, *Problem) {
	v, p := parseString(field, raw)
	if p != nil {
		return "", p
	}
	if err := aggregates.ValidateID(v); err != nil {
		return "", fieldProblem(field, err.Error())
	}
	return v, nil
}

func parseDisplayName(field string, raw json.RawMessage) (string, *Problem) {
	v, p := parseString(field, raw)
	if p != nil {
		return "", p
	}
	if err := aggregates.ValidateDisplayName(v); err != nil {
		return "", fieldProblem(field, err.Error())
	}
	return v, nil
}

func parseChecked(field string, raw json.RawMessage, check func(string) error) (string, *Problem) {
	v, p := parseString(field, raw)
	if p != nil {
		return "", p
	}
	if err := check(v); err != nil {
		return "", fieldProblem(field, err.Error())
	}
	return v, nil
}

func parseEmail(field string, raw json.RawMessage) (string, *Problem) {
	v, p := parseString(field, raw)
	if p != nil {
		return "", p
	}
	return checkEmail(field, v)
}

func checkEmail(field, v string) (string, *Problem) {
	c, err := aggregates.CanonicalEmail(v)
	if err != nil {
		return "", fieldProblem(field, err.Error())
	}
	return c, nil
}

func parseDocument(field string, raw json.RawMessage) (string, *Problem) {
	v, p := parseString(field, raw)
	if p != nil {
		return "", p
	}
	return checkDocument(field, v)
}

func checkDocument(field, v string) (string, *Problem) {
	c, err := aggregates.CanonicalDocument(v)
	if err != nil {
		return "", fieldProblem(field, err.Error())
	}
	return c, nil
}

// emailNotProven is the 403 of a request that would mark address verified
// with a token that does not prove it (Claims.ProvesEmail).
func emailNotProven(field, address string) *Problem {
	p := problem(http.StatusForbidden, ProblemEmailNotProven, "the token does not prove the address "+address+
		": only an admin-scoped token, or one whose email claim is this address with email_verified true, may mark it verified; add it unverified instead")
	p.Field = field
	return p
}

// documentNotProven is the 403 of a request that would claim document with
// a token that does not prove it (Claims.ProvesDocument).
func documentNotProven(document string) *Problem {
	p := problem(http.StatusForbidden, ProblemDocumentNotProven, "the token does not prove the document number "+document+
		": only an admin-scoped token, or one whose documents claim holds it, may claim it for a branch")
	p.Field = "document"
	return p
}

func parseBool(field string, raw json.RawMessage) (bool, *Problem) {
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fieldProblem(field, "must be true or false")
}

// required checks that the members named are present and not null.
func required(m map[string]json.RawMessage, fields ...string) *Problem {
	for _, f := range fields {
		if raw, ok := m[f]; !ok || isNull(raw) {
			return fieldProblem(f, "required")
		}
	}
	return nil
}

// notNull refuses null for the members named (they cannot be removed).
func notNull(m map[string]json.RawMessage, fields ...string) *Problem {
	for _, f := range fields {
		if raw, ok := m[f]; ok && isNull(raw) {
			return fieldProblem(f, "cannot be removed (null)")
		}
	}
	return nil
}

// listLimit reads the limit query parameter (1–MaxListLimit, default
// DefaultListLimit; larger values are capped).
func listLimit(v string) (int, *Problem) {
	if v == "" {
		return DefaultListLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fieldProblem("limit", fmt.Sprintf("want a whole number from 1 to %d", MaxListLimit))
	}
	return min(n, MaxListLimit), nil
}

// directoryList reads the limit and cursor of a directory listing (tenant
// "" and kind name the listing the cursor is bound to): the exclusive start
// sort key, "" for the first page.
func (s *Server) directoryList(r *http.Request, tenant, kind string) (limit int, startSK string, p *Problem) {
	q := r.URL.Query()
	if p := singleParams(q, map[string]bool{"limit": true, "cursor": true}); p != nil {
		return 0, "", p
	}
	if limit, p = listLimit(q.Get("limit")); p != nil {
		return 0, "", p
	}
	startSK, p = s.cursorSK(q.Get("cursor"), tenant, "", kind)
	return limit, startSK, p
}

// cursorSK verifies cursor c ("" for the first page) for the listing
// (tenant, branch, query) and returns the sort key to start after.
func (s *Server) cursorSK(c, tenant, branch, query string) (string, *Problem) {
	if c == "" {
		return "", nil
	}
	cur, err := s.cursors.decode(c, tenant, branch, query)
	if err != nil {
		p := problem(http.StatusBadRequest, ProblemInvalidCursor, "the cursor is not one this listing issued (altered, signed with another key, or for another listing)")
		p.Field = "cursor"
		return "", p
	}
	return cur.SK, nil
}

func (s *Server) directoryCursor(tenant, kind, sk string) string {
	if sk == "" {
		return ""
	}
	return s.cursors.encode(cursor{Tenant: tenant, Query: kind, SK: sk})
}

// partitionQuery is a strongly consistent Query of the partition pk in key
// order, after the sort key startSK ("" from the first item).
func (s *Server) partitionQuery(pk, startSK string) *dynamodb.QueryInput {
	in := &dynamodb.QueryInput{
		TableName: &s.cfg.Table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": strAV(pk)},
	}
	if startSK != "" {
		in.ExclusiveStartKey = keyAV(aggregates.Key{PK: pk, SK: startSK})
	}
	return in
}

// directoryPage reads a page of a directory listing of tenants or branches
// with in (its Limit is set here): up to limit items, decoded, and when
// there are more the cursor to the next page, after the last item's id
// (tenant and kind name the listing, as for directoryList).
func directoryPage[T any](ctx context.Context, s *Server, in *dynamodb.QueryInput, limit int, tenant, kind string, decode func(map[string]ddbtypes.AttributeValue) T) (items []T, nextCursor string, err error) {
	in.Limit = aws.Int32(int32(limit + 1))
	read, more, err := s.queryUpTo(ctx, in, limit)
	if err != nil {
		return nil, "", err
	}
	items = make([]T, 0, len(read))
	for _, item := range read {
		items = append(items, decode(item))
	}
	if more {
		id, _ := stringAttr(read[len(read)-1], attrID)
		nextCursor = s.directoryCursor(tenant, kind, id)
	}
	return items, nextCursor, nil
}

// queryUpTo reads up to limit items with in (whose Limit should be
// limit+1), following pages, and says whether there are more.
func (s *Server) queryUpTo(ctx context.Context, in *dynamodb.QueryInput, limit int) ([]map[string]ddbtypes.AttributeValue, bool, error) {
	var items []map[string]ddbtypes.AttributeValue
	for {
		out, err := s.api.Query(ctx, in)
		if err != nil {
			return nil, false, s.dynamoError("Query", err)
		}
		items = append(items, out.Items...)
		if len(items) > limit {
			return items[:limit], true, nil
		}
		if out.LastEvaluatedKey == nil {
			return items, false, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

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
