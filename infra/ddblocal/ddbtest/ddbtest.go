// Package ddbtest is the tests' side of DynamoDB Local: one shared instance
// per test binary (Main, Endpoint, Config, Client), fresh tables with
// unique names (NewTable, TableName), and the pool of tables a package
// creates before any of its tests writes (Pool).
//
// Only tests import it: it links package testing, which the product's
// binaries must not (the launcher itself, package ddblocal, is product
// code that `ledgerctl run` uses).
package ddbtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal"
	"github.com/ledger-dev/ledger/table"
)

// EnvTestEndpoint names the environment variable that points tests at an
// already running DynamoDB (Local) instead of starting one, e.g.
// LEDGER_TEST_DYNAMODB_ENDPOINT=http://127.0.0.1:8000.
const EnvTestEndpoint = "LEDGER_TEST_DYNAMODB_ENDPOINT"

// The one instance a test binary shares. It starts on the first Endpoint
// call, never more than once, and Main stops it.
var shared struct {
	installed atomic.Bool // Main is running the tests
	once      sync.Once
	inst      *ddblocal.Instance
	endpoint  string
	err       error
}

// Main runs a test binary's tests with a shared DynamoDB Local and exits
// with their status. Use it as the package's TestMain:
//
//	func TestMain(m *testing.M) { ddbtest.Main(m) }
//
// The instance starts lazily, on the first Endpoint (or Config, Client,
// NewTable) call, so a binary whose selected tests never touch DynamoDB
// starts nothing. Main stops it after the tests; a failure to stop turns a
// passing run into a failing one.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	shared.installed.Store(true)
	code := m.Run()
	if shared.inst != nil {
		if err := shared.inst.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "ddbtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// owned maps a test's name to the endpoint of the DynamoDB Local it has
// to itself (Own).
var owned sync.Map

// Own gives the test t (and its subtests) a DynamoDB Local of its own,
// started now and stopped when t ends: Endpoint, Config, Client and a
// Pool's Table then use it, and a Pool's Table creates a fresh table in
// it. It is for a long test that runs beside the rest of its package
// (t.Parallel): DynamoDB Local serves its requests one at a time and
// slows as its stream grows (Pool), so two long tests on the shared
// instance take longer side by side than one after the other, and each
// on its own instance neither waits for the other's requests nor reads
// behind the other's records. With $LEDGER_TEST_DYNAMODB_ENDPOINT set
// the test uses that endpoint like every other.
func Own(t *testing.T) {
	t.Helper()
	if os.Getenv(EnvTestEndpoint) != "" {
		return
	}
	if !shared.installed.Load() {
		t.Fatal("ddbtest: the package's TestMain must call ddbtest.Main(m) to use DynamoDB Local")
	}
	name := t.Name()
	ctx, cancel := context.WithTimeout(context.Background(), 2*ddblocal.DefaultStartTimeout)
	defer cancel()
	start := time.Now()
	inst, err := ddblocal.Start(ctx, ddblocal.Options{})
	if err != nil {
		t.Fatalf("ddbtest: a DynamoDB Local of the test's own: %v", err)
	}
	t.Logf("ddbtest: DynamoDB Local of the test's own at %s started in %s", inst.Endpoint, time.Since(start).Round(time.Millisecond))
	owned.Store(name, inst.Endpoint)
	t.Cleanup(func() {
		owned.Delete(name)
		if err := inst.Stop(); err != nil {
			t.Errorf("ddbtest: %v", err)
		}
	})
}

// Long marks a long test: it runs beside the package's other long tests
// (t.Parallel), each on a DynamoDB Local of its own (Own), where it
// neither waits for the others' requests nor reads behind their records.
// In session 18's CI run processor/poller's tests took 1,465 s one after
// the other on one instance, the long ones 1,020 s of it, mostly waiting
// on lease durations and on the shared instance; processor's randomized
// runs shared one instance side by side.
func Long(t *testing.T) {
	t.Helper()
	t.Parallel()
	Own(t)
}

// ownEndpoint is the endpoint of the DynamoDB Local t, or the nearest of
// the tests it is a subtest of, has to itself (Own), if there is one.
func ownEndpoint(t testing.TB) (string, bool) {
	for n := t.Name(); ; {
		if ep, ok := owned.Load(n); ok {
			return ep.(string), true
		}
		i := strings.LastIndexByte(n, '/')
		if i < 0 {
			return "", false
		}
		n = n[:i]
	}
}

// Endpoint returns the shared DynamoDB Local's endpoint, starting it on
// first use, or $LEDGER_TEST_DYNAMODB_ENDPOINT when that is set, or the
// one t's test has to itself (Own). It fails the test if the instance
// cannot be started, and if the package's TestMain does not call Main
// (nothing would stop the instance).
func Endpoint(t testing.TB) string {
	t.Helper()
	if ep := os.Getenv(EnvTestEndpoint); ep != "" {
		return ep
	}
	if ep, ok := ownEndpoint(t); ok {
		return ep
	}
	if !shared.installed.Load() {
		t.Fatal("ddbtest: the package's TestMain must call ddbtest.Main(m) to use the shared DynamoDB Local")
	}
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*ddblocal.DefaultStartTimeout)
		defer cancel()
		start := time.Now()
		shared.inst, shared.err = ddblocal.Start(ctx, ddblocal.Options{})
		if shared.err == nil {
			shared.endpoint = shared.inst.Endpoint
			t.Logf("ddbtest: DynamoDB Local at %s started in %s", shared.endpoint, time.Since(start).Round(time.Millisecond))
		}
	})
	if shared.err != nil {
		t.Fatalf("ddbtest: %v", shared.err)
	}
	return shared.endpoint
}

// Config returns an AWS configuration for the shared instance (see
// infra.LocalConfig; opts can wrap its transport).
func Config(t testing.TB, opts ...infra.ConfigOption) aws.Config {
	t.Helper()
	cfg, err := infra.LocalConfig(context.Background(), Endpoint(t), opts...)
	if err != nil {
		t.Fatalf("ddbtest: %v", err)
	}
	return cfg
}

// Client returns a DynamoDB client for the shared instance.
func Client(t testing.TB, opts ...infra.ConfigOption) *dynamodb.Client {
	t.Helper()
	return dynamodb.NewFromConfig(Config(t, opts...))
}

var tableSeq atomic.Int64

// NewTable creates a fresh ledger table (table.CreateTable: keys, indexes,
// stream, TTL and the default flags item) and its coordination table
// (table.CoordinationTableName) with a name no other test in any binary
// uses, and returns the ledger table's name. Tables are not deleted: an
// in-memory instance goes away with the binary, and on an external endpoint
// they are left for inspection. Deleting them would not help either:
// DynamoDB Local's stream slowdown stays after its tables are gone.
func NewTable(t testing.TB, api table.TableAPI) string {
	t.Helper()
	name := TableName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := table.CreateTables(ctx, api, name); err != nil {
		t.Fatalf("ddbtest: %v", err)
	}
	return name
}

// TableName returns a table name unique to this call: the test's name,
// made safe for DynamoDB, with the process id and a counter.
func TableName(t testing.TB) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '_':
			return r
		}
		return '_'
	}, t.Name())
	if len(clean) > 200 {
		clean = clean[:200]
	}
	return fmt.Sprintf("%s-%d-%d", clean, os.Getpid(), tableSeq.Add(1))
}
