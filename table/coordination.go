package table

// This file is the coordination table: where the stream consumers keep the
// state they coordinate with — each shard's checkpoint (checkpoint.go) and
// lease (lease.go) — apart from the ledger table. The ledger table has a
// stream and the consumers read it; every write they made to it for their
// own bookkeeping was a record of that stream, so a consumer renewing a
// lease or moving a checkpoint over an idle stream made the next record it
// read, forever, and every checkpoint of a stream shared one partition key.
// The coordination table has no stream; a commit claims the checkpoint in
// it and updates the reports in the ledger table in one TransactWriteItems
// (a transaction may span tables of one account and region), so the
// exactly-once argument (docs/exactly-once.md) is unchanged.
//
// Layout (keys in aggregates/keys.go, marked (c)): PK/SK strings, on-demand
// billing, no stream, no index, TTL on expiresAt (CoordinationRetention). Its name is the ledger table's with
// "-coordination" appended unless configured (LEDGER_COORDINATION_TABLE).
//
// Deployments from before it kept checkpoints and leases in the ledger
// table under STREAM#{stream ARN}. A consumer finding such an item refuses
// to start (LegacyStreamState): reading the stream again from the
// coordination table's empty state would apply records twice.
// MigrateStreamState moves them, with the consumers stopped
// (`ledgerctl coordination migrate`, docs/runbook.md).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// CoordinationSuffix makes the default coordination table's name from the
// ledger table's.
const CoordinationSuffix = "-coordination"

// CoordinationRetention is how long a checkpoint or lease item lives after
// its last write: the coordination table's TTL (expiresAt) deletes it
// then, so that the items of shards long gone do not pile up (a stream
// replaces its shards every few hours) and a poller's reads of the stream's
// leases and checkpoints grow with the shards alive, not with the stream's
// history. Losing an item that old loses nothing: every record a
// checkpoint committed, and every record of a shard a checkpoint marked
// finished, was written before the checkpoint's last write, more than
// CoordinationRetention ago, so it has left the stream (24 hours'
// retention) and with it every shard that could be read from it; a
// reader of a shard without a checkpoint starts at what the stream still
// holds, none of which that checkpoint had committed. It must exceed the
// stream's retention with a margin for clocks.
const CoordinationRetention = 7 * 24 * time.Hour

// FinishedRetention is how long the checkpoint and the released lease of
// a shard read to its end live after that: the shard's records were all
// written before it closed, so they leave the stream within its 24 hours
// of retention, and the shard with them; two days leave a margin for
// clocks, and keep the partitions every pass reads to about two days of
// shards.
const FinishedRetention = 48 * time.Hour

func coordinationExpiry(now time.Time) types.AttributeValue {
	return Int(now.Add(CoordinationRetention).Unix())
}

func finishedExpiry(now time.Time) types.AttributeValue {
	return Int(now.Add(FinishedRetention).Unix())
}

// LeaseStale is how long a lease item may go unwritten before a poller no
// longer learns a shard from it (Poller.learnShards): a shard alive in the
// stream is in the listing of the whole stream every poller reads at start,
// so a lease nobody wrote for longer than the stream's retention only
// describes a shard gone with its records.
const LeaseStale = 24 * time.Hour

// CoordinationTableName is the coordination table's name when none is
// configured: the ledger table's name and CoordinationSuffix.
func CoordinationTableName(ledgerTable string) string { return ledgerTable + CoordinationSuffix }

// CheckCoordinationTable says why coord cannot be ledgerTable's
// coordination table by its name alone: it must be another table, or the
// consumers' bookkeeping lands in the stream they read.
func CheckCoordinationTable(ledgerTable, coord string) error {
	if coord == "" {
		return errors.New("coordination table name is empty")
	}
	if coord == ledgerTable {
		return fmt.Errorf("coordination table %q is the ledger table: it must be a table without a stream of its own (default %q)", coord, CoordinationTableName(ledgerTable))
	}
	return nil
}

// CreateCoordinationTableInput returns the CreateTable request for a
// coordination table named name: PK/SK strings, on-demand billing, no
// stream.
func CreateCoordinationTableInput(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName: aws.String(name),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(AttrSK), KeyType: types.KeyTypeRange},
		},
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrSK), AttributeType: types.ScalarAttributeTypeS},
		},
		BillingMode: types.BillingModePayPerRequest,
	}
}

// CreateCoordinationTable creates the coordination table named name unless
// it exists, waits until it is ACTIVE and makes sure TTL is on expiresAt
// (CoordinationRetention) when ttl, which must be false on DynamoDB Local:
// it enforces TTL but never trims its stream, so the argument of
// CoordinationRetention does not hold there (`ledgerctl run`); created
// reports whether this call created it. An existing table is not checked: see
// ValidateCoordinationTable.
func CreateCoordinationTable(ctx context.Context, api TableAPI, name string, ttl bool) (created bool, err error) {
	created, err = createTable(ctx, api, CreateCoordinationTableInput(name))
	if err != nil || !ttl {
		return created, err
	}
	if err := enableTTL(ctx, api, name); err != nil {
		return created, fmt.Errorf("create table %s: %w", name, err)
	}
	return created, nil
}

// CreateTables creates the ledger table name (CreateTable) and its
// coordination table under the default name (CoordinationTableName), for
// callers that own both: tests, benchmarks, recordings.
func CreateTables(ctx context.Context, api TableAPI, name string) error {
	if _, err := CreateTable(ctx, api, name); err != nil {
		return err
	}
	_, err := CreateCoordinationTable(ctx, api, CoordinationTableName(name), true)
	return err
}

// ValidateCoordinationTable reads the coordination table and says how it
// differs from the definition: it must exist with PK/SK string keys and
// should have no stream (a stream is not wrong, only paid for). A missing
// table's error says how to create it.
func ValidateCoordinationTable(ctx context.Context, api TableAPI, name string) error {
	info, err := DescribeTable(ctx, api, name)
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return fmt.Errorf("coordination table %s does not exist: create it with `ledgerctl table create` (docs/runbook.md, \"The coordination table\"): %w", name, err)
	}
	if err != nil {
		return err
	}
	if info.Hash != tableHash || info.Range != tableRange {
		return fmt.Errorf("coordination table %s has keys %s, %s; want %s, %s", name, info.Hash, orNone(info.Range.String()), tableHash, tableRange)
	}
	return nil
}

