package table

// This file is the table's definition: keys PK/SK, two overloaded global
// secondary indexes (GSI1, GSI2) with projection ALL, on-demand billing, a
// NEW_AND_OLD_IMAGES stream and TTL on expiresAt. CreateTable makes it
// (idempotently), DescribeTable reads back what a live table looks like and
// TableInfo.Validate says how it differs from the definition.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DefaultTableName is the table's name when none is configured
// (LEDGER_TABLE, read in cmd/).
const DefaultTableName = "ledger"

// Attribute names of the table's keys, index keys and TTL.
const (
	AttrPK        = "PK"
	AttrSK        = "SK"
	AttrGSI1PK    = "GSI1PK"
	AttrGSI1SK    = "GSI1SK"
	AttrGSI2PK    = "GSI2PK"
	AttrGSI2SK    = "GSI2SK"
	AttrExpiresAt = "expiresAt"
)

// Names of the global secondary indexes.
const (
	IndexGSI1 = "GSI1"
	IndexGSI2 = "GSI2"
)

// StreamViewType is the view type the table's stream must have: the
// processor folds new − old, so it needs both images.
const StreamViewType = types.StreamViewTypeNewAndOldImages

// tableWaitMax bounds how long CreateTable waits for the table to become
// ACTIVE; the caller's context can cut it shorter.
const tableWaitMax = 5 * time.Minute

// TableAPI is the part of the DynamoDB client that this package uses.
// *dynamodb.Client satisfies it.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

var _ TableAPI = (*dynamodb.Client)(nil)

// KeyInfo is one key attribute of a table or index.
type KeyInfo struct {
	Name string
	Type types.ScalarAttributeType // S, N or B
}

func (k KeyInfo) String() string {
	if k.Name == "" {
		return "none"
	}
	return k.Name + " (" + string(k.Type) + ")"
}

// IndexInfo describes one global secondary index.
type IndexInfo struct {
	Name       string
	Hash       KeyInfo
	Range      KeyInfo // zero when the index has no range key
	Projection types.ProjectionType
	Status     types.IndexStatus
}

// The definition, in one place: CreateTableInput builds from it and
// Validate compares against it.
var (
	tableHash  = KeyInfo{AttrPK, types.ScalarAttributeTypeS}
	tableRange = KeyInfo{AttrSK, types.ScalarAttributeTypeS}
	tableGSIs  = []IndexInfo{
		{Name: IndexGSI1, Hash: KeyInfo{AttrGSI1PK, types.ScalarAttributeTypeS}, Range: KeyInfo{AttrGSI1SK, types.ScalarAttributeTypeS}, Projection: types.ProjectionTypeAll},
		{Name: IndexGSI2, Hash: KeyInfo{AttrGSI2PK, types.ScalarAttributeTypeS}, Range: KeyInfo{AttrGSI2SK, types.ScalarAttributeTypeS}, Projection: types.ProjectionTypeAll},
	}
)

// CreateTableInput returns the CreateTable request for a ledger table named
// name: keys, indexes, on-demand billing and the NEW_AND_OLD_IMAGES stream.
// TTL cannot be part of CreateTable; CreateTable enables it afterwards.
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	var defs []types.AttributeDefinition
	addDef := func(k KeyInfo) {
		for _, d := range defs {
			if aws.ToString(d.AttributeName) == k.Name {
				return
			}
		}
		defs = append(defs, types.AttributeDefinition{AttributeName: aws.String(k.Name), AttributeType: k.Type})
	}
	keySchema := func(hash, rng KeyInfo) []types.KeySchemaElement {
		addDef(hash)
		ks := []types.KeySchemaElement{{AttributeName: aws.String(hash.Name), KeyType: types.KeyTypeHash}}
		if rng.Name != "" {
			addDef(rng)
			ks = append(ks, types.KeySchemaElement{AttributeName: aws.String(rng.Name), KeyType: types.KeyTypeRange})
		}
		return ks
	}

	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		KeySchema:   keySchema(tableHash, tableRange),
		BillingMode: types.BillingModePayPerRequest,
		StreamSpecification: &types.StreamSpecification{
			StreamEnabled:  aws.Bool(true),
			StreamViewType: StreamViewType,
		},
	}
	for _, g := range tableGSIs {
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName:  aws.String(g.Name),
			KeySchema:  keySchema(g.Hash, g.Range),
			Projection: &types.Projection{ProjectionType: g.Projection},
		})
	}
	in.AttributeDefinitions = defs
	return in
}

