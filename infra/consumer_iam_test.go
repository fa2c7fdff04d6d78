package infra_test

import (
	"context"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/internal/ledgertest"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// txActions records, as IAM actions, the kind of every action inside the
// TransactWriteItems a consumer sends: AWS authorizes each action of a
// transaction as its single-item operation (a Delete needs
// dynamodb:DeleteItem, a ConditionCheck dynamodb:ConditionCheckItem).
type txActions struct {
	processor.DynamoDB
	mu   sync.Mutex
	seen map[string]bool
}

func (r *txActions) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	r.mu.Lock()
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			r.seen["dynamodb:PutItem"] = true
		case it.Update != nil:
			r.seen["dynamodb:UpdateItem"] = true
		case it.Delete != nil:
			r.seen["dynamodb:DeleteItem"] = true
		case it.ConditionCheck != nil:
			r.seen["dynamodb:ConditionCheckItem"] = true
		}
	}
	r.mu.Unlock()
	return r.DynamoDB.TransactWriteItems(ctx, in, opts...)
}

// The consumer Lambda's role grants every kind of action its commits
// carry, found by running the consumer, not listed by hand: with tenant
// roll-ups on, a commit that folds roll-up deltas deletes each delta item
// inside its transaction (processor/commit.go), which the role did not
// grant (DynamoDB Local does not enforce IAM: on AWS every folding commit
// was refused with AccessDenied, and retried for ever). Both guards the
// Lambda uses run: the shard checkpoint (tumbling windows) and the run
// marker (standard mode), each over a workload's records, twice (the
// second pass folds the deltas the first put).
func TestTemplate_TheConsumerRoleGrantsEveryActionItsCommitsCarry(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	rec := &txActions{DynamoDB: c, seen: map[string]bool{}}
	for i, guard := range []string{"checkpoint", "marker"} {
		name := ddbtest.NewTable(t, c)
		require.NoError(t, ledgertest.NewWorkload(uint64(31+i)).Run(ctx, c, name, 150))
		info, err := table.DescribeTable(ctx, c, name)
		require.NoError(t, err)
		p, err := processor.New(rec, processor.Config{Table: name}, nil)
		require.NoError(t, err)
		for range 2 {
			shards, err := ledgertest.ReadAll(ctx, dynamodbstreams.NewFromConfig(ddbtest.Config(t)), info.StreamARN, nil)
			require.NoError(t, err)
			for _, s := range shards {
				var g processor.Guard = p.MarkerGuard()
				if guard == "checkpoint" {
					g = p.ShardGuard(info.StreamARN, s.ID)
				}
				_, err = p.Process(ctx, g, s.Records)
				require.NoError(t, err)
			}
		}
	}
	var seen []string
	for a := range rec.seen {
		seen = append(seen, a)
	}
	sort.Strings(seen)
	assert.Contains(t, seen, "dynamodb:DeleteItem", "the folds ran (their deletes are what this test is about)")
	tpl := loadTemplate(t)
	granted := append(actions(roleStatement(t, tpl, "ConsumerRole", "CommitReports")), actions(roleStatement(t, tpl, "ConsumerRole", "FoldRollupDeltas"))...)
	for _, a := range seen {
		assert.True(t, slices.Contains(granted, a), "the consumer's commits carry %s; ConsumerRole grants %v on the table", a, granted)
	}
}
