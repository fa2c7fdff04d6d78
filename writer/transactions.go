package writer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/oklog/ulid/v2"

	"github.com/ledger-dev/ledger/aggregates"
)

// maxListPages bounds the Query pages one listing reads when filters drop
// items.
const maxListPages = 5

// branchPath validates the tenant and branch of the path.
func branchPath(r *http.Request) (tenant, branch string, p *Problem) {
	tenant, branch = r.PathValue("tenant"), r.PathValue("branch")
	if err := aggregates.ValidateID(tenant); err != nil {
		return "", "", fieldProblem("tenant", err.Error())
	}
	if err := aggregates.ValidateID(branch); err != nil {
		return "", "", fieldProblem("branch", err.Error())
	}
	return tenant, branch, nil
}

// transactionPath validates the path of one transaction and returns its
// key. The id is a ULID whose time is the transaction's createdAt, which
// gives the sort key's date: a transaction is addressed by its id alone.
func transactionPath(r *http.Request) (tenant, branch, id string, k aggregates.Key, p *Problem) {
	if tenant, branch, p = branchPath(r); p != nil {
		return "", "", "", aggregates.Key{}, p
	}
	id = r.PathValue("id")
	u, err := ulid.ParseStrict(id)
	if err != nil || u.String() != id {
		return "", "", "", aggregates.Key{}, fieldProblem("id", "not a transaction id (26 characters, uppercase ULID)")
	}
	date := aggregates.DateOf(ulid.Time(u.Time()))
	return tenant, branch, id, aggregates.TransactionKey(tenant, branch, date, id), nil
}

func transactionLocation(tenant, branch, id string) string {
	return "/v1/tenants/" + tenant + "/branches/" + branch + "/transactions/" + id
}

// writesAllowed consults the flags: nil when mutations may proceed, else
// the 503 to answer. It fails closed.
func (s *Server) writesAllowed(ctx context.Context) *Problem {
	f, err := s.flags.get(ctx)
	switch {
	case err != nil:
		s.metrics.WritesRefused.WithLabelValues("flags_unavailable").Inc()
		return problem(http.StatusServiceUnavailable, ProblemFlagsUnavailable,
			"the flags cannot be read, so writes are refused (fail closed); reads are served").withHeader("Retry-After", "5")
	case !f.Exists:
		s.metrics.WritesRefused.WithLabelValues("disabled").Inc()
		return problem(http.StatusServiceUnavailable, ProblemWritesDisabled,
			"writes are disabled: the flags item is missing (ledgerctl flags set writesEnabled=true creates it); reads are served").withHeader("Retry-After", "60")
	case !f.WritesEnabled():
		s.metrics.WritesRefused.WithLabelValues("disabled").Inc()
		return problem(http.StatusServiceUnavailable, ProblemWritesDisabled,
			"writes are disabled for maintenance (flag writesEnabled is false); reads are served").withHeader("Retry-After", "60")
	}
	return nil
}

