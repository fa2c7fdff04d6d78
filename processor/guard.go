package processor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// A Guard records a consumer's position in one ordered sequence of stream
// records (a shard, or a Lambda event source mapping's delivery of one) and
// is part of every commit transaction, so that records committed once are
// recognised and skipped when delivered again. docs/exactly-once.md argues
// why each guard is exact and what it assumes.
//
// A Guard is used by one goroutine at a time. Get one from
// Processor.ShardGuard or Processor.MarkerGuard.
type Guard interface {
	// committed returns how many leading changes are done: committed by an
	// earlier delivery, or (MarkerGuard) without effect and so safe to skip,
	// which it marks unguarded. With redeliver set, the caller stops at n and
	// has the source redeliver from there (see MarkerGuard).
	committed(ctx context.Context, changes []change) (n int, redeliver bool, err error)
	// claim returns the transaction action that claims run as committed.
	claim(run []Record) ddbtypes.TransactWriteItem
	// claimed records that claim(run) committed.
	claimed(run []Record)
	// reset forgets cached state after the claim's condition failed.
	reset()
}

// ErrGap is returned (wrapped) by a ShardGuard whose checkpoint is behind the
// position the caller's records start from: records between the two were
// never handed to the processor, so nothing may be committed. The caller
// must reposition its iterator after the checkpoint.
var ErrGap = errors.New("records do not start at the checkpoint")

// ShardGuard is the offset-in-state guard of a shard whose id is known (the
// poller, the tumbling-window Lambda): the shard's checkpoint item, moved by a
// compare-and-set inside each commit transaction.
type ShardGuard struct {
	p         *Processor
	key       aggregates.Key
	shard     string
	loaded    bool
	prev      string // checkpoint as last read or written; "" for none
	origin    string // the records handed over start right after this sequence number
	hasOrigin bool
}

// ShardGuard returns the guard of one shard of a stream.
func (p *Processor) ShardGuard(streamARN, shardID string) *ShardGuard {
	return &ShardGuard{p: p, key: aggregates.CheckpointKey(streamARN, shardID), shard: shardID}
}

// SetOrigin declares that the records the caller will pass start right after
// sequence number seq (the iterator was opened AFTER_SEQUENCE_NUMBER seq), so
// the guard can refuse to commit over a gap (ErrGap). Without an origin the
// caller promises its records start at the checkpoint or at the shard's trim
// horizon.
func (g *ShardGuard) SetOrigin(seq string) { g.origin, g.hasOrigin = seq, true }

// Checkpoint returns the shard's committed position ("" when none),
// reading it from the table if the guard has not yet.
func (g *ShardGuard) Checkpoint(ctx context.Context) (string, error) {
	if err := g.load(ctx); err != nil {
		return "", err
	}
	return g.prev, nil
}

func (g *ShardGuard) load(ctx context.Context) error {
	if g.loaded {
		return nil
	}
	item, err := g.p.getItem(ctx, g.key)
	if err != nil {
		return fmt.Errorf("read checkpoint %s: %w", g.key, err)
	}
	g.prev, _ = stringAttr(item, attrSequenceNumber)
	g.loaded = true
	return nil
}

func (g *ShardGuard) committed(ctx context.Context, changes []change) (int, bool, error) {
	if err := g.load(ctx); err != nil {
		return 0, false, err
	}
	if g.hasOrigin && g.origin != "" && (g.prev == "" || CompareSequence(g.prev, g.origin) < 0) {
		return 0, false, fmt.Errorf("shard %s: checkpoint %q, records start after %q: %w", g.shard, g.prev, g.origin, ErrGap)
	}
	n := 0
	if g.prev != "" {
		for n < len(changes) && CompareSequence(changes[n].rec.SequenceNumber, g.prev) <= 0 {
			n++
		}
	}
	return n, false, nil
}

func (g *ShardGuard) claim(run []Record) ddbtypes.TransactWriteItem {
	last := lastSequence(run)
	u := &ddbtypes.Update{
		TableName:        &g.p.cfg.Table,
		Key:              keyAV(g.key),
		UpdateExpression: aws.String("SET #seq = :last, #et = :et, #ua = :now, #shard = :shard"),
		ExpressionAttributeNames: map[string]string{
			"#seq": attrSequenceNumber, "#et": attrEntityType, "#ua": attrUpdatedAt, "#shard": "shardId",
		},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
			":last": strAV(last), ":et": strAV(aggregates.EntityCheckpoint),
			":now": strAV(g.p.now().Format(time.RFC3339Nano)), ":shard": strAV(g.shard),
		},
	}
	if g.prev == "" {
		u.ConditionExpression = aws.String("attribute_not_exists(#seq)")
	} else {
		u.ConditionExpression = aws.String("#seq = :prev")
		u.ExpressionAttributeValues[":prev"] = strAV(g.prev)
	}
	return ddbtypes.TransactWriteItem{Update: u}
}

func (g *ShardGuard) claimed(run []Record) {
	g.prev = lastSequence(run)
	g.loaded = true
}

func (g *ShardGuard) reset() { g.loaded = false }

// MarkerGuard is the guard of the standard-mode Lambda, whose events carry no
// shard id: a run marker item keyed by each run's first record, holding the
// run's last sequence number, put with attribute_not_exists.
type MarkerGuard struct{ p *Processor }

// MarkerGuard returns the run-marker guard. It holds no state; one can serve
// every invocation.
func (p *Processor) MarkerGuard() *MarkerGuard { return &MarkerGuard{p: p} }

