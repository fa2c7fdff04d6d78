package infra_test

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/processor/poller"
	"github.com/ledger-dev/ledger/writer"
)

// registerRecorder is a Registerer that keeps what is registered with it.
type registerRecorder struct{ collectors []prometheus.Collector }

func (r *registerRecorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *registerRecorder) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
}

func (r *registerRecorder) Unregister(prometheus.Collector) bool { return false }

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// ledgerMetrics returns every metric the processor, the poller and the
// writer define, from their registries, with each metric's label names.
func ledgerMetrics(t *testing.T) map[string][]string {
	t.Helper()
	r := &registerRecorder{}
	processor.NewMetrics(r)
	poller.NewMetrics(r)
	writer.NewMetrics(r)
	out := map[string][]string{}
	for _, c := range r.collectors {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			s := d.String()
			name := descName.FindStringSubmatch(s)
			require.NotNil(t, name, s)
			var labels []string
			if m := descLabels.FindStringSubmatch(s); m != nil && m[1] != "" {
				labels = strings.Split(m[1], ",")
			}
			out[name[1]] = labels
		}
	}
	require.NotEmpty(t, out)
	return out
}

var (
	metricRef = regexp.MustCompile(`\bledger_[a-z0-9_]+`)
	byClause  = regexp.MustCompile(`\bby \(([^)]*)\)`)
	// matchers are the label names of a selector's {…}.
	matchers = regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)\s*"`)
	// recorded names series of recording rules: level:metric:operations.
	recorded = regexp.MustCompile(`\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b`)
)

// checkQuery checks a PromQL query of a dashboard or a rule: it names
// ledger metrics (marking them in used), groups by and matches labels they
// have (or Prometheus' own: le, instance, job).
func checkQuery(t *testing.T, known map[string][]string, used map[string]bool, where, expr string) {
	t.Helper()
	expr = recorded.ReplaceAllString(expr, "")
	names := metricRef.FindAllString(expr, -1)
	if len(names) == 0 {
		return
	}
	var labels []string
	for _, n := range names {
		base := baseName(n, known)
		ls, ok := known[base]
		if !assert.True(t, ok, "%s: %s is not a ledger metric", where, n) {
			continue
		}
		used[base] = true
		labels = append(labels, ls...)
	}
	var refs []string
	for _, m := range byClause.FindAllStringSubmatch(expr, -1) {
		refs = append(refs, strings.Split(m[1], ",")...)
	}
	for _, m := range matchers.FindAllStringSubmatch(expr, -1) {
		refs = append(refs, m[1])
	}
	for _, l := range refs {
		l = strings.TrimSpace(l)
		switch l {
		case "le", "instance", "job":
			continue
		}
		assert.Contains(t, labels, l, "%s: %v have no label %s: %s", where, names, l, expr)
	}
}

// baseName maps a series name as queried to the metric that defines it.
func baseName(series string, known map[string][]string) string {
	if _, ok := known[series]; ok {
		return series
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(series, suffix); ok {
			if _, ok := known[b]; ok {
				return b
			}
		}
	}
	return series
}

func TestGrafanaDashboard_ReferencesOnlyDefinedMetricsAndLabels(t *testing.T) {
	known := ledgerMetrics(t)
	b, err := os.ReadFile("dashboards/ledger.json")
	require.NoError(t, err)
	var dash struct {
		Title  string
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		assert.NotEmpty(t, p.Targets, p.Title)
		for _, tgt := range p.Targets {
			checkQuery(t, known, used, p.Title, tgt.Expr)
		}
	}
	// What the dashboard is for: lag, throughput, conflicts, quarantine,
	// write units, errors, iterator age, leases.
	for _, m := range []string{
		"ledger_stream_lag_seconds", "ledger_records_total", "ledger_aggregate_conflicts_total",
		"ledger_quarantined_records_total", "ledger_dynamodb_write_units_total", "ledger_commits_total",
		"ledger_stream_iterator_age_seconds", "ledger_poller_leases_held", "ledger_http_requests_total",
	} {
		assert.True(t, used[m], "the dashboard does not show %s", m)
	}
	var unused []string
	for m := range known {
		if !used[m] {
			unused = append(unused, m)
		}
	}
	sort.Strings(unused)
	assert.Empty(t, unused, "metrics no panel shows")
}

// The rules of infra/prometheus/rules.yaml name only ledger metrics and
// their labels; the alerts cover lag, quarantine, parked deltas, failed
// commits, conflicts, leases and the writer's errors.
func TestPrometheusRules_ReferenceOnlyDefinedMetricsAndLabels(t *testing.T) {
	known := ledgerMetrics(t)
	b, err := os.ReadFile("prometheus/rules.yaml")
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Rules []struct{ Record, Alert, Expr string }
		}
	}
	require.NoError(t, yaml.Unmarshal(b, &f))
	used := map[string]bool{}
	n := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			n++
			checkQuery(t, known, used, r.Record+r.Alert, r.Expr)
		}
	}
	require.Positive(t, n)
	for _, m := range []string{
		"ledger_stream_iterator_age_seconds", "ledger_stream_lag_seconds", "ledger_quarantined_records_total",
		"ledger_parked_deltas_total", "ledger_commits_total", "ledger_aggregate_conflicts_total",
		"ledger_poller_lease_losses_total", "ledger_poller_leases_held", "ledger_http_requests_total",
		"ledger_http_request_duration_seconds", "ledger_writer_dynamodb_errors_total",
	} {
		assert.True(t, used[m], "no rule uses %s", m)
	}
}

// The CloudWatch side: every ledger metric the template's alarms and
// dashboard name (EMF names: the Prometheus name, maybe with {labels}, or a
// histogram's _count/_sum) is one the processor defines, with labels it has.
func TestTemplate_CloudWatchMetricsAreTheProcessors(t *testing.T) {
	known := ledgerMetrics(t)
	b, err := os.ReadFile("template.yaml")
	require.NoError(t, err)
	emf := regexp.MustCompile(`\b(ledger_[a-z0-9_]+)(\{([^}]*)\})?`)
	found := 0
	for _, m := range emf.FindAllStringSubmatch(string(b), -1) {
		base := baseName(m[1], known)
		labels, ok := known[base]
		if !assert.True(t, ok, "%s is not a ledger metric", m[0]) {
			continue
		}
		found++
		if m[3] == "" {
			continue
		}
		for _, kv := range strings.Split(m[3], ",") {
			k, _, _ := strings.Cut(kv, "=")
			assert.Contains(t, labels, k, "%s", m[0])
		}
	}
	assert.Positive(t, found)
}