// LegacyStreamState reports whether the ledger table still holds a
// checkpoint or lease of the stream in the layout from before the
// coordination table (partition STREAM#{stream ARN} of the ledger table):
// a consumer must not start on the stream until MigrateStreamState moved
// them. One Query of one item.
func LegacyStreamState(ctx context.Context, api dynamodb.QueryAPIClient, ledgerTable, streamARN string) (bool, error) {
	p := dynamodb.NewQueryPaginator(api, &dynamodb.QueryInput{
		TableName:                 aws.String(ledgerTable),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		FilterExpression:          aws.String("attribute_not_exists(#moved)"),
		ExpressionAttributeNames:  map[string]string{"#pk": AttrPK, "#moved": attrMovedTo},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(aggregates.LeasePK(streamARN))},
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return false, fmt.Errorf("look for checkpoints of %s in the ledger table %s: %w", streamARN, ledgerTable, err)
		}
		if len(out.Items) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// Attributes of a migration: movedTo marks a tombstone left in the ledger
// table in place of a moved checkpoint (naming the coordination table);
// migratedFrom, on the coordination table's copy, the updatedAt of the
// ledger table's checkpoint it was copied from. A tombstone also holds
// pendingTo = migratedPending, which no version's commit or move accepts:
// a consumer of a version before the coordination table that still runs
// stalls on it instead of committing from nothing.
const (
	attrMovedTo      = "movedTo"
	attrMigratedFrom = "migratedFrom"
	migratedPending  = "MIGRATED"
)

// fenceTombstone reports whether item, a tombstone at a shard's key in
// the ledger table, is one FenceLegacyCheckpoint put where nothing was:
// it holds neither updatedAt nor sequenceNumber, which every checkpoint
// write of every version set and which the migration's tombstone keeps
// from the checkpoint it replaced. (A LATEST start mark of the version
// before the coordination table may land on it and set updatedAt: it is
// then taken for the migration's, whose release finds no fenced copy and
// changes nothing.)
func fenceTombstone(item map[string]types.AttributeValue) bool {
	_, ua := item[AttrUpdatedAt]
	_, seq := item[AttrSequenceNumber]
	return !ua && !seq
}

// IsLegacyCheckpoint reports whether item, read at a shard's key in the
// ledger table (LegacyCheckpointKey), is a checkpoint in the layout before
// the coordination table: present and not a tombstone.
func IsLegacyCheckpoint(item map[string]types.AttributeValue) bool {
	if item == nil {
		return false
	}
	_, moved := item[attrMovedTo]
	return !moved
}

// ErrLegacyStreamState is a consumer's refusal to start on a stream whose
// checkpoints are still in the ledger table.
var ErrLegacyStreamState = errors.New("checkpoints and leases are in the ledger table (the layout before the coordination table): stop every consumer of the stream and run `ledgerctl coordination migrate` (docs/runbook.md, \"The coordination table\")")

// RefuseLegacyStreamState is LegacyStreamState as a consumer's start check:
// nil when the ledger table holds none of the stream's old items.
func RefuseLegacyStreamState(ctx context.Context, api dynamodb.QueryAPIClient, ledgerTable, streamARN string) error {
	found, err := LegacyStreamState(ctx, api, ledgerTable, streamARN)
	if err != nil {
		return err
	}
	if found {
		return fmt.Errorf("stream %s: %w", streamARN, ErrLegacyStreamState)
	}
	return nil
}

// MigrateAPI is what MigrateStreamState calls.
type MigrateAPI interface {
	dynamodb.QueryAPIClient
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// MigrateOptions changes what MigrateStreamState checks.
type MigrateOptions struct {
	// IgnoreLeases moves the state even while a lease is held and
	// unexpired: for a caller that knows no consumer runs (ledgerctl run,
	// which holds its data directory's lock, restarting its own poller).
	IgnoreLeases bool
}

// MigrateResult counts what MigrateStreamState moved.
type MigrateResult struct {
	Checkpoints int // copied to the coordination table and removed from the ledger table
	Leases      int // removed (a stopped fleet's leases are free or expired)
	// Released counts copies an earlier run left fenced after their
	// original's tombstone had landed (that run failed between the two),
	// released by this one.
	Released int
}

// ErrConsumerRunning is MigrateStreamState's refusal while a consumer may
// still be running: a lease is held and unexpired, or a checkpoint changed
// while it was being moved.
var ErrConsumerRunning = errors.New("a consumer of the stream is running: stop every poller and disable the Lambda's event source mapping, then run again")

// MigrateStreamState moves a stream's checkpoints from the ledger table
// (the layout before the coordination table) to the coordination table,
// and removes its leases, with every consumer stopped. It is idempotent and
// resumable: each checkpoint is copied as it is (sequence number, finished
// mark, half-committed batch) to its new key, fenced (no consumer may claim
// from it: ErrCheckpointFenced), where no checkpoint is, or over a previous
// run's copy of an earlier version of the item that nothing moved since,
// or is kept there when it descends from this very item (a previous run's
// copy, which a consumer may have moved on since if a version of this
// command before the fence made it); then the ledger table's item is
// replaced, on condition that it did not change, by a tombstone no version
// can commit on (a consumer of the previous version still running stalls
// there instead of committing from nothing); only then is the copy's fence
// lifted, on condition that it is still the copy of that item. A copy
// whose fence a failed run left although its tombstone landed is released
// by the next run; a tombstone a consumer's fence put where no checkpoint
// was (FenceLegacyCheckpoint) has no copy and is passed over. Until a run
// ends without error, a shard whose original
// might still move has no claimable copy: the old consumer's commits after
// the copy are never applied a second time from it (review, session 15).
// It refuses with ErrConsumerRunning when a lease is held and unexpired at
// now or a checkpoint changed while it was moved, and with
// ErrMigrationConflict when the coordination table holds a checkpoint of
// the shard that is not a copy of the ledger table's.
func MigrateStreamState(ctx context.Context, api MigrateAPI, ledgerTable, coord, streamARN string, now time.Time, opts MigrateOptions) (MigrateResult, error) {
	var res MigrateResult
	if err := CheckCoordinationTable(ledgerTable, coord); err != nil {
		return res, err
	}
	var items []map[string]types.AttributeValue
	p := dynamodb.NewQueryPaginator(api, &dynamodb.QueryInput{
		TableName:                 aws.String(ledgerTable),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": AttrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(aggregates.LeasePK(streamARN))},
		ConsistentRead:            aws.Bool(true),
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return res, fmt.Errorf("migrate %s: read the ledger table's checkpoints: %w", streamARN, err)
		}
		items = append(items, out.Items...)
	}
	leasePrefix := strings.TrimSuffix(aggregates.LeaseKey(streamARN, "x").SK, "x")
	cpPrefix := strings.TrimSuffix(aggregates.CheckpointKey(streamARN, "x").SK, "x")
	for _, item := range items {
		sk, _ := String(item, AttrSK)
		if shard, ok := strings.CutPrefix(sk, leasePrefix); ok && !opts.IgnoreLeases {
			l := DecodeLease(shard, item)
			exp, _ := String(item, AttrLeaseExpiry)
			if until, err := time.Parse(time.RFC3339Nano, exp); l.Owner != "" && (err != nil || now.Before(until)) {
				return res, fmt.Errorf("migrate %s: lease of %s held by %s until %s: %w", streamARN, shard, l.Owner, orNone(exp), ErrConsumerRunning)
			}
		}
	}
	for _, item := range items {
		sk, _ := String(item, AttrSK)
		shard, ok := strings.CutPrefix(sk, cpPrefix)
		if !ok {
			continue
		}
		if _, moved := item[attrMovedTo]; moved {
			if fenceTombstone(item) {
				// A consumer's fence put it (FenceLegacyCheckpoint), over
				// nothing: no copy was made of it, so none is to be
				// released. There is one for every shard a commit touched
				// in the last 7 days, and a release tried on each would
				// be a failed conditional write and a round trip each
				// (review session 18, R18-4).
				continue
			}
			// Moved by an earlier run: its copy is released, unless that
			// run failed between the tombstone and the release.
			released, err := releaseCopy(ctx, api, ledgerTable, coord, streamARN, shard, item)
			if err != nil {
				return res, fmt.Errorf("migrate %s: checkpoint of %s: %w", streamARN, shard, err)
			}
			if released {
				res.Released++
			}
			continue
		}
		if err := copyCheckpoint(ctx, api, ledgerTable, coord, streamARN, shard, item); err != nil {
			return res, fmt.Errorf("migrate %s: checkpoint of %s: %w", streamARN, shard, err)
		}
		if err := tombstone(ctx, api, ledgerTable, coord, item); err != nil {
			return res, fmt.Errorf("migrate %s: checkpoint of %s: %w", streamARN, shard, err)
		}
		if _, err := releaseCopy(ctx, api, ledgerTable, coord, streamARN, shard, item); err != nil {
			return res, fmt.Errorf("migrate %s: checkpoint of %s: %w", streamARN, shard, err)
		}
		res.Checkpoints++
	}
	for _, item := range items {
		sk, _ := String(item, AttrSK)
		if _, moved := item[attrMovedTo]; moved || strings.HasPrefix(sk, cpPrefix) {
			continue
		}
		if err := deleteUnchanged(ctx, api, ledgerTable, item); err != nil {
			return res, fmt.Errorf("migrate %s: %s: %w", streamARN, sk, err)
		}
		if strings.HasPrefix(sk, leasePrefix) {
			res.Leases++
		}
	}
	return res, nil
}

// ErrMigrationConflict is MigrateStreamState's refusal when the
// coordination table's checkpoint of a shard is neither absent nor a copy
// of the ledger table's: a consumer of this version committed from a
// checkpoint the ledger table still holds another version of.
var ErrMigrationConflict = errors.New("the coordination table's checkpoint is not a copy of the ledger table's: a consumer of this version committed on the shard while the ledger table still held its checkpoint; see docs/runbook.md, \"The coordination table\"")

// copyCheckpoint puts the ledger table's checkpoint item into the
// coordination table under its new key, marked with the updatedAt it was
// copied from and fenced (migrationFence = the ledger table's name: no
// claim or move lands on it until releaseCopy), on condition that no
// checkpoint is there or that the one there descends from this very item
// (a previous run's copy, still fenced, or moved on since by a consumer if
// a version of this command before the fence made it: it is then kept). A
// previous run's copy of an earlier version of the item that no consumer
// moved since is replaced.
func copyCheckpoint(ctx context.Context, api MigrateAPI, ledgerTable, coord, streamARN, shard string, item map[string]types.AttributeValue) error {
	ua := migratedFrom(item)
	moved := maps.Clone(item)
	maps.Copy(moved, Key(aggregates.CheckpointKey(streamARN, shard)))
	moved[attrMigratedFrom] = ua
	moved[attrMigrationFence] = S(ledgerTable)
	_, err := api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(coord), Item: moved,
		ConditionExpression:                 aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames:            map[string]string{"#pk": AttrPK},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		if err != nil {
			return fmt.Errorf("copy to the coordination table: %w", err)
		}
		return nil
	}
	from, ok := ccf.Item[attrMigratedFrom].(*types.AttributeValueMemberS)
	if ok && from.Value == ua.(*types.AttributeValueMemberS).Value {
		return nil // a previous run's copy of this item
	}
	if !ok || !untouchedCopy(ccf.Item) {
		return ErrMigrationConflict
	}
	// A previous run's copy of an earlier version of this item that nothing
	// moved since: that run found a consumer still running, which moved the
	// ledger table's checkpoint on after the copy (its tombstone failed:
	// ErrConsumerRunning). The copy is replaced by this one, on condition
	// that it is still untouched (review, session 15: the run after the
	// consumer was stopped refused it as a conflict, and the runbook's
	// answer to a conflict is a repair by hand).
	cond := "#mf = :from AND #ua = :from"
	if _, has := ccf.Item[AttrUpdatedAt]; !has {
		cond = "#mf = :from AND attribute_not_exists(#ua)"
	}
	_, err = api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(coord), Item: moved,
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  map[string]string{"#mf": attrMigratedFrom, "#ua": AttrUpdatedAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{":from": from},
	})
	if errors.As(err, &ccf) {
		return ErrMigrationConflict // moved on by a consumer of this version meanwhile
	}
	if err != nil {
		return fmt.Errorf("copy to the coordination table over a previous run's copy: %w", err)
	}
	return nil
}

