package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	ledgertable "github.com/ledger-dev/ledger/table"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

// Every table this package uses is created before any test writes: one
// per test that takes one (8, and 1 for
// TumblingMode_CountedRepairsAtRandomMomentsWhileKilled).
var tables = ddbtest.Pool{Size: 9}

func newTable(t *testing.T) string { return tables.Table(t) }

// lambdaEnv is the environment the function gets: a table, DynamoDB Local
// through the fault proxy, the fake Runtime API, and short retries (no SDK
// retries: the processor's own are what is under test).
func lambdaEnv(api *runtimeAPI, endpoint, table string, extra ...string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"AWS_LAMBDA_RUNTIME_API=" + api.addr(),
		"AWS_LAMBDA_FUNCTION_NAME=ledger-test",
		"AWS_ENDPOINT_URL=" + endpoint,
		"AWS_ENDPOINT_URL_LAMBDA=" + api.controlPlane.srv.URL,
		"AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "AWS_REGION=us-east-1",
		"AWS_MAX_ATTEMPTS=1",
		"LEDGER_TABLE=" + table,
		"LEDGER_MAX_ATTEMPTS=3", "LEDGER_BASE_BACKOFF=1ms", "LEDGER_MAX_BACKOFF=20ms",
		"LEDGER_LOG_LEVEL=warn",
	}
	return append(env, extra...)
}

// stream is a table's stream as Lambda events.
type stream struct {
	ddb     *dynamodb.Client
	streams *dynamodbstreams.Client
	table   string
	arn     string
}

func newStream(t *testing.T, table string) *stream {
	s := &stream{ddb: ddbtest.Client(t), streams: dynamodbstreams.NewFromConfig(ddbtest.Config(t)), table: table}
	info, err := ledgertable.DescribeTable(context.Background(), s.ddb, table)
	require.NoError(t, err)
	s.arn = info.StreamARN
	return s
}

// records reads the whole stream (one shard on DynamoDB Local) and converts
// it to Lambda event records, as the event source mapping delivers them.
func (s *stream) records(t *testing.T) (shard string, recs []events.DynamoDBEventRecord) {
	t.Helper()
	shards, err := ledgertest.ReadAll(context.Background(), s.streams, s.arn, nil)
	require.NoError(t, err)
	require.Len(t, shards, 1)
	for _, r := range shards[0].Records {
		ev, err := processor.ToLambda(r)
		require.NoError(t, err)
		require.Equal(t, s.arn, ev.EventSourceArn)
		recs = append(recs, ev)
	}
	return shards[0].ID, recs
}

func (s *stream) requireReconciled(t *testing.T) processor.ReconcileStats {
	t.Helper()
	diffs, stats, err := processor.Reconcile(context.Background(), s.ddb, s.table, processor.Scope{})
	require.NoError(t, err)
	for _, d := range diffs {
		t.Errorf("reconcile difference: %s", d)
	}
	return stats
}

// TestLambdaBinary runs the built cmd/lambda as Lambda runs it: a process
// talking to a Runtime API, fed by an event source mapping, against
// DynamoDB Local.
func TestLambdaBinary(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	t.Run("BadConfigurationIsAnInitError", func(t *testing.T) {
		t.Parallel()
		testInitErrors(t, bin)
	})
	t.Run("OutsideLambdaExitsWithUsage", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(bin)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		assert.Equal(t, exitNoRuntime, exit.ExitCode())
		assert.Contains(t, string(out), "AWS_LAMBDA_RUNTIME_API is not set")
		assert.Contains(t, string(out), "LEDGER_LAMBDA_MODE")
	})
	t.Run("StandardMode_RandomizedDeliveryWithKillsReconciles", func(t *testing.T) {
		t.Parallel()
		testDelivery(t, bin, "standard", seed(t, 1))
	})
	t.Run("TumblingMode_WindowsWithStateAndKillsReconcile", func(t *testing.T) {
		t.Parallel()
		testDelivery(t, bin, "tumbling", seed(t, 2))
	})
	t.Run("TumblingMode_ShardsRollAndSplitOnTheEmulation", func(t *testing.T) {
		t.Parallel()
		testTumblingShards(t, bin, seed(t, 4))
	})
	t.Run("TumblingMode_ShardsUnderAWSConflictsAreExact", func(t *testing.T) {
		t.Parallel()
		testTumblingShardsUnderConflicts(t, bin, seed(t, 5))
	})
	t.Run("TumblingMode_CountedRepairsAtRandomMomentsWhileKilled", func(t *testing.T) {
		t.Parallel()
		testCountedRepairsWithKills(t, bin)
	})
	t.Run("UnsafeOrUnreadableMappingIsAnInitError", func(t *testing.T) {
		t.Parallel()
		testMappingCheck(t, bin)
	})
	t.Run("MalformedEventsAreAnsweredNotFatal", func(t *testing.T) {
		t.Parallel()
		testMalformed(t, bin)
	})
	t.Run("StandardMode_RedeliveryFromAnEarlierStart", func(t *testing.T) {
		t.Parallel()
		testRedeliveryFromEarlierStart(t, bin)
	})
	t.Run("StandardMode_DamagedReportsAreParkedAndRepaired", func(t *testing.T) {
		t.Parallel()
		testDamagedReports(t, bin, seed(t, 3))
	})
}