// committed follows the chain of run markers from the first record. A
// marker keyed by a record says that every record up to the marker's last
// sequence number is committed; records without effect (not transactions,
// invalid images, repeats) need no marker, because processing them again
// changes nothing, so the walk steps over them (marking them unguarded) and
// looks up the markers of every record up to the next one with an effect in
// one BatchGetItem. The first record with an effect and no marker starts
// what is new. (A batch acknowledged without effect leaves no marker, so a
// redelivery from an earlier start must walk through it to the runs after
// it.)
//
// When a marker reaches past the batch's end (an event source mapping that
// redelivered a shorter batch), it writes an alias marker at the batch's
// last record pointing to the same end and asks for redelivery from that
// record, so that the next batch starts where the chain can be followed
// instead of inside a committed run.
func (g *MarkerGuard) committed(ctx context.Context, changes []change) (int, bool, error) {
	n := 0
	for n < len(changes) {
		// Candidates: n through the first change with an effect, at most 100
		// (BatchGetItem's limit).
		j := n
		for j+1 < len(changes) && j-n+1 < 100 && !changes[j].effective() {
			j++
		}
		found, last, err := g.firstMarker(ctx, changes[n:j+1])
		if err != nil {
			return n, false, err
		}
		if found < 0 {
			for k := n; k < j; k++ {
				changes[k].unguarded = true
			}
			if changes[j].effective() {
				return j, false, nil
			}
			changes[j].unguarded = true
			n = j + 1
			continue
		}
		for k := n; k < n+found; k++ {
			changes[k].unguarded = true
		}
		n += found
		start := n
		for n < len(changes) && CompareSequence(changes[n].rec.SequenceNumber, last) <= 0 {
			n++
		}
		if n == start {
			return n, false, fmt.Errorf("run marker of %s ends at %s, before its own record %s",
				changes[n].rec.EventID, last, changes[n].rec.SequenceNumber)
		}
		if n == len(changes) && CompareSequence(changes[n-1].rec.SequenceNumber, last) < 0 {
			g.p.metrics.Conflicts.WithLabelValues(ConflictShortRedelivery).Inc()
			tail := changes[n-1].rec
			if err := g.p.putMarker(ctx, recordID(tail), last, 0); err != nil {
				return n - 1, false, fmt.Errorf("write alias marker at %s: %w", recordID(tail), err)
			}
			return n - 1, true, nil
		}
	}
	return n, false, nil
}

// firstMarker reads the run markers of changes' records (consistent reads)
// and returns the index of the first record that has one and that marker's
// last sequence number; -1 when none has.
func (g *MarkerGuard) firstMarker(ctx context.Context, changes []change) (int, string, error) {
	keys := make([]aggregates.Key, len(changes))
	for i := range changes {
		keys[i] = aggregates.RunMarkerKey(recordID(changes[i].rec))
	}
	items, err := g.p.batchGet(ctx, keys, attrSequenceNumber)
	if err != nil {
		return -1, "", fmt.Errorf("read run markers: %w", err)
	}
	for i, k := range keys {
		item, ok := items[k]
		if !ok {
			continue
		}
		last, ok := stringAttr(item, attrSequenceNumber)
		if !ok {
			return -1, "", fmt.Errorf("run marker %s has no %s", k, attrSequenceNumber)
		}
		return i, last, nil
	}
	return -1, "", nil
}

func (g *MarkerGuard) claim(run []Record) ddbtypes.TransactWriteItem {
	item := g.p.markerItem(recordID(&run[0]), lastSequence(run), len(run))
	return ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{
		TableName:           &g.p.cfg.Table,
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(PK)"),
	}}
}

func (g *MarkerGuard) claimed([]Record) {}
func (g *MarkerGuard) reset()           {}

func (p *Processor) markerItem(eventID, lastSeq string, count int) map[string]ddbtypes.AttributeValue {
	now := p.now()
	item := keyAV(aggregates.RunMarkerKey(eventID))
	item[attrEntityType] = strAV(aggregates.EntityRunMarker)
	item[attrSequenceNumber] = strAV(lastSeq)
	item["recordCount"] = intAV(int64(count))
	item[attrUpdatedAt] = strAV(now.Format(time.RFC3339Nano))
	item[attrExpiresAt] = &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(p.cfg.MarkerTTL).Unix(), 10)}
	return item
}

// putMarker writes an alias marker (count 0) outside a commit; it claims no
// records, it only points at the end of a committed run, so writing it twice
// is harmless.
func (p *Processor) putMarker(ctx context.Context, eventID, lastSeq string, count int) error {
	in := &dynamodb.PutItemInput{TableName: &p.cfg.Table, Item: p.markerItem(eventID, lastSeq, count)}
	return p.retry(ctx, "PutItem", func(ctx context.Context) error {
		p.metrics.WriteRequests.WithLabelValues("PutItem").Inc()
		_, err := p.api.PutItem(ctx, in)
		return err
	})
}

var (
	_ Guard = (*ShardGuard)(nil)
	_ Guard = (*MarkerGuard)(nil)
)

// lastSequence returns the highest sequence number of run (a batch may
// repeat an earlier record at its end).
func lastSequence(run []Record) string {
	last := run[0].SequenceNumber
	for _, r := range run[1:] {
		if CompareSequence(r.SequenceNumber, last) > 0 {
			last = r.SequenceNumber
		}
	}
	return last
}