// migratedFrom is what a copy of the ledger table's checkpoint item
// records as its origin (migratedFrom): the item's updatedAt, "" when it
// has none. A tombstone keeps the updatedAt of the item it replaced.
func migratedFrom(item map[string]types.AttributeValue) types.AttributeValue {
	if ua := item[AttrUpdatedAt]; ua != nil {
		return ua
	}
	return S("")
}

// releaseCopy lifts the fence from the coordination table's copy of the
// ledger table's checkpoint item, which is now a tombstone (the move is
// done: no consumer of the version before the coordination table can move
// it any more), on condition that the copy was made from that very item
// (migratedFrom) and is still fenced; a consumer may claim from it from
// then on. The same update marks the copy legacyTombstone (the tombstone
// stands: FenceLegacyCheckpoint need not run before its first claim). It
// reports whether it lifted a fence: false when there was none
// (released already, by an earlier run or an attempt whose answer was
// lost, or made unfenced by a version of this command before the fence) or
// no copy (its TTL deleted it). A fenced copy of another version of the
// item is ErrMigrationConflict.
func releaseCopy(ctx context.Context, api MigrateAPI, ledgerTable, coord, streamARN, shard string, tomb map[string]types.AttributeValue) (bool, error) {
	_, err := api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(coord), Key: Key(aggregates.CheckpointKey(streamARN, shard)),
		UpdateExpression:                    aws.String("REMOVE #fence SET #lt = :ledger"),
		ConditionExpression:                 aws.String("#mf = :from AND attribute_exists(#fence)"),
		ExpressionAttributeNames:            map[string]string{"#mf": attrMigratedFrom, "#fence": attrMigrationFence, "#lt": attrTombstoned},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":from": migratedFrom(tomb), ":ledger": S(ledgerTable)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		if _, fenced := ccf.Item[attrMigrationFence]; fenced {
			return false, fmt.Errorf("release the copy: it is fenced but not a copy of the moved checkpoint: %w", ErrMigrationConflict)
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("release the copy in the coordination table: %w", err)
	}
	return true, nil
}

