package table_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	"github.com/ledger-dev/ledger/table"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

func flagsKey() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		table.AttrPK: &types.AttributeValueMemberS{Value: "SETTINGS#APP"},
		table.AttrSK: &types.AttributeValueMemberS{Value: "FLAGS#V1"},
	}
}

func TestCreateTable_CreatesOnceAndWritesDefaultFlags(t *testing.T) {
	ctx := t.Context()
	client := ddbtest.Client(t)
	name := ddbtest.TableName(t)

	before := time.Now().UTC().Truncate(time.Second)
	created, err := table.CreateTable(ctx, client, name)
	require.NoError(t, err)
	assert.True(t, created, "first CreateTable")

	got, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(name), Key: flagsKey(), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	require.NotNil(t, got.Item, "flags item")
	assert.Equal(t, &types.AttributeValueMemberS{Value: "FLAGS"}, got.Item["entityType"])
	assert.Equal(t, &types.AttributeValueMemberBOOL{Value: true}, got.Item["writesEnabled"])
	assert.Equal(t, &types.AttributeValueMemberN{Value: "1"}, got.Item["version"])
	updatedAt, ok := got.Item["updatedAt"].(*types.AttributeValueMemberS)
	require.True(t, ok, "updatedAt is %T; want S", got.Item["updatedAt"])
	ts, err := time.Parse(time.RFC3339, updatedAt.Value)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(updatedAt.Value, "Z"), "updatedAt %q is not UTC", updatedAt.Value)
	assert.False(t, ts.Before(before), "updatedAt %s before %s", ts, before)

	// An operator turns writes off; creating again must neither fail nor
	// touch the flags.
	_, err = client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(name),
		Key:                       flagsKey(),
		UpdateExpression:          aws.String("SET writesEnabled = :f"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":f": &types.AttributeValueMemberBOOL{Value: false}},
	})
	require.NoError(t, err)

	created, err = table.CreateTable(ctx, client, name)
	require.NoError(t, err)
	assert.False(t, created, "second CreateTable")

	got, err = client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(name), Key: flagsKey(), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.Equal(t, &types.AttributeValueMemberBOOL{Value: false}, got.Item["writesEnabled"], "flags after second CreateTable")

	info, err := table.DescribeTable(ctx, client, name)
	require.NoError(t, err)
	assert.NoError(t, info.Validate())
}

func TestCreateTable_ExistingTableGetsTTLButNoFlags(t *testing.T) {
	// A table someone else created (ledgerctl run twice, or a deploy) is
	// not ours to put flags into: a missing flags item means writes stay
	// disabled until an operator decides.
	ctx := t.Context()
	client := ddbtest.Client(t)
	name := ddbtest.TableName(t)
	_, err := client.CreateTable(ctx, table.CreateTableInput(name))
	require.NoError(t, err)

	created, err := table.CreateTable(ctx, client, name)
	require.NoError(t, err)
	assert.False(t, created)

	got, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(name), Key: flagsKey(), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	assert.Nil(t, got.Item, "CreateTable wrote flags into a table it did not create")

	ttl, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	require.NoError(t, err)
	assert.Equal(t, types.TimeToLiveStatusEnabled, ttl.TimeToLiveDescription.TimeToLiveStatus, "ttl enabled on an existing table")
}

func TestDescribeTable_ReadsTheDefinitionBack(t *testing.T) {
	ctx := t.Context()
	client := ddbtest.Client(t)
	name := ddbtest.NewTable(t, client)

	info, err := table.DescribeTable(ctx, client, name)
	require.NoError(t, err)

	s := func(n string) table.KeyInfo { return table.KeyInfo{Name: n, Type: types.ScalarAttributeTypeS} }
	assert.Equal(t, name, info.Name)
	assert.Equal(t, types.TableStatusActive, info.Status)
	assert.NotEmpty(t, info.ARN)
	assert.Equal(t, s("PK"), info.Hash)
	assert.Equal(t, s("SK"), info.Range)
	require.Len(t, info.GSIs, 2)
	assert.Equal(t, "GSI1", info.GSIs[0].Name)
	assert.Equal(t, s("GSI1PK"), info.GSIs[0].Hash)
	assert.Equal(t, s("GSI1SK"), info.GSIs[0].Range)
	assert.Equal(t, types.ProjectionTypeAll, info.GSIs[0].Projection)
	assert.Equal(t, "GSI2", info.GSIs[1].Name)
	assert.Equal(t, s("GSI2PK"), info.GSIs[1].Hash)
	assert.Equal(t, s("GSI2SK"), info.GSIs[1].Range)
	assert.Equal(t, types.ProjectionTypeAll, info.GSIs[1].Projection)
	assert.True(t, info.StreamEnabled)
	assert.Equal(t, types.StreamViewTypeNewAndOldImages, info.StreamViewType)
	assert.Contains(t, info.StreamARN, name+"/stream/")
	assert.Equal(t, types.BillingModePayPerRequest, info.BillingMode)
	assert.Equal(t, types.TimeToLiveStatusEnabled, info.TTLStatus)
	assert.Equal(t, "expiresAt", info.TTLAttribute)
	assert.NoError(t, info.Validate())
}

