package infra_test

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// template is infra/template.yaml as generic values, with CloudFormation's
// short-form intrinsics (!Ref, !GetAtt, !Sub, !If, …) turned into their
// long form ({"Ref": …}, {"Fn::GetAtt": […]}, …).
type template struct {
	Parameters map[string]map[string]any
	Conditions map[string]any
	Resources  map[string]struct {
		Type                string
		DeletionPolicy      string
		UpdateReplacePolicy string
		Properties          map[string]any
	}
}

func loadTemplate(t *testing.T) template {
	t.Helper()
	b, err := os.ReadFile("template.yaml")
	require.NoError(t, err)
	var root yaml.Node
	require.NoError(t, yaml.Unmarshal(b, &root))
	v, err := cfnValue(&root)
	require.NoError(t, err)
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	var tpl template
	require.NoError(t, json.Unmarshal(raw, &tpl))
	return tpl
}

// cfnValue converts a YAML node, expanding intrinsic function tags.
func cfnValue(n *yaml.Node) (any, error) {
	var v any
	switch n.Kind {
	case yaml.DocumentNode:
		return cfnValue(n.Content[0])
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i < len(n.Content); i += 2 {
			val, err := cfnValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = val
		}
		v = m
	case yaml.SequenceNode:
		s := []any{}
		for _, c := range n.Content {
			val, err := cfnValue(c)
			if err != nil {
				return nil, err
			}
			s = append(s, val)
		}
		v = s
	case yaml.AliasNode:
		return cfnValue(n.Alias)
	default:
		tag := n.Tag
		if strings.HasPrefix(tag, "!") && !strings.HasPrefix(tag, "!!") {
			n.Tag = "!!str" // an intrinsic's argument
		}
		if err := n.Decode(&v); err != nil {
			return nil, err
		}
		n.Tag = tag
	}
	if !strings.HasPrefix(n.Tag, "!") || strings.HasPrefix(n.Tag, "!!") {
		return v, nil
	}
	fn := strings.TrimPrefix(n.Tag, "!")
	switch fn {
	case "Ref", "Condition":
		return map[string]any{fn: v}, nil
	case "GetAtt":
		if s, ok := v.(string); ok {
			resource, attr, _ := strings.Cut(s, ".")
			v = []any{resource, attr}
		}
	}
	return map[string]any{"Fn::" + fn: v}, nil
}

func (tpl template) resource(t *testing.T, name, typ string) map[string]any {
	t.Helper()
	r, ok := tpl.Resources[name]
	require.True(t, ok, "resource %s missing", name)
	require.Equal(t, typ, r.Type, name)
	return r.Properties
}