// untouchedCopy reports whether item, a coordination table checkpoint with
// migratedFrom, is still the copy a migration put there: no consumer wrote
// it since (every checkpoint write sets updatedAt, and a copy keeps the
// updatedAt of the item it was copied from, which migratedFrom names).
func untouchedCopy(item map[string]types.AttributeValue) bool {
	from, ok := item[attrMigratedFrom].(*types.AttributeValueMemberS)
	if !ok {
		return false
	}
	ua, has := item[AttrUpdatedAt].(*types.AttributeValueMemberS)
	if !has {
		_, any := item[AttrUpdatedAt]
		return !any && from.Value == ""
	}
	return ua.Value == from.Value
}

// tombstone replaces the ledger table's checkpoint item, unchanged since it
// was read, with a tombstone (movedTo, pendingTo MIGRATED): a consumer of a
// version before the coordination table can neither commit on it nor take
// it for a shard without a checkpoint. The ledger table's TTL removes it
// after CoordinationRetention, when no such consumer can be left running.
func tombstone(ctx context.Context, api MigrateAPI, ledgerTable, coord string, item map[string]types.AttributeValue) error {
	in := &dynamodb.UpdateItemInput{
		TableName: aws.String(ledgerTable), Key: map[string]types.AttributeValue{AttrPK: item[AttrPK], AttrSK: item[AttrSK]},
		UpdateExpression:          aws.String("SET #moved = :coord, #pt = :mig, #exp = :exp"),
		ExpressionAttributeNames:  map[string]string{"#moved": attrMovedTo, "#pt": attrPendingTo, "#ua": AttrUpdatedAt, "#exp": AttrExpiresAt},
		ExpressionAttributeValues: map[string]types.AttributeValue{":coord": S(coord), ":mig": S(migratedPending), ":exp": coordinationExpiry(time.Now())},
	}
	if ua, ok := item[AttrUpdatedAt]; ok {
		in.ConditionExpression = aws.String("#ua = :ua")
		in.ExpressionAttributeValues[":ua"] = ua
	} else {
		in.ConditionExpression = aws.String("attribute_not_exists(#ua)")
	}
	_, err := api.UpdateItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("changed while it was being moved: %w", ErrConsumerRunning)
	}
	if err != nil {
		return fmt.Errorf("leave a tombstone in the ledger table: %w", err)
	}
	return nil
}

// deleteUnchanged deletes item from the ledger table on the condition that
// its updatedAt is still the one read (every checkpoint and lease write
// sets it); a failed condition is ErrConsumerRunning.
func deleteUnchanged(ctx context.Context, api MigrateAPI, ledgerTable string, item map[string]types.AttributeValue) error {
	in := &dynamodb.DeleteItemInput{TableName: aws.String(ledgerTable), Key: map[string]types.AttributeValue{AttrPK: item[AttrPK], AttrSK: item[AttrSK]}}
	if ua, ok := item[AttrUpdatedAt]; ok {
		in.ConditionExpression = aws.String("#ua = :ua")
		in.ExpressionAttributeNames = map[string]string{"#ua": AttrUpdatedAt}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":ua": ua}
	} else {
		in.ConditionExpression = aws.String("attribute_not_exists(#ua)")
		in.ExpressionAttributeNames = map[string]string{"#ua": AttrUpdatedAt}
	}
	_, err := api.DeleteItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("changed while it was being moved: %w", ErrConsumerRunning)
	}
	if err != nil {
		return fmt.Errorf("delete from the ledger table: %w", err)
	}
	return nil
}

