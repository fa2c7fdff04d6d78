package writer

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// Reports are read, never written, by the writer: the stream consumers
// maintain them. They are eventually consistent with the transactions (by
// the stream's lag), so they are read with eventually consistent reads; each
// says how fresh it is with updatedAt, the time of the last commit to it
// (also sent as Last-Modified for a single report).

// maxRangePeriods bounds the periods one range request spans, per type:
// a year of days, about ten years of weeks, months and quarters, a hundred
// years.
var maxRangePeriods = map[aggregates.PeriodType]int{
	aggregates.Daily: 366, aggregates.Weekly: 530, aggregates.Monthly: 120, aggregates.Quarterly: 40, aggregates.Yearly: 100,
	aggregates.FiscalQuarter: 40, aggregates.FiscalYear: 100,
}

func parsePeriod(field string, t aggregates.PeriodType, v string) (aggregates.Period, *Problem) {
	p, err := aggregates.ParsePeriod(t, v)
	if err != nil {
		return aggregates.Period{}, fieldProblem(field, err.Error())
	}
	return p, nil
}

// Report responses are bounded (docs/api.md, "Reports"): a page holds at
// most the requested number of entry items (single report) or reports
// (range), and never more than about maxReportPageBytes of report data, far
// below API Gateway's and Lambda's 6 MB. A report item itself is bounded
// (at most 32 inline entries per dimension: table/report.go); its
// entry items are what pages.
const (
	// DefaultReportEntries and MaxReportEntries bound the entry items one
	// page of a single report carries (the limit parameter).
	DefaultReportEntries = 500
	MaxReportEntries     = 1000
	// DefaultReportRange and MaxReportRange bound the reports one page of a
	// range carries (the limit parameter).
	DefaultReportRange = 100
	MaxReportRange     = 366
	// maxReportPageBytes bounds the stored bytes of report data one page
	// reads (the JSON is of the same order).
	maxReportPageBytes = 1 << 20
	// reportQueryPage is the Limit of each Query a page makes.
	reportQueryPage = 200
)

