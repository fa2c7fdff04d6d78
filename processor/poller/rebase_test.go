package poller_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// serialRecorder is the env's recorder for writers running at once (the
// workload and a rebase): each write and its stream record are made under
// one lock, so the fake stream holds each item's records in the order the
// table applied them (the per-item order the stream guarantees). A probe
// (table.Probe's UpdateItem) is recorded as the MODIFY it makes; every
// other call goes to the table unrecorded (report items, applied items:
// records the consumers do not fold).
type serialRecorder struct {
	*dynamodb.Client
	rec *recorder
	mu  sync.Mutex
}

func (s *serialRecorder) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.PutItem(ctx, in, opts...)
}

func (s *serialRecorder) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.DeleteItem(ctx, in, opts...)
}

func (s *serialRecorder) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if !strings.Contains(aws.ToString(in.UpdateExpression), "#probe = :id") {
		return s.Client.UpdateItem(ctx, in, opts...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := *in
	cp.ReturnValues = ddbtypes.ReturnValueAllOld
	out, err := s.Client.UpdateItem(ctx, &cp, opts...)
	if err != nil {
		return nil, err
	}
	next := map[string]ddbtypes.AttributeValue{}
	for k, v := range out.Attributes {
		next[k] = v
	}
	v := in.ExpressionAttributeValues
	next[table.AttrChanges], next[table.AttrProbe], next[table.AttrSig] = v[":c1"], v[":id"], v[":sig"]
	s.rec.add(in.Key, out.Attributes, next)
	return &dynamodb.UpdateItemOutput{Attributes: next}, nil
}

// putWriterShaped creates a transaction of branch (tenant, branch) as the
// writer does (changes 1, its sig) through api.
func putWriterShaped(t *testing.T, api *serialRecorder, tableName, tenant, branch, id string) {
	t.Helper()
	k := aggregates.Key{PK: aggregates.TransactionPK(tenant, branch), SK: "2024-06-30#" + id}
	item := map[string]ddbtypes.AttributeValue{
		"PK": table.S(k.PK), "SK": table.S(k.SK), "entityType": table.S(aggregates.EntityTransaction),
		"type": table.S("INCOME"), "amount": &ddbtypes.AttributeValueMemberN{Value: "7.5"}, "category": table.S("food"),
		"createdAt": table.S("2024-06-30T12:00:00Z"), "version": table.Int(1),
	}
	table.Count(item, 1)
	_, err := api.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &tableName, Item: item})
	require.NoError(t, err)
}

