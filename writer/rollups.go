package writer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// Tenant roll-ups (issue 24; docs/design.md "Tenant roll-ups", "Reads";
// docs/api.md "Tenant roll-ups"): the reports of all of a tenant's
// branches together, one per currency, each the sum of
// aggregates.RollupLanes partials the stream consumers write. The writer
// reads them as it reads branch reports: eventually consistent, the
// parked deltas not added, a tenant-wide token (the path's tenant, or
// admin; a token names no branch, so every token that may act for the
// tenant may read them, and none of another tenant may).

const (
	// DefaultRollupRange and MaxRollupRange bound the periods one page of
	// a roll-up range carries (the limit parameter).
	DefaultRollupRange = 100
	MaxRollupRange     = 100
	// rollupReadConcurrency bounds the lane Queries a request runs at once.
	rollupReadConcurrency = 8
	// rollupLaneQueries bounds the Queries one lane of a range page makes
	// (each skips the rest of a period's entry items it ran into), so a
	// page's reads are bounded whatever the partials hold; a lane cut short
	// ends the page at its last period read.
	rollupLaneQueries = 8
	// batchGetAttempts bounds the BatchGetItem calls of one read (the first
	// and the retries of its UnprocessedKeys).
	batchGetAttempts = 6
)

// RollupTotals are a roll-up's figures as the API shows them: its
// currency ("-" for the branches without one), period, totals, net
// (income − expense) and the number of branches that contributed.
type RollupTotals struct {
	Tenant     string `json:"tenant"`
	Currency   string `json:"currency"`
	PeriodType string `json:"periodType"`
	Period     string `json:"period"`
	Totals
	Net      string `json:"net"`
	Branches int64  `json:"branches"`
	// UpdatedAt is the latest commit to any of the roll-up's partials.
	UpdatedAt string `json:"updatedAt,omitempty"`
}

// Rollup is one roll-up with one page of its breakdowns: the names of the
// page (in dimension and name order, entries whose figures are all zero
// left out) and, while more names remain, the cursor to the next page.
type Rollup struct {
	RollupTotals
	ByCategory      map[string]Totals `json:"byCategory"`
	ByCostCenter    map[string]Totals `json:"byCostCenter"`
	ByPaymentMethod map[string]Totals `json:"byPaymentMethod"`
	NextCursor      string            `json:"nextCursor,omitempty"`
}

// RollupRange is the answer to a roll-up range request: the roll-ups that
// exist in the range, in period order, and the cursor to the next page
// while more remain.
type RollupRange struct {
	Items      []RollupTotals `json:"items"`
	NextCursor string         `json:"nextCursor,omitempty"`
}

// rollupCurrency resolves the currency a roll-up request reads: the
// currency parameter ("-" for branches without one; an invalid code is
// 422 invalid-field), or when it is absent the one currency of the
// tenant's branches (cur "" when the tenant has no branch). Branches in
// more than one currency make it 422 currency-required, naming them.
func (s *Server) rollupCurrency(ctx context.Context, tenant string, q url.Values) (cur string, p *Problem, err error) {
	if vs, ok := q["currency"]; ok {
		v := vs[0]
		if err := aggregates.ValidateRollupCurrency(v); err != nil {
			return "", unacceptableField("currency", err.Error()+" (or "+aggregates.NoCurrency+" for the branches without a currency)"), nil
		}
		return v, nil, nil
	}
	curs, err := s.branchCurrencies(ctx, tenant)
	if err != nil {
		return "", nil, err
	}
	switch len(curs) {
	case 0:
		return "", nil, nil
	case 1:
		return curs[0], nil, nil
	}
	p = problem(http.StatusUnprocessableEntity, ProblemCurrencyRequired,
		fmt.Sprintf("the branches of tenant %s are in %d currencies (%s): roll-ups are per currency, so give currency= one of them (%s for the branches without a currency)",
			tenant, len(curs), strings.Join(curs, ", "), aggregates.NoCurrency))
	p.Field = "currency"
	return "", p, nil
}