func TestDescribeTable_MissingTableIsResourceNotFound(t *testing.T) {
	client := ddbtest.Client(t)
	_, err := table.DescribeTable(t.Context(), client, ddbtest.TableName(t))
	var nf *types.ResourceNotFoundException
	assert.ErrorAs(t, err, &nf)
}

func TestValidate_CatchesLiveTablesWithTheWrongStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream *types.StreamSpecification
		want   string
	}{
		{"no stream", nil, "stream is disabled; want enabled with NEW_AND_OLD_IMAGES"},
		{"keys only", &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeKeysOnly}, "stream view type is KEYS_ONLY; want NEW_AND_OLD_IMAGES"},
		{"new image", &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewImage}, "stream view type is NEW_IMAGE; want NEW_AND_OLD_IMAGES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			client := ddbtest.Client(t)
			name := ddbtest.TableName(t)
			in := table.CreateTableInput(name)
			in.StreamSpecification = tc.stream
			_, err := client.CreateTable(ctx, in)
			require.NoError(t, err)

			info, err := table.DescribeTable(ctx, client, name)
			require.NoError(t, err)
			err = info.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), "table "+name+" does not match the ledger definition")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestValidate_NamesEveryDifference(t *testing.T) {
	s := func(n string) table.KeyInfo { return table.KeyInfo{Name: n, Type: types.ScalarAttributeTypeS} }
	good := func() table.TableInfo {
		return table.TableInfo{
			Name:  "ledger",
			Hash:  s("PK"),
			Range: s("SK"),
			GSIs: []table.IndexInfo{
				{Name: "GSI1", Hash: s("GSI1PK"), Range: s("GSI1SK"), Projection: types.ProjectionTypeAll},
				{Name: "GSI2", Hash: s("GSI2PK"), Range: s("GSI2SK"), Projection: types.ProjectionTypeAll},
			},
			StreamEnabled:  true,
			StreamViewType: types.StreamViewTypeNewAndOldImages,
			StreamARN:      "arn:aws:dynamodb:us-east-1:000000000000:table/ledger/stream/2026-01-01T00:00:00.000",
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*table.TableInfo)
		want   []string
	}{
		{"matching", func(*table.TableInfo) {}, nil},
		{"extra index is fine", func(ti *table.TableInfo) {
			ti.GSIs = append(ti.GSIs, table.IndexInfo{Name: "GSI3", Hash: s("X")})
		}, nil},
		{"numeric hash key", func(ti *table.TableInfo) { ti.Hash.Type = types.ScalarAttributeTypeN }, []string{"hash key is PK (N); want PK (S)"}},
		{"no range key", func(ti *table.TableInfo) { ti.Range = table.KeyInfo{} }, []string{"range key is none; want SK (S)"}},
		{"missing index", func(ti *table.TableInfo) { ti.GSIs = ti.GSIs[:1] }, []string{"index GSI2 is missing"}},
		{"index keys and projection", func(ti *table.TableInfo) {
			ti.GSIs[0].Range = table.KeyInfo{}
			ti.GSIs[0].Projection = types.ProjectionTypeKeysOnly
			ti.GSIs[1].Hash = s("GSI1PK")
		}, []string{
			"index GSI1 range key is none; want GSI1SK (S)",
			"index GSI1 projection is KEYS_ONLY; want ALL",
			"index GSI2 hash key is GSI1PK (S); want GSI2PK (S)",
		}},
		{"stream off and wrong keys together", func(ti *table.TableInfo) {
			ti.StreamEnabled = false
			ti.Range = s("sk")
		}, []string{"range key is sk (S); want SK (S)", "stream is disabled"}},
		{"stream without arn", func(ti *table.TableInfo) { ti.StreamARN = "" }, []string{"no stream ARN"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ti := good()
			tc.change(&ti)
			err := ti.Validate()
			if tc.want == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestCreateTableInput_MatchesTheDefinition(t *testing.T) {
	in := table.CreateTableInput("ledger")
	assert.Equal(t, "ledger", aws.ToString(in.TableName))
	assert.Equal(t, types.BillingModePayPerRequest, in.BillingMode)
	assert.Equal(t, types.StreamViewTypeNewAndOldImages, in.StreamSpecification.StreamViewType)
	var defs []string
	for _, d := range in.AttributeDefinitions {
		defs = append(defs, aws.ToString(d.AttributeName)+":"+string(d.AttributeType))
	}
	assert.ElementsMatch(t, []string{"PK:S", "SK:S", "GSI1PK:S", "GSI1SK:S", "GSI2PK:S", "GSI2SK:S"}, defs)
	require.Len(t, in.GlobalSecondaryIndexes, 2)
	for _, g := range in.GlobalSecondaryIndexes {
		assert.Equal(t, types.ProjectionTypeAll, g.Projection.ProjectionType, aws.ToString(g.IndexName))
		assert.Nil(t, g.ProvisionedThroughput, "on-demand tables take no provisioned throughput")
	}
}