// testDamagedReports damages report items of one branch in every way
// (ledgertest.Damage) between two phases of randomized delivery with
// kills and DynamoDB failures: the function never stops on them, parks the
// refused deltas, the other branches stay exact; --repair heals the damaged
// ones and a last phase leaves no difference.
func testDamagedReports(t *testing.T, bin string, seed uint64) {
	ctx := context.Background()
	table := newTable(t)
	s := newStream(t, table)
	proxy := newFaultProxy(t, ddbtest.Endpoint(t))
	api := newRuntimeAPI(t)
	fn := newFunction(t, bin, api, lambdaEnv(api, proxy.srv.URL, table, "LEDGER_LAMBDA_MODE=standard", "LEDGER_MAX_ITEMS_PER_RUN=24"))
	proxy.kill = fn.kill
	fn.start()
	e := &esm{t: t, rng: rand.New(rand.NewPCG(seed, 7)), fn: fn, api: api, proxy: proxy, arn: s.arn, stats: map[string]int{}}
	w := ledgertest.NewWorkload(seed)
	delivered := 0
	deliver := func(steps int) {
		require.NoError(t, w.Run(ctx, s.ddb, table, steps))
		var recs []events.DynamoDBEventRecord
		e.shard, recs = s.records(t)
		e.standard(recs, delivered)
		delivered = len(recs)
	}
	deliver(400)
	s.requireReconciled(t)
	damaged, err := ledgertest.Damage(ctx, s.ddb, table, "acme", "north")
	require.NoError(t, err)
	deliver(400)

	diffs, _, err := processor.Reconcile(ctx, s.ddb, table, processor.Scope{})
	require.NoError(t, err)
	assert.NoError(t, ledgertest.DamageFound(diffs, damaged, "acme", "north"))
	parked := 0.0
	for _, l := range fn.emfLines() {
		for k, v := range l {
			if strings.HasPrefix(k, "ledger_parked_deltas_total") {
				parked += v.(float64)
			}
		}
	}
	assert.Positive(t, parked, "the function parked the refused deltas")
	res, err := processor.Repair(ctx, s.ddb, table, diffs, time.Now())
	require.NoError(t, err)
	assert.Equal(t, len(diffs), res.Repaired, "skipped %v, partial %v", res.Skipped, res.Partial)
	deliver(200)
	s.requireReconciled(t)
	t.Logf("deliveries: %v", e.stats)
}

func testInitErrors(t *testing.T, bin string) {
	tests := []struct{ env, mention string }{
		{"LEDGER_LAMBDA_MODE=sideways", `LEDGER_LAMBDA_MODE="sideways"`},
		{"LEDGER_MAX_ATTEMPTS=lots", `LEDGER_MAX_ATTEMPTS="lots": want an integer from 1 to 1000`},
		{"LEDGER_MARKER_TTL=2h", `LEDGER_MARKER_TTL="2h"`},
		{"LEDGER_BATCH_RECORDS=50", `LEDGER_BATCH_RECORDS="50"`},
		{"LEDGER_TABLE=no spaces allowed", `LEDGER_TABLE="no spaces allowed"`},
	}
	for _, tt := range tests {
		t.Run(strings.SplitN(tt.env, "=", 2)[0], func(t *testing.T) {
			api := newRuntimeAPI(t)
			cmd := exec.Command(bin)
			cmd.Env = append(lambdaEnv(api, "http://127.0.0.1:1", "ledger"), tt.env)
			done := make(chan error, 1)
			require.NoError(t, cmd.Start())
			go func() { done <- cmd.Wait() }()
			select {
			case ie := <-api.initErrs:
				assert.Equal(t, initErrorType, ie.header)
				assert.Equal(t, initErrorType, ie.errType)
				assert.Contains(t, ie.message, tt.mention)
			case <-time.After(20 * time.Second):
				t.Fatal("no init error posted")
			}
			select {
			case err := <-done:
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit)
				assert.Equal(t, exitInitError, exit.ExitCode())
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("the process did not exit after its init error")
			}
		})
	}
}