// The worker registry: one item per poller of a stream
// (aggregates.WorkerKey), written at each of its lease-renewal rounds, so
// that a poller learns how many pollers share the stream and how many
// leases each holds from a Query of a handful of items instead of a read
// of every lease (issue 23: the coordination a poller reads grows with its
// share, not with the stream). Under its key it holds
//
//	entityType   WORKER
//	owner        S, the poller's owner name
//	beat         N, +1 per heartbeat: a poller that sees it unchanged for a
//	             lease duration on its own clock counts the worker as gone
//	             (no clock is compared across machines, as for leases)
//	held         N, the leases the poller held at its last heartbeat
//	left         BOOL, true once the poller stopped (its leases released)
//	offers       SS, shards another poller handed over to this one or left
//	             for it to take (OfferLease): hints, the lease item decides;
//	             an offer the poller took stays until the heartbeat whose
//	             held counts it removes it (OffersCounted), so that held +
//	             the offers never leaves out a lease handed to it
//	             (docs/exactly-once.md, "The givers' overshoot (session 23)")
//	leaseMode    S, "heartbeat" when the poller keeps its leases live by
//	             this item's beat instead of renewing each lease item
//	             (docs/exactly-once.md, "The worker heartbeat"); absent
//	             for pollers that renew every lease
//	modeBeat     N, the beat the heartbeat that wrote leaseMode made: the
//	             mark holds only while beat = modeBeat (or modeBeat + 1
//	             once left), so any other version's write voids it
//	fencedBeat   N, set by a poller taking this one's leases over after
//	             seeing its beat unchanged for a lease duration
//	             (FenceWorker): its heartbeats fail from then on
//	asks         SS, shards a drain asked this poller to hand over
//	             (AskWorker): a heartbeat poller reads no lease item of
//	             its own, so it learns of the lease's pendingOwner here
//	incarnation  S, the random id of the process that last claimed the
//	             item (its first write, or its rejoin); every later write
//	             of that process is conditional on it, so that a second
//	             live process given the same owner name takes the item
//	             over and the first learns it (docs/exactly-once.md,
//	             review of the heartbeat, HB6); absent on items of
//	             versions before it
//	listing      BOOL, true while the poller's first listing of the
//	             stream is under way (ListingNote)
//	listingSeen  SS, the listing pollers (ListingKey: owner and
//	             incarnation) whose announcement this poller's
//	             DescribeStream rate counts (docs/exactly-once.md, "The
//	             first listing's share of DescribeStream")
//	listingBy    S, the incarnation that wrote listing and listingSeen:
//	             both are read only while it is the item's incarnation,
//	             so that a process of a version before them claiming the
//	             item (a rollback) inherits neither (review of session
//	             27, S27-J1)
//	updatedAt    S, RFC 3339
//	expiresAt    N, the last write + WorkerRetention (TTL)
//
// Exactness never depends on it: it only sizes a poller's fair share and
// tells it where leases were handed; every lease change is still the
// lease item's conditional write.
const (
	AttrWorkerOwner  = "owner"
	AttrWorkerBeat   = "beat"
	AttrWorkerHeld   = "held"
	AttrWorkerLeft   = "left"
	AttrWorkerOffers = "offers"
	AttrWorkerMode   = "leaseMode"
	// AttrWorkerModeBeat is the beat the last heartbeat that set leaseMode
	// wrote (the review of the heartbeat, HB2).
	AttrWorkerModeBeat = "modeBeat"
	AttrWorkerFenced   = "fencedBeat"
	AttrWorkerAsks     = "asks"
	// AttrWorkerIncarnation is the claiming process's random id (HB6).
	AttrWorkerIncarnation = "incarnation"
	// AttrWorkerListing is set while the poller's first listing of the
	// stream is under way (ListingNote).
	AttrWorkerListing = "listing"
	// AttrWorkerListingSeen are the listing pollers (ListingKey) whose
	// announcement the poller's DescribeStream rate counts (ListingNote).
	AttrWorkerListingSeen = "listingSeen"
	// AttrWorkerListingBy is the incarnation that wrote listing and
	// listingSeen (ListingNote; S27-J1).
	AttrWorkerListingBy = "listingBy"
)

// LeaseModeHeartbeat is the leaseMode of a poller whose leases are live
// while its worker item's beat moves.
const LeaseModeHeartbeat = "heartbeat"

// WorkerRetention is how long a worker item lives after its last write: a
// poller gone for that long is forgotten by the table's TTL (the others
// stop counting it after one lease duration without a heartbeat).
const WorkerRetention = 24 * time.Hour

// Worker is a worker registry item as read.
type Worker struct {
	Owner  string
	Beat   int64
	Held   int
	Left   bool
	Offers []string
	// Heartbeat is true when the worker keeps its leases live by its beat
	// (leaseMode = heartbeat) rather than by renewing each lease item.
	Heartbeat bool
	// Fenced is true when a taker fenced it (fencedBeat set).
	Fenced bool
	// Asks are the shards a drain asked it to hand over.
	Asks []string
	// Incarnation is the id of the process that claimed the item last
	// ("" on items of versions before it).
	Incarnation string
	// Listing is true while its first listing of the stream is under way;
	// ListingSeen are the listing pollers (ListingKey) its DescribeStream
	// rate counts (ListingNote).
	Listing     bool
	ListingSeen []string
}

// DecodeWorker reads a worker registry item.
func DecodeWorker(item map[string]types.AttributeValue) Worker {
	w := Worker{Left: Flag(item, AttrWorkerLeft)}
	w.Owner, _ = String(item, AttrWorkerOwner)
	w.Beat, _ = Int64(item, AttrWorkerBeat)
	held, _ := Int64(item, AttrWorkerHeld)
	w.Held = int(held)
	if ss, ok := item[AttrWorkerOffers].(*types.AttributeValueMemberSS); ok {
		w.Offers = ss.Value
	}
	if ss, ok := item[AttrWorkerAsks].(*types.AttributeValueMemberSS); ok {
		w.Asks = ss.Value
	}
	mode, _ := String(item, AttrWorkerMode)
	modeBeat, _ := Int64(item, AttrWorkerModeBeat)
	// The mark holds only at the beat the heartbeat wrote it with (or the
	// one after, written by its LeaveWorker): a write of a version before
	// the heartbeat (a rollback under the same owner name) adds to the
	// beat and never removes leaseMode, so a mark without its beat is
	// stale (docs/exactly-once.md, review of the heartbeat, HB2).
	w.Heartbeat = mode == LeaseModeHeartbeat && (modeBeat == w.Beat || (w.Left && modeBeat == w.Beat-1))
	_, w.Fenced = item[AttrWorkerFenced]
	w.Incarnation, _ = String(item, AttrWorkerIncarnation)
	// The listing note counts only as written by the item's incarnation:
	// a process of a version before it that claimed the item since (a
	// rollback) neither announces a listing nor counts one (S27-J1).
	if by, _ := String(item, AttrWorkerListingBy); by != "" && by == w.Incarnation {
		w.Listing = Flag(item, AttrWorkerListing)
		if ss, ok := item[AttrWorkerListingSeen].(*types.AttributeValueMemberSS); ok {
			w.ListingSeen = ss.Value
		}
	}
	return w
}

