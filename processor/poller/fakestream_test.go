package poller_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	st "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/ledger-dev/ledger/processor/poller"
)

// recorder is a ledgertest.WriteAPI that writes to the real table and
// turns every write into the stream record DynamoDB would have produced
// (NEW_AND_OLD_IMAGES; a write that changes nothing produces none), so a
// scripted stream can serve them in any shard layout while the table holds
// the items the reports must match.
type recorder struct {
	api  *dynamodb.Client
	mu   sync.Mutex
	recs []st.Record
}

func (r *recorder) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	cp := *in
	cp.ReturnValues = ddbtypes.ReturnValueAllOld
	out, err := r.api.PutItem(ctx, &cp, opts...)
	if err != nil {
		return nil, err
	}
	r.add(in.Item, out.Attributes, in.Item)
	return out, nil
}

func (r *recorder) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	cp := *in
	cp.ReturnValues = ddbtypes.ReturnValueAllOld
	out, err := r.api.DeleteItem(ctx, &cp, opts...)
	if err != nil {
		return nil, err
	}
	if out.Attributes != nil {
		r.add(in.Key, out.Attributes, nil)
	}
	return out, nil
}

var seqCounter struct {
	sync.Mutex
	n int64
}

func nextSeq() string {
	seqCounter.Lock()
	defer seqCounter.Unlock()
	seqCounter.n += 100
	return fmt.Sprintf("%021d", seqCounter.n)
}

func (r *recorder) add(key, old, new map[string]ddbtypes.AttributeValue) {
	name := st.OperationTypeModify
	switch {
	case old == nil:
		name = st.OperationTypeInsert
	case new == nil:
		name = st.OperationTypeRemove
	}
	if old != nil && new != nil && fmt.Sprint(toStream(old)) == fmt.Sprint(toStream(new)) {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := st.Record{
		EventID:   aws.String("ev-" + strconv.Itoa(len(r.recs)) + "-" + strconv.FormatInt(now.UnixNano(), 36)),
		EventName: name,
		Dynamodb: &st.StreamRecord{
			ApproximateCreationDateTime: aws.Time(now),
			Keys:                        toStream(map[string]ddbtypes.AttributeValue{"PK": key["PK"], "SK": key["SK"]}),
			OldImage:                    toStream(old),
			NewImage:                    toStream(new),
			SequenceNumber:              aws.String(nextSeq()),
			StreamViewType:              st.StreamViewTypeNewAndOldImages,
		},
	}
	r.recs = append(r.recs, rec)
}

// take returns the records written since the last take.
func (r *recorder) take() []st.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.recs
	r.recs = nil
	return out
}

func toStream(m map[string]ddbtypes.AttributeValue) map[string]st.AttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]st.AttributeValue, len(m))
	for k, v := range m {
		out[k] = toStreamAV(v)
	}
	return out
}

func toStreamAV(v ddbtypes.AttributeValue) st.AttributeValue {
	switch v := v.(type) {
	case *ddbtypes.AttributeValueMemberS:
		return &st.AttributeValueMemberS{Value: v.Value}
	case *ddbtypes.AttributeValueMemberN:
		return &st.AttributeValueMemberN{Value: v.Value}
	case *ddbtypes.AttributeValueMemberBOOL:
		return &st.AttributeValueMemberBOOL{Value: v.Value}
	case *ddbtypes.AttributeValueMemberNULL:
		return &st.AttributeValueMemberNULL{Value: v.Value}
	case *ddbtypes.AttributeValueMemberB:
		return &st.AttributeValueMemberB{Value: v.Value}
	case *ddbtypes.AttributeValueMemberSS:
		return &st.AttributeValueMemberSS{Value: v.Value}
	case *ddbtypes.AttributeValueMemberNS:
		return &st.AttributeValueMemberNS{Value: v.Value}
	case *ddbtypes.AttributeValueMemberBS:
		return &st.AttributeValueMemberBS{Value: v.Value}
	case *ddbtypes.AttributeValueMemberM:
		return &st.AttributeValueMemberM{Value: toStream(v.Value)}
	case *ddbtypes.AttributeValueMemberL:
		l := make([]st.AttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = toStreamAV(e)
		}
		return &st.AttributeValueMemberL{Value: l}
	}
	panic(fmt.Sprintf("attribute value %T", v))
}

