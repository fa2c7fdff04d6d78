// Package prometheus_test checks the Prometheus rules shipped in
// rules.yaml (promtool, and their links to docs/runbook.md) and, in
// live_test.go, every query of the Grafana dashboard and every rule
// expression against a real Prometheus scraping a live poller and writer.
package prometheus_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

// requireTool returns the path of a binary of Debian's prometheus package
// (promtool, prometheus). Outside CI a missing one skips the test; in CI
// (CI set) it fails it: .ci/run installs the package.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not on PATH in CI: .ci/run installs Debian's prometheus package", name)
		}
		t.Skipf("%s not on PATH (Debian: apt-get install prometheus)", name)
	}
	return path
}

// ruleFile is rules.yaml as Prometheus reads it.
type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []rule
	}
}

type rule struct {
	Record      string
	Alert       string
	Expr        string
	For         string
	Labels      map[string]string
	Annotations map[string]string
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile("rules.yaml")
	require.NoError(t, err)
	var f ruleFile
	require.NoError(t, yaml.Unmarshal(b, &f))
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	require.NotEmpty(t, out)
	return out
}

func TestRules_PassPromtoolCheckAndTheirUnitTests(t *testing.T) {
	promtool := requireTool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		assert.Contains(t, string(out), "SUCCESS", "promtool %s", strings.Join(args, " "))
	}
}

// runbook returns docs/runbook.md and the GitHub anchors of its headings.
func runbook(t *testing.T) (string, map[string]bool) {
	t.Helper()
	b, err := os.ReadFile("../../docs/runbook.md")
	require.NoError(t, err)
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	anchors := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		anchors[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(title), ""), " ", "-")] = true
	}
	return string(b), anchors
}

const runbookURL = "https://github.com/ledger-dev/ledger/blob/main/docs/runbook.md#"

// Every alert says what fired (summary), how bad (severity) and where the
// runbook section is, is named in the runbook, and has a unit test in which
// it fires.
func TestRules_EveryAlertLinksARunbookSectionAndIsUnitTested(t *testing.T) {
	text, anchors := runbook(t)
	require.True(t, anchors["lag-rising"], "anchors of docs/runbook.md: %v", anchors)
	b, err := os.ReadFile("rules_test.yaml")
	require.NoError(t, err)
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	require.NoError(t, yaml.Unmarshal(b, &tests))
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	alerts := 0
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			assert.Regexp(t, `^[a-z_]+:ledger_[a-z0-9_]+:[a-z0-9_]+$`, r.Record, "recording rule names are level:metric:operations")
			continue
		}
		alerts++
		assert.True(t, strings.HasPrefix(r.Alert, "Ledger"), "%s: alert names start with Ledger", r.Alert)
		assert.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "%s: severity", r.Alert)
		assert.NotEmpty(t, r.Annotations["summary"], "%s: summary", r.Alert)
		assert.NotEmpty(t, r.Annotations["description"], "%s: description", r.Alert)
		anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookURL)
		if assert.True(t, ok, "%s: runbook_url %q does not start with %s", r.Alert, r.Annotations["runbook_url"], runbookURL) {
			assert.True(t, anchors[anchor], "%s: docs/runbook.md has no section #%s", r.Alert, anchor)
		}
		assert.Contains(t, text, "`"+r.Alert+"`", "docs/runbook.md does not name %s", r.Alert)
		assert.True(t, fires[r.Alert], "%s: no test in rules_test.yaml where it fires", r.Alert)
	}
	assert.Positive(t, alerts)
}