func list(v any) []any { l, _ := v.([]any); return l }
func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// The coordination table has the keys table/coordination.go creates, no
// stream and no index, and the consumer is told its name.
func TestTemplate_CoordinationTableMatchesGoDefinition(t *testing.T) {
	tpl := loadTemplate(t)
	p := tpl.resource(t, "CoordinationTable", "AWS::DynamoDB::Table")
	want := table.CreateCoordinationTableInput("ledger-coordination")
	var defs, keys []string
	for _, d := range list(p["AttributeDefinitions"]) {
		defs = append(defs, obj(d)["AttributeName"].(string)+" "+obj(d)["AttributeType"].(string))
	}
	for _, k := range list(p["KeySchema"]) {
		keys = append(keys, obj(k)["AttributeName"].(string)+" "+obj(k)["KeyType"].(string))
	}
	var wantDefs, wantKeys []string
	for _, d := range want.AttributeDefinitions {
		wantDefs = append(wantDefs, aws.ToString(d.AttributeName)+" "+string(d.AttributeType))
	}
	for _, k := range want.KeySchema {
		wantKeys = append(wantKeys, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	assert.Equal(t, wantDefs, defs)
	assert.Equal(t, wantKeys, keys)
	assert.Equal(t, string(want.BillingMode), p["BillingMode"])
	assert.Nil(t, p["StreamSpecification"], "the coordination table has no stream: its writes are no records")
	assert.Nil(t, p["GlobalSecondaryIndexes"])
	assert.Equal(t, map[string]any{"AttributeName": table.AttrExpiresAt, "Enabled": true}, p["TimeToLiveSpecification"], "items of shards long gone expire")
	env := obj(obj(tpl.resource(t, "ConsumerFunction", "AWS::Serverless::Function")["Environment"])["Variables"])
	assert.Equal(t, map[string]any{"Ref": "CoordinationTable"}, env["LEDGER_COORDINATION_TABLE"])
}

func TestTemplate_TableMatchesGoDefinition(t *testing.T) {
	tpl := loadTemplate(t)
	p := tpl.resource(t, "Table", "AWS::DynamoDB::Table")
	want := table.CreateTableInput("ledger")

	types := map[string]string{}
	for _, d := range list(p["AttributeDefinitions"]) {
		types[obj(d)["AttributeName"].(string)] = obj(d)["AttributeType"].(string)
	}
	wantTypes := map[string]string{}
	for _, d := range want.AttributeDefinitions {
		wantTypes[aws.ToString(d.AttributeName)] = string(d.AttributeType)
	}
	assert.Equal(t, wantTypes, types, "attribute definitions")

	keys := func(v any) []string {
		var out []string
		for _, k := range list(v) {
			out = append(out, obj(k)["AttributeName"].(string)+" "+obj(k)["KeyType"].(string))
		}
		return out
	}
	var wantKeys []string
	for _, k := range want.KeySchema {
		wantKeys = append(wantKeys, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	assert.Equal(t, wantKeys, keys(p["KeySchema"]), "table keys")

	gsis := map[string]string{}
	for _, g := range list(p["GlobalSecondaryIndexes"]) {
		gsis[obj(g)["IndexName"].(string)] = strings.Join(keys(obj(g)["KeySchema"]), ", ") + " / " + obj(obj(g)["Projection"])["ProjectionType"].(string)
	}
	wantGSIs := map[string]string{}
	for _, g := range want.GlobalSecondaryIndexes {
		var ks []string
		for _, k := range g.KeySchema {
			ks = append(ks, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
		}
		wantGSIs[aws.ToString(g.IndexName)] = strings.Join(ks, ", ") + " / " + string(g.Projection.ProjectionType)
	}
	assert.Equal(t, wantGSIs, gsis, "global secondary indexes")

	assert.Equal(t, string(table.StreamViewType), obj(p["StreamSpecification"])["StreamViewType"])
	assert.Equal(t, map[string]any{"AttributeName": table.AttrExpiresAt, "Enabled": true}, p["TimeToLiveSpecification"])
	assert.Equal(t, map[string]any{"Ref": "BillingMode"}, p["BillingMode"])
	assert.Equal(t, string(want.BillingMode), tpl.Parameters["BillingMode"]["Default"], "on demand by default, as CreateTable")
	assert.Equal(t, true, obj(p["PointInTimeRecoverySpecification"])["PointInTimeRecoveryEnabled"])
	assert.Equal(t, true, obj(p["SSESpecification"])["SSEEnabled"])
	assert.Equal(t, true, p["DeletionProtectionEnabled"])
	assert.Equal(t, map[string]any{"Fn::If": []any{"HasTableName", map[string]any{"Ref": "TableName"}, map[string]any{"Ref": "AWS::NoValue"}}}, p["TableName"])
}

// Issue 12: the table is retained when the stack goes (deleting the stack
// never deletes the data), and so also when a first deploy rolls back. With
// a fixed name the retained table then blocks the next deploy ("already
// exists"); by default the template lets CloudFormation name the table, so
// a second deploy after a rollback creates a table of another name. A
// fixed name stays possible (docs/deploy.md says what to do then).
func TestTemplate_SecondDeployAfterARollbackIsNotBlockedByTheRetainedTable(t *testing.T) {
	tpl := loadTemplate(t)
	tpl.resource(t, "Table", "AWS::DynamoDB::Table")
	table := tpl.Resources["Table"]
	assert.Equal(t, "Retain", table.DeletionPolicy)
	assert.Equal(t, "Retain", table.UpdateReplacePolicy)
	assert.Equal(t, "", tpl.Parameters["TableName"]["Default"], "CloudFormation names the table unless told otherwise")
	assert.Equal(t, map[string]any{"Fn::Not": []any{map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "TableName"}, ""}}}}, tpl.Conditions["HasTableName"])
	// No other resource keeps a fixed name past a rollback: only the
	// table and its coordination table are retained, and the coordination
	// table is always named by CloudFormation.
	for name, r := range tpl.Resources {
		switch name {
		case "Table":
		case "CoordinationTable":
			// Named after the table (unique per deploy as its name is).
			assert.Equal(t, "Retain", r.DeletionPolicy)
			assert.Equal(t, map[string]any{"Fn::Sub": "${Table}-coordination"}, r.Properties["TableName"])
		default:
			assert.Empty(t, r.DeletionPolicy, "%s would outlive a rollback", name)
		}
	}
}

func TestTemplate_EventSourceMappingKeepsExactlyOnceSettings(t *testing.T) {
	tpl := loadTemplate(t)
	p := tpl.resource(t, "ConsumerEventSourceMapping", "AWS::Lambda::EventSourceMapping")
	// Assumption 4 of docs/exactly-once.md, setting by setting.
	assert.Equal(t, false, p["BisectBatchOnFunctionError"], "a bisected retry could start inside a committed run")
	assert.EqualValues(t, 1, p["ParallelizationFactor"], "one batch per shard at a time")
	assert.Equal(t, []any{"ReportBatchItemFailures"}, p["FunctionResponseTypes"])
	assert.EqualValues(t, -1, p["MaximumRetryAttempts"], "a mapping that gives up loses records")
	assert.EqualValues(t, -1, p["MaximumRecordAgeInSeconds"])
	assert.Equal(t, "TRIM_HORIZON", p["StartingPosition"])
	assert.Equal(t, map[string]any{"Fn::GetAtt": []any{"Table", "StreamArn"}}, p["EventSourceArn"])
	assert.Equal(t, map[string]any{"Ref": "BatchSize"}, p["BatchSize"])
	assert.Equal(t, map[string]any{"Ref": "MaximumBatchingWindowInSeconds"}, p["MaximumBatchingWindowInSeconds"])
	assert.Equal(t, map[string]any{"Fn::GetAtt": []any{"ConsumerDeadLetterQueue", "Arn"}}, obj(obj(p["DestinationConfig"])["OnFailure"])["Destination"])
	assert.Equal(t, map[string]any{"Fn::If": []any{"Tumbling", map[string]any{"Ref": "TumblingWindowInSeconds"}, map[string]any{"Ref": "AWS::NoValue"}}}, p["TumblingWindowInSeconds"])

	// The function's mode follows the window.
	fn := tpl.resource(t, "ConsumerFunction", "AWS::Serverless::Function")
	env := obj(obj(fn["Environment"])["Variables"])
	assert.Equal(t, map[string]any{"Fn::If": []any{"Tumbling", "tumbling", "standard"}}, env["LEDGER_LAMBDA_MODE"])
	assert.Equal(t, map[string]any{"Ref": "Table"}, env["LEDGER_TABLE"])
	assert.Equal(t, "provided.al2023", fn["Runtime"])
	assert.Equal(t, []any{"arm64"}, fn["Architectures"])
	assert.Equal(t, "bootstrap", fn["Handler"])

	// No filter (issue 12): docs/lambda.md and docs/deploy.md say so, and
	// the function refuses a filtered mapping (cmd/lambda/esmcheck.go).
	assert.NotContains(t, p, "FilterCriteria")

	// The function may read its mappings to check them.
	st := roleStatement(t, tpl, "ConsumerRole", "CheckOwnEventSourceMappings")
	assert.Equal(t, []string{"lambda:ListEventSourceMappings"}, actions(st))
}

// iamActions maps the DynamoDB calls of a client interface to the IAM
// actions they need. TransactWriteItems is authorised per action inside.
func iamActions(iface reflect.Type, transactActions ...string) []string {
	var out []string
	for i := 0; i < iface.NumMethod(); i++ {
		m := iface.Method(i).Name
		if m == "TransactWriteItems" {
			for _, a := range transactActions {
				out = append(out, "dynamodb:"+a)
			}
			continue
		}
		out = append(out, "dynamodb:"+m)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func roleStatement(t *testing.T, tpl template, role, sid string) map[string]any {
	t.Helper()
	p := tpl.resource(t, role, "AWS::IAM::Role")
	for _, pol := range list(p["Policies"]) {
		for _, st := range list(obj(obj(pol)["PolicyDocument"])["Statement"]) {
			if obj(st)["Sid"] == sid {
				return obj(st)
			}
		}
	}
	t.Fatalf("%s has no statement %s", role, sid)
	return nil
}

func actions(st map[string]any) []string {
	var out []string
	switch a := st["Action"].(type) {
	case string:
		out = []string{a}
	case []any:
		for _, x := range a {
			out = append(out, x.(string))
		}
	}
	sort.Strings(out)
	return out
}

func TestTemplate_RolesGrantWhatTheCodeCallsOnThisTableOnly(t *testing.T) {
	tpl := loadTemplate(t)

	// The consumer: processor.DynamoDB's calls; commits carry Updates (report
	// deltas, checkpoints) and Puts (run markers).
	st := roleStatement(t, tpl, "ConsumerRole", "CommitReports")
	assert.Equal(t, slices.DeleteFunc(iamActions(reflect.TypeFor[processor.DynamoDB](), "UpdateItem", "PutItem"), func(a string) bool { return a == "dynamodb:Query" }), actions(st))
	assert.Equal(t, []any{map[string]any{"Fn::GetAtt": []any{"Table", "Arn"}}, map[string]any{"Fn::GetAtt": []any{"CoordinationTable", "Arn"}}}, st["Resource"])
	// Query only for the old layout's checkpoints (processor.refuseLegacy),
	// never a tenant's partition.
	st = roleStatement(t, tpl, "ConsumerRole", "FindOldCheckpoints")
	assert.Equal(t, []string{"dynamodb:Query"}, actions(st))
	assert.Equal(t, map[string]any{"Fn::GetAtt": []any{"Table", "Arn"}}, st["Resource"])
	assert.Equal(t, map[string]any{"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": []any{"STREAM#*"}}}, st["Condition"])
	// Deletes in commits: the folded roll-up deltas, in the ledger table,
	// and a layout-6 batch's staging items, in the coordination table
	// (TestTemplate_TheConsumerRoleGrantsEveryActionItsCommitsCarry
	// finds every action kind the commits carry by running the consumer).
	st = roleStatement(t, tpl, "ConsumerRole", "FoldRollupDeltas")
	assert.Equal(t, []string{"dynamodb:DeleteItem"}, actions(st))
	assert.Equal(t, []any{map[string]any{"Fn::GetAtt": []any{"Table", "Arn"}}, map[string]any{"Fn::GetAtt": []any{"CoordinationTable", "Arn"}}}, st["Resource"])
	st = roleStatement(t, tpl, "ConsumerRole", "ReadTheStream")
	assert.Equal(t, []string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"}, actions(st))
	assert.Equal(t, map[string]any{"Fn::Sub": "${Table.Arn}/stream/*"}, st["Resource"])
	st = roleStatement(t, tpl, "ConsumerRole", "OnFailureDestination")
	assert.Equal(t, []string{"sqs:SendMessage"}, actions(st))

	// The writer: writer.DynamoDB's calls; its transactions put, update and
	// delete items and check conditions on others.
	st = roleStatement(t, tpl, "WriterRole", "Items")
	assert.Equal(t, iamActions(reflect.TypeFor[writer.DynamoDB](), "PutItem", "UpdateItem", "DeleteItem", "ConditionCheckItem"), actions(st))
	assert.Equal(t, map[string]any{"Fn::GetAtt": []any{"Table", "Arn"}}, st["Resource"])

	// No statement anywhere grants a wildcard action or resource.
	for name, r := range tpl.Resources {
		if r.Type != "AWS::IAM::Role" {
			continue
		}
		for _, pol := range list(r.Properties["Policies"]) {
			for _, s := range list(obj(obj(pol)["PolicyDocument"])["Statement"]) {
				for _, a := range actions(obj(s)) {
					assert.NotContains(t, a, "*", "%s: action %s", name, a)
				}
				if slices.Equal(actions(obj(s)), []string{"lambda:ListEventSourceMappings"}) {
					continue // supports no resource-level permission: "*" only (read-only)
				}
				assert.NotEqual(t, "*", obj(s)["Resource"], "%s: resource *", name)
			}
		}
	}
}

func TestTemplate_AlarmsCoverTheFailureModes(t *testing.T) {
	tpl := loadTemplate(t)
	got := map[string]bool{}
	for _, r := range tpl.Resources {
		if r.Type == "AWS::CloudWatch::Alarm" {
			got[r.Properties["Namespace"].(string)+" "+r.Properties["MetricName"].(string)] = true
		}
	}
	for _, want := range []string{
		"AWS/Lambda IteratorAge", "AWS/Lambda Errors", "AWS/Lambda Throttles",
		"AWS/SQS ApproximateNumberOfMessagesVisible",
		"ledger ledger_commits_total{outcome=failed}",
		"ledger ledger_aggregate_conflicts_total{reason=" + processor.ConflictTransactionConflict + "}",
		"ledger ledger_aggregate_conflicts_total{reason=" + processor.ConflictConditionFailed + "}",
		"ledger ledger_quarantined_records_total",
		"ledger ledger_foreign_records_total",
	} {
		assert.True(t, got[want], "no alarm on %s", want)
	}
}

// API Gateway answers some requests itself (its throttle's 429, 413 over
// its payload limit, 500 when the function fails, 503/504 when it does not
// answer in time). An HTTP API cannot customise those answers (only a REST
// API has gateway responses), so the writer's OpenAPI document describes
// them: every operation the gateway forwards lists them with API Gateway's
// application/json GatewayError body (docs/api.md "Errors"), and the 400
// the Lambda adapter answers to an event it cannot read. This test ties the
// template's routes to the document: a route added to the template whose
// operations do not list the gateway's answers, or a REST API without
// problem+json gateway responses, fails it.
func TestTemplate_GatewayAnswersAreInTheOpenAPIDocument(t *testing.T) {
	tpl := loadTemplate(t)
	for name, r := range tpl.Resources {
		switch r.Type {
		case "AWS::Serverless::Api":
			gr := obj(r.Properties["GatewayResponses"])
			for _, typ := range []string{"DEFAULT_4XX", "DEFAULT_5XX"} {
				_, ok := obj(obj(gr[typ])["ResponseTemplates"])["application/problem+json"]
				assert.True(t, ok, "%s: a REST API answers its own errors as problem+json (GatewayResponses %s)", name, typ)
			}
		case "AWS::ApiGateway::RestApi", "AWS::ApiGatewayV2::Api":
			t.Errorf("%s: %s; the document describes the answers of the SAM HTTP API (AWS::Serverless::HttpApi) only", name, r.Type)
		}
	}

	fn := tpl.resource(t, "WriterFunction", "AWS::Serverless::Function")
	var routes []string
	for _, ev := range obj(fn["Events"]) {
		ev := obj(ev)
		require.Equal(t, "HttpApi", ev["Type"])
		routes = append(routes, obj(ev["Properties"])["Path"].(string))
	}
	require.NotEmpty(t, routes)
	forwarded := func(path string) bool {
		for _, route := range routes {
			if prefix, ok := strings.CutSuffix(route, "{proxy+}"); ok && strings.HasPrefix(path, prefix) || path == route {
				return true
			}
		}
		return false
	}

	raw, err := writer.OpenAPI()
	require.NoError(t, err)
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Responses map[string]struct {
				Content map[string]struct {
					Schema struct {
						Ref string `json:"$ref"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	nforwarded := 0
	for path, item := range doc.Paths {
		if !forwarded(path) {
			continue
		}
		nforwarded++
		for method, rawOp := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				Responses map[string]struct {
					Ref string `json:"$ref"`
				} `json:"responses"`
			}
			require.NoError(t, json.Unmarshal(rawOp, &op), "%s %s", method, path)
			for _, status := range []string{"413", "429", "500", "503", "504"} {
				ref := op.Responses[status].Ref
				name := strings.TrimPrefix(ref, "#/components/responses/")
				body := doc.Components.Responses[name].Content["application/json"].Schema.Ref
				assert.Equal(t, "#/components/schemas/GatewayError", body, "%s %s: %s (%s) must describe API Gateway's own answer", method, path, status, ref)
			}
			ref := op.Responses["400"].Ref
			name := strings.TrimPrefix(ref, "#/components/responses/")
			assert.Contains(t, doc.Components.Responses[name].Content, "application/problem+json", "%s %s: the Lambda adapter's 400 invalid-request", method, path)
		}
	}
	assert.Positive(t, nforwarded, "no operation of the document is under the template's routes %v", routes)
}

// Issue 26: the consumer has concurrency of its own, so a flood of writer
// invocations cannot stall the stream; the writer enforces the tenant
// budget across its instances by default; 0 means "none", never "throttle
// everything" (ReservedConcurrentExecutions 0 would stop the function).
func TestTemplate_ConsumerReservesConcurrencyAndTheWriterHasATenantBudget(t *testing.T) {
	tpl := loadTemplate(t)
	for _, c := range []struct{ function, param, condition string }{
		{"ConsumerFunction", "ConsumerReservedConcurrency", "ReserveConsumer"},
		{"WriterFunction", "WriterReservedConcurrency", "ReserveWriter"},
	} {
		fn := tpl.resource(t, c.function, "AWS::Serverless::Function")
		assert.Equal(t, map[string]any{"Fn::If": []any{c.condition, map[string]any{"Ref": c.param}, map[string]any{"Ref": "AWS::NoValue"}}},
			fn["ReservedConcurrentExecutions"], c.function)
		assert.Equal(t, map[string]any{"Fn::Not": []any{map[string]any{"Fn::Equals": []any{map[string]any{"Ref": c.param}, 0.0}}}},
			tpl.Conditions[c.condition], c.condition)
		assert.EqualValues(t, 0, tpl.Parameters[c.param]["MinValue"], c.param)
	}
	assert.Positive(t, tpl.Parameters["ConsumerReservedConcurrency"]["Default"], "the consumer is reserved by default")

	env := obj(obj(tpl.resource(t, "WriterFunction", "AWS::Serverless::Function")["Environment"])["Variables"])
	assert.Equal(t, map[string]any{"Ref": "WriterTenantBudget"}, env["LEDGER_TENANT_BUDGET"])
	assert.Equal(t, map[string]any{"Ref": "WriterTenantBudgetBurst"}, env["LEDGER_TENANT_BUDGET_BURST"])
	// The buckets are in the coordination table (no stream), which the
	// writer may update and nothing more.
	assert.Equal(t, map[string]any{"Ref": "CoordinationTable"}, env["LEDGER_COORDINATION_TABLE"])
	st := roleStatement(t, tpl, "WriterRole", "TenantBudget")
	assert.Equal(t, []string{"dynamodb:UpdateItem"}, actions(st))
	assert.Equal(t, map[string]any{"Fn::GetAtt": []any{"CoordinationTable", "Arn"}}, st["Resource"])
	assert.Positive(t, tpl.Parameters["WriterTenantBudget"]["Default"], "the budget is on by default")
	// At least one unit a shard (writer.DefaultBudgetShards), or the writer refuses to start.
	assert.EqualValues(t, writer.DefaultBudgetShards, tpl.Parameters["WriterTenantBudgetBurst"]["MinValue"])
}
