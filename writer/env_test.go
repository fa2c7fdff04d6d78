package writer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/writer"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

const testSecret = "writer-test-secret-0123456789abcdef-0123456789"

var cursorKey = []byte("writer-test-cursor-key-0123456789abcdef")

// The tables this package's tests use, all created before any test writes.
// Most tests share one table, each under tenants of its own; the ones that
// change the flags singleton or read the stream get their own.
const dedicatedTables = 12

var (
	tables = ddbtest.Pool{Size: dedicatedTables + 1}
	shared struct {
		once sync.Once
		name string
	}
)

func sharedTable(t *testing.T) string {
	t.Helper()
	shared.once.Do(func() { shared.name = tables.Table(t) })
	if shared.name == "" {
		t.Fatal("no shared table: the first test to want it failed to get one")
	}
	return shared.name
}

// ownTable returns a table no other test uses.
func ownTable(t *testing.T) string { return tables.Table(t) }

var tenantSeq atomic.Int64

// uniqueTenant returns a tenant id no other test uses.
func uniqueTenant() string {
	return fmt.Sprintf("t%d-%d", time.Now().UnixNano()%1e9, tenantSeq.Add(1))
}

// env is a writer served over real HTTP in front of DynamoDB Local.
type env struct {
	t       *testing.T
	table   string
	tenant  string
	branch  string
	token   string
	ddb     *dynamodb.Client // straight to the table, for checks
	calls   *ledgertest.FaultTransport
	srv     *writer.Server
	http    *httptest.Server
	reg     *prometheus.Registry
	metrics *writer.Metrics
	seed    *seeder
	// own are the tenants this env created (its own and newTenant's): the
	// directory checks judge their items only, since other tests write the
	// shared table while a scan, which is no snapshot, reads it.
	own map[string]bool
}

type envOption func(*writer.Config)

func newEnv(t *testing.T, table string, opts ...envOption) *env {
	t.Helper()
	calls := &ledgertest.FaultTransport{}
	cfgAWS := ddbtest.Config(t, infra.WithTransportWrapper(func(next http.RoundTripper) http.RoundTripper {
		calls.Next = next
		return calls
	}))
	auth, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(testSecret)})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	cfg := writer.Config{Table: table, Auth: auth, CursorKey: cursorKey, Gatherer: reg, FlagsTTL: 50 * time.Millisecond, FlagsTimeout: 30 * time.Second, RequestTimeout: time.Minute}
	for _, o := range opts {
		o(&cfg)
	}
	metrics := writer.NewMetrics(reg)
	srv, err := writer.New(dynamodb.NewFromConfig(cfgAWS), cfg, metrics)
	require.NoError(t, err)
	hs := httptest.NewServer(validated(t, srv)) // every exchange checked against the OpenAPI document
	t.Cleanup(hs.Close)
	e := &env{t: t, table: table, tenant: uniqueTenant(), branch: "north", ddb: ddbtest.Client(t), calls: calls, srv: srv, http: hs, reg: reg, metrics: metrics}
	e.token = e.tokenFor(e.tenant)
	e.seed = newSeeder(t, table)
	e.seed.tenant(e.tenant)
	e.own = map[string]bool{e.tenant: true}
	e.addBranches("north", "south")
	return e
}

// seeder creates tenants and branches through a writer of its own, with an
// admin token, so that the env's metrics and DynamoDB call counts see only
// what the test itself sends.
type seeder struct {
	t     *testing.T
	srv   http.Handler // the writer, its exchanges checked against the OpenAPI document
	token string
}

func newSeeder(t *testing.T, table string) *seeder {
	auth, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(testSecret)})
	require.NoError(t, err)
	srv, err := writer.New(ddbtest.Client(t), writer.Config{Table: table, Auth: auth, CursorKey: cursorKey, FlagsTTL: 50 * time.Millisecond, FlagsTimeout: 30 * time.Second, RequestTimeout: time.Minute}, nil)
	require.NoError(t, err)
	tok, err := writer.NewToken([]byte(testSecret), writer.TokenOptions{Admin: true})
	require.NoError(t, err)
	return &seeder{t: t, srv: validated(t, srv), token: tok}
}

// post sends a POST with an admin token and a fresh Idempotency-Key to the
// seeder's handler and requires 201.
func (sd *seeder) post(path, body string) {
	sd.t.Helper()
	rec := httptest.NewRecorder()
	hr := httptest.NewRequest("POST", path, strings.NewReader(body))
	hr.Header.Set("Authorization", "Bearer "+sd.token)
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Idempotency-Key", newKey())
	sd.srv.ServeHTTP(rec, hr)
	require.Equal(sd.t, http.StatusCreated, rec.Code, "seed %s: answer %s", path, rec.Body)
}