// getReport serves GET …/reports/{period}/{value}[?limit=&cursor=]: the
// report's totals and inline entries, and its entry items in pages
// (nextCursor while more remain). Other parameters, or one given twice,
// are 400 as in every listing.
func (s *Server) getReport(w http.ResponseWriter, r *http.Request) {
	tenant, branch, p := branchPath(r)
	if p != nil {
		p.write(w)
		return
	}
	pt, err := aggregates.ParsePeriodType(r.PathValue("period"))
	if err != nil {
		fieldProblem("period", err.Error()).write(w)
		return
	}
	period, p := parsePeriod("value", pt, r.PathValue("value"))
	if p == nil { // as the listings do: an unknown or repeated parameter is refused, never ignored
		p = singleParams(r.URL.Query(), map[string]bool{"limit": true, "cursor": true})
	}
	if p != nil {
		p.write(w)
		return
	}
	limit, startSK, p := s.reportPaging(r, tenant, branch, "report:"+period.String(), DefaultReportEntries, MaxReportEntries)
	if p != nil {
		p.write(w)
		return
	}
	k := aggregates.ReportKey{Tenant: tenant, Branch: branch, Period: period}
	in := &dynamodb.QueryInput{
		TableName:                &s.cfg.Table,
		KeyConditionExpression:   aws.String("#pk = :pk AND begins_with(#sk, :p)"),
		ExpressionAttributeNames: map[string]string{"#pk": attrPK, "#sk": attrSK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":pk": strAV(k.Key().PK), ":p": strAV(k.Key().SK),
		},
	}
	pg, err := s.readReports(r.Context(), in, startSK, 1, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sr := pg.set[k]
	if startSK != "" {
		// A later page: the report item's totals, this page's entry items.
		out, err := s.api.GetItem(r.Context(), &dynamodb.GetItemInput{TableName: &s.cfg.Table, Key: keyAV(k.Key())})
		if err != nil {
			s.fail(w, r, s.dynamoError("GetItem", err))
			return
		}
		if sr == nil {
			sr = &table.StoredReport{Key: k}
		}
		if out.Item != nil {
			head := maps.Clone(out.Item)
			for _, d := range aggregates.Dimensions {
				delete(head, d.Attribute()) // its inline entries were on the first page
			}
			sr.Item = head
		}
	}
	if sr == nil || !sr.Exists() {
		problem(http.StatusNotFound, ProblemNotFound, "no report for this period: no transaction of it has been aggregated yet").write(w)
		return
	}
	rep, err := decodeReport(k, sr)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if c := pg.entriesCursor[k]; c != "" {
		rep.NextCursor = s.cursors.encode(cursor{Tenant: tenant, Branch: branch, Query: "report:" + period.String(), SK: c})
	}
	if t, err := time.Parse(time.RFC3339Nano, rep.UpdatedAt); err == nil {
		w.Header().Set("Last-Modified", t.UTC().Format(http.TimeFormat))
	}
	writeJSON(w, http.StatusOK, rep)
}

// reportPaging reads the limit (1–max, default def; larger is capped) and
// the cursor, bound to the listing named query, of a report request.
func (s *Server) reportPaging(r *http.Request, tenant, branch, query string, def, max int) (limit int, startSK string, p *Problem) {
	q := r.URL.Query()
	if limit, p = pageLimit(q.Get("limit"), def, max); p != nil {
		return 0, "", p
	}
	startSK, p = s.cursorSK(q.Get("cursor"), tenant, branch, query)
	return limit, startSK, p
}

// reportPage is what readReports read: the reports by key, those whose
// entry items did not all fit (with the sort key of the last one read), and
// where the next page starts ("" when the Query is exhausted).
type reportPage struct {
	set           table.ReportSet
	entriesCursor map[aggregates.ReportKey]string
	next          string
}

// readReports runs in (a Query of report items in key order) from after
// startSK, collecting at most maxReports reports and at most maxEntries
// entry items and maxReportPageBytes bytes. A report whose entry items do
// not fit keeps the ones read, gets an entries cursor, and the page ends
// after it: the next page starts past its remaining entry items.
func (s *Server) readReports(ctx context.Context, in *dynamodb.QueryInput, startSK string, maxReports, maxEntries int) (reportPage, error) {
	pg := reportPage{set: table.ReportSet{}, entriesCursor: map[aggregates.ReportKey]string{}}
	pk := in.ExpressionAttributeValues[":pk"]
	if startSK != "" {
		in.ExclusiveStartKey = map[string]ddbtypes.AttributeValue{attrPK: pk, attrSK: strAV(startSK)}
	}
	in.Limit = aws.Int32(reportQueryPage)
	reports, entries, bytes := 0, 0, 0
	var last string              // sort key of the last item taken
	var cur aggregates.ReportKey // the report being read
	for {
		out, err := s.api.Query(ctx, in)
		if err != nil {
			return pg, s.dynamoError("Query", err)
		}
		for _, item := range out.Items {
			sk, _ := stringAttr(item, attrSK)
			ref, err := aggregates.ParseReportItemKey(aggregates.Key{PK: pk.(*ddbtypes.AttributeValueMemberS).Value, SK: sk})
			if err != nil {
				return pg, err
			}
			size := table.ItemSize(item)
			switch {
			case ref.Kind == aggregates.ReportHeader && (reports == maxReports || (reports > 0 && bytes+size > maxReportPageBytes)):
				pg.next = last // the next page starts with this report
				return pg, nil
			case ref.Kind == aggregates.ReportHeader:
				reports++
			case ref.Kind == aggregates.ReportEntry && ref.Report != cur && pg.set[ref.Report] == nil && reports == maxReports:
				pg.next = last // entry items of a report past the page (its item is missing)
				return pg, nil
			case ref.Kind == aggregates.ReportEntry && (entries == maxEntries || bytes+size > maxReportPageBytes):
				pg.entriesCursor[ref.Report] = last
				pg.next = ref.Report.Key().SK + "$" // past the rest of its entry items
				return pg, nil
			case ref.Kind == aggregates.ReportEntry:
				entries++
			}
			if err := pg.set.Add(item); err != nil {
				return pg, err
			}
			cur, last = ref.Report, sk
			bytes += size
		}
		if len(out.LastEvaluatedKey) == 0 {
			return pg, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// ReportRange is the answer to a range request: the reports that exist in
// the range, in period order, and the cursor to the next page while more
// remain.
type ReportRange struct {
	Items      []Report `json:"items"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

// reportRange serves GET …/reports?period=&from=&to=[&limit=&cursor=]: one
// Query with BETWEEN on the sort key, from the first report item to the
// last one's entry items ("{to}#…" sorts before "{to}$"), in pages.
func (s *Server) reportRange(w http.ResponseWriter, r *http.Request) {
	tenant, branch, p := branchPath(r)
	if p != nil {
		p.write(w)
		return
	}
	q := r.URL.Query()
	if p := singleParams(q, map[string]bool{"period": true, "from": true, "to": true, "limit": true, "cursor": true}); p != nil {
		p.write(w)
		return
	}
	from, to, p := rangeQuery(q)
	if p != nil {
		p.write(w)
		return
	}
	query := "reports:" + from.String() + ".." + to.Value
	limit, startSK, p := s.reportPaging(r, tenant, branch, query, DefaultReportRange, MaxReportRange)
	if p != nil {
		p.write(w)
		return
	}
	in := &dynamodb.QueryInput{
		TableName:                &s.cfg.Table,
		KeyConditionExpression:   aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi"),
		ExpressionAttributeNames: map[string]string{"#pk": attrPK, "#sk": attrSK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":pk": strAV(aggregates.ReportPK(tenant, branch)), ":lo": strAV(from.String()), ":hi": strAV(to.String() + "$"),
		},
	}
	pg, err := s.readReports(r.Context(), in, startSK, limit, MaxReportEntries)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := ReportRange{Items: []Report{}}
	for _, k := range pg.set.Keys() {
		if !pg.set[k].Exists() {
			continue
		}
		rep, err := decodeReport(k, pg.set[k])
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if c := pg.entriesCursor[k]; c != "" {
			rep.EntriesCursor = s.cursors.encode(cursor{Tenant: tenant, Branch: branch, Query: "report:" + k.Period.String(), SK: c})
		}
		out.Items = append(out.Items, rep)
	}
	if pg.next != "" {
		out.NextCursor = s.cursors.encode(cursor{Tenant: tenant, Branch: branch, Query: query, SK: pg.next})
	}
	writeJSON(w, http.StatusOK, out)
}

// rangeQuery reads the period, from and to parameters of a range request
// (branch reports, tenant roll-ups): all three required, one period type,
// to not before from, at most maxRangePeriods periods.
func rangeQuery(q url.Values) (from, to aggregates.Period, p *Problem) {
	for _, name := range []string{"period", "from", "to"} {
		if q.Get(name) == "" {
			return from, to, fieldProblem(name, "required")
		}
	}
	pt, err := aggregates.ParsePeriodType(q.Get("period"))
	if err != nil {
		return from, to, fieldProblem("period", err.Error())
	}
	if from, p = parsePeriod("from", pt, q.Get("from")); p != nil {
		return from, to, p
	}
	if to, p = parsePeriod("to", pt, q.Get("to")); p != nil {
		return from, to, p
	}
	if to.Value < from.Value {
		return from, to, fieldProblem("to", "before from")
	}
	if n := periodsBetween(from, to); n > maxRangePeriods[pt] {
		return from, to, fieldProblem("to", fmt.Sprintf("the range spans %d %s periods; at most %d per request", n, pt, maxRangePeriods[pt]))
	}
	return from, to, nil
}

// periodsBetween counts the periods from..to inclusive (same type, both
// valid: aggregates.ParsePeriod). WEEKLY values are dates: the weeks of a
// range are counted in steps of 7 days from from (a branch's weeks start
// on one weekday, so its week values in the range are at most that many).
func periodsBetween(from, to aggregates.Period) int {
	switch from.Type {
	case aggregates.Daily, aggregates.Weekly:
		a, _ := time.Parse("2006-01-02", from.Value)
		b, _ := time.Parse("2006-01-02", to.Value)
		days := int(b.Sub(a).Hours() / 24)
		if from.Type == aggregates.Weekly {
			return days/7 + 1
		}
		return days + 1
	case aggregates.Monthly:
		a, _ := time.Parse("2006-01", from.Value)
		b, _ := time.Parse("2006-01", to.Value)
		return (b.Year()-a.Year())*12 + int(b.Month()) - int(a.Month()) + 1
	case aggregates.Quarterly, aggregates.FiscalQuarter:
		return quarterIndex(to.Value) - quarterIndex(from.Value) + 1
	default: // YEARLY, FISCAL_YEAR: YYYY, FYyyyy
		a, _ := strconv.Atoi(strings.TrimPrefix(from.Value, "FY"))
		b, _ := strconv.Atoi(strings.TrimPrefix(to.Value, "FY"))
		return b - a + 1
	}
}

// quarterIndex numbers a quarter value, YYYY-Qn or FYyyyy-Qn, in quarters
// since year 0.
func quarterIndex(v string) int {
	y, q, _ := strings.Cut(strings.TrimPrefix(v, "FY"), "-Q")
	year, _ := strconv.Atoi(y)
	n, _ := strconv.Atoi(q)
	return year*4 + n - 1
}

// healthz answers 200 while the process serves HTTP.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