// branchCurrencies lists the currencies of the tenant's branches
// (table.BranchCurrencies, eventually consistent): a failed Query is a
// backend error, a damaged branch currency a server error naming it.
func (s *Server) branchCurrencies(ctx context.Context, tenant string) ([]string, error) {
	curs, err := table.BranchCurrencies(ctx, s.api, s.cfg.Table, tenant, false)
	var damaged *table.DamagedCurrencyError
	if err != nil && !errors.As(err, &damaged) {
		return nil, s.dynamoError("Query", err)
	}
	return curs, err
}

// rollupRequest is what both roll-up reads share once checked: the
// tenant, the currency read ("" when the tenant has no branch), and the
// page (limit, and where the cursor left off).
type rollupRequest struct {
	tenant, cur string
	limit       int
	after       string
	query       string // what the cursor is bound to
}

// rollupRead checks a roll-up read's request in order: the tenant path,
// that each of params is given at most once, the read's own parameters
// (own returns their canonical form, which keys the cursor, or a
// problem), the limit (def, max), the currency (rollupCurrency), then the
// cursor (reportPaging over kind:currency:own). ok is false when it has
// answered the request itself, with a problem or a failure.
func (s *Server) rollupRead(w http.ResponseWriter, r *http.Request, kind string, params []string, def, max int,
	own func(url.Values) (string, *Problem)) (rq rollupRequest, ok bool) {
	tenant, p := tenantPath(r)
	q := r.URL.Query()
	if p == nil {
		allowed := make(map[string]bool, len(params))
		for _, n := range params {
			allowed[n] = true
		}
		p = singleParams(q, allowed)
	}
	var key string
	if p == nil {
		key, p = own(q)
	}
	if p == nil {
		_, p = pageLimit(q.Get("limit"), def, max)
	}
	if p != nil {
		p.write(w)
		return rollupRequest{}, false
	}
	cur, p, err := s.rollupCurrency(r.Context(), tenant, q)
	if err != nil {
		s.fail(w, r, err)
		return rollupRequest{}, false
	}
	if p == nil {
		rq = rollupRequest{tenant: tenant, cur: cur, query: kind + ":" + cur + ":" + key}
		rq.limit, rq.after, p = s.reportPaging(r, tenant, "", rq.query, def, max)
	}
	if p != nil {
		p.write(w)
		return rollupRequest{}, false
	}
	return rq, true
}

