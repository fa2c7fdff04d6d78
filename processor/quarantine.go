package processor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/table"
)

// This file is the quarantine of invalid records: the quarantine item of a
// record, what it weighs in a commit, and the puts outside a commit. The
// commit transactions carry the quarantine items of the records they claim
// (commit.go; docs/exactly-once.md, "Quarantine items").

// maxQuarantineRecord bounds the raw record stored with a quarantine item,
// well under DynamoDB's 400 KB item limit (a MODIFY carries two images).
const maxQuarantineRecord = 64 << 10

// maxQuarantineBytes bounds the quarantine items one commit transaction
// carries, in bytes as quarantineBytes counts them: TransactWriteItems
// takes at most 4 MB of items, and the report writes beside them keep the
// rest.
const maxQuarantineBytes = 2 << 20

// maxQuarantineDetail bounds the detail a quarantine item stores: the
// detail quotes the refused value, which may be as large as the item (the
// record keeps it whole, up to maxQuarantineRecord).
const maxQuarantineDetail = 1 << 10

// quarantineOverhead is what quarantineBytes counts for a quarantine item's
// attributes besides its record and detail (keys, names, reason, times).
const quarantineOverhead = 1 << 10

// quarantinePuts bounds the quarantine puts outside a commit in flight at
// once.
const quarantinePuts = 16

// needsQuarantine reports whether the change's record gets a quarantine
// item: a transaction record that cannot be one, not a repeat.
func (c *change) needsQuarantine() bool { return c.invalid != nil && !c.dup }

// quarantineBytes is what the quarantine item of c weighs in a commit: its
// record as stored, its detail and a fixed overhead. It depends on the
// record alone, so a batch's plan places quarantine items alike whoever
// plans it.
func quarantineBytes(c *change) int {
	raw, _ := storedRecord(c.rec, false)
	return len(raw) + len(quarantineDetail(c)) + quarantineOverhead
}

// quarantineDetail is the detail the quarantine item of c stores: the
// reason's message, cut at maxQuarantineDetail bytes.
func quarantineDetail(c *change) string {
	d := c.invalid.Error()
	if len(d) <= maxQuarantineDetail {
		return d
	}
	return strings.ToValidUTF8(d[:maxQuarantineDetail], "") + "…"
}

// quarantined is the quarantine item of one invalid record in a commit,
// built once for all its attempts (one quarantinedAt, by which the commit
// recognises its own items after a lost answer).
type quarantined struct {
	c         *change
	key       aggregates.Key
	item      map[string]ddbtypes.AttributeValue
	at        time.Time
	truncated bool
	// exists: its condition failed, the record is quarantined already;
	// the commit no longer sends it.
	exists bool
}

// quarantineWrites returns the quarantine items of changes that need one,
// built at now, a record id once.
func (p *Processor) quarantineWrites(changes []*change, now time.Time) []*quarantined {
	var out []*quarantined
	seen := map[string]bool{}
	for _, c := range changes {
		id := recordID(c.rec)
		if !c.needsQuarantine() || seen[id] {
			continue // two records with one id (malformed, no eventID nor sequence number) are one item
		}
		seen[id] = true
		item, truncated := quarantineItem(c, now, false)
		out = append(out, &quarantined{c: c, key: aggregates.QuarantineKey(id), item: item, at: now, truncated: truncated})
	}
	return out
}

// truncate replaces q's item by its truncated form (keys and reason),
// once; it reports whether it did.
func (q *quarantined) truncate() bool {
	if q.truncated {
		return false
	}
	q.item, q.truncated = quarantineItem(q.c, q.at, true)
	return true
}

// put is q's write in a commit transaction.
func (q *quarantined) put(tableName string) ddbtypes.TransactWriteItem {
	in := table.PutQuarantine(tableName, q.item)
	return ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: in.TableName, Item: in.Item, ConditionExpression: in.ConditionExpression}}
}

// countQuarantined counts the quarantine items a landed commit wrote.
func (p *Processor) countQuarantined(qs []*quarantined) {
	for _, q := range qs {
		if !q.exists {
			p.metrics.Quarantined.WithLabelValues(string(q.c.invalid.Reason)).Inc()
		}
	}
}

// countLandedQuarantine counts, after a commit's claim failed, the
// quarantine items of qs that exist with this commit's quarantinedAt: an
// attempt of it landed and its answer was lost (one consistent read; a
// failed read only leaves the metric short).
func (p *Processor) countLandedQuarantine(ctx context.Context, qs []*quarantined) {
	var keys []aggregates.Key
	for _, q := range qs {
		if !q.exists {
			keys = append(keys, q.key)
		}
	}
	for len(keys) > 0 {
		n := min(len(keys), 100)
		items, err := p.batchGet(ctx, keys[:n], table.AttrQuarantinedAt)
		if err != nil {
			return
		}
		keys = keys[n:]
		for _, q := range qs {
			got, ok := items[q.key]
			if !ok || q.exists {
				continue
			}
			at, _ := table.String(got, table.AttrQuarantinedAt)
			if mine, _ := table.String(q.item, table.AttrQuarantinedAt); at == mine {
				p.metrics.Quarantined.WithLabelValues(string(q.c.invalid.Reason)).Inc()
			}
		}
	}
}

