package writer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
)

// Reports are read, never written, by the writer: the stream consumers
// maintain them. They are eventually consistent with the transactions (by
// the stream's lag), so they are read with eventually consistent reads; each
// says how fresh it is with updatedAt, the time of the last commit to it
// (also sent as Last-Modified for a single report).

// maxRangePeriods bounds the periods one range request spans, per type.
var maxRangePeriods = map[aggregates.PeriodType]int{aggregates.Daily: 366, aggregates.Monthly: 120, aggregates.Yearly: 100}

func parsePeriod(field string, t aggregates.PeriodType, v string) (aggregates.Period, *Problem) {
	p, err := aggregates.ParsePeriod(t, v)
	if err != nil {
		return aggregates.Period{}, fieldProblem(field, err.Error())
	}
	return p, nil
}

// getReport serves GET …/reports/{period}/{value}.
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
	if p != nil {
		p.write(w)
		return
	}
	k := aggregates.ReportKey{Tenant: tenant, Branch: branch, Period: period}
	sr, err := infra.ReadReport(r.Context(), s.api, s.cfg.Table, k, false)
	if err != nil {
		s.fail(w, r, s.dynamoError("Query", err))
		return
	}
	if !sr.Exists() {
		problem(http.StatusNotFound, ProblemNotFound, "no report for this period: no transaction of it has been aggregated yet").write(w)
		return
	}
	rep, err := decodeReport(k, sr)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if t, err := time.Parse(time.RFC3339Nano, rep.UpdatedAt); err == nil {
		w.Header().Set("Last-Modified", t.UTC().Format(http.TimeFormat))
	}
	writeJSON(w, http.StatusOK, rep)
}

// ReportRange is the answer to a range request: the reports that exist in
// the range, in period order.
type ReportRange struct {
	Items []Report `json:"items"`
}

// reportRange serves GET …/reports?period=&from=&to=: one Query with
// BETWEEN on the sort key, from the first report item to the last one's
// entry items ("{to}#…" sorts before "{to}$").
func (s *Server) reportRange(w http.ResponseWriter, r *http.Request) {
	tenant, branch, p := branchPath(r)
	if p != nil {
		p.write(w)
		return
	}
	q := r.URL.Query()
	if p := singleParams(q, map[string]bool{"period": true, "from": true, "to": true}); p != nil {
		p.write(w)
		return
	}
	for _, name := range []string{"period", "from", "to"} {
		if q.Get(name) == "" {
			fieldProblem(name, "required").write(w)
			return
		}
	}
	pt, err := aggregates.ParsePeriodType(q.Get("period"))
	if err != nil {
		fieldProblem("period", err.Error()).write(w)
		return
	}
	from, p := parsePeriod("from", pt, q.Get("from"))
	if p != nil {
		p.write(w)
		return
	}
	to, p := parsePeriod("to", pt, q.Get("to"))
	if p != nil {
		p.write(w)
		return
	}
	if to.Value < from.Value {
		fieldProblem("to", "before from").write(w)
		return
	}
	if n := periodsBetween(from, to); n > maxRangePeriods[pt] {
		fieldProblem("to", fmt.Sprintf("the range spans %d %s periods; at most %d per request", n, pt, maxRangePeriods[pt])).write(w)
		return
	}
	items, err := s.queryReports(r.Context(), tenant, branch, from, to)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ReportRange{Items: items})
}

func (s *Server) queryReports(ctx context.Context, tenant, branch string, from, to aggregates.Period) ([]Report, error) {
	in := &dynamodb.QueryInput{
		TableName:                &s.cfg.Table,
		KeyConditionExpression:   aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi"),
		ExpressionAttributeNames: map[string]string{"#pk": attrPK, "#sk": attrSK},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":pk": strAV(aggregates.ReportPK(tenant, branch)), ":lo": strAV(from.String()), ":hi": strAV(to.String() + "$"),
		},
	}
	set := infra.ReportSet{}
	p := dynamodb.NewQueryPaginator(s.api, in)
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.dynamoError("Query", err)
		}
		for _, item := range out.Items {
			if err := set.Add(item); err != nil {
				return nil, err
			}
		}
	}
	items := []Report{}
	for _, k := range set.Keys() {
		if !set[k].Exists() {
			continue
		}
		rep, err := decodeReport(k, set[k])
		if err != nil {
			return nil, err
		}
		items = append(items, rep)
	}
	return items, nil
}

// periodsBetween counts the periods from..to inclusive (same type).
func periodsBetween(from, to aggregates.Period) int {
	layout := map[aggregates.PeriodType]string{aggregates.Daily: "2006-01-02", aggregates.Monthly: "2006-01", aggregates.Yearly: "2006"}[from.Type]
	a, _ := time.Parse(layout, from.Value)
	b, _ := time.Parse(layout, to.Value)
	switch from.Type {
	case aggregates.Daily:
		return int(b.Sub(a).Hours()/24) + 1
	case aggregates.Monthly:
		return (b.Year()-a.Year())*12 + int(b.Month()) - int(a.Month()) + 1
	default:
		return b.Year() - a.Year() + 1
	}
}

// healthz answers 200 while the process serves HTTP.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when the table answers a read of the flags item, 503
// when it does not or the server is draining.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	f, err := GetFlags(ctx, s.api, s.cfg.Table)
	if err != nil {
		s.cfg.Logger.Warn("readiness: table unreachable", "table", s.cfg.Table, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "table unreachable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]json.RawMessage{
		"status":        json.RawMessage(`"ready"`),
		"writesEnabled": json.RawMessage(strconv.FormatBool(f.WritesEnabled())),
	})
}