// A rebase of one branch while a poller runs and a workload writes: keys
// written before counting (no changes), another path's writes (poisoned
// items, hard deletes, edits that keep the count), counted writes; during
// the first round, more writes, one of them a counted create of the branch
// committed after B1, so the first round's pin fails and a second lands.
// After the rebase and a final drain the reports reconcile, and the
// branch's applied item counts every record of its present keys
// (applied + probed = Σ changes + retired), with foreign acknowledged,
// fencedAt set and nothing of the rebase left.
func TestPoller_ARebaseWhileThePollerRunsLeavesTheBranchExactAndCounted(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 26)
	f := e.stream
	f.addShard("shardId-A", "")
	f.appendTo("shardId-A", e.write(t, 120)...) // before counting: no changes
	e.w.Counted = true
	f.appendTo("shardId-A", e.write(t, 120)...)
	e.drain(t, "p0", nil)

	const tenant, branch = "acme", "north"
	coord := table.CoordinationTableName(e.table)
	scope := processor.Scope{Tenant: tenant, Branch: branch}
	// Losses: records no consumer will see (the stream trimmed them
	// unread); and damage: a head of the branch off by 100.
	_ = e.write(t, 40)
	heads, err := e.ddb.Query(ctx, &dynamodb.QueryInput{TableName: &e.table, KeyConditionExpression: aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": table.S(aggregates.ReportPK(tenant, branch))}, ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	damaged := false
	for _, item := range heads.Items {
		if et, _ := table.String(item, table.AttrEntityType); et == aggregates.EntityReport && !damaged {
			_, err := e.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table, Key: table.Key(table.KeyOf(item)),
				UpdateExpression:          aws.String("SET #i = #i + :d"),
				ExpressionAttributeNames:  map[string]string{"#i": table.AttrTotalIncome},
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":d": &ddbtypes.AttributeValueMemberN{Value: "100"}}})
			require.NoError(t, err)
			damaged = true
		}
	}
	require.True(t, damaged)
	diffs, _, err := processor.Reconcile(ctx, e.ddb, e.table, scope)
	require.NoError(t, err)
	require.NotEmpty(t, diffs, "the branch's reports are off before the rebase")
	before, err := table.GetApplied(ctx, e.ddb, coord, tenant, branch)
	require.NoError(t, err)
	require.Positive(t, before.Foreign, "the branch holds records counting cannot prove")

	p1 := e.poller(t, "p1", nil, nil, nil)
	stopPoller := start(t, p1)
	api := &serialRecorder{Client: e.ddb, rec: e.rec}
	feed := func() {
		if recs := e.rec.take(); len(recs) > 0 {
			f.appendTo("shardId-A", recs...)
		}
	}
	feederDone, stopFeeder := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(feederDone)
		for {
			select {
			case <-stopFeeder:
				return
			case <-time.After(10 * time.Millisecond):
				feed()
			}
		}
	}()
	writerDone, stopWriter := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(writerDone)
		for {
			select {
			case <-stopWriter:
				return
			default:
			}
			if err := e.w.Run(ctx, api, e.table, 1); err != nil {
				t.Errorf("workload: %v", err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	var once sync.Once
	var logs []string
	var logMu sync.Mutex
	res, err := processor.Rebase(ctx, api, e.table, processor.RebaseOptions{
		Tenant: tenant, Branch: branch, StreamARN: f.arn, Wait: time.Minute, Poll: 20 * time.Millisecond, Rounds: 10,
		Log: func(format string, args ...any) {
			logMu.Lock()
			logs = append(logs, fmt.Sprintf(format, args...))
			logMu.Unlock()
			if !strings.HasPrefix(format, "B2:") {
				return
			}
			once.Do(func() {
				// Round 1, after its probes: the workload stops, and a
				// counted create of the branch is committed after B1.
				close(stopWriter)
				<-writerDone
				a, err := table.GetApplied(ctx, e.ddb, coord, tenant, branch)
				require.NoError(t, err)
				putWriterShaped(t, api, e.table, tenant, branch, "late")
				eventually(t, "the late create committed", time.Minute, func() bool {
					b, err := table.GetApplied(ctx, e.ddb, coord, tenant, branch)
					return err == nil && b.Applied > a.Applied
				})
			})
		},
	})
	require.NoError(t, err, "logs: %v", logs)
	assert.GreaterOrEqual(t, res.Rounds, 2, "the first round's pin failed on the late create")
	assert.Positive(t, res.Probes)

	close(stopFeeder)
	<-feederDone
	feed()
	stopPoller()
	e.drain(t, "p2", nil)
	diffs, _, err = processor.Reconcile(ctx, e.ddb, e.table, scope)
	require.NoError(t, err)
	for _, d := range diffs {
		t.Errorf("reconcile difference of %s/%s after the rebase: %s", tenant, branch, d)
	}
	t.Logf("rebase %+v; steps %v", res, logs)

	a, err := table.GetApplied(ctx, e.ddb, coord, tenant, branch)
	require.NoError(t, err)
	var sum int64
	p := dynamodb.NewQueryPaginator(e.ddb, &dynamodb.QueryInput{TableName: &e.table, KeyConditionExpression: aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":pk": table.S(aggregates.TransactionPK(tenant, branch))}, ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		require.NoError(t, err)
		for _, item := range out.Items {
			c, ok := table.Changes(item)
			require.True(t, ok, "every key probed has a count: %v", table.KeyOf(item))
			require.True(t, table.SigMatches(item), "and a matching sig: %v", table.KeyOf(item))
			sum += c
		}
	}
	assert.Equal(t, sum+a.Retired, a.Applied+a.Probed, "applied + probed = Σ changes + retired")
	assert.Equal(t, a.Foreign, a.ForeignAck, "every foreign record acknowledged")
	assert.NotEmpty(t, a.FencedAt)
	assert.Empty(t, a.Rebasing)
	assert.Empty(t, a.Open)
	assert.NotContains(t, a.ProbedBy, res.ID, "the rebase's own count is removed")
	assert.Equal(t, before.Epoch+int64(res.Transactions), a.Epoch)
}