// putQuarantine puts the quarantine items of changes outside a commit,
// several at once, each on condition that it is absent (a repeat's failed
// condition counts as done): for invalid records no commit claims (a
// trimmed batch's, docs/exactly-once.md) and for a batch planned before
// quarantine items rode in its groups (plan version 2).
func (p *Processor) putQuarantine(ctx context.Context, changes []change) error {
	var list []*change
	for i := range changes {
		if changes[i].needsQuarantine() {
			list = append(list, &changes[i])
		}
	}
	errs := make([]error, len(list))
	sem := make(chan struct{}, quarantinePuts)
	var wg sync.WaitGroup
	for i, c := range list {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = p.putQuarantineItem(ctx, c)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// putQuarantineItem puts the quarantine item of c, keyed by its record and
// put with attribute_not_exists, so a repeat writes nothing new.
func (p *Processor) putQuarantineItem(ctx context.Context, c *change) error {
	now := p.now()
	item, truncated := quarantineItem(c, now, false)
	err := p.retry(ctx, "PutItem", func(ctx context.Context) error {
		p.metrics.WriteRequests.WithLabelValues("PutItem").Inc()
		out, err := p.api.PutItem(ctx, table.PutQuarantine(p.cfg.Table, item))
		if err == nil && out.ConsumedCapacity != nil {
			p.metrics.WriteUnits.WithLabelValues("PutItem").Add(aws.ToFloat64(out.ConsumedCapacity.CapacityUnits))
		}
		var ccf *ddbtypes.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return nil // quarantined by an earlier delivery
		}
		if err != nil && classifyErr(err) == classPermanent && !truncated {
			item, truncated = quarantineItem(c, now, true) // too large or unencodable: keep keys and reason
			return errRetryTruncated
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("quarantine record %s: %w", c.rec.EventID, err)
	}
	p.metrics.Quarantined.WithLabelValues(string(c.invalid.Reason)).Inc()
	return nil
}

// errRetryTruncated makes retry try once more with the truncated item.
var errRetryTruncated = &retryableError{"quarantine item rejected; retrying truncated"}

type retryableError struct{ msg string }

func (e *retryableError) Error() string        { return e.msg }
func (e *retryableError) RetryableError() bool { return true }

// quarantineItem is the quarantine item of c, quarantined at now; only its
// record's keys when truncate is set or the record is too large to keep.
// It reports whether the item is truncated.
func quarantineItem(c *change, now time.Time, truncate bool) (map[string]ddbtypes.AttributeValue, bool) {
	r := c.rec
	q := table.Quarantined{
		ID: recordID(r), EventID: r.EventID, EventName: r.EventName, SequenceNumber: r.SequenceNumber, StreamARN: r.StreamARN,
		Reason: string(c.invalid.Reason), Detail: quarantineDetail(c), Field: c.invalid.Field, At: now.UTC().Format(time.RFC3339Nano),
	}
	q.Record, q.RecordBytes = storedRecord(r, truncate)
	q.Truncated = q.RecordBytes > 0
	return table.QuarantineItem(q), q.Truncated
}

// storedRecord is the record as a quarantine item stores it: its Lambda
// JSON, or only its keys when truncate is set, the record does not encode
// or its JSON is larger than maxQuarantineRecord; whole is then the size of
// the whole (0 when not truncated).
func storedRecord(r *Record, truncate bool) (raw string, whole int) {
	raw, err := recordJSON(r)
	if err != nil {
		raw, truncate = fmt.Sprintf(`{"encodeError":%q}`, err.Error()), true
	}
	if !truncate && len(raw) <= maxQuarantineRecord {
		return raw, 0
	}
	keys, _ := json.Marshal(map[string]any{"eventID": r.EventID, "sequenceNumber": r.SequenceNumber})
	if k, err := recordKeysJSON(r); err == nil {
		keys = k
	}
	return string(keys), len(raw)
}

// recordID identifies a record for its quarantine item and run marker: its
// eventID, or for a record without one (malformed input), its sequence
// number, or a hash of its content.
func recordID(r *Record) string {
	switch {
	case r.EventID != "":
		return r.EventID
	case r.SequenceNumber != "":
		return "seq-" + r.SequenceNumber
	}
	raw, _ := recordJSON(r)
	sum := sha256.Sum256([]byte(raw + fmt.Sprint(r.DecodeErr)))
	return "sha256-" + hex.EncodeToString(sum[:])
}

func recordJSON(r *Record) (string, error) {
	ev, err := ToLambda(*r)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(ev)
	return string(b), err
}

func recordKeysJSON(r *Record) ([]byte, error) {
	short := *r
	short.OldImage, short.NewImage = nil, nil
	ev, err := ToLambda(short)
	if err != nil {
		return nil, err
	}
	return json.Marshal(ev)
}
