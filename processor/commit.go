package processor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra"
)

// This file is the commit protocol: one TransactWriteItems per run, holding
// the guard's claim and one conditional, additive update per report item.
// docs/exactly-once.md explains why it is exact.

// errGuardTaken means a run's guard condition failed: some or all of its
// records were committed by an earlier delivery (or a lost answer).
var errGuardTaken = errors.New("guard already claimed")

// commitRuns plans changes into runs and commits them in order. It returns
// how many leading changes are done.
func (p *Processor) commitRuns(ctx context.Context, g Guard, changes []change, res *Result) (int, error) {
	done := 0
	for _, r := range planRuns(changes, p.cfg.MaxItemsPerRun, p.cfg.MaxEntriesPerItem) {
		if err := p.quarantine(ctx, r.changes); err != nil {
			return done, err
		}
		keys := r.fold.Keys()
		// A run with a change that has an effect is claimed even when its
		// deltas cancel out (an insert and a remove of one item, a modify of
		// no aggregated field): the marker walk must find it. Only a run
		// without any effect (ignored records, invalid images, repeats)
		// commits nothing, as processing it again changes nothing.
		if len(keys) > 0 || anyEffective(r.changes) {
			recs := r.records()
			parts := make([]part, len(keys))
			for i, k := range keys {
				parts[i] = part{key: k, delta: r.fold.Report(k)}
			}
			err := p.commitTx(ctx, g, func() ddbtypes.TransactWriteItem { return g.claim(recs) }, func() { g.claimed(recs) }, parts)
			if err != nil {
				return done, fmt.Errorf("commit run of %d records: %w", len(recs), err)
			}
			res.Runs++
		}
		p.account(r.changes, len(keys) > 0, res)
		done += len(r.changes)
	}
	return done, nil
}

// commitBatch commits changes, which start right after the checkpoint, as
// one batch (docs/exactly-once.md, "Batch commits"): the checkpoint's
// pending batch first when there is one, else all of changes. It returns how
// many leading changes are done.
func (p *Processor) commitBatch(ctx context.Context, g *ShardGuard, changes []change, res *Result) (int, error) {
	plan := batchPlan{items: p.cfg.MaxItemsPerRun, entries: p.cfg.MaxEntriesPerItem}
	end, next := len(changes), 0
	pb := g.pending
	if pb != nil {
		if last := maxSequence(changes); CompareSequence(last, pb.to) < 0 {
			return 0, fmt.Errorf("shard %s: the pending batch ends at %s, the records at %s: %w", g.shard, pb.to, last, ErrIncompleteBatch)
		}
		end = -1
		for i := range changes {
			if !changes[i].dup && CompareSequence(changes[i].rec.SequenceNumber, pb.to) == 0 {
				end = i + 1
				break
			}
		}
		if end < 0 {
			return 0, fmt.Errorf("shard %s: the pending batch's last record %s is not among the records", g.shard, pb.to)
		}
		plan, next = pb.plan, pb.next
	}
	batch := changes[:end]
	to := maxSequence(batch)
	if err := p.quarantine(ctx, batch); err != nil {
		return 0, err
	}
	fold := aggregates.NewFold()
	for i := range batch {
		fold.AddChange(batch[i].old, batch[i].new)
	}
	groups := planGroups(fold, plan)
	reportsChanged := len(groups) > 0
	if !reportsChanged && (anyEffective(batch) || g.abandoned != nil) {
		// Claimed all the same, like a run (see commitRuns); and an abandoned
		// batch must be cleared even by a batch without effect.
		groups = [][]part{nil}
	}
	n := len(groups)
	digest := planDigest(to, plan, groups)
	if pb != nil && (n != pb.groups || digest != pb.digest) {
		return 0, fmt.Errorf("shard %s: the pending batch through %s was planned as %d groups (plan %s), now %d (plan %s): changed code mid-batch? See docs/runbook.md",
			g.shard, pb.to, pb.groups, pb.digest, n, digest)
	}
	for k := next; k < n; k++ {
		err := p.commitTx(ctx, g,
			func() ddbtypes.TransactWriteItem { return g.claimGroup(k, n, to, plan, digest) },
			func() { g.claimedGroup(k, n, to, plan, digest) }, groups[k])
		if err != nil {
			return 0, fmt.Errorf("commit group %d of %d of the batch through %s: %w", k+1, n, to, err)
		}
		res.Runs++
	}
	p.account(batch, reportsChanged, res)
	return end, nil
}