// CreateTable creates the ledger table named name unless it exists, waits
// until it is ACTIVE, and makes sure TTL is enabled on expiresAt. When this
// call created the table it also writes the default flags item
// (writesEnabled true) under attribute_not_exists(PK), so a flags item that
// is already there is never overwritten.
//
// created reports whether this call created the table; an existing table is
// not an error. CreateTable does not check an existing table's shape: use
// DescribeTable and TableInfo.Validate for that. It fails if TTL is already
// enabled on an attribute other than expiresAt. Errors name the table and
// the step that failed.
func CreateTable(ctx context.Context, api TableAPI, name string) (created bool, err error) {
	created, err = createTable(ctx, api, CreateTableInput(name))
	if err != nil {
		return created, err
	}
	if err := enableTTL(ctx, api, name); err != nil {
		return created, fmt.Errorf("create table %s: %w", name, err)
	}
	if created {
		if err := putDefaultFlags(ctx, api, name, time.Now()); err != nil {
			return created, fmt.Errorf("create table %s: %w", name, err)
		}
	}
	return created, nil
}

// createTable sends in unless the table exists and waits until the table is
// ACTIVE; created reports whether this call created it.
func createTable(ctx context.Context, api TableAPI, in *dynamodb.CreateTableInput) (created bool, err error) {
	name := aws.ToString(in.TableName)
	_, err = api.CreateTable(ctx, in)
	var inUse *types.ResourceInUseException
	switch {
	case err == nil:
		created = true
	case errors.As(err, &inUse):
		// Exists (or is being created by someone else): wait for it below.
	default:
		return false, fmt.Errorf("create table %s: %w", name, err)
	}

	waiter := dynamodb.NewTableExistsWaiter(api, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 500 * time.Millisecond
		o.MaxDelay = 5 * time.Second
	})
	if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, tableWaitMax); err != nil {
		return created, fmt.Errorf("create table %s: wait until active: %w", name, err)
	}
	return created, nil
}

// enableTTL turns TTL on for expiresAt unless it is already on (or being
// turned on). UpdateTimeToLive is not idempotent: on AWS enabling it twice
// is a ValidationException.
func enableTTL(ctx context.Context, api TableAPI, name string) error {
	out, err := api.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	if err != nil {
		return fmt.Errorf("describe ttl: %w", err)
	}
	if d := out.TimeToLiveDescription; d != nil {
		switch d.TimeToLiveStatus {
		case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
			if attr := aws.ToString(d.AttributeName); attr != AttrExpiresAt {
				return fmt.Errorf("ttl is enabled on %q; want %q", attr, AttrExpiresAt)
			}
			return nil
		case types.TimeToLiveStatusDisabling:
			return fmt.Errorf("ttl is being disabled; retry when it is DISABLED")
		}
	}
	_, err = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(AttrExpiresAt),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		return fmt.Errorf("enable ttl on %s: %w", AttrExpiresAt, err)
	}
	return nil
}

// TableInfo is what DescribeTable reads back about a live table.
type TableInfo struct {
	Name        string
	ARN         string
	Status      types.TableStatus
	BillingMode types.BillingMode // empty when the service does not say
	Hash        KeyInfo
	Range       KeyInfo // zero when the table has no range key
	GSIs        []IndexInfo

	StreamEnabled  bool
	StreamViewType types.StreamViewType
	// StreamARN is the table's latest stream ARN, the one consumers read.
	StreamARN string

	TTLStatus    types.TimeToLiveStatus
	TTLAttribute string
}