// keyHash spreads records over child shards by item key, as DynamoDB
// partitions do: all records of one item go to the same child.
func keyHash(r st.Record) uint32 {
	h := fnv.New32a()
	pk, _ := r.Dynamodb.Keys["PK"].(*st.AttributeValueMemberS)
	sk, _ := r.Dynamodb.Keys["SK"].(*st.AttributeValueMemberS)
	if pk != nil {
		h.Write([]byte(pk.Value))
	}
	if sk != nil {
		h.Write([]byte("\x00" + sk.Value))
	}
	return h.Sum32()
}

// fakeShard is one shard of a scripted stream.
type fakeShard struct {
	id, parent string
	records    []st.Record
	closed     bool
	trim       int // records before this index are trimmed
	firstRead  time.Time
	endRead    time.Time // when a reader got past the last record of a closed shard
}

type fakeIter struct {
	shard string
	pos   int
}

// fakeStream is a scripted DynamoDB Streams API: a shard graph the test
// builds and changes (records appended, shards closed, children added,
// records trimmed) with injected faults, in front of the poller's logic.
// The records it serves are made by a recorder; the processor commits them
// to the real DynamoDB Local.
type fakeStream struct {
	arn string

	mu       sync.Mutex
	shards   []*fakeShard
	iters    map[string]fakeIter
	nextIter int
	pageSize int // records per GetRecords page at most (the request's Limit too)
	descPage int // shards per DescribeStream page

	// Faults, keyed by shard: the next N GetRecords calls on it fail.
	expire   map[string]int
	throttle map[string]int
	// trimOnRead: on the next GetRecords on the shard, the trim horizon
	// jumps forward by this many records past the iterator.
	trimOnRead map[string]int

	calls map[string]int // by operation
	// reads logs every GetRecords by the client's owner tag.
	reads []fakeRead
}

type fakeRead struct {
	owner, shard string
	at           time.Time
}

func newFakeStream(arn string) *fakeStream {
	return &fakeStream{
		arn: arn, iters: map[string]fakeIter{}, pageSize: 100, descPage: 2,
		expire: map[string]int{}, throttle: map[string]int{}, trimOnRead: map[string]int{}, calls: map[string]int{},
	}
}

func (f *fakeStream) addShard(id, parent string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shards = append(f.shards, &fakeShard{id: id, parent: parent})
}

func (f *fakeStream) shard(id string) *fakeShard {
	for _, s := range f.shards {
		if s.id == id {
			return s
		}
	}
	panic("no shard " + id)
}

func (f *fakeStream) appendTo(id string, recs ...st.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.shard(id)
	if s.closed {
		panic("append to closed shard " + id)
	}
	s.records = append(s.records, recs...)
}

// split appends recs to the children by key hash (in order).
func (f *fakeStream) split(children []string, recs []st.Record) {
	for _, r := range recs {
		f.appendTo(children[int(keyHash(r))%len(children)], r)
	}
}

func (f *fakeStream) close(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shard(id).closed = true
}

func (f *fakeStream) setTrim(id string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shard(id).trim = n
}

func (f *fakeStream) shardTimes(id string) (first, end time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.shard(id)
	return s.firstRead, s.endRead
}

// client returns the Streams API as seen by one poller: its reads are
// logged under owner.
func (f *fakeStream) client(owner string) poller.Streams { return &fakeClient{f: f, owner: owner} }

type fakeClient struct {
	f     *fakeStream
	owner string
}

func (c *fakeClient) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	f := c.f
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["DescribeStream"]++
	if aws.ToString(in.StreamArn) != f.arn {
		return nil, &st.ResourceNotFoundException{Message: aws.String("no stream " + aws.ToString(in.StreamArn))}
	}
	start := 0
	if id := aws.ToString(in.ExclusiveStartShardId); id != "" {
		for i, s := range f.shards {
			if s.id == id {
				start = i + 1
			}
		}
	}
	desc := &st.StreamDescription{StreamArn: aws.String(f.arn), StreamStatus: st.StreamStatusEnabled, StreamViewType: st.StreamViewTypeNewAndOldImages}
	end := min(start+f.descPage, len(f.shards))
	for _, s := range f.shards[start:end] {
		sh := st.Shard{ShardId: aws.String(s.id), SequenceNumberRange: &st.SequenceNumberRange{StartingSequenceNumber: aws.String(s.startSeq())}}
		if s.parent != "" {
			sh.ParentShardId = aws.String(s.parent)
		}
		if s.closed {
			sh.SequenceNumberRange.EndingSequenceNumber = aws.String(s.endSeq())
		}
		desc.Shards = append(desc.Shards, sh)
	}
	if end < len(f.shards) {
		desc.LastEvaluatedShardId = aws.String(f.shards[end-1].id)
	}
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: desc}, nil
}