// ListingKey names one process's first listing in a worker item's
// listingSeen: its owner and incarnation, so that an acknowledgement of
// a previous process of the same name is not one of this process's.
func ListingKey(owner, incarnation string) string { return owner + "#" + incarnation }

// ListingNote adds to in, a worker write (HeartbeatWorker and the writes
// built on it), the poller's part in sharing the stream's DescribeStream
// rate by weight (docs/exactly-once.md, "The first listing's share of
// DescribeStream"): listing set while its first listing is under way
// (removed otherwise), and seen, the listing pollers (ListingKey) whose
// announcement its rate already counts (removed when empty). Both are
// signed by the writing process's incarnation (listingBy, the write's
// :inc): DecodeWorker reads them only while that is still the item's
// incarnation, so that a process of an older version, whose claim leaves
// attributes it does not know in place, inherits neither (review of
// session 27, S27-J1). Exactness never depends on either: they only pace
// DescribeStream.
func ListingNote(in *dynamodb.UpdateItemInput, listing bool, seen []string) *dynamodb.UpdateItemInput {
	expr := aws.ToString(in.UpdateExpression)
	var set, remove []string
	if _, signed := in.ExpressionAttributeValues[":inc"]; !signed {
		// Not a write built on HeartbeatWorker: an unsigned note is never
		// read (the safe side: no weight, no acknowledgement).
		listing, seen = false, nil
	}
	if listing || len(seen) > 0 {
		set = append(set, "#lby = :inc") // HeartbeatWorker's incarnation
	} else {
		remove = append(remove, "#lby")
	}
	in.ExpressionAttributeNames["#lby"] = AttrWorkerListingBy
	if listing {
		set = append(set, "#lst = :lst")
		in.ExpressionAttributeValues[":lst"] = &types.AttributeValueMemberBOOL{Value: true}
	} else {
		remove = append(remove, "#lst")
	}
	in.ExpressionAttributeNames["#lst"] = AttrWorkerListing
	if len(seen) > 0 {
		set = append(set, "#lsn = :lsn")
		in.ExpressionAttributeValues[":lsn"] = &types.AttributeValueMemberSS{Value: seen}
	} else {
		remove = append(remove, "#lsn")
	}
	in.ExpressionAttributeNames["#lsn"] = AttrWorkerListingSeen
	if len(set) > 0 {
		expr = strings.Replace(expr, "SET ", "SET "+strings.Join(set, ", ")+", ", 1)
	}
	if len(remove) > 0 {
		expr = strings.Replace(expr, " REMOVE ", " REMOVE "+strings.Join(remove, ", ")+", ", 1)
	}
	in.UpdateExpression = aws.String(expr)
	return in
}

// HeartbeatWorker writes owner's registry item: beat + 1, held, not left,
// incarnation (the writing process's id: this write claims the item for
// it), answering the item as written (its offers and asks). With
// heartbeat set the item says leaseMode = heartbeat (its leases are live
// while the beat moves) and the write is conditional on no taker having
// fenced it (FenceWorker): a heartbeat that fails on that condition
// extends nothing (docs/exactly-once.md, "The worker heartbeat", claim
// H1). Without it, the write is the one of a poller that renews every
// lease: unconditional, no leaseMode. It is a process's first write (its
// claim): every later one is HeartbeatWorkerAgain or RenewWorkerAgain,
// conditional on the incarnation it wrote.
func HeartbeatWorker(tableName, streamARN, owner, incarnation string, held int, heartbeat bool, now time.Time) *dynamodb.UpdateItemInput {
	in := &dynamodb.UpdateItemInput{
		TableName:        aws.String(tableName),
		Key:              Key(aggregates.WorkerKey(streamARN, owner)),
		UpdateExpression: aws.String("SET #et = :et, #o = :o, #h = :h, #ua = :ua, #exp = :exp, #inc = :inc REMOVE #l ADD #b :one"),
		ExpressionAttributeNames: map[string]string{
			"#et": AttrEntityType, "#o": AttrWorkerOwner, "#h": AttrWorkerHeld, "#ua": AttrUpdatedAt,
			"#exp": AttrExpiresAt, "#l": AttrWorkerLeft, "#b": AttrWorkerBeat, "#inc": AttrWorkerIncarnation,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":et": S(aggregates.EntityWorker), ":o": S(owner), ":h": Int(int64(held)), ":ua": stamp(now),
			":exp": Int(now.Add(WorkerRetention).Unix()), ":one": Int(1), ":inc": S(incarnation),
		},
		ReturnValues: types.ReturnValueAllNew,
	}
	if heartbeat {
		// modeBeat: the beat this write makes (the update's operands read
		// the item as it was), so that the mark is stale after any write
		// that does not renew it (DecodeWorker).
		in.UpdateExpression = aws.String("SET #et = :et, #o = :o, #h = :h, #ua = :ua, #exp = :exp, #inc = :inc, #m = :m, #mb = if_not_exists(#b, :zero) + :one REMOVE #l ADD #b :one")
		in.ConditionExpression = aws.String("attribute_not_exists(#f)")
		in.ExpressionAttributeNames["#m"] = AttrWorkerMode
		in.ExpressionAttributeNames["#mb"] = AttrWorkerModeBeat
		in.ExpressionAttributeNames["#f"] = AttrWorkerFenced
		in.ExpressionAttributeValues[":m"] = S(LeaseModeHeartbeat)
		in.ExpressionAttributeValues[":zero"] = Int(0)
	}
	return in
}

