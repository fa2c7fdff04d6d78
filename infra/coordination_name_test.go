package infra_test

// Adversarial review of issue 23's coordination table (branch
// review-coord). Gated behind LEDGER_REVIEW_COORD=1: it fails on main.

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/ledger-dev/ledger/table"
)

// Issue 23 review: the template let CloudFormation name CoordinationTable
// (a random suffix) and told only the Lambda its name; it was no output. Every other
// consumer and tool defaults to {ledger table}-coordination
// (table.CoordinationTableName): pollers, `ledgerctl lag`, `ledgerctl
// reconcile`'s in-flight check, and `ledgerctl coordination migrate`,
// which even creates that table when it is missing — so following the
// runbook's upgrade ("update the stack", then "ledgerctl coordination
// migrate" with LEDGER_TABLE set to the TableName output) moves the
// checkpoints into a table the stack's Lambda never reads: the tumbling
// Lambda then starts every shard from no checkpoint (the ledger table is
// clean, so refuseLegacy lets it), and pollers next to it keep a second,
// independent set of checkpoints. Now the table is named
// !Sub "${Table}-coordination" (unique per deploy, as the Table's own
// generated name is, so the rollback argument still holds).
func TestTemplate_TheStacksCoordinationTableIsTheOneTheToolsUse(t *testing.T) {
	tpl := loadTemplate(t)
	p := tpl.resource(t, "CoordinationTable", "AWS::DynamoDB::Table")
	named := assert.Equal(t, map[string]any{"Fn::Sub": "${Table}" + table.CoordinationSuffix}, p["TableName"],
		"the coordination table's name is not the default every tool derives from the ledger table's")
	if !named {
		b, err := os.ReadFile("template.yaml")
		require.NoError(t, err)
		var doc struct {
			Outputs map[string]any `yaml:"Outputs"`
		}
		require.NoError(t, yaml.Unmarshal(b, &doc))
		_, out := doc.Outputs["CoordinationTableName"]
		assert.True(t, out, "nor is its name an output of the stack")
	}
}