// createTransaction serves POST …/transactions.
func (s *Server) createTransaction(w http.ResponseWriter, r *http.Request) {
	tenant, branch, p := branchPath(r)
	key, body, ok := s.mutationRequest(w, r, p,
		"creating a transaction needs an Idempotency-Key header (a fresh UUID per transaction, reused on retries)")
	if !ok {
		return
	}
	req, p := decodeCreate(body)
	if p != nil {
		p.write(w)
		return
	}
	branchKey := aggregates.BranchKey(tenant, branch)
	marking := false // this attempt sets the branch's hasTransactions marker
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body),
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			// The tenant's and branch's status from the cache (dircache.go):
			// the create names no item it shares with other creates, except
			// the branch's on its first transaction. An attempt that tried
			// to set the marker and did not commit on a conflict (another
			// transaction held the branch: most likely a create setting it)
			// waits for the marker.
			if marking {
				if err := s.awaitMarked(ctx, tenant, branch); err != nil {
					return nil, response{}, nil, err
				}
			}
			marked, p, err := s.activeBranch(ctx, tenant, branch)
			if p != nil || err != nil {
				return nil, response{}, p, err
			}
			now := s.cfg.Now().UTC()
			created := req.CreatedAt
			if created.IsZero() {
				created = now.Truncate(time.Millisecond)
			}
			u, err := ulid.New(ulid.Timestamp(created), s.cfg.Entropy)
			if err != nil {
				return nil, response{}, nil, fmt.Errorf("new transaction id: %w", err)
			}
			t := Transaction{
				ID: u.String(), Tenant: tenant, Branch: branch, Type: string(req.Type),
				Amount: aggregates.FormatAmount(req.Amount), Category: req.Category, CostCenter: req.CostCenter,
				PaymentMethod: req.PaymentMethod, Description: req.Description,
				CreatedAt: created.Format(time.RFC3339Nano), UpdatedAt: now.Format(time.RFC3339Nano), Version: 1,
			}
			item, err := transactionItem(aggregates.TransactionKey(tenant, branch, aggregates.DateOf(created), t.ID), t)
			if err != nil {
				return nil, response{}, nil, fmt.Errorf("create transaction: %w", err)
			}
			resp := versionedResponse(http.StatusCreated, t, t.Version)
			resp.location = transactionLocation(tenant, branch, t.ID)
			marking = !marked
			ch := s.transactionCreate(item, tenant, branch, marking)
			// A failed condition (the branch gone or suspended, or an id
			// collision) means no create holds the marker: prepare reads
			// the branch again instead of waiting for the marker.
			for i := range ch.actions {
				if f := ch.actions[i].onFail; f != nil {
					ch.actions[i].onFail = func(ctx context.Context, old map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
						marking = false
						return f(ctx, old)
					}
				}
			}
			return ch, resp, nil, nil
		},
		committed: func() {
			if marking {
				s.forget(branchKey) // read again: marked from now on
			}
		},
	})
}

// getVersioned serves a strongly consistent read of the item at k: decoded,
// with its version as the ETag, or 404 naming what.
func getVersioned[T any](s *Server, w http.ResponseWriter, r *http.Request, k aggregates.Key, what string, decode func(map[string]ddbtypes.AttributeValue) T) {
	item, err := s.getItem(r.Context(), k)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if item == nil {
		notFoundOf(what).write(w)
		return
	}
	v, _ := intAttr(item, attrVersion)
	versionedResponse(http.StatusOK, decode(item), v).write(w, false)
}

// getTransaction serves GET …/transactions/{id}, strongly consistent.
func (s *Server) getTransaction(w http.ResponseWriter, r *http.Request) {
	_, _, _, k, p := transactionPath(r)
	if p != nil {
		p.write(w)
		return
	}
	getVersioned(s, w, r, k, "transaction", decodeTransaction)
}

// patchTransaction serves PATCH …/transactions/{id}: a JSON merge patch of
// the mutable fields, on condition that If-Match names the current version.
func (s *Server) patchTransaction(w http.ResponseWriter, r *http.Request) {
	tenant, branch, id, k, p := transactionPath(r)
	expected, key, body, ok := s.patchRequest(w, r, p, patchIfMatch)
	if !ok {
		return
	}
	patch, p := decodePatch(body)
	if p != nil {
		p.write(w)
		return
	}
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body), lookupFirst: true,
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			// Suspension means the same for changes as for creates.
			if _, p, err := s.activeBranch(ctx, tenant, branch); p != nil || err != nil {
				return nil, response{}, p, err
			}
			item, p, err := s.getForChange(ctx, k, expected, "transaction")
			if item == nil {
				return nil, response{}, p, err
			}
			t := decodeTransaction(item)
			applyPatch(&t, patch)
			t.ID = id // the path's id is the sort key's
			t.Version++
			t.UpdatedAt = s.cfg.Now().UTC().Format(time.RFC3339Nano)
			next, err := transactionItem(k, t)
			var inv *aggregates.InvalidError
			if errors.As(err, &inv) {
				// The stored item is not a valid transaction (it was not
				// written by the writer) and the patch does not fix it.
				return nil, response{}, fieldProblem(inv.Field, "the stored transaction is invalid here and the patch must set it: "+inv.Detail), nil
			}
			if err != nil {
				return nil, response{}, nil, err
			}
			return s.transactionReplace(k, next, expected), versionedResponse(http.StatusOK, t, t.Version), nil, nil
		},
	})
}