// seed is the randomized tests' seed: def, or $LEDGER_LAMBDA_SEED.
func seed(t *testing.T, def uint64) uint64 {
	if v := os.Getenv("LEDGER_LAMBDA_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "LEDGER_LAMBDA_SEED")
		return n
	}
	return def
}

// testDelivery writes a randomized workload in two phases and has the
// function consume the stream after each, through the simulated event
// source mapping; then the reports must equal the fold of the table.
func testDelivery(t *testing.T, bin, mode string, seed uint64) {
	ctx := context.Background()
	table := newTable(t)
	s := newStream(t, table)
	proxy := newFaultProxy(t, ddbtest.Endpoint(t))
	api := newRuntimeAPI(t)
	api.controlPlane.set(safeMapping("esm-1", mode))
	// Small runs: a batch commits in several transactions, so that failures
	// can land between them (partial batch responses).
	extra := []string{"LEDGER_LAMBDA_MODE=" + mode, "LEDGER_MAX_ITEMS_PER_RUN=12"}
	if mode == "tumbling" {
		// Small enough that windows also commit early, and in several
		// batches.
		extra = append(extra, "LEDGER_BATCH_RECORDS=100")
	}
	fn := newFunction(t, bin, api, lambdaEnv(api, proxy.srv.URL, table, extra...))
	proxy.kill = fn.kill
	fn.start()
	e := &esm{t: t, rng: rand.New(rand.NewPCG(seed, 99)), fn: fn, api: api, proxy: proxy, arn: s.arn, stats: map[string]int{}}

	// Most branches keep a business calendar of their own (the writer's
	// stamps; one branch is written without, the legacy rule).
	cals := ledgertest.TestCalendars()
	w := ledgertest.NewWorkload(seed)
	w.Stamp = cals.Stamper()
	delivered := 0
	var recs []events.DynamoDBEventRecord
	for phase := 0; phase < 2; phase++ {
		// The second phase also carries the function's own writes (reports,
		// markers or checkpoints, quarantine items) back through the stream.
		require.NoError(t, w.Run(ctx, s.ddb, table, 700))
		e.shard, recs = s.records(t)
		switch mode {
		case "standard":
			e.standard(recs, delivered)
		case "tumbling":
			e.tumbling(recs, delivered)
		}
		delivered = len(recs)
	}
	rs := s.requireReconciled(t)
	assert.Equal(t, w.Live(), rs.Transactions)
	// The reports equal the fold of the stamps (reconcile), and every
	// stamp is what an independent computation of the periods gives.
	checked, bad, err := cals.Check(ctx, s.ddb, table)
	require.NoError(t, err)
	assert.Empty(t, bad)
	assert.Positive(t, checked)
	if mode == "standard" {
		requireRunsDisjoint(t, s, recs)
	}

	lines := fn.emfLines()
	outcomes := map[string]int{}
	var applied, duplicates float64
	for _, l := range lines {
		outcomes[fmt.Sprint(l["Outcome"])]++
		if l["FinalInvoke"] == false && l["Outcome"] == "committed" {
			outcomes["early_commit"]++
		}
		for k, v := range l {
			if strings.HasPrefix(k, "ledger_records_total{") && strings.Contains(k, "outcome=applied") {
				applied += v.(float64)
			}
			if strings.HasPrefix(k, "ledger_records_total{") && strings.Contains(k, "outcome=duplicate") {
				duplicates += v.(float64)
			}
		}
	}
	require.NotEmpty(t, lines)
	if mode == "tumbling" {
		assert.NotZero(t, outcomes["early_commit"], "windows committed early")
		assert.NotZero(t, outcomes["carried"], "records carried in the state")

		// Everything again, as one final invocation: nothing may be applied.
		before := len(fn.emfLines())
		a := fn.invoke(api, e.windowEvent(recs, nil, time.Now(), true), -1)
		require.True(t, a.ok, "%s", a.body)
		after := fn.waitEMF(before)
		last := after[len(after)-1]
		for k, v := range last {
			if strings.HasPrefix(k, "ledger_records_total{") {
				assert.NotContains(t, k, "outcome=applied", "a full redelivery applied %v records", v)
			}
		}
		s.requireReconciled(t)
	} else {
		assert.NotZero(t, e.stats["partial_failure"], "partial batch responses happened")
	}
	assert.Greater(t, fn.starts, 3, "processes killed and restarted")
	t.Logf("%s: %d records, %d live transactions (%d invalid); workload %v; delivery %v; %d processes; invocation outcomes %v; applied %v, duplicates %v",
		mode, len(recs), rs.Transactions, rs.Invalid, w.Counts, e.stats, fn.starts, outcomes, applied, duplicates)
}