// maxSequence is the highest sequence number of changes (lastSequence
// without copying the records).
func maxSequence(changes []change) string {
	last := changes[0].rec.SequenceNumber
	for i := range changes[1:] {
		if s := changes[i+1].rec.SequenceNumber; CompareSequence(s, last) > 0 {
			last = s
		}
	}
	return last
}

func records(changes []change) []Record {
	out := make([]Record, len(changes))
	for i := range changes {
		out[i] = *changes[i].rec
	}
	return out
}

// account counts committed changes by outcome and observes the lag of the
// applied ones when reports changed.
func (p *Processor) account(changes []change, reportsChanged bool, res *Result) {
	now := p.now()
	for i := range changes {
		c := &changes[i]
		switch {
		case c.dup:
			res.Duplicates++
			p.metrics.Records.WithLabelValues(eventLabel(c.rec.EventName), OutcomeDuplicate).Inc()
		case !c.isTxn:
			res.Ignored++
			p.metrics.Records.WithLabelValues(eventLabel(c.rec.EventName), OutcomeIgnored).Inc()
		case c.invalid != nil:
			res.Quarantined++
			p.metrics.Records.WithLabelValues(eventLabel(c.rec.EventName), OutcomeQuarantined).Inc()
		default:
			res.Applied++
			p.metrics.Records.WithLabelValues(eventLabel(c.rec.EventName), OutcomeApplied).Inc()
			if t := writeTime(c); !t.IsZero() && reportsChanged {
				p.metrics.Lag.Observe(now.Sub(t).Seconds())
			}
		}
	}
}

func anyEffective(changes []change) bool {
	for i := range changes {
		if changes[i].effective() {
			return true
		}
	}
	return false
}

// writeTime is when the change was written: the writer's own updatedAt in the
// new image (precise), else the stream's ApproximateCreationDateTime.
func writeTime(c *change) time.Time {
	if c.rec.NewImage != nil {
		if s, ok := stringAttr(c.rec.NewImage, attrUpdatedAt); ok {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				return t
			}
		}
	}
	return c.rec.ApproximateCreation
}

// commitTx commits one transaction: the guard action claim() returns and
// one update per part, retrying what is retryable; claimed runs once it
// landed. It returns errGuardTaken when the guard's condition failed: what
// it claims is (partly) committed already.
func (p *Processor) commitTx(ctx context.Context, g Guard, claim func() ddbtypes.TransactWriteItem, claimed func(), parts []part) error {
	keys := make([]aggregates.ReportKey, len(parts))
	for i, pt := range parts {
		keys[i] = pt.key
	}
	var lastErr error
	for attempt := 1; attempt <= p.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if err := sleep(ctx, p.backoff(attempt-1)); err != nil {
				return err
			}
		}
		shapes, err := p.shapes.get(ctx, p, keys)
		if err != nil {
			return err
		}
		items := make([]ddbtypes.TransactWriteItem, 0, len(parts)+1)
		items = append(items, claim())
		now := p.now().Format(time.RFC3339Nano)
		for _, pt := range parts {
			u, err := p.reportUpdate(pt.key, pt.delta, shapes[pt.key.Key()], now)
			if err != nil {
				return err
			}
			items = append(items, ddbtypes.TransactWriteItem{Update: u})
		}
		p.metrics.WriteRequests.WithLabelValues("TransactWriteItems").Inc()
		out, err := p.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems:          items,
			ReturnConsumedCapacity: ddbtypes.ReturnConsumedCapacityTotal,
		})
		if err == nil {
			for _, cc := range out.ConsumedCapacity {
				p.metrics.WriteUnits.WithLabelValues("TransactWriteItems").Add(aws.ToFloat64(cc.CapacityUnits))
			}
			claimed()
			for _, pt := range parts {
				p.shapes.applied(pt.key.Key(), shapes[pt.key.Key()], pt.delta)
			}
			p.metrics.Commits.WithLabelValues("committed").Inc()
			return nil
		}
		lastErr = err
		var tce *ddbtypes.TransactionCanceledException
		if errors.As(err, &tce) {
			retry, err := p.cancelled(g, keys, tce)
			if err != nil {
				return err
			}
			if retry {
				continue
			}
		}
		class := classifyErr(err)
		if class == classPermanent || class == classCanceled {
			p.metrics.Commits.WithLabelValues("failed").Inc()
			return err
		}
		// Outcome unknown (the write may have landed): retry; the guard in the
		// next attempt tells whether it did.
		p.countRetry("TransactWriteItems", class)
	}
	p.metrics.Commits.WithLabelValues("failed").Inc()
	return fmt.Errorf("%d attempts: %w", p.cfg.MaxAttempts, lastErr)
}