// getRollup serves GET /v1/tenants/{t}/reports/{period}/{value}
// [?currency=&limit=&cursor=]: one BatchGetItem of the RollupLanes
// partials, and for each partial with a full inline map one Query of its
// entry items after the cursor; summed. A page carries the totals and the
// next limit names (dimension, then name, order) of the summed
// breakdowns; nextCursor while more remain. 404 when no partial exists.
func (s *Server) getRollup(w http.ResponseWriter, r *http.Request) {
	var period aggregates.Period
	rq, ok := s.rollupRead(w, r, "rollup", []string{"currency", "limit", "cursor"}, DefaultReportEntries, MaxReportEntries,
		func(url.Values) (string, *Problem) {
			pt, err := aggregates.ParsePeriodType(r.PathValue("period"))
			if err != nil {
				return "", fieldProblem("period", err.Error())
			}
			var p *Problem
			period, p = parsePeriod("value", pt, r.PathValue("value"))
			return period.String(), p
		})
	if !ok {
		return
	}
	tenant, cur, limit, after, query := rq.tenant, rq.cur, rq.limit, rq.after, rq.query
	if cur == "" {
		problem(http.StatusNotFound, ProblemNotFound, "no roll-up for this period: tenant "+tenant+" has no branches").write(w)
		return
	}
	parts, err := s.readPartials(r.Context(), aggregates.RollupKeys(tenant, cur, period))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(parts) == 0 {
		problem(http.StatusNotFound, ProblemNotFound, "no roll-up for this period and currency: no transaction of it has been rolled up yet").write(w)
		return
	}
	out, err := s.sumRollup(r.Context(), parts, after, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if out.NextCursor != "" {
		out.NextCursor = s.cursors.encode(cursor{Tenant: tenant, Query: query, SK: out.NextCursor})
	}
	if t, err := time.Parse(time.RFC3339Nano, out.UpdatedAt); err == nil {
		w.Header().Set("Last-Modified", t.UTC().Format(http.TimeFormat))
	}
	writeJSON(w, http.StatusOK, out)
}

// readPartials reads the partial items of keys (one period's lanes) with
// one BatchGetItem, retrying its UnprocessedKeys with backoff; absent
// partials are left out.
func (s *Server) readPartials(ctx context.Context, keys []aggregates.RollupKey) ([]*table.StoredPartial, error) {
	byKey := map[aggregates.Key]aggregates.RollupKey{}
	req := make([]map[string]ddbtypes.AttributeValue, 0, len(keys))
	for _, k := range keys {
		byKey[k.Key()] = k
		req = append(req, keyAV(k.Key()))
	}
	var parts []*table.StoredPartial
	pending := map[string]ddbtypes.KeysAndAttributes{s.cfg.Table: {Keys: req}}
	for attempt := 0; ; attempt++ {
		out, err := s.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: pending})
		if err != nil {
			return nil, s.dynamoError("BatchGetItem", err)
		}
		for _, item := range out.Responses[s.cfg.Table] {
			k, ok := byKey[table.KeyOf(item)]
			if !ok {
				return nil, fmt.Errorf("read roll-up: BatchGetItem answered an item not asked for: %s", table.KeyOf(item))
			}
			parts = append(parts, &table.StoredPartial{Key: k, Item: item})
		}
		if len(out.UnprocessedKeys[s.cfg.Table].Keys) == 0 {
			break
		}
		if attempt+1 == batchGetAttempts {
			s.metrics.DynamoDBErrors.WithLabelValues("BatchGetItem", "throttle").Inc()
			return nil, &backendError{op: "BatchGetItem", class: "throttle",
				err: fmt.Errorf("%d of %d roll-up partials still unprocessed after %d attempts", len(out.UnprocessedKeys[s.cfg.Table].Keys), len(keys), batchGetAttempts)}
		}
		pending = out.UnprocessedKeys
		// Backoff with full jitter, 25 ms doubling, as the AWS guidance for
		// BatchGetItem's unprocessed keys asks.
		d := time.Duration(rand.Int64N(int64(25*time.Millisecond) << attempt))
		select {
		case <-ctx.Done():
			return nil, s.dynamoError("BatchGetItem", ctx.Err())
		case <-time.After(d):
		}
	}
	slices.SortFunc(parts, func(a, b *table.StoredPartial) int { return a.Key.Lane - b.Key.Lane })
	return parts, nil
}

// sumRollup sums the partials of one roll-up: their totals and branch
// counts, and one page of their breakdowns, the limit names after after (a
// name key "{code}#{name}", "" from the first) in key order. Inline names
// are in the items; the entry items of each partial with a full inline map
// are read after after, limit+1 of them at most. The page's names have
// every partial's share: a partial whose entries were cut short read
// limit+1 names, all of them candidates, so the first limit candidates
// sort no later than its last name read, and it holds no unread name
// before that. out.NextCursor is the name key to resume after (unsigned)
// while names remain.
func (s *Server) sumRollup(ctx context.Context, parts []*table.StoredPartial, after string, limit int) (Rollup, error) {
	var full []*table.StoredPartial
	for _, sp := range parts {
		if sp.FullMap() {
			full = append(full, sp)
		}
	}
	err := forEach(ctx, full, func(ctx context.Context, sp *table.StoredPartial) error {
		items, err := s.partialEntries(ctx, sp.Key, after, limit+1)
		sp.Entries = items // each goroutine its own partial
		return err
	})
	if err != nil {
		return Rollup{}, err
	}
	sum := &aggregates.Report{}
	var branches int64
	var updated string
	for _, sp := range parts {
		r, b, problems := sp.Decode()
		if len(problems) > 0 {
			return Rollup{}, fmt.Errorf("roll-up partial %s is malformed (ledgerctl reconcile --repair mends it): %s", sp.Key, strings.Join(problems, "; "))
		}
		sum.Totals = sum.Totals.Add(r.Totals)
		for _, d := range aggregates.Dimensions {
			for name, t := range r.Breakdowns[d] {
				if d.Code()+"#"+name > after {
					if sum.Breakdowns[d] == nil {
						sum.Breakdowns[d] = map[string]aggregates.Totals{}
					}
					sum.Breakdowns[d][name] = sum.Breakdowns[d][name].Add(t)
				}
			}
		}
		branches += b
		if u, _ := stringAttr(sp.Item, attrUpdatedAt); u > updated {
			updated = u
		}
	}
	var names []string // the candidates, in key order
	for _, d := range aggregates.Dimensions {
		for name := range sum.Breakdowns[d] {
			names = append(names, d.Code()+"#"+name)
		}
	}
	slices.Sort(names)
	out := Rollup{RollupTotals: rollupTotals(parts[0].Key, sum.Totals, branches, updated)}
	maps := [3]*map[string]Totals{&out.ByCategory, &out.ByCostCenter, &out.ByPaymentMethod}
	for _, d := range aggregates.Dimensions {
		*maps[d] = map[string]Totals{}
	}
	if len(names) > limit {
		names = names[:limit]
		out.NextCursor = names[limit-1]
	}
	for _, nk := range names {
		code, name, _ := strings.Cut(nk, "#")
		d, _ := aggregates.ParseDimensionCode(code)
		if t := sum.Breakdowns[d][name]; !t.IsZero() {
			(*maps[d])[name] = totalsJSON(t)
		}
	}
	return out, nil
}