func applyPatch(t *Transaction, p patchRequest) {
	if p.Type != nil {
		t.Type = string(*p.Type)
	}
	if p.Amount != nil {
		t.Amount = aggregates.FormatAmount(*p.Amount)
	}
	if p.Category != nil {
		t.Category = *p.Category
	}
	for _, f := range []struct {
		o   optional
		dst *string
	}{{p.CostCenter, &t.CostCenter}, {p.PaymentMethod, &t.PaymentMethod}, {p.Description, &t.Description}} {
		if f.o.Set {
			*f.dst = f.o.Value
		}
	}
}

// deleteTransaction serves DELETE …/transactions/{id}, with an optional
// If-Match version.
func (s *Server) deleteTransaction(w http.ResponseWriter, r *http.Request) {
	tenant, branch, _, k, p := transactionPath(r)
	expected, key, ok := s.deleteRequest(w, r, p)
	if !ok {
		return
	}
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, nil),
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			if _, p, err := s.activeBranch(ctx, tenant, branch); p != nil || err != nil {
				return nil, response{}, p, err
			}
			return s.transactionDelete(k, expected), response{status: http.StatusNoContent}, nil, nil
		},
	})
}

// listQuery is a validated listing request.
type listQuery struct {
	from, to       *aggregates.Date
	typ, category  string
	limit          int
	cursor         string
	canonicalQuery string // the filters, to bind cursors to
}

var listParams = map[string]bool{"from": true, "to": true, "type": true, "category": true, "limit": true, "cursor": true}

func parseListQuery(r *http.Request) (listQuery, *Problem) {
	q := r.URL.Query()
	if p := singleParams(q, listParams); p != nil {
		return listQuery{}, p
	}
	lq := listQuery{limit: DefaultListLimit}
	for _, f := range []struct {
		name string
		dst  **aggregates.Date
	}{{"from", &lq.from}, {"to", &lq.to}} {
		if v := q.Get(f.name); v != "" {
			d, err := aggregates.ParseDate(v)
			if err != nil {
				return listQuery{}, fieldProblem(f.name, err.Error())
			}
			*f.dst = &d
		}
	}
	if lq.from != nil && lq.to != nil && lq.to.String() < lq.from.String() {
		return listQuery{}, fieldProblem("to", "before from")
	}
	if v := q.Get("type"); v != "" {
		if v != string(aggregates.Income) && v != string(aggregates.Expense) {
			return listQuery{}, fieldProblem("type", "want INCOME or EXPENSE")
		}
		lq.typ = v
	}
	if v, ok := q["category"]; ok {
		if err := aggregates.ValidateName(v[0]); err != nil {
			return listQuery{}, fieldProblem("category", err.Error())
		}
		lq.category = v[0]
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return listQuery{}, fieldProblem("limit", fmt.Sprintf("want a whole number from 1 to %d", MaxListLimit))
		}
		lq.limit = min(n, MaxListLimit)
	}
	lq.cursor = q.Get("cursor")
	canon := url.Values{}
	for name, v := range map[string]string{"type": lq.typ, "category": lq.category} {
		if v != "" {
			canon.Set(name, v)
		}
	}
	if lq.from != nil {
		canon.Set("from", lq.from.String())
	}
	if lq.to != nil {
		canon.Set("to", lq.to.String())
	}
	lq.canonicalQuery = canon.Encode()
	return lq, nil
}

