package writer_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/internal/ddbconflict"
	"github.com/ledger-dev/ledger/writer"
)

// TestLoad measures sustained POST /transactions throughput and latency
// against DynamoDB Local, over real HTTP, with N concurrent clients each
// sending its next request as soon as the last is answered (closed loop).
// Every request has its own Idempotency-Key, so each is one TransactWriteItems
// (the transaction and the idempotency record; a branch's first also sets
// its hasTransactions marker), the flags and the tenant's and branch's
// status read from their caches. It is skipped unless LEDGER_LOAD is set:
//
//	LEDGER_LOAD=1 go test ./writer -run TestLoad -v
//	LEDGER_LOAD=1 LEDGER_LOAD_CLIENTS=32 LEDGER_LOAD_DURATION=30s go test ./writer -run TestLoad -v
//
// LEDGER_LOAD_WARMUP (default 2s) is the time before measuring: requests
// sent then are not measured, but their statuses are reported (a branch's
// first creates, which set its marker, fall in it). LEDGER_LOAD_BRANCHES
// (default 8) spreads the clients over that many
// branches of one tenant (1: all on one branch). LEDGER_LOAD_AWS_LATENCY
// (e.g. 15ms) puts the AWS transaction-conflict emulation
// (internal/ddbconflict) in front of DynamoDB Local, holding each
// transaction's items that much longer than DynamoDB Local takes; the run
// then also reports the transactions the emulation cancelled and the share
// of requests answered 409 (issue 13, part 1). LEDGER_LOAD_ALTERNATE (e.g.
// 1s, with LEDGER_LOAD_AWS_LATENCY) switches the emulation off and on in
// turns of that length within one run and reports both phases, so that a
// busy machine's noise hits them alike; LEDGER_LOAD_CONTROL=1 adds a turn
// with the latency alone (no conflicts) between them, to tell what the
// latency costs on the machine from what the conflicts cost.
//
// The figures include the load generator and DynamoDB Local sharing the
// machine with the writer.
func TestLoad(t *testing.T) {
	if os.Getenv("LEDGER_LOAD") == "" {
		t.Skip("set LEDGER_LOAD=1 to run the load benchmark")
	}
	clients := envInt(t, "LEDGER_LOAD_CLIENTS", 16)
	duration := envDuration(t, "LEDGER_LOAD_DURATION", 20*time.Second)
	warmup := envDuration(t, "LEDGER_LOAD_WARMUP", 2*time.Second)

	branches := envInt(t, "LEDGER_LOAD_BRANCHES", 8)
	awsLatency := envDuration(t, "LEDGER_LOAD_AWS_LATENCY", 0)
	alternate := envDuration(t, "LEDGER_LOAD_ALTERNATE", 0)
	require.Positive(t, branches, "LEDGER_LOAD_BRANCHES")
	control := os.Getenv("LEDGER_LOAD_CONTROL") != ""
	require.False(t, alternate > 0 && awsLatency <= 0, "LEDGER_LOAD_ALTERNATE needs LEDGER_LOAD_AWS_LATENCY")
	require.False(t, control && alternate <= 0, "LEDGER_LOAD_CONTROL needs LEDGER_LOAD_ALTERNATE")

	e := newEnv(t, ownTable(t), func(c *writer.Config) { c.FlagsTTL = writer.DefaultFlagsTTL })
	var emu *ddbconflict.Transport
	var delay *delayTransport
	if awsLatency > 0 {
		if control {
			delay = &delayTransport{next: e.calls.Next, latency: awsLatency}
			e.calls.Next = delay
		}
		emu = &ddbconflict.Transport{Next: e.calls.Next, Latency: awsLatency}
		e.calls.Next = emu
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}, Timeout: 30 * time.Second}
	for b := range branches {
		e.addBranches("b" + strconv.Itoa(b))
	}

	results := make([][]loadSample, clients)
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+duration)
	// With LEDGER_LOAD_ALTERNATE the emulation is switched off and on in
	// turns of that length (off first; with LEDGER_LOAD_CONTROL a turn of
	// the latency alone between them), and each request counts for the
	// phase it was sent in: the phases share the machine's noise.
	phases := []string{"emulation off", "emulation on (AWS latency " + awsLatency.String() + ")"}
	if control {
		phases = []string{phases[0], "control: latency " + awsLatency.String() + " without conflicts", phases[1]}
	}
	on := len(phases) - 1
	phase := func(at time.Time) int {
		switch {
		case alternate > 0:
			return int(at.Sub(start)/alternate) % len(phases)
		case emu != nil:
			return on
		}
		return 0
	}
	set := func(p int) {
		emu.Off.Store(p != on)
		if delay != nil {
			delay.on.Store(p == 1)
		}
	}
	if alternate > 0 {
		set(0)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				next := start.Add((time.Since(start)/alternate + 1) * alternate)
				select {
				case <-stop:
					return
				case <-time.After(time.Until(next)):
					set(phase(next))
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				branch := "b" + strconv.Itoa((c+i)%branches)
				body := fmt.Sprintf(`{"type":"%s","amount":"%d.%02d","category":"cat-%d","paymentMethod":"card"}`,
					[]string{"INCOME", "EXPENSE"}[i%2], 1+i%500, i%100, i%7)
				req, err := http.NewRequest("POST", e.http.URL+"/v1/tenants/"+e.tenant+"/branches/"+branch+"/transactions", strings.NewReader(body))
				if err != nil {
					panic(err)
				}
				req.Header.Set("Authorization", "Bearer "+e.token)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", fmt.Sprintf("load-%d-%d", c, i))
				t0 := time.Now()
				resp, err := hc.Do(req)
				s := loadSample{at: t0, latency: time.Since(t0)}
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					s.status = resp.StatusCode
				}
				results[c] = append(results[c], s)
			}
		}()
	}
	wg.Wait()

	// Split the samples: warm-up, and the measured ones by phase.
	var created int
	byPhase := make([][]loadSample, len(phases))
	warmStatuses := map[int]int{}
	for _, rs := range results {
		for _, s := range rs {
			if s.status == http.StatusCreated {
				created++
			}
			switch {
			case s.at.Before(measureFrom):
				warmStatuses[s.status]++
			default:
				byPhase[phase(s.at)] = append(byPhase[phase(s.at)], s)
			}
		}
	}
	t.Logf("POST /transactions, %d clients, %d branches of one tenant, %s measured after %s warm-up (warm-up statuses %v)",
		clients, branches, duration, warmup, warmStatuses)
	secs := duration.Seconds()
	if alternate > 0 {
		secs /= float64(len(phases))
		t.Logf("%d phases in turns of %s: %.1f s measured in each", len(phases), alternate, secs)
	}
	failed := 0
	for p, samples := range byPhase {
		if len(samples) > 0 {
			failed += logLoad(t, phases[p], samples, secs)
		}
	}
	t.Logf("transaction conflicts (retried): %.0f; conditional check failures: create %.0f",
		testutil.ToFloat64(e.metrics.TransactionConflicts), testutil.ToFloat64(e.metrics.ConditionalCheckFailures.WithLabelValues("create")))
	t.Logf("DynamoDB calls: TransactWriteItems %d, GetItem %d, PutItem %d, UpdateItem %d",
		e.calls.Calls("TransactWriteItems"), e.calls.Calls("GetItem"), e.calls.Calls("PutItem"), e.calls.Calls("UpdateItem"))
	if emu != nil {
		cancelled, rejected := emu.Stats()
		t.Logf("AWS conflict emulation, latency %s: %d transactions cancelled, %d writes rejected", awsLatency, cancelled, rejected)
	}

	// Every 201 is exactly one stored transaction; every request has its
	// own Idempotency-Key, so none really conflicts with another: a 409 is
	// a failure.
	stored := 0
	for b := range branches {
		stored += countItems(t, e, e.tenant, "b"+strconv.Itoa(b))
	}
	assert.Equal(t, created, stored, "stored transactions equal 201 answers")
	assert.Zero(t, failed)
}