// partialEntries reads up to n entry items of partial k whose name key is
// after after, in key order.
func (s *Server) partialEntries(ctx context.Context, k aggregates.RollupKey, after string, n int) (items []map[string]ddbtypes.AttributeValue, err error) {
	key := k.Key()
	in := &dynamodb.QueryInput{
		TableName:                 &s.cfg.Table,
		KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :p)"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#sk": attrSK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": strAV(key.PK), ":p": strAV(k.EntriesPrefix())},
		Limit:                     aws.Int32(int32(n)),
	}
	if after != "" {
		in.ExclusiveStartKey = keyAV(aggregates.Key{PK: key.PK, SK: k.EntriesPrefix() + after})
	}
	for {
		out, err := s.api.Query(ctx, in)
		if err != nil {
			return nil, s.dynamoError("Query", err)
		}
		items = append(items, out.Items...)
		if len(items) >= n || len(out.LastEvaluatedKey) == 0 {
			return items[:min(n, len(items))], nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
		in.Limit = aws.Int32(int32(n - len(items)))
	}
}

func rollupTotals(k aggregates.RollupKey, t aggregates.Totals, branches int64, updated string) RollupTotals {
	return RollupTotals{
		Tenant: k.Tenant, Currency: k.Currency, PeriodType: string(k.Period.Type), Period: k.Period.Value,
		Totals: totalsJSON(t), Net: aggregates.FormatAmount(t.Income.Sub(t.Expense)), Branches: branches, UpdatedAt: updated,
	}
}

