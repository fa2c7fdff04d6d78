package writer

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// Listings of the directory: the limit and signed cursor of a page, and the
// strongly consistent Query of a partition read page by page.

// listLimit reads the limit query parameter of a directory listing
// (pageLimit with DefaultListLimit and MaxListLimit).
func listLimit(v string) (int, *Problem) { return pageLimit(v, DefaultListLimit, MaxListLimit) }

// pageLimit reads a page's limit query parameter v: def when absent, a
// whole number from 1 up (larger than max is capped at max). Anything else,
// 0 among them, is 400 invalid-field naming the range and the default:
// the documents declare minimum 1, so a client generated from them refuses
// 0 itself, and a page of nothing is never what a caller means.
func pageLimit(v string, def, max int) (int, *Problem) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fieldProblem("limit", fmt.Sprintf("limit=%s is not a page size: give a whole number from 1 to %d (larger values are capped at %d), or leave limit out for %d",
			truncate(v, 32), max, max, def))
	}
	return min(n, max), nil
}

// directoryList reads the limit and cursor of a directory listing (tenant
// "" and kind name the listing the cursor is bound to): the exclusive start
// sort key, "" for the first page. A problem its path already has
// (pathProblem) comes first. On a problem it has answered and ok is false.
func (s *Server) directoryList(w http.ResponseWriter, r *http.Request, pathProblem *Problem, tenant, kind string) (limit int, startSK string, ok bool) {
	q := r.URL.Query()
	p := pathProblem
	if p == nil {
		p = singleParams(q, map[string]bool{"limit": true, "cursor": true})
	}
	if p == nil {
		limit, p = listLimit(q.Get("limit"))
	}
	if p == nil {
		startSK, p = s.cursorSK(q.Get("cursor"), tenant, "", kind)
	}
	if p != nil {
		p.write(w)
		return 0, "", false
	}
	return limit, startSK, true
}

// tenantListing reads the request of a listing of one of the tenant's
// partitions, kind ("accounts", "branches"): the path's tenant, the page's
// limit and the strongly consistent Query of the partition pk(tenant) after
// the cursor. On a problem it has answered and ok is false.
func (s *Server) tenantListing(w http.ResponseWriter, r *http.Request, kind string, pk func(tenant string) string) (tenant string, limit int, in *dynamodb.QueryInput, ok bool) {
	tenant, p := tenantPath(r)
	limit, start, ok := s.directoryList(w, r, p, tenant, kind)
	if !ok {
		return "", 0, nil, false
	}
	return tenant, limit, s.partitionQuery(pk(tenant), start), true
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