// delayTransport holds each TransactWriteItems' answer for latency while
// on: the emulation's latency without its conflicts, the control of a
// LEDGER_LOAD_CONTROL run.
type delayTransport struct {
	next    http.RoundTripper
	latency time.Duration
	on      atomic.Bool
}

func (d *delayTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := d.next.RoundTrip(req)
	if err != nil || !d.on.Load() || !strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".TransactWriteItems") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body) // release the connection first, as the emulation does
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	time.Sleep(d.latency)
	return resp, nil
}

type loadSample struct {
	at      time.Time
	latency time.Duration
	status  int
}

// logLoad logs the throughput, latency quantiles of the 201s and the
// statuses of samples measured over secs seconds, and returns how many were
// not 201.
func logLoad(t *testing.T, phase string, samples []loadSample, secs float64) (failed int) {
	var lat []time.Duration
	statuses := map[int]int{}
	for _, s := range samples {
		statuses[s.status]++
		if s.status == http.StatusCreated {
			lat = append(lat, s.latency)
		}
	}
	failed = len(samples) - len(lat)
	t.Logf("%s: %d requests, %.0f req/s, 201: %.0f/s, 409: %d (%.1f %%), statuses %v",
		phase, len(samples), float64(len(samples))/secs, float64(len(lat))/secs,
		statuses[http.StatusConflict], 100*float64(statuses[http.StatusConflict])/float64(len(samples)), statuses)
	if len(lat) == 0 {
		return failed
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(100 * time.Microsecond) }
	t.Logf("%s: 201 latency p50 %s, p90 %s, p99 %s, max %s", phase, q(0.50), q(0.90), q(0.99), q(1))
	return failed
}

func countItems(t *testing.T, e *env, tenant, branch string) int {
	pk := "TENANT#" + tenant + "#BRANCH#" + branch + "#TRANSACTION"
	n := 0
	p := dynamodb.NewQueryPaginator(e.ddb, &dynamodb.QueryInput{
		TableName: &e.table, KeyConditionExpression: ptr("PK = :pk"), Select: ddbtypes.SelectCount,
		ExpressionAttributeValues: map[string]ddbAV{":pk": s(pk)}, ConsistentRead: ptr(true),
	})
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		require.NoError(t, err)
		n += int(out.Count)
	}
	return n
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, name)
	return d
}
