package writer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
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
	by, p := authorOf(r)
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
			branchState, p, err := s.activeBranch(ctx, tenant, branch)
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
			// Its periods, decided once: the branch's calendar and the
			// tenant's period types in force (dircache.go).
			if p, err := branchState.stamp(&t); p != nil || err != nil {
				return nil, response{}, p, err
			}
			resp := versionedResponse(http.StatusCreated, t, t.Version)
			resp.location = transactionLocation(tenant, branch, t.ID)
			marking = !branchState.marked
			ch, err := s.transactionCreate(aggregates.TransactionKey(tenant, branch, aggregates.DateOf(created), t.ID), t, by, marking)
			if err != nil {
				return nil, response{}, nil, err
			}
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
// with its version as the ETag, or 404 naming what (for a tombstone too).
func getVersioned[T any](s *Server, w http.ResponseWriter, r *http.Request, k aggregates.Key, what string, decode func(map[string]ddbtypes.AttributeValue) T) {
	item, err := s.getItem(r.Context(), k)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if item = live(item); item == nil {
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
	ifm, key, body, ok := s.patchRequest(w, r, p, patchIfMatch)
	if !ok {
		return
	}
	patch, p := decodePatch(body)
	if p != nil {
		p.write(w)
		return
	}
	by, p := authorOf(r)
	if p != nil {
		p.write(w)
		return
	}
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body), lookupFirst: true,
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			// Suspension means the same for changes as for creates.
			branchState, p, err := s.activeBranch(ctx, tenant, branch)
			if p != nil || err != nil {
				return nil, response{}, p, err
			}
			item, expected, p, err := s.readForPatch(ctx, k, ifm, "transaction")
			if item == nil {
				return nil, response{}, p, err
			}
			t := decodeTransaction(item)
			applyPatch(&t, patch)
			t.ID = id // the path's id is the sort key's
			t.Version++
			t.UpdatedAt = s.cfg.Now().UTC().Format(time.RFC3339Nano)
			// A change is stamped again, from its createdAt, with the
			// calendar and period types in force now: a calendar change
			// applies to the transactions written after it, and the
			// stream's MODIFY moves the amount between periods exactly.
			if p, err := branchState.stamp(&t); p != nil || err != nil {
				return nil, response{}, p, err
			}
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
			ch, err := s.transactionReplace(k, item, next, t, expected, by)
			if err != nil {
				return nil, response{}, nil, err
			}
			return ch, versionedResponse(http.StatusOK, t, t.Version), nil, nil
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
// If-Match version. The transaction is read first, whatever If-Match says:
// its history entry keeps it as it was deleted, and the delete is
// conditioned on the version read.
func (s *Server) deleteTransaction(w http.ResponseWriter, r *http.Request) {
	tenant, branch, id, k, p := transactionPath(r)
	ifm, key, ok := s.deleteRequest(w, r, p)
	if !ok {
		return
	}
	by, p := authorOf(r)
	if p != nil {
		p.write(w)
		return
	}
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, nil),
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			if _, p, err := s.activeBranch(ctx, tenant, branch); p != nil || err != nil {
				return nil, response{}, p, err
			}
			item, p, err := s.getForChange(ctx, k, 0, "transaction")
			if item == nil {
				return nil, response{}, p, err
			}
			read, _ := intAttr(item, attrVersion)
			expected, p := s.versionFor(ifm, read)
			if p != nil {
				return nil, response{}, p, nil
			}
			t := decodeTransaction(item)
			t.ID = id // the path's id is the sort key's
			// Tombstones only once every reader knows them (the flag).
			f, err := s.flags.get(ctx)
			if err != nil {
				return nil, response{}, nil, err
			}
			ch, err := s.transactionDelete(k, item, t, read, expected > 0, f.Tombstones(), by)
			if err != nil {
				return nil, response{}, nil, err
			}
			return ch, response{status: http.StatusNoContent}, nil, nil
		},
	})
}

// listQuery is a validated listing request.
type listQuery struct {
	from, to       *aggregates.Date // UTC dates: the sort key's
	bizFrom, bizTo *aggregates.Date // business dates
	typ, category  string
	limit          int
	cursor         string
	canonicalQuery string // the filters, to bind cursors to
}

var listParams = map[string]bool{"from": true, "to": true, "businessDateFrom": true, "businessDateTo": true,
	"type": true, "category": true, "limit": true, "cursor": true}

// A transaction of business date D has a UTC date from D−1 to D+2, in
// every calendar: business day D starts when the local clock first reads D
// at or after its start (00:00–23:59), and local clocks since 1970 are
// UTC−12 to UTC+14, so it starts at or after D−1 10:00 UTC; it ends when
// day D+1 (or, where the zone skipped D+1, D+2: only a jump of a whole day
// east, to an offset of +12 or more, skips a date) starts, at the latest
// (D+1 23:59) + 12 h < D+2 12:00 UTC. A listing by business date reads the
// sort keys of that wider UTC range and keeps the transactions whose
// businessDate is in range (a FilterExpression), and those stored without
// a stamp whose UTC date is (they count there; checked here, as a
// FilterExpression cannot name a key attribute).
const (
	businessDateUTCBefore = 1 // days before a business date its UTC dates start
	businessDateUTCAfter  = 2 // days after it they end
)

