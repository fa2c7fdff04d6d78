package bench

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra"
	"github.com/ledger-dev/ledger/infra/ddblocal"
	ledgertable "github.com/ledger-dev/ledger/table"
)

// The memory backlog's table has TTL off (DynamoDB Local's TTL job would
// hold its write lock for minutes at a time over a million items).
func TestDisableTTL_TurnsOffTheTablesTTL(t *testing.T) {
	ctx := context.Background()
	in, err := ddblocal.Start(ctx, ddblocal.Options{})
	require.NoError(t, err)
	defer func() { _ = in.Stop() }()
	cfg, err := infra.LocalConfig(ctx, in.Endpoint)
	require.NoError(t, err)
	db := dynamodb.NewFromConfig(cfg)
	ttl := func() ddbtypes.TimeToLiveStatus {
		out, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String("backlog")})
		require.NoError(t, err)
		return out.TimeToLiveDescription.TimeToLiveStatus
	}
	err = ledgertable.CreateTables(ctx, db, "backlog")
	require.NoError(t, err)
	require.Equal(t, ddbtypes.TimeToLiveStatusEnabled, ttl(), "the ledger table has TTL on")
	require.NoError(t, disableTTL(ctx, db, "backlog"))
	assert.Equal(t, ddbtypes.TimeToLiveStatusDisabled, ttl())
}