// DescribeTable reads the table's keys, indexes, stream and TTL settings.
// A missing table comes back as an error wrapping
// *types.ResourceNotFoundException.
func DescribeTable(ctx context.Context, api TableAPI, name string) (TableInfo, error) {
	out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		return TableInfo{}, fmt.Errorf("describe table %s: %w", name, err)
	}
	if out.Table == nil {
		return TableInfo{}, fmt.Errorf("describe table %s: response has no table description", name)
	}
	t := out.Table
	defs := attrTypes(t.AttributeDefinitions)
	info := TableInfo{
		Name:      aws.ToString(t.TableName),
		ARN:       aws.ToString(t.TableArn),
		Status:    t.TableStatus,
		StreamARN: aws.ToString(t.LatestStreamArn),
	}
	info.Hash, info.Range = keys(t.KeySchema, defs)
	if t.BillingModeSummary != nil {
		info.BillingMode = t.BillingModeSummary.BillingMode
	}
	if s := t.StreamSpecification; s != nil {
		info.StreamEnabled = aws.ToBool(s.StreamEnabled)
		info.StreamViewType = s.StreamViewType
	}
	for _, g := range t.GlobalSecondaryIndexes {
		idx := IndexInfo{Name: aws.ToString(g.IndexName), Status: g.IndexStatus}
		idx.Hash, idx.Range = keys(g.KeySchema, defs)
		if g.Projection != nil {
			idx.Projection = g.Projection.ProjectionType
		}
		info.GSIs = append(info.GSIs, idx)
	}
	slices.SortFunc(info.GSIs, func(a, b IndexInfo) int { return strings.Compare(a.Name, b.Name) })

	ttl, err := api.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	if err != nil {
		return TableInfo{}, fmt.Errorf("describe table %s: describe ttl: %w", name, err)
	}
	if d := ttl.TimeToLiveDescription; d != nil {
		info.TTLStatus = d.TimeToLiveStatus
		info.TTLAttribute = aws.ToString(d.AttributeName)
	}
	return info, nil
}

func attrTypes(defs []types.AttributeDefinition) map[string]types.ScalarAttributeType {
	m := make(map[string]types.ScalarAttributeType, len(defs))
	for _, d := range defs {
		m[aws.ToString(d.AttributeName)] = d.AttributeType
	}
	return m
}

func keys(schema []types.KeySchemaElement, typ map[string]types.ScalarAttributeType) (hash, rng KeyInfo) {
	for _, k := range schema {
		name := aws.ToString(k.AttributeName)
		switch k.KeyType {
		case types.KeyTypeHash:
			hash = KeyInfo{name, typ[name]}
		case types.KeyTypeRange:
			rng = KeyInfo{name, typ[name]}
		}
	}
	return hash, rng
}

// Validate reports how the table differs from the ledger definition: its
// keys, its GSIs (keys and projection), and its stream (enabled, with
// NEW_AND_OLD_IMAGES). It returns nil when they all match; otherwise one
// error listing every difference, each naming what was found and what is
// wanted. Extra indexes, billing mode and TTL are not checked.
func (ti TableInfo) Validate() error {
	var diffs []string
	diff := func(format string, args ...any) {
		diffs = append(diffs, fmt.Sprintf(format, args...))
	}
	if ti.Hash != tableHash {
		diff("hash key is %s; want %s", ti.Hash, tableHash)
	}
	if ti.Range != tableRange {
		diff("range key is %s; want %s", ti.Range, tableRange)
	}
	for _, want := range tableGSIs {
		i := slices.IndexFunc(ti.GSIs, func(g IndexInfo) bool { return g.Name == want.Name })
		if i < 0 {
			diff("index %s is missing", want.Name)
			continue
		}
		got := ti.GSIs[i]
		if got.Hash != want.Hash {
			diff("index %s hash key is %s; want %s", want.Name, got.Hash, want.Hash)
		}
		if got.Range != want.Range {
			diff("index %s range key is %s; want %s", want.Name, got.Range, want.Range)
		}
		if got.Projection != want.Projection {
			diff("index %s projection is %s; want %s", want.Name, orNone(string(got.Projection)), want.Projection)
		}
	}
	switch {
	case !ti.StreamEnabled:
		diff("stream is disabled; want enabled with %s", StreamViewType)
	case ti.StreamViewType != StreamViewType:
		diff("stream view type is %s; want %s", orNone(string(ti.StreamViewType)), StreamViewType)
	case ti.StreamARN == "":
		diff("stream is enabled but the table has no stream ARN")
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("table %s does not match the ledger definition: %s", ti.Name, strings.Join(diffs, "; "))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