// requireRunsDisjoint checks the run markers directly: no stream record is
// claimed by two committed runs (alias markers, which claim nothing, aside).
func requireRunsDisjoint(t *testing.T, s *stream, recs []events.DynamoDBEventRecord) {
	t.Helper()
	index := map[string]int{}
	for i, r := range recs {
		index[r.EventID] = i
	}
	var items []map[string]ddbtypes.AttributeValue
	in := &dynamodb.ScanInput{TableName: aws.String(s.table), ConsistentRead: aws.Bool(true)}
	for {
		out, err := s.ddb.Scan(context.Background(), in)
		require.NoError(t, err)
		items = append(items, out.Items...)
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	claimed := make([]string, len(recs))
	runs, copies := 0, 0
	for _, it := range items {
		pk, _ := it["PK"].(*ddbtypes.AttributeValueMemberS)
		count, _ := it["recordCount"].(*ddbtypes.AttributeValueMemberN)
		last, _ := it["sequenceNumber"].(*ddbtypes.AttributeValueMemberS)
		if pk == nil || !strings.HasPrefix(pk.Value, "RUN#") || count == nil || count.Value == "0" || last == nil {
			continue
		}
		first, ok := index[strings.TrimPrefix(pk.Value, "RUN#")]
		require.True(t, ok, "marker %s of no delivered record", pk.Value)
		if from, ok := it[ledgertable.AttrFirstSequenceNumber].(*ddbtypes.AttributeValueMemberS); ok && from.Value != recs[first].Change.SequenceNumber {
			// A copy of a run's claim under the key a version before
			// counted changes uses (ledgertable.RekeyRunMarker): it names the
			// run that starts at from, whose own marker is checked.
			copies++
			continue
		}
		runs++
		for i := first; i < len(recs) && processor.CompareSequence(recs[i].Change.SequenceNumber, last.Value) <= 0; i++ {
			if claimed[i] != "" {
				t.Errorf("record %d (%s) claimed by two runs: %s and %s", i, recs[i].Change.SequenceNumber, claimed[i], pk.Value)
			}
			claimed[i] = pk.Value
		}
	}
	require.NotZero(t, runs)
	t.Logf("%d runs, %d copies of a run's claim under an older version's key", runs, copies)
}

// testRedeliveryFromEarlierStart delivers transaction a, then a change
// that commits nothing (so leaves no run marker), then transaction b, each
// in its own batch; then the three again from a's batch start, as a
// mapping resuming from an older checkpoint would. Nothing may be applied
// twice. The change in between is a tenant item (not a transaction), or a
// modify of a transaction that changes no aggregated field (a zero delta).
func testRedeliveryFromEarlierStart(t *testing.T, bin string) {
	str := func(v string) ddbtypes.AttributeValue { return &ddbtypes.AttributeValueMemberS{Value: v} }
	txn := func(id, note string) map[string]ddbtypes.AttributeValue {
		return map[string]ddbtypes.AttributeValue{"PK": str("TENANT#t#BRANCH#b#TRANSACTION"), "SK": str("2024-01-01#" + id),
			"entityType": str("TRANSACTION"), "id": str(id), "type": str("INCOME"), "amount": &ddbtypes.AttributeValueMemberN{Value: "1"},
			"category": str("food"), "createdAt": str("2024-01-01T10:00:00Z"), "version": &ddbtypes.AttributeValueMemberN{Value: "1"},
			"description": str(note)}
	}
	tests := []struct {
		name    string
		between map[string]ddbtypes.AttributeValue
	}{
		{"AcrossABatchOfNoTransaction", map[string]ddbtypes.AttributeValue{"PK": str("TENANT#t"), "SK": str("METADATA"), "entityType": str("TENANT")}},
		{"AcrossAZeroDeltaModify", txn("a", "edited")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			table := newTable(t)
			s := newStream(t, table)
			api := newRuntimeAPI(t)
			fn := newFunction(t, bin, api, lambdaEnv(api, ddbtest.Endpoint(t), table))
			fn.start()
			for _, item := range []map[string]ddbtypes.AttributeValue{txn("a", ""), tt.between, txn("b", "")} {
				_, err := s.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
				require.NoError(t, err)
			}
			_, recs := s.records(t)
			require.Len(t, recs, 4) // the flags item the table's creation writes, then ours
			recs = recs[1:]
			e := &esm{t: t}
			for _, batch := range [][]events.DynamoDBEventRecord{recs[0:1], recs[1:2], recs[2:3], recs[0:3]} {
				a := fn.invoke(api, e.standardEvent(batch), -1)
				require.True(t, a.ok, "%s", a.body)
				assert.JSONEq(t, `{"batchItemFailures":[]}`, string(a.body))
			}
			s.requireReconciled(t)
		})
	}
}

