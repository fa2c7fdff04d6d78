package writer_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/writer"
)

// limit=0 stays 400, as the document's minimum of 1 has it (a client
// generated from it refuses 0 itself), with a problem naming the range and
// how to get the default page, on every listing and the report's entries.
func TestPaging_LimitZeroIs400NamingTheRangeAndTheDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	tenant := "/v1/tenants/" + e.tenant
	cases := []struct {
		path, detail string
		admin        bool
	}{
		{path: e.base() + "/transactions", detail: "give a whole number from 1 to 200 (larger values are capped at 200), or leave limit out for 50"},
		{path: tenant + "/branches", detail: "give a whole number from 1 to 200 (larger values are capped at 200), or leave limit out for 50"},
		{path: tenant + "/accounts", detail: "give a whole number from 1 to 200 (larger values are capped at 200), or leave limit out for 50"},
		{path: "/v1/tenants", admin: true, detail: "give a whole number from 1 to 200 (larger values are capped at 200), or leave limit out for 50"},
		{path: e.base() + "/reports/MONTHLY/2026-01", detail: "give a whole number from 1 to 1000 (larger values are capped at 1000), or leave limit out for 500"},
		{path: e.base() + "/reports?period=MONTHLY&from=2026-01&to=2026-02", detail: "give a whole number from 1 to"},
	}
	sep := func(path string) string {
		for _, c := range path {
			if c == '?' {
				return "&"
			}
		}
		return "?"
	}
	for _, tc := range cases {
		for _, limit := range []string{"0", "-1", "ten", "1.5"} {
			rq := req{method: "GET", path: tc.path + sep(tc.path) + "limit=" + limit}
			var r reply
			if tc.admin {
				r = e.asAdmin(rq)
			} else {
				r = e.send(rq)
			}
			require.Equal(t, http.StatusBadRequest, r.Status, "%s: answer %s", rq.path, r)
			p := r.problem(t)
			assert.Equal(t, writer.ProblemInvalidField, p.Type)
			assert.Equal(t, "limit", p.Field)
			assert.Contains(t, p.Detail, "limit="+limit+" is not a page size", rq.path)
			assert.Contains(t, p.Detail, tc.detail, rq.path)
		}
		ok := e.send(req{method: "GET", path: tc.path + sep(tc.path) + "limit=1"})
		if tc.admin {
			ok = e.asAdmin(req{method: "GET", path: tc.path + sep(tc.path) + "limit=1"})
		}
		assert.NotEqual(t, http.StatusBadRequest, ok.Status, "%s?limit=1: answer %s", tc.path, ok)
	}
}

// The single report refuses what the listings refuse: an unknown query
// parameter, or one given twice, is 400 naming it (it was ignored).
func TestReports_OneReportRefusesUnknownAndRepeatedParametersAsListingsDo(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sharedTable(t))
	for _, tc := range []struct{ query, field, detail string }{
		{"?period=DAILY", "period", "unknown query parameter"},
		{"?limt=5", "limt", "unknown query parameter"},
		{"?limit=5&limit=6", "limit", "give it once"},
	} {
		for _, path := range []string{e.base() + "/reports/MONTHLY/2026-01", e.base() + "/transactions"} {
			r := e.send(req{method: "GET", path: path + tc.query})
			require.Equal(t, http.StatusBadRequest, r.Status, "%s%s: answer %s", path, tc.query, r)
			p := r.problem(t)
			assert.Equal(t, writer.ProblemInvalidField, p.Type)
			assert.Equal(t, tc.field, p.Field, "%s%s", path, tc.query)
			assert.Equal(t, tc.detail, p.Detail, "%s%s", path, tc.query)
		}
	}
	r := e.send(req{method: "GET", path: e.base() + "/reports/MONTHLY/2026-01?limit=5"})
	assert.NotEqual(t, http.StatusBadRequest, r.Status, "answer %s", r)
}
