package ddbtest_test

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

// fatalTB records the message of a Fatal or Fatalf and ends the goroutine,
// as testing.T does, without failing the test that runs it.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatal(args ...any) { f.msg = fmt.Sprint(args...); runtime.Goexit() }
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalOf runs take with a fatalTB and returns its fatal message ("" when
// take returned).
func fatalOf(t *testing.T, take func(testing.TB)) string {
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); take(tb) }()
	<-done
	return tb.msg
}

func TestPool_HandsOutEachTableOnceAndFailsWhenExhausted(t *testing.T) {
	setups := 0
	p := &ddbtest.Pool{Size: 2, Setup: func(testing.TB, *dynamodb.Client) { setups++ }}
	a, b := p.Table(t), p.Table(t)
	assert.NotEqual(t, a, b)
	assert.Equal(t, 1, setups)
	for _, name := range []string{a, b} {
		info, err := table.DescribeTable(context.Background(), ddbtest.Client(t), name)
		require.NoError(t, err, name)
		assert.NotEmpty(t, info.StreamARN, "a ledger table, stream and all")
	}
	if flag.Lookup("test.count").Value.String() != "1" {
		// Tests repeated: a used-up pool makes a fresh table instead.
		assert.NotContains(t, []string{a, b}, p.Table(t))
		return
	}
	assert.Contains(t, fatalOf(t, func(tb testing.TB) { p.Table(tb) }), "table pool of 2 exhausted")
}

// A pool whose creation failed fails every taker with the reason, not only
// the first (the rest would otherwise find an empty pool).
func TestPool_AFailedSetupFailsEveryTaker(t *testing.T) {
	p := &ddbtest.Pool{Size: 1, Setup: func(tb testing.TB, _ *dynamodb.Client) { tb.Fatal("setup broke") }}
	assert.Equal(t, "setup broke", fatalOf(t, func(tb testing.TB) { p.Table(tb) }))
	for range 2 {
		assert.Contains(t, fatalOf(t, func(tb testing.TB) { p.Table(tb) }), "creating the table pool failed in "+t.Name())
	}
	assert.Contains(t, fatalOf(t, func(tb testing.TB) { (&ddbtest.Pool{}).Table(tb) }), "table pool of size 0")
}

// A test with a DynamoDB Local of its own gets its tables there, the rest
// of the binary keeps the shared instance, and the own one stops with the
// test.
func TestOwn_ATestsOwnDynamoDBLocalHoldsItsTablesAndStopsWithIt(t *testing.T) {
	ctx := context.Background()
	shared := ddbtest.Endpoint(t)
	var own, name string
	t.Run("own", func(t *testing.T) {
		ddbtest.Own(t)
		own = ddbtest.Endpoint(t)
		assert.NotEqual(t, shared, own, "a test that owns an instance is pointed at it")
		name = (&ddbtest.Pool{Size: 1}).Table(t)
		_, err := ddbtest.Client(t).DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &name})
		require.NoError(t, err, "the pool's table is made in the test's own instance")
	})
	assert.Equal(t, shared, ddbtest.Endpoint(t), "the shared instance once the owner ended")
	_, err := ddbtest.Client(t).DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &name})
	require.Error(t, err, "the own instance's table is not in the shared one")
	cfg, err := infra.LocalConfig(ctx, own)
	require.NoError(t, err)
	_, err = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }).ListTables(ctx, &dynamodb.ListTablesInput{})
	require.Error(t, err, "the own instance stopped with its test")
}