// HeartbeatWorkerAgain is a heartbeat poller's heartbeat after its claim
// (HeartbeatWorker with heartbeat set, or RejoinWorker), conditional on
// its item existing, unfenced, and still claimed by incarnation. An item
// deleted under a live poller (by hand, by TTL under a host suspended past
// WorkerRetention: the fence deleted with it) is not re-created by the
// heartbeat, which fails like a fence (the poller drops every lease and
// rejoins), so that the others, judging its leases by the rule for owners
// outside the registry, take them from a poller whose validity has ended
// (docs/exactly-once.md, review of the heartbeat, HB4). An item another
// process given the same owner name claimed since fails it too: its poller
// stops (HB6). The caller tells the three apart by a consistent read.
func HeartbeatWorkerAgain(tableName, streamARN, owner, incarnation string, held int, now time.Time) *dynamodb.UpdateItemInput {
	in := HeartbeatWorker(tableName, streamARN, owner, incarnation, held, true, now)
	in.ConditionExpression = aws.String("attribute_exists(#b) AND attribute_not_exists(#f) AND #inc = :inc")
	return in
}

// RenewWorkerAgain is the worker write of a poller that renews every
// lease, after its claim (HeartbeatWorker without heartbeat): conditional
// on no other process having claimed the item since (HB6). A deleted item
// is written again (a renewing poller's leases do not depend on it).
func RenewWorkerAgain(tableName, streamARN, owner, incarnation string, held int, now time.Time) *dynamodb.UpdateItemInput {
	in := HeartbeatWorker(tableName, streamARN, owner, incarnation, held, false, now)
	in.ConditionExpression = aws.String("attribute_not_exists(#inc) OR #inc = :inc")
	return in
}

// FenceWorker marks owner's registry item fenced at beat, on condition
// that its beat is still beat: a taker that saw the beat unchanged for a
// lease duration makes it before taking any of owner's leases over, so
// that no later heartbeat of owner extends its leases (claim H1). It fails
// when owner heartbeated since; fencing again at the same beat succeeds.
func FenceWorker(tableName, streamARN, owner string, beat int64) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(tableName),
		Key:                       Key(aggregates.WorkerKey(streamARN, owner)),
		UpdateExpression:          aws.String("SET #f = :b"),
		ConditionExpression:       aws.String("#b = :b"),
		ExpressionAttributeNames:  map[string]string{"#f": AttrWorkerFenced, "#b": AttrWorkerBeat},
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": Int(beat)},
	}
}

// RejoinWorker clears the fence on owner's registry item with a heartbeat
// (beat + 1) claimed by incarnation: written by a poller whose heartbeat
// failed on the fence (or found its item deleted), after it dropped every
// lease it held. With claim set (a process none of whose claims was
// answered yet: its first heartbeat found a previous life's fence) it is
// unconditional; otherwise it is conditional on the item not being
// claimed by another incarnation since (attribute_not_exists or equal):
// unconditional, a fenced process's rejoin landing after a newer
// process's claim would take the name back from it, and the newer one's
// wait for the older one's validity to end would not hold (HB6).
func RejoinWorker(tableName, streamARN, owner, incarnation string, claim bool, now time.Time) *dynamodb.UpdateItemInput {
	in := HeartbeatWorker(tableName, streamARN, owner, incarnation, 0, true, now)
	in.UpdateExpression = aws.String("SET #et = :et, #o = :o, #h = :h, #ua = :ua, #exp = :exp, #inc = :inc, #m = :m, #mb = if_not_exists(#b, :zero) + :one REMOVE #l, #f, #as ADD #b :one")
	in.ConditionExpression = nil
	in.ExpressionAttributeNames["#as"] = AttrWorkerAsks
	if !claim {
		in.ConditionExpression = aws.String("attribute_not_exists(#inc) OR #inc = :inc")
	}
	return in
}

// ClaimedFrom makes in, a claim of a worker item (HeartbeatWorker, or
// RejoinWorker with claim set), conditional besides its own condition on
// the item naming the incarnation seen when its writer last read it (""
// for none: no incarnation, or no item). A claim is a process's write
// before one of its claims was answered; sent on that read, it lands only
// if no other claim landed since. Unconditional, a claim sent before its
// process was born (its answer lost or late, another attempt answered)
// could land after a newer process of the same name claimed the item,
// take the name back, and make the born process's heartbeats land again
// after the newer one's claim (docs/exactly-once.md, "Review
// (adversarial, session 19): HB6 as built", R1). The incarnations only
// change by claims, so the condition does not race the item's heartbeats.
func ClaimedFrom(in *dynamodb.UpdateItemInput, seen string) *dynamodb.UpdateItemInput {
	cond := "attribute_not_exists(#inc)"
	if seen != "" {
		cond = "#inc = :seenInc"
		in.ExpressionAttributeValues[":seenInc"] = S(seen)
	}
	in.ExpressionAttributeNames["#inc"] = AttrWorkerIncarnation
	if c := aws.ToString(in.ConditionExpression); c != "" {
		cond = "(" + c + ") AND " + cond
	}
	in.ConditionExpression = aws.String(cond)
	return in
}

// RejoinedFrom makes in, a rejoin (RejoinWorker, or a claim made of it
// with ClaimedFrom), conditional besides its own condition on the fence as
// its writer last read the item (item; nil: there was none): the same
// fencedBeat, no fence, or no item. A rejoin answers one fence: sent on
// that read, it lands only while that fence (or its absence) stands.
// Without it, a rejoin whose answer was lost and that landed late, after
// its poller had rejoined by a later attempt and been fenced again by a
// taker, lifted the later fence: the poller's heartbeats (conditional on
// no fence) landed again, and it read the shards the taker had taken,
// beside it (docs/exactly-once.md, "Review (adversarial, session 19):
// HB6 as built", R2). Every fence is at a beat later than the rejoins
// before it (a rejoin moves the beat), so a later fence never matches.
func RejoinedFrom(in *dynamodb.UpdateItemInput, item map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
	in.ExpressionAttributeNames["#f"] = AttrWorkerFenced
	in.ExpressionAttributeNames["#b"] = AttrWorkerBeat
	cond := "attribute_not_exists(#b)"
	if item != nil {
		cond = "attribute_not_exists(#f)"
		if f, ok := Int64(item, AttrWorkerFenced); ok {
			cond = "#f = :seenFence"
			in.ExpressionAttributeValues[":seenFence"] = Int(f)
		}
	}
	if c := aws.ToString(in.ConditionExpression); c != "" {
		cond = "(" + c + ") AND " + cond
	}
	in.ConditionExpression = aws.String(cond)
	return in
}