// forEach runs f on every item with at most rollupReadConcurrency at once
// and returns the first error (the others' context is cancelled).
func forEach[T any](ctx context.Context, items []T, f func(context.Context, T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, rollupReadConcurrency)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, it := range items {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(ctx, it); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// rollupRange serves GET /v1/tenants/{t}/reports?period=&from=&to=
// [&currency=&limit=&cursor=]: RollupLanes Queries (rollupReadConcurrency
// at a time), one per partial partition, over SK BETWEEN the range (after
// the cursor's period), summed per period. A lane reads up to limit+1
// partial items; the page holds the first limit periods no lane's read
// stopped before.
func (s *Server) rollupRange(w http.ResponseWriter, r *http.Request) {
	var from, to aggregates.Period
	rq, ok := s.rollupRead(w, r, "rollups", []string{"period", "from", "to", "currency", "limit", "cursor"}, DefaultRollupRange, MaxRollupRange,
		func(q url.Values) (string, *Problem) {
			var p *Problem
			from, to, p = rangeQuery(q)
			return from.String() + ".." + to.Value, p
		})
	if !ok {
		return
	}
	tenant, cur, limit, startSK, query := rq.tenant, rq.cur, rq.limit, rq.after, rq.query
	out := RollupRange{Items: []RollupTotals{}}
	if cur == "" {
		writeJSON(w, http.StatusOK, out)
		return
	}
	lo := from.String()
	if startSK != "" {
		lo = startSK + "$" // past the cursor's period and its entry items
	}
	hi := to.String() + "$"
	type lane struct {
		heads []map[string]ddbtypes.AttributeValue
		cut   bool // stopped before the range's end
	}
	lanes := make([]lane, aggregates.RollupLanes)
	idx := make([]int, aggregates.RollupLanes)
	for i := range idx {
		idx[i] = i
	}
	err := forEach(r.Context(), idx, func(ctx context.Context, k int) error {
		heads, cut, err := s.laneHeads(ctx, aggregates.RollupPK(tenant, cur, k), lo, hi, limit+1)
		lanes[k] = lane{heads, cut}
		return err
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	bound := "" // the smallest last period of a lane cut short
	for _, l := range lanes {
		if l.cut && len(l.heads) > 0 {
			if sk, _ := stringAttr(l.heads[len(l.heads)-1], attrSK); bound == "" || sk < bound {
				bound = sk
			}
		}
	}
	parts := map[string][]*table.StoredPartial{}
	for k, l := range lanes {
		for _, item := range l.heads {
			sk, _ := stringAttr(item, attrSK)
			if bound != "" && sk > bound {
				continue
			}
			period, err := aggregates.ParsePeriodKey(sk)
			if err != nil || period.Type != from.Type {
				s.fail(w, r, fmt.Errorf("roll-up partial %s: not a %s period", table.KeyOf(item), from.Type))
				return
			}
			parts[sk] = append(parts[sk], &table.StoredPartial{Key: aggregates.RollupKey{Tenant: tenant, Currency: cur, Lane: k, Period: period}, Item: item})
		}
	}
	sks := slices.Sorted(func(yield func(string) bool) {
		for sk := range parts {
			if !yield(sk) {
				return
			}
		}
	})
	for i, sk := range sks {
		if i == limit {
			break
		}
		sum := aggregates.Totals{}
		var branches int64
		var updated string
		for _, sp := range parts[sk] {
			head := &table.StoredPartial{Key: sp.Key, Item: sp.Item}
			rep, b, problems := head.Decode()
			if len(problems) > 0 {
				s.fail(w, r, fmt.Errorf("roll-up partial %s is malformed (ledgerctl reconcile --repair mends it): %s", sp.Key, strings.Join(problems, "; ")))
				return
			}
			sum = sum.Add(rep.Totals)
			branches += b
			if u, _ := stringAttr(sp.Item, attrUpdatedAt); u > updated {
				updated = u
			}
		}
		out.Items = append(out.Items, rollupTotals(parts[sk][0].Key, sum, branches, updated))
	}
	if n := len(out.Items); n > 0 && (len(sks) > limit || bound != "") {
		last := parts[sks[n-1]][0].Key.Period.String()
		out.NextCursor = s.cursors.encode(cursor{Tenant: tenant, Query: query, SK: last})
	}
	writeJSON(w, http.StatusOK, out)
}

// laneHeads reads the partial items of one lane partition pk with sort
// keys between lo and hi, in order, up to n of them; cut is true when it
// stopped before hi (at n items, or after rollupLaneQueries Queries). The
// Queries return the partials' entry items too (they sort right after
// their partial); a Query that ends among a period's entry items makes the
// next start past them.
func (s *Server) laneHeads(ctx context.Context, pk, lo, hi string, n int) (heads []map[string]ddbtypes.AttributeValue, cut bool, err error) {
	in := &dynamodb.QueryInput{
		TableName:                &s.cfg.Table,
		KeyConditionExpression:   aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi"),
		ExpressionAttributeNames: map[string]string{"#pk": attrPK, "#sk": attrSK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":pk": strAV(pk), ":lo": strAV(lo), ":hi": strAV(hi),
		},
		Limit: aws.Int32(reportQueryPage),
	}
	lastHead := "" // the last partial read: the entry items after it are its
	for range rollupLaneQueries {
		out, err := s.api.Query(ctx, in)
		if err != nil {
			return nil, false, s.dynamoError("Query", err)
		}
		lastIsEntry := false
		for _, item := range out.Items {
			sk, _ := stringAttr(item, attrSK)
			if strings.Count(sk, "#") != 1 { // an entry item: "{period}#{code}#{name}"
				lastIsEntry = true
				continue
			}
			lastHead, lastIsEntry = sk, false
			heads = append(heads, item)
			if len(heads) == n {
				return heads, true, nil
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return heads, false, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
		if lastIsEntry && lastHead != "" {
			in.ExclusiveStartKey = keyAV(aggregates.Key{PK: pk, SK: lastHead + "$"})
		}
	}
	return heads, true, nil
}