// cancelled interprets a cancelled commit. The guard's reason comes first:
// when it failed, the run is (partly) committed already, whatever else
// failed. It returns retry=true when the run should simply be tried again.
func (p *Processor) cancelled(g Guard, keys []aggregates.ReportKey, tce *ddbtypes.TransactionCanceledException) (bool, error) {
	reasons := tce.CancellationReasons
	code := func(i int) string {
		if i < len(reasons) {
			return aws.ToString(reasons[i].Code)
		}
		return ""
	}
	if code(0) == "ConditionalCheckFailed" {
		g.reset()
		for _, k := range keys {
			p.shapes.forget(k.Key())
		}
		p.metrics.Conflicts.WithLabelValues(ConflictDuplicate).Inc()
		p.metrics.Commits.WithLabelValues("duplicate").Inc()
		return false, errGuardTaken
	}
	var shape, conflict, throttle bool
	for i := range reasons {
		switch code(i) {
		case "", "None":
		case "ConditionalCheckFailed": // a report's shape (the guard's was handled above)
			shape = true
			if i-1 < len(keys) {
				p.shapes.forget(keys[i-1].Key())
			}
		case "TransactionConflict":
			conflict = true
		case "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
			throttle = true
		default:
			p.metrics.Commits.WithLabelValues("failed").Inc()
			return false, fmt.Errorf("commit cancelled: item %d of the transaction: %s: %s", i, code(i), aws.ToString(reasons[i].Message))
		}
	}
	if shape {
		p.metrics.Conflicts.WithLabelValues(ConflictConditionFailed).Inc()
	}
	if conflict {
		p.metrics.Conflicts.WithLabelValues(ConflictTransactionConflict).Inc()
		p.countRetry("TransactWriteItems", classServer)
	}
	if throttle {
		p.countRetry("TransactWriteItems", classThrottle)
	}
	return true, nil
}

// Placeholders of report updates. Short names keep expressions far from
// DynamoDB's 4 KB limit.
var reportNames = map[string]string{
	"#i": attrTotalIncome, "#x": attrTotalExpense, "#n": attrTransactionCount,
	"#et": attrEntityType, "#pt": attrPeriodType, "#pv": attrPeriodValue, "#ua": attrUpdatedAt,
	"#b0": aggregates.ByCategory.Attribute(), "#b1": aggregates.ByCostCenter.Attribute(), "#b2": aggregates.ByPaymentMethod.Attribute(),
}

const maxExpression = 4096