// startSeq is the shard's first sequence number: shards created later
// start later, as on AWS.
func (s *fakeShard) startSeq() string {
	if len(s.records) > 0 {
		return aws.ToString(s.records[0].Dynamodb.SequenceNumber)
	}
	return "0"
}

func (s *fakeShard) endSeq() string {
	if len(s.records) > 0 {
		return aws.ToString(s.records[len(s.records)-1].Dynamodb.SequenceNumber)
	}
	return s.startSeq()
}

func (f *fakeStream) newIter(shard string, pos int) *string {
	f.nextIter++
	tok := "it-" + strconv.Itoa(f.nextIter)
	f.iters[tok] = fakeIter{shard: shard, pos: pos}
	return aws.String(tok)
}

func (c *fakeClient) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	f := c.f
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["GetShardIterator"]++
	var s *fakeShard
	for _, x := range f.shards {
		if x.id == aws.ToString(in.ShardId) {
			s = x
		}
	}
	if s == nil {
		return nil, &st.ResourceNotFoundException{Message: aws.String("no shard")}
	}
	var pos int
	switch in.ShardIteratorType {
	case st.ShardIteratorTypeTrimHorizon:
		pos = s.trim
	case st.ShardIteratorTypeLatest:
		pos = len(s.records)
	case st.ShardIteratorTypeAfterSequenceNumber, st.ShardIteratorTypeAtSequenceNumber:
		seq := aws.ToString(in.SequenceNumber)
		pos = len(s.records)
		for i, r := range s.records {
			c := compareSeq(aws.ToString(r.Dynamodb.SequenceNumber), seq)
			if c > 0 || (c == 0 && in.ShardIteratorType == st.ShardIteratorTypeAtSequenceNumber) {
				pos = i
				break
			}
		}
		if pos < s.trim {
			return nil, &st.TrimmedDataAccessException{Message: aws.String("sequence number " + seq + " is beyond the trim horizon")}
		}
	default:
		return nil, errors.New("fake: iterator type " + string(in.ShardIteratorType))
	}
	return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: f.newIter(s.id, pos)}, nil
}

func compareSeq(a, b string) int {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func (c *fakeClient) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	f := c.f
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["GetRecords"]++
	it, ok := f.iters[aws.ToString(in.ShardIterator)]
	if !ok {
		return nil, errors.New("fake: unknown iterator")
	}
	f.reads = append(f.reads, fakeRead{owner: c.owner, shard: it.shard, at: time.Now()})
	s := f.shard(it.shard)
	if f.expire[s.id] > 0 {
		f.expire[s.id]--
		return nil, &st.ExpiredIteratorException{Message: aws.String("iterator expired")}
	}
	if f.throttle[s.id] > 0 {
		f.throttle[s.id]--
		return nil, &st.LimitExceededException{Message: aws.String("rate exceeded")}
	}
	if n := f.trimOnRead[s.id]; n > 0 {
		delete(f.trimOnRead, s.id)
		s.trim = min(it.pos+n, len(s.records))
	}
	if it.pos < s.trim {
		return nil, &st.TrimmedDataAccessException{Message: aws.String("trimmed")}
	}
	if s.firstRead.IsZero() {
		s.firstRead = time.Now()
	}
	n := min(int(aws.ToInt32(in.Limit)), f.pageSize, len(s.records)-it.pos)
	out := &dynamodbstreams.GetRecordsOutput{Records: append([]st.Record(nil), s.records[it.pos:it.pos+n]...)}
	next := it.pos + n
	if s.closed && next == len(s.records) {
		if s.endRead.IsZero() {
			s.endRead = time.Now()
		}
		return out, nil // no next iterator: the shard's end
	}
	out.NextShardIterator = f.newIter(s.id, next)
	return out, nil
}
