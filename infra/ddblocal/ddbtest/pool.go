package ddbtest

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ledger-dev/ledger/table"
)

// Pool is the ledger tables of one test package, all created together
// before any of its tests writes: DynamoDB Local slows writes to tables
// created after its stream holds many records, enough for short leases to
// expire in a test that gets a late table. Declare one per package:
//
//	var tables = ddbtest.Pool{Size: 14}
//
// and take a table per test with tables.Table(t). The zero Pool is not
// usable: Size must be at least one.
type Pool struct {
	// Size is how many tables the pool creates: one per test that takes
	// one (and a spare).
	Size int
	// Setup, when set, runs once right after the pool's tables are made,
	// with the first taker's t and the client that made them: for tables
	// of other shapes a package needs created before any write.
	Setup func(t testing.TB, c *dynamodb.Client)

	once   sync.Once
	mu     sync.Mutex
	tables []string
	err    error
}

// Table returns a table of the pool that no other test of the binary has
// had, creating the pool on the first call. It fails the test when the
// pool could not be created (every taker sees that failure, not only the
// first) and when the pool is exhausted in a single run: Size is then too
// small and a late table would slow the test. When tests are repeated
// (-count > 1) and the pool is used up, it creates a fresh table instead
// (slower once the stream holds many records, but working). A test with a
// DynamoDB Local of its own (Own) gets a fresh table there instead.
func (p *Pool) Table(t testing.TB) string {
	t.Helper()
	if _, ok := ownEndpoint(t); ok {
		return NewTable(t, Client(t)) // a fresh instance: nothing to slow it
	}
	p.once.Do(func() { p.fill(t) })
	if p.err != nil {
		t.Fatal(p.err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tables) == 0 {
		if !repeated() {
			t.Fatalf("ddbtest: table pool of %d exhausted: raise its Size", p.Size)
		}
		return NewTable(t, Client(t))
	}
	name := p.tables[0]
	p.tables = p.tables[1:]
	return name
}

// fill creates the pool's tables and runs Setup. Until both are done,
// p.err says so: a t.Fatal inside them ends the Once with the error set.
func (p *Pool) fill(t testing.TB) {
	p.err = fmt.Errorf("ddbtest: creating the table pool failed in %s (see its log)", t.Name())
	if p.Size < 1 {
		p.err = fmt.Errorf("ddbtest: table pool of size %d", p.Size)
		return
	}
	c := Client(t)
	for range p.Size {
		name := TableName(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := table.CreateTables(ctx, c, name)
		cancel()
		if err != nil {
			p.err = fmt.Errorf("ddbtest: table pool: %w", err)
			return
		}
		p.tables = append(p.tables, name)
	}
	if p.Setup != nil {
		p.Setup(t, c)
	}
	p.err = nil
}

// repeated reports whether the test binary runs its tests more than once
// (go test -count N, N > 1).
func repeated() bool {
	f := flag.Lookup("test.count")
	return f != nil && f.Value.String() != "1"
}