func testMalformed(t *testing.T, bin string) {
	ctx := context.Background()
	table := newTable(t)
	s := newStream(t, table)
	api := newRuntimeAPI(t)
	fn := newFunction(t, bin, api, lambdaEnv(api, ddbtest.Endpoint(t), table))
	fn.start()

	// Real records to break: a few transactions of a small workload.
	require.NoError(t, ledgertest.NewWorkload(7).Run(ctx, s.ddb, table, 30))
	_, recs := s.records(t)
	var txns []events.DynamoDBEventRecord // valid inserts
	for _, r := range recs {
		if _, tx := processor.Transactions(processor.FromLambda(r)); r.EventName == "INSERT" && tx != nil {
			txns = append(txns, r)
		}
	}
	require.GreaterOrEqual(t, len(txns), 3)
	encode := func(r events.DynamoDBEventRecord) string {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		return string(b)
	}
	noType := strings.Replace(encode(txns[0]), `"amount":{"N":"`, `"amount":{},"was":{"S":"`, 1)
	numberAsJSONNumber := strings.Replace(encode(txns[1]), `"SizeBytes":`, `"SizeBytes":"many","x":`, 1)
	require.NotEqual(t, encode(txns[0]), noType)

	cases := []struct {
		name, payload string
		wantOK        bool
		mention       string
	}{
		{"garbage", `{"Records": [ {"eventID"`, false, "not valid JSON"},
		{"not an event", `[1,2,3]`, false, "not a DynamoDB stream event"},
		{"window event in standard mode", `{"Records":[],"shardId":"s","eventSourceARN":"a","state":{}}`, false, "LEDGER_LAMBDA_MODE=tumbling"},
		{"broken records", `{"Records":[` + noType + `,` + numberAsJSONNumber + `,` + encode(txns[2]) + `,5,{}]}`, true, ""},
	}
	for _, c := range cases {
		a := fn.invoke(api, []byte(c.payload), -1)
		require.False(t, a.killed)
		if !c.wantOK {
			require.False(t, a.ok, "%s: %s", c.name, a.body)
			var e answerError
			require.NoError(t, json.Unmarshal(a.body, &e), "%s", a.body)
			assert.Contains(t, e.ErrorMessage, c.mention, c.name)
			continue
		}
		require.True(t, a.ok, "%s: %s", c.name, a.body)
		assert.JSONEq(t, `{"batchItemFailures":[]}`, string(a.body), c.name)
	}
	assert.Equal(t, 1, fn.starts, "no crash, no restart")

	// The two broken transaction records were quarantined; the good one
	// applied.
	for _, r := range txns[:2] {
		k := aggregates.QuarantineKey(r.EventID)
		out, err := s.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
			Key: map[string]ddbtypes.AttributeValue{"PK": &ddbtypes.AttributeValueMemberS{Value: k.PK}, "SK": &ddbtypes.AttributeValueMemberS{Value: k.SK}}})
		require.NoError(t, err)
		assert.NotNil(t, out.Item, "record %s quarantined", r.EventID)
	}
	lines := fn.waitEMF(3)
	last := lines[len(lines)-1]
	assert.Equal(t, 5.0, last["ledger_records_total"], "%v", last)
	assert.Equal(t, 1.0, last["ledger_records_total{event=INSERT,outcome=applied}"], "%v", last)
	assert.Equal(t, 2.0, last["ledger_records_total{event=INSERT,outcome=quarantined}"], "%v", last)
	// The last two records (5 and {}) have no sequence number; the processor
	// takes them for repeats (see the report on processor.dedupe) or
	// quarantines them: either way they are counted, not fatal.
	num := func(k string) float64 { v, _ := last[k].(float64); return v }
	assert.Equal(t, 2.0, num("ledger_records_total{event=UNKNOWN,outcome=quarantined}")+num("ledger_records_total{event=UNKNOWN,outcome=duplicate}"), "%v", last)
}