// AskWorker adds shard to the asks of owner's registry item: a drain that
// asked for the lease (RequestLease) tells its owner, which reads none of
// its lease items while its heartbeat keeps them live.
func AskWorker(tableName, streamARN, owner, shard string) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(tableName),
		Key:                       Key(aggregates.WorkerKey(streamARN, owner)),
		UpdateExpression:          aws.String("ADD #as :s"),
		ConditionExpression:       aws.String("attribute_exists(#b)"),
		ExpressionAttributeNames:  map[string]string{"#as": AttrWorkerAsks, "#b": AttrWorkerBeat},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberSS{Value: []string{shard}}},
	}
}

// ClearAsks removes shards from the asks of owner's registry item.
func ClearAsks(tableName, streamARN, owner string, shards []string) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(tableName),
		Key:                       Key(aggregates.WorkerKey(streamARN, owner)),
		UpdateExpression:          aws.String("DELETE #as :s"),
		ExpressionAttributeNames:  map[string]string{"#as": AttrWorkerAsks},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberSS{Value: shards}},
	}
}

// LeaveWorker marks owner's registry item left (its leases released or
// handed over), so that the others stop counting it at once: on condition
// that the item exists and is still incarnation's (or claimed by no
// process that says so), so that a process whose name another process
// took over does not mark the newer one left (HB6).
func LeaveWorker(tableName, streamARN, owner, incarnation string, now time.Time) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(tableName),
		Key:                       Key(aggregates.WorkerKey(streamARN, owner)),
		UpdateExpression:          aws.String("SET #l = :t, #h = :zero, #ua = :ua REMOVE #of ADD #b :one"),
		ConditionExpression:       aws.String("attribute_exists(#b) AND (attribute_not_exists(#inc) OR #inc = :inc)"),
		ExpressionAttributeNames:  map[string]string{"#l": AttrWorkerLeft, "#h": AttrWorkerHeld, "#ua": AttrUpdatedAt, "#of": AttrWorkerOffers, "#b": AttrWorkerBeat, "#inc": AttrWorkerIncarnation},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": Bool(true), ":zero": Int(0), ":ua": stamp(now), ":one": Int(1), ":inc": S(incarnation)},
	}
}

// OfferLease adds shard to the offers of owner's registry item, on
// condition that the worker is registered and has not left.
func OfferLease(tableName, streamARN, owner, shard string) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(tableName),
		Key:                       Key(aggregates.WorkerKey(streamARN, owner)),
		UpdateExpression:          aws.String("ADD #of :s"),
		ConditionExpression:       aws.String("attribute_exists(#b) AND attribute_not_exists(#l)"),
		ExpressionAttributeNames:  map[string]string{"#of": AttrWorkerOffers, "#b": AttrWorkerBeat, "#l": AttrWorkerLeft},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberSS{Value: []string{shard}}},
	}
}

// OffersCounted makes in, a worker write of owner's that sets held
// (HeartbeatWorker and its variants), also remove shards from its offers:
// the offers its writer took, whose takes that held counts. Removed in the
// same write, a taken offer is never left out of both: the others count a
// worker as held + its offers, and a heartbeat computed before a take and
// landing after a separate clear would have left it out until the next
// heartbeat. Removing a shard the offers do not hold is no error.
func OffersCounted(in *dynamodb.UpdateItemInput, shards []string) *dynamodb.UpdateItemInput {
	if len(shards) == 0 {
		return in
	}
	in.UpdateExpression = aws.String(aws.ToString(in.UpdateExpression) + " DELETE #of :taken")
	in.ExpressionAttributeNames["#of"] = AttrWorkerOffers
	in.ExpressionAttributeValues[":taken"] = &types.AttributeValueMemberSS{Value: shards}
	return in
}

// ClearOffers removes shards from the offers of owner's registry item.
func ClearOffers(tableName, streamARN, owner string, shards []string) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(tableName),
		Key:                       Key(aggregates.WorkerKey(streamARN, owner)),
		UpdateExpression:          aws.String("DELETE #of :s"),
		ExpressionAttributeNames:  map[string]string{"#of": AttrWorkerOffers},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberSS{Value: shards}},
	}
}

// ReadWorkers reads a stream's worker registry (consistently, paginated).
func ReadWorkers(ctx context.Context, api dynamodb.QueryAPIClient, coord, streamARN string) ([]Worker, error) {
	var ws []Worker
	err := queryAll(ctx, api, coord, aggregates.WorkersPK(streamARN), func(item map[string]types.AttributeValue) {
		ws = append(ws, DecodeWorker(item))
	})
	if err != nil {
		return nil, fmt.Errorf("read the workers of %s: %w", streamARN, err)
	}
	return ws, nil
}

// ReadLeasePage reads one page of at most limit items of a stream's lease
// partition (consistently), from start (nil: the first); next is nil after
// the last page. A poller sweeps the partition a page per round instead of
// reading it whole at every pass.
func ReadLeasePage(ctx context.Context, api dynamodb.QueryAPIClient, coord, streamARN string, start map[string]types.AttributeValue, limit int32) (leases []Lease, next map[string]types.AttributeValue, err error) {
	leasePrefix := strings.TrimSuffix(aggregates.LeaseKey(streamARN, "x").SK, "x")
	out, err := api.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(coord),
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  map[string]string{"#pk": AttrPK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": S(aggregates.LeasePK(streamARN))},
		ConsistentRead:            aws.Bool(true),
		ExclusiveStartKey:         start,
		Limit:                     aws.Int32(limit),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read leases of %s: %w", streamARN, err)
	}
	for _, item := range out.Items {
		if sk, _ := String(item, AttrSK); strings.HasPrefix(sk, leasePrefix) {
			leases = append(leases, DecodeLease(strings.TrimPrefix(sk, leasePrefix), item))
		}
	}
	return leases, out.LastEvaluatedKey, nil
}