func (sd *seeder) tenant(id string) {
	sd.t.Helper()
	sd.post("/v1/tenants", fmt.Sprintf(`{"id":%q,"name":"Tenant %s"}`, id, id))
}

var documentSeq atomic.Int64

// uniqueDocument returns a branch document number no other test uses.
func uniqueDocument() string {
	return fmt.Sprintf("D%d%d", time.Now().UnixNano()%1e12, documentSeq.Add(1))
}

func (sd *seeder) branch(tenant, id string) {
	sd.t.Helper()
	sd.post("/v1/tenants/"+tenant+"/branches", fmt.Sprintf(`{"id":%q,"name":"Branch %s","document":%q}`, id, id, uniqueDocument()))
}

// addBranches creates active branches of the env's tenant (newEnv creates
// north and south): a transaction needs its tenant and branch to exist and
// be active.
func (e *env) addBranches(ids ...string) {
	e.t.Helper()
	for _, id := range ids {
		e.seed.branch(e.tenant, id)
	}
}

func (e *env) tokenFor(tenant string) string {
	tok, err := writer.NewToken([]byte(testSecret), writer.TokenOptions{Tenant: tenant})
	require.NoError(e.t, err)
	return tok
}

func (e *env) base() string { return "/v1/tenants/" + e.tenant + "/branches/" + e.branch }

// reply is an HTTP answer.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.Status, r.Body) }

func (r reply) problem(t *testing.T) writer.Problem {
	t.Helper()
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), "answer %s", r)
	var p writer.Problem
	require.NoError(t, json.Unmarshal(r.Body, &p))
	require.Equal(t, r.Status, p.Status)
	return p
}

func (r reply) transaction(t *testing.T) writer.Transaction {
	t.Helper()
	var tx writer.Transaction
	require.NoError(t, json.Unmarshal(r.Body, &tx), "answer %s", r)
	return tx
}

// req is a request to send; headers are name, value pairs.
type req struct {
	method, path string
	body         any // string, []byte or a value to marshal; nil for none
	headers      []string
	noAuth       bool
}

func (e *env) send(rq req) reply {
	e.t.Helper()
	var body io.Reader
	switch b := rq.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(e.t, err)
		body = bytes.NewReader(raw)
	}
	hr, err := http.NewRequest(rq.method, e.http.URL+rq.path, body)
	require.NoError(e.t, err)
	if !rq.noAuth {
		hr.Header.Set("Authorization", "Bearer "+e.token)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(rq.headers); i += 2 {
		if rq.headers[i+1] == "" {
			hr.Header.Del(rq.headers[i])
		} else {
			hr.Header.Set(rq.headers[i], rq.headers[i+1])
		}
	}
	resp, err := e.http.Client().Do(hr)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: raw}
}

var idemSeq atomic.Int64

func newKey() string { return fmt.Sprintf("key-%d-%d", time.Now().UnixNano(), idemSeq.Add(1)) }

// create posts a transaction with a fresh idempotency key and requires 201.
func (e *env) create(body string) writer.Transaction {
	e.t.Helper()
	r := e.send(req{method: "POST", path: e.base() + "/transactions", body: body, headers: []string{"Idempotency-Key", newKey()}})
	require.Equal(e.t, http.StatusCreated, r.Status, "answer %s", r)
	return r.transaction(e.t)
}

// dynamoCalls is how many DynamoDB requests the server has sent so far.
func (e *env) dynamoCalls() int {
	n := 0
	for _, op := range []string{"GetItem", "BatchGetItem", "Query", "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"} {
		n += e.calls.Calls(op)
	}
	return n
}

// countTransactions counts the items of the env's branch partition.
// countTransactions counts the branch's transactions: the items of its
// transaction partition that are not tombstones (a deleted transaction's
// item keeps its key, without its fields, under deletedAt).
func (e *env) countTransactions(tenant, branch string) int {
	e.t.Helper()
	pk := "TENANT#" + tenant + "#BRANCH#" + branch + "#TRANSACTION"
	out, err := e.ddb.Query(context.Background(), &dynamodb.QueryInput{
		TableName: &e.table, KeyConditionExpression: ptr("PK = :pk"),
		FilterExpression:          ptr("attribute_not_exists(#del)"),
		ExpressionAttributeNames:  map[string]string{"#del": aggregates.AttrDeletedAt},
		ExpressionAttributeValues: map[string]ddbAV{":pk": s(pk)}, ConsistentRead: ptr(true),
	})
	require.NoError(e.t, err)
	return len(out.Items)
}

func ptr[T any](v T) *T { return &v }

type ddbAV = ddbtypes.AttributeValue

func s(v string) ddbAV { return &ddbtypes.AttributeValueMemberS{Value: v} }