func parseListQuery(r *http.Request) (listQuery, *Problem) {
	q := r.URL.Query()
	if p := singleParams(q, listParams); p != nil {
		return listQuery{}, p
	}
	lq := listQuery{limit: DefaultListLimit}
	for _, f := range []struct {
		name string
		dst  **aggregates.Date
	}{{"from", &lq.from}, {"to", &lq.to}, {"businessDateFrom", &lq.bizFrom}, {"businessDateTo", &lq.bizTo}} {
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
	if lq.bizFrom != nil && lq.bizTo != nil && lq.bizTo.String() < lq.bizFrom.String() {
		return listQuery{}, fieldProblem("businessDateTo", "before businessDateFrom")
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
		var p *Problem
		if lq.limit, p = pageLimit(v, DefaultListLimit, MaxListLimit); p != nil {
			return listQuery{}, p
		}
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
	if lq.bizFrom != nil {
		canon.Set("businessDateFrom", lq.bizFrom.String())
	}
	if lq.bizTo != nil {
		canon.Set("businessDateTo", lq.bizTo.String())
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
	// The UTC dates read: from and to, and around a business-date range
	// its widening; both given, their intersection.
	lo, hi := utcRange(lq)
	if lo != "" && hi != "" && hi < lo {
		writeJSON(w, http.StatusOK, ListPage{Items: []Transaction{}}) // no UTC date can hold one
		return
	}
	// A day's sort keys are "YYYY-MM-DD#…": all sort after "YYYY-MM-DD"
	// and before "YYYY-MM-DD$" ('$' follows '#').
	switch {
	case lo != "" && hi != "":
		cond += " AND #sk BETWEEN :lo AND :hi"
	case lo != "":
		cond += " AND #sk >= :lo"
	case hi != "":
		cond += " AND #sk <= :hi"
	}
	if lo != "" {
		names["#sk"], values[":lo"] = attrSK, strAV(lo)
	}
	if hi != "" {
		names["#sk"], values[":hi"] = attrSK, strAV(hi+"$")
	}
	in := &dynamodb.QueryInput{
		TableName: &s.cfg.Table, KeyConditionExpression: &cond,
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
		ScanIndexForward: aws.Bool(false), Limit: aws.Int32(int32(lq.limit + 1)),
	}
	// Tombstones (deleted transactions) are never listed: dropped by the
	// filter, so pages may be short as with any filter, and the cursor and
	// the page bound (maxListPages) work as for the other filters.
	names["#del"] = aggregates.AttrDeletedAt
	filters := []string{"attribute_not_exists(#del)"}
	if lq.typ != "" {
		names["#type"], values[":type"] = fieldType, strAV(lq.typ)
		filters = append(filters, "#type = :type")
	}
	if lq.category != "" {
		names["#cat"], values[":cat"] = fieldCategory, strAV(lq.category)
		filters = append(filters, "#cat = :cat")
	}
	if lq.bizFrom != nil || lq.bizTo != nil {
		// Stamped transactions of the range, and every unstamped one
		// (inBusinessRange keeps those of its UTC dates).
		names["#bd"] = aggregates.AttrBusinessDate
		in := ""
		switch {
		case lq.bizFrom != nil && lq.bizTo != nil:
			in = "#bd BETWEEN :bdlo AND :bdhi"
		case lq.bizFrom != nil:
			in = "#bd >= :bdlo"
		default:
			in = "#bd <= :bdhi"
		}
		if lq.bizFrom != nil {
			values[":bdlo"] = strAV(lq.bizFrom.String())
		}
		if lq.bizTo != nil {
			values[":bdhi"] = strAV(lq.bizTo.String())
		}
		filters = append(filters, "("+in+" OR attribute_not_exists(#bd))")
	}
	in.FilterExpression = aws.String(strings.Join(filters, " AND "))
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
			lastSK, _ = stringAttr(item, attrSK)
			t := decodeTransaction(item)
			if !lq.inBusinessRange(t) {
				continue
			}
			page.Items = append(page.Items, t)
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

// utcRange is the range of UTC dates (sort key dates) a listing reads, ""
// for no bound: from and to, intersected with the UTC dates a business-date
// range's transactions can have.
func utcRange(lq listQuery) (lo, hi string) {
	if lq.from != nil {
		lo = lq.from.String()
	}
	if lq.to != nil {
		hi = lq.to.String()
	}
	if lq.bizFrom != nil {
		if d := clampDate(lq.bizFrom.AddDays(-businessDateUTCBefore)); lo == "" || d > lo {
			lo = d
		}
	}
	if lq.bizTo != nil {
		if d := clampDate(lq.bizTo.AddDays(businessDateUTCAfter)); hi == "" || d < hi {
			hi = d
		}
	}
	return lo, hi
}

// clampDate formats d, kept within years 0000–9999 (a sort key's).
func clampDate(d aggregates.Date) string {
	switch {
	case d.Year < 0:
		return "0000-01-01"
	case d.Year > 9999:
		return "9999-12-31"
	}
	return d.String()
}

// inBusinessRange reports whether t, read by a listing, is in its
// business-date range: its businessDate (for a transaction stored without
// a stamp, its UTC date: decodeTransaction) within businessDateFrom and
// businessDateTo.
func (lq listQuery) inBusinessRange(t Transaction) bool {
	return (lq.bizFrom == nil || t.BusinessDate >= lq.bizFrom.String()) && (lq.bizTo == nil || t.BusinessDate <= lq.bizTo.String())
}