// reportUpdate builds the additive update of one report item. Totals use
// if_not_exists(x, 0) + d. A breakdown map the item lacks is set whole; an
// entry the map lacks is set whole; an existing entry is incremented. Which
// form is used follows the item's known shape, and that shape is the
// update's condition, so a stale guess cancels the transaction instead of
// corrupting the item.
func (p *Processor) reportUpdate(k aggregates.ReportKey, delta *aggregates.Report, sh *shape, now string) (*ddbtypes.Update, error) {
	names := make(map[string]string, len(reportNames)+8)
	for n, a := range reportNames {
		names[n] = a
	}
	values := map[string]ddbtypes.AttributeValue{
		":z": intAV(0), ":et": strAV(aggregates.EntityReport), ":pt": strAV(string(k.Period.Type)),
		":pv": strAV(k.Period.Value), ":ua": strAV(now),
		":i": numberAV(delta.Income), ":x": numberAV(delta.Expense), ":n": intAV(delta.Count),
	}
	set := []string{
		"#i = if_not_exists(#i, :z) + :i", "#x = if_not_exists(#x, :z) + :x", "#n = if_not_exists(#n, :z) + :n",
		"#et = :et", "#pt = :pt", "#pv = :pv", "#ua = :ua",
	}
	var cond []string
	nv := 0
	value := func(v ddbtypes.AttributeValue) string {
		nv++
		name := ":v" + strconv.Itoa(nv)
		values[name] = v
		return name
	}
	ne := 0
	for _, d := range aggregates.Dimensions {
		entries := delta.Breakdowns[d]
		if len(entries) == 0 {
			continue
		}
		b := "#b" + strconv.Itoa(int(d))
		if !sh.present[d] {
			m := &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{}}
			for name, t := range entries {
				m.Value[name] = infra.TotalsAV(t)
			}
			set = append(set, b+" = "+value(m))
			cond = append(cond, "attribute_not_exists("+b+")")
			continue
		}
		sorted := make([]string, 0, len(entries))
		for name := range entries {
			sorted = append(sorted, name)
		}
		sort.Strings(sorted)
		newEntry := false
		for _, name := range sorted {
			t := entries[name]
			ne++
			e := b + ".#k" + strconv.Itoa(ne)
			names["#k"+strconv.Itoa(ne)] = name
			if !sh.entries[d][name] {
				set = append(set, e+" = "+value(infra.TotalsAV(t)))
				cond = append(cond, "attribute_not_exists("+e+")")
				newEntry = true
				continue
			}
			cond = append(cond, "attribute_exists("+e+")")
			for _, f := range []struct {
				ph   string
				zero bool
				v    ddbtypes.AttributeValue
			}{{"#i", t.Income.IsZero(), numberAV(t.Income)}, {"#x", t.Expense.IsZero(), numberAV(t.Expense)}, {"#n", t.Count == 0, intAV(t.Count)}} {
				if f.zero {
					continue
				}
				path := e + "." + f.ph
				set = append(set, path+" = if_not_exists("+path+", :z) + "+value(f.v))
			}
		}
		if newEntry {
			cond = append(cond, "attribute_exists("+b+")")
		}
	}
	u := &ddbtypes.Update{
		TableName:                 &p.cfg.Table,
		Key:                       keyAV(k.Key()),
		UpdateExpression:          aws.String("SET " + strings.Join(set, ", ")),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
	if len(cond) > 0 {
		u.ConditionExpression = aws.String(strings.Join(cond, " AND "))
	}
	if len(*u.UpdateExpression) > maxExpression || len(aws.ToString(u.ConditionExpression)) > maxExpression {
		return nil, fmt.Errorf("report %s: update expression of %d bytes exceeds DynamoDB's limit", k, len(*u.UpdateExpression))
	}
	// Placeholders not used by this update must not be sent.
	for n := range names {
		if !strings.Contains(*u.UpdateExpression, n) && !strings.Contains(aws.ToString(u.ConditionExpression), n) {
			delete(names, n)
		}
	}
	return u, nil
}