// ListPage is a page of a listing: up to limit items and, when there may be
// more, the cursor to the next page.
type ListPage struct {
	Items      []Transaction `json:"items"`
	NextCursor string        `json:"nextCursor,omitempty"`
}

// listTransactions serves GET …/transactions: newest first, filtered, paged
// with a signed cursor.
func (s *Server) listTransactions(w http.ResponseWriter, r *http.Request) {
	tenant, branch, p := branchPath(r)
	if p != nil {
		p.write(w)
		return
	}
	lq, p := parseListQuery(r)
	if p != nil {
		p.write(w)
		return
	}
	pk := aggregates.TransactionPK(tenant, branch)
	names := map[string]string{"#pk": attrPK}
	values := map[string]ddbtypes.AttributeValue{":pk": strAV(pk)}
	cond := "#pk = :pk"
	// A day's sort keys are "YYYY-MM-DD#…": all sort after "YYYY-MM-DD"
	// and before "YYYY-MM-DD$" ('$' follows '#').
	switch {
	case lq.from != nil && lq.to != nil:
		cond += " AND #sk BETWEEN :lo AND :hi"
	case lq.from != nil:
		cond += " AND #sk >= :lo"
	case lq.to != nil:
		cond += " AND #sk <= :hi"
	}
	if lq.from != nil {
		names["#sk"], values[":lo"] = attrSK, strAV(lq.from.String())
	}
	if lq.to != nil {
		names["#sk"], values[":hi"] = attrSK, strAV(lq.to.String()+"$")
	}
	in := &dynamodb.QueryInput{
		TableName: &s.cfg.Table, KeyConditionExpression: &cond,
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		ScanIndexForward: aws.Bool(false), Limit: aws.Int32(int32(lq.limit + 1)),
	}
	var filters []string
	if lq.typ != "" {
		names["#type"], values[":type"] = fieldType, strAV(lq.typ)
		filters = append(filters, "#type = :type")
	}
	if lq.category != "" {
		names["#cat"], values[":cat"] = fieldCategory, strAV(lq.category)
		filters = append(filters, "#cat = :cat")
	}
	if len(filters) > 0 {
		in.FilterExpression = aws.String(strings.Join(filters, " AND "))
	}
	if lq.cursor != "" {
		cur, err := s.cursors.decode(lq.cursor, tenant, branch, lq.canonicalQuery)
		if err != nil {
			p := problem(http.StatusBadRequest, ProblemInvalidCursor, "the cursor is not one this listing issued (altered, expired key, or other filters)")
			p.Field = "cursor"
			p.write(w)
			return
		}
		in.ExclusiveStartKey = keyAV(aggregates.Key{PK: pk, SK: cur.SK})
	}

	page := ListPage{Items: []Transaction{}}
	var lastSK string
pages:
	for n := 1; ; n++ {
		out, err := s.api.Query(r.Context(), in)
		if err != nil {
			s.fail(w, r, s.dynamoError("Query", err))
			return
		}
		for _, item := range out.Items {
			if len(page.Items) == lq.limit {
				page.NextCursor = lastSK // there is more
				break pages
			}
			page.Items = append(page.Items, decodeTransaction(item))
			lastSK, _ = stringAttr(item, attrSK)
		}
		switch {
		case out.LastEvaluatedKey == nil:
			break pages
		case len(page.Items) == lq.limit:
			page.NextCursor = lastSK
			break pages
		case n == maxListPages:
			// Filters dropped most of what was read: hand back where the
			// reading stopped, even if this page is short.
			page.NextCursor, _ = stringAttr(out.LastEvaluatedKey, attrSK)
			break pages
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	if page.NextCursor != "" {
		page.NextCursor = s.cursors.encode(cursor{Tenant: tenant, Branch: branch, Query: lq.canonicalQuery, SK: page.NextCursor})
	}
	writeJSON(w, http.StatusOK, page)
}