// The function reads its event source mappings at cold start: unsafe
// settings, or none readable, are an init error naming each problem;
// LEDGER_ESM_CHECK=off (the documented override) starts it all the same.
func testMappingCheck(t *testing.T, bin string) {
	unsafe := safeMapping("esm-unsafe", "standard")
	unsafe["BisectBatchOnFunctionError"] = true
	delete(unsafe, "FunctionResponseTypes")
	tests := []struct {
		name     string
		setup    func(cp *fakeControlPlane)
		extra    []string
		mentions []string
	}{
		{"unsafe", func(cp *fakeControlPlane) { cp.set(unsafe) }, nil,
			[]string{"esm-unsafe", "BisectBatchOnFunctionError is true", "FunctionResponseTypes"}},
		{"tumbling mode, standard mapping", nil, []string{"LEDGER_LAMBDA_MODE=tumbling"},
			[]string{"TumblingWindowInSeconds is unset"}},
		{"no permission", func(cp *fakeControlPlane) { cp.fail(http.StatusForbidden, "AccessDeniedException") }, nil,
			[]string{"cannot verify", "AccessDeniedException", "LEDGER_ESM_CHECK"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newRuntimeAPI(t)
			if tt.setup != nil {
				tt.setup(api.controlPlane)
			}
			cmd := exec.Command(bin)
			cmd.Env = append(lambdaEnv(api, "http://127.0.0.1:1", "ledger"), tt.extra...)
			done := make(chan error, 1)
			require.NoError(t, cmd.Start())
			go func() { done <- cmd.Wait() }()
			select {
			case ie := <-api.initErrs:
				assert.Equal(t, unsafeMappingErrorType, ie.errType)
				for _, m := range tt.mentions {
					assert.Contains(t, ie.message, m)
				}
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("no init error posted")
			}
			select {
			case err := <-done:
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit)
				assert.Equal(t, exitInitError, exit.ExitCode())
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("the process did not exit after its init error")
			}
		})
	}
	t.Run("override", func(t *testing.T) {
		api := newRuntimeAPI(t)
		api.controlPlane.fail(http.StatusForbidden, "AccessDeniedException")
		fn := newFunction(t, bin, api, append(lambdaEnv(api, "http://127.0.0.1:1", "ledger"), "LEDGER_ESM_CHECK=off"))
		fn.start()
		a := fn.invoke(api, []byte(`{"Records":[]}`), -1)
		require.True(t, a.ok, "%s", a.body)
		assert.JSONEq(t, `{"batchItemFailures":[]}`, string(a.body))
		assert.Zero(t, api.controlPlane.callCount())
		// stderr is read asynchronously: on a loaded machine the warning
		// can reach the buffer after the invocation's answer.
		assert.Eventually(t, func() bool { return strings.Contains(fn.logs(), "LEDGER_ESM_CHECK=off") }, 10*time.Second, 10*time.Millisecond,
			"the disabled check is logged: %s", fn.logs())
	})
}