// quarantine writes a quarantine item for every change that needs one. The
// item is keyed by the record's eventID and put with attribute_not_exists,
// so a redelivery writes nothing new.
func (p *Processor) quarantine(ctx context.Context, changes []change) error {
	for i := range changes {
		c := &changes[i]
		if c.invalid == nil {
			continue
		}
		item := p.quarantineItem(c, false)
		err := p.retry(ctx, "PutItem", func(ctx context.Context) error {
			p.metrics.WriteRequests.WithLabelValues("PutItem").Inc()
			out, err := p.api.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: &p.cfg.Table, Item: item, ConditionExpression: aws.String("attribute_not_exists(PK)"),
				ReturnConsumedCapacity: ddbtypes.ReturnConsumedCapacityTotal,
			})
			if err == nil && out.ConsumedCapacity != nil {
				p.metrics.WriteUnits.WithLabelValues("PutItem").Add(aws.ToFloat64(out.ConsumedCapacity.CapacityUnits))
			}
			var ccf *ddbtypes.ConditionalCheckFailedException
			if errors.As(err, &ccf) {
				return nil // quarantined by an earlier delivery
			}
			if err != nil && classifyErr(err) == classPermanent && !isTruncated(item) {
				item = p.quarantineItem(c, true) // too large or unencodable: keep keys and reason
				return errRetryTruncated
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("quarantine record %s: %w", c.rec.EventID, err)
		}
		p.metrics.Quarantined.WithLabelValues(string(c.invalid.Reason)).Inc()
	}
	return nil
}

// errRetryTruncated makes retry try once more with the truncated item.
var errRetryTruncated = &retryableError{"quarantine item rejected; retrying truncated"}

type retryableError struct{ msg string }

func (e *retryableError) Error() string        { return e.msg }
func (e *retryableError) RetryableError() bool { return true }

// maxQuarantineRecord bounds the raw record stored with a quarantine item,
// well under DynamoDB's 400 KB item limit (a MODIFY carries two images).
const maxQuarantineRecord = 64 << 10

func isTruncated(item map[string]ddbtypes.AttributeValue) bool {
	_, ok := item["truncated"]
	return ok
}

func (p *Processor) quarantineItem(c *change, truncate bool) map[string]ddbtypes.AttributeValue {
	now := p.now().Format(time.RFC3339Nano)
	r := c.rec
	item := keyAV(aggregates.QuarantineKey(recordID(r)))
	item[attrEntityType] = strAV(aggregates.EntityQuarantine)
	item["GSI1PK"] = strAV(aggregates.QuarantineIndexPK)
	item["GSI1SK"] = strAV(now + "#" + r.EventID)
	item["eventID"] = strAV(r.EventID)
	item["eventName"] = strAV(r.EventName)
	item[attrSequenceNumber] = strAV(r.SequenceNumber)
	item["streamArn"] = strAV(r.StreamARN)
	item["reason"] = strAV(string(c.invalid.Reason))
	item["detail"] = strAV(c.invalid.Error())
	if c.invalid.Field != "" {
		item["field"] = strAV(c.invalid.Field)
	}
	item["quarantinedAt"] = strAV(now)
	raw, err := recordJSON(r)
	if err != nil {
		raw, truncate = fmt.Sprintf(`{"encodeError":%q}`, err.Error()), true
	}
	if truncate || len(raw) > maxQuarantineRecord {
		item["truncated"] = &ddbtypes.AttributeValueMemberBOOL{Value: true}
		item["recordBytes"] = intAV(int64(len(raw)))
		keys, _ := json.Marshal(map[string]any{"eventID": r.EventID, "sequenceNumber": r.SequenceNumber})
		if k, err := recordKeysJSON(r); err == nil {
			keys = k
		}
		raw = string(keys)
	}
	item["record"] = strAV(raw)
	return item
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

// getItem reads one item with a consistent read; nil when absent.
func (p *Processor) getItem(ctx context.Context, k aggregates.Key) (map[string]ddbtypes.AttributeValue, error) {
	var item map[string]ddbtypes.AttributeValue
	err := p.retry(ctx, "GetItem", func(ctx context.Context) error {
		out, err := p.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &p.cfg.Table, Key: keyAV(k), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return err
		}
		item = out.Item
		return nil
	})
	return item, err
}
