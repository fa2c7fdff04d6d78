package streamemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go"
)

// targetPrefix is the X-Amz-Target prefix of the DynamoDB Streams API
// (awsJson1_0 protocol: "DynamoDBStreams_20120810.GetRecords").
const targetPrefix = "DynamoDBStreams_20120810."

// errorNamespace prefixes the __type of error answers, as AWS writes it;
// the SDK keeps what follows the '#'.
const errorNamespace = "com.amazonaws.dynamodb.v20120810#"

// Handler serves s over HTTP as the DynamoDB Streams API does (the
// awsJson1_0 protocol the AWS SDKs speak: a POST with X-Amz-Target
// DynamoDBStreams_20120810.{DescribeStream,GetShardIterator,GetRecords,
// ListStreams} and a JSON body, attribute values in DynamoDB JSON), so a
// consumer in another process reaches the emulation through its ordinary
// Streams client by its endpoint (AWS_ENDPOINT_URL_DYNAMODB_STREAMS, or
// the client's BaseEndpoint). Errors are answered as AWS answers them:
// HTTP 400 (500 for InternalServerError) with
// {"__type":"com.amazonaws.dynamodb.v20120810#TrimmedDataAccessException","message":…},
// which the SDK decodes into its typed errors (*types.TrimmedDataAccessException,
// …; ValidationException and unknown operations as a smithy.APIError with
// that code). Requests are not authenticated: any signature is accepted.
func Handler(s *Stream) http.Handler {
	return &server{s: s}
}

type server struct {
	s   *Stream
	req atomic.Uint64
}

// The wire shapes (member names as in the service model; the SDK's
// deserializer ignores none it knows and skips the rest).
type (
	describeStreamRequest struct {
		StreamArn             *string
		Limit                 *int32
		ExclusiveStartShardId *string
		ShardFilter           *struct {
			Type    string
			ShardId *string
		}
	}
	getShardIteratorRequest struct {
		StreamArn         *string
		ShardId           *string
		ShardIteratorType string
		SequenceNumber    *string
	}
	getRecordsRequest struct {
		ShardIterator *string
		Limit         *int32
	}
	listStreamsRequest struct {
		TableName               *string
		Limit                   *int32
		ExclusiveStartStreamArn *string
	}

	wireSequenceNumberRange struct {
		StartingSequenceNumber *string `json:",omitempty"`
		EndingSequenceNumber   *string `json:",omitempty"`
	}
	wireShard struct {
		ShardId             *string                  `json:",omitempty"`
		ParentShardId       *string                  `json:",omitempty"`
		SequenceNumberRange *wireSequenceNumberRange `json:",omitempty"`
	}
	wireKeySchemaElement struct {
		AttributeName *string
		KeyType       string
	}
	wireStreamDescription struct {
		StreamArn               *string                `json:",omitempty"`
		StreamLabel             *string                `json:",omitempty"`
		StreamStatus            string                 `json:",omitempty"`
		StreamViewType          string                 `json:",omitempty"`
		CreationRequestDateTime *float64               `json:",omitempty"`
		TableName               *string                `json:",omitempty"`
		KeySchema               []wireKeySchemaElement `json:",omitempty"`
		Shards                  []wireShard
		LastEvaluatedShardId    *string `json:",omitempty"`
	}
	wireStreamRecord struct {
		ApproximateCreationDateTime *float64       `json:",omitempty"`
		Keys                        map[string]any `json:",omitempty"`
		NewImage                    map[string]any `json:",omitempty"`
		OldImage                    map[string]any `json:",omitempty"`
		SequenceNumber              *string        `json:",omitempty"`
		SizeBytes                   *int64         `json:",omitempty"`
		StreamViewType              string         `json:",omitempty"`
	}
	wireIdentity struct {
		PrincipalId *string `json:",omitempty"`
		Type        *string `json:",omitempty"`
	}
	wireRecord struct {
		AwsRegion    *string           `json:"awsRegion,omitempty"`
		Dynamodb     *wireStreamRecord `json:"dynamodb,omitempty"`
		EventID      *string           `json:"eventID,omitempty"`
		EventName    string            `json:"eventName,omitempty"`
		EventSource  *string           `json:"eventSource,omitempty"`
		EventVersion *string           `json:"eventVersion,omitempty"`
		UserIdentity *wireIdentity     `json:"userIdentity,omitempty"`
	}
	wireStream struct {
		StreamArn   *string `json:",omitempty"`
		StreamLabel *string `json:",omitempty"`
		TableName   *string `json:",omitempty"`
	}
)

func (h *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := fmt.Sprintf("emu-%08d", h.req.Add(1))
	w.Header().Set("x-amzn-RequestId", id)
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "UnknownOperationException", "only POST is served")
		return
	}
	op, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), targetPrefix)
	if !ok {
		writeError(w, http.StatusBadRequest, "UnknownOperationException", fmt.Sprintf("unknown X-Amz-Target %q", r.Header.Get("X-Amz-Target")))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "SerializationException", err.Error())
		return
	}
	if len(body) == 0 {
		body = []byte("{}")
	}
	var out any
	switch op {
	case "DescribeStream":
		out, err = h.describeStream(r, body)
	case "GetShardIterator":
		out, err = h.getShardIterator(r, body)
	case "GetRecords":
		out, err = h.getRecords(r, body)
	case "ListStreams":
		out, err = h.listStreams(body)
	default:
		writeError(w, http.StatusBadRequest, "UnknownOperationException", "unknown operation "+op)
		return
	}
	if err != nil {
		writeAPIError(w, err)
		return
	}
	b, err := json.Marshal(out)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "InternalServerError", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// errSerialization is a request body that is not the operation's JSON.
type errSerialization struct{ err error }

func (e errSerialization) Error() string { return e.err.Error() }

func decodeBody(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return errSerialization{err}
	}
	return nil
}

func (h *server) describeStream(r *http.Request, body []byte) (any, error) {
	var in describeStreamRequest
	if err := decodeBody(body, &in); err != nil {
		return nil, err
	}
	din := &dynamodbstreams.DescribeStreamInput{StreamArn: in.StreamArn, Limit: in.Limit, ExclusiveStartShardId: in.ExclusiveStartShardId}
	if f := in.ShardFilter; f != nil {
		din.ShardFilter = &types.ShardFilter{Type: types.ShardFilterType(f.Type), ShardId: f.ShardId}
	}
	out, err := h.s.DescribeStream(r.Context(), din)
	if err != nil {
		return nil, err
	}
	d := out.StreamDescription
	wd := wireStreamDescription{
		StreamArn: d.StreamArn, StreamLabel: d.StreamLabel, StreamStatus: string(d.StreamStatus), StreamViewType: string(d.StreamViewType),
		CreationRequestDateTime: epoch(d.CreationRequestDateTime), TableName: d.TableName, LastEvaluatedShardId: d.LastEvaluatedShardId,
		Shards: make([]wireShard, 0, len(d.Shards)),
	}
	for _, k := range d.KeySchema {
		wd.KeySchema = append(wd.KeySchema, wireKeySchemaElement{AttributeName: k.AttributeName, KeyType: string(k.KeyType)})
	}
	for _, sh := range d.Shards {
		ws := wireShard{ShardId: sh.ShardId, ParentShardId: sh.ParentShardId}
		if rg := sh.SequenceNumberRange; rg != nil {
			ws.SequenceNumberRange = &wireSequenceNumberRange{StartingSequenceNumber: rg.StartingSequenceNumber, EndingSequenceNumber: rg.EndingSequenceNumber}
		}
		wd.Shards = append(wd.Shards, ws)
	}
	return map[string]any{"StreamDescription": wd}, nil
}

func (h *server) getShardIterator(r *http.Request, body []byte) (any, error) {
	var in getShardIteratorRequest
	if err := decodeBody(body, &in); err != nil {
		return nil, err
	}
	out, err := h.s.GetShardIterator(r.Context(), &dynamodbstreams.GetShardIteratorInput{
		StreamArn: in.StreamArn, ShardId: in.ShardId, ShardIteratorType: types.ShardIteratorType(in.ShardIteratorType), SequenceNumber: in.SequenceNumber,
	})
	if err != nil {
		return nil, err
	}
	return map[string]any{"ShardIterator": out.ShardIterator}, nil
}

func (h *server) getRecords(r *http.Request, body []byte) (any, error) {
	var in getRecordsRequest
	if err := decodeBody(body, &in); err != nil {
		return nil, err
	}
	out, err := h.s.GetRecords(r.Context(), &dynamodbstreams.GetRecordsInput{ShardIterator: in.ShardIterator, Limit: in.Limit})
	if err != nil {
		return nil, err
	}
	recs := make([]wireRecord, 0, len(out.Records))
	for _, rec := range out.Records {
		recs = append(recs, toWireRecord(rec))
	}
	resp := struct {
		Records           []wireRecord
		NextShardIterator *string `json:",omitempty"`
	}{recs, out.NextShardIterator}
	return resp, nil
}

func (h *server) listStreams(body []byte) (any, error) {
	var in listStreamsRequest
	if err := decodeBody(body, &in); err != nil {
		return nil, err
	}
	streams := []wireStream{}
	for _, st := range h.s.ListStreams(aws.ToString(in.TableName)) {
		streams = append(streams, wireStream{StreamArn: st.StreamArn, StreamLabel: st.StreamLabel, TableName: st.TableName})
	}
	return map[string]any{"Streams": streams}, nil
}

// ListStreams returns the emulated stream when tableName is "" or its
// table's (known once the upstream was read): what the API's ListStreams
// answers for one stream.
func (s *Stream) ListStreams(tableName string) []types.Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := types.Stream{StreamArn: aws.String(s.cfg.StreamARN)}
	if s.desc != nil {
		st.StreamLabel, st.TableName = s.desc.StreamLabel, s.desc.TableName
	}
	if tableName != "" && aws.ToString(st.TableName) != tableName {
		return nil
	}
	return []types.Stream{st}
}

func toWireRecord(r types.Record) wireRecord {
	w := wireRecord{AwsRegion: r.AwsRegion, EventID: r.EventID, EventName: string(r.EventName), EventSource: r.EventSource, EventVersion: r.EventVersion}
	if u := r.UserIdentity; u != nil {
		w.UserIdentity = &wireIdentity{PrincipalId: u.PrincipalId, Type: u.Type}
	}
	if d := r.Dynamodb; d != nil {
		w.Dynamodb = &wireStreamRecord{
			ApproximateCreationDateTime: epoch(d.ApproximateCreationDateTime),
			Keys:                        attributeMap(d.Keys), NewImage: attributeMap(d.NewImage), OldImage: attributeMap(d.OldImage),
			SequenceNumber: d.SequenceNumber, SizeBytes: d.SizeBytes, StreamViewType: string(d.StreamViewType),
		}
	}
	return w
}

// epoch is a timestamp as awsJson writes it: seconds since the epoch, a
// JSON number with the fraction.
func epoch(t *time.Time) *float64 {
	if t == nil {
		return nil
	}
	v := float64(t.UnixMilli()) / 1000
	return &v
}

// attributeMap is an item (or image, or keys) in DynamoDB JSON; nil for
// none.
func attributeMap(m map[string]types.AttributeValue) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if av := attributeValue(v); av != nil {
			out[k] = av
		}
	}
	return out
}

// attributeValue is one attribute value in DynamoDB JSON ({"S":"…"},
// {"N":"…"}, {"B":"base64"}, {"M":{…}}, …); nil for a nil value.
func attributeValue(v types.AttributeValue) any {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return map[string]string{"S": v.Value}
	case *types.AttributeValueMemberN:
		return map[string]string{"N": v.Value}
	case *types.AttributeValueMemberB:
		return map[string][]byte{"B": v.Value} // encoding/json writes []byte as base64, as the protocol does
	case *types.AttributeValueMemberBOOL:
		return map[string]bool{"BOOL": v.Value}
	case *types.AttributeValueMemberNULL:
		return map[string]bool{"NULL": v.Value}
	case *types.AttributeValueMemberSS:
		return map[string][]string{"SS": orEmpty(v.Value)}
	case *types.AttributeValueMemberNS:
		return map[string][]string{"NS": orEmpty(v.Value)}
	case *types.AttributeValueMemberBS:
		return map[string][][]byte{"BS": orEmpty(v.Value)}
	case *types.AttributeValueMemberL:
		l := make([]any, 0, len(v.Value))
		for _, e := range v.Value {
			l = append(l, attributeValue(e))
		}
		return map[string][]any{"L": l}
	case *types.AttributeValueMemberM:
		m := attributeMap(v.Value)
		if m == nil {
			m = map[string]any{}
		}
		return map[string]map[string]any{"M": m}
	}
	return nil
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// writeAPIError answers err as AWS does: its code in __type under the
// service's namespace, HTTP 400 for a client fault and 500 otherwise.
func writeAPIError(w http.ResponseWriter, err error) {
	var ser errSerialization
	if errors.As(err, &ser) {
		writeError(w, http.StatusBadRequest, "SerializationException", ser.Error())
		return
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		writeError(w, http.StatusInternalServerError, "InternalServerError", err.Error())
		return
	}
	status := http.StatusBadRequest
	if ae.ErrorFault() == smithy.FaultServer || ae.ErrorCode() == "InternalServerError" {
		status = http.StatusInternalServerError
	}
	writeError(w, status, ae.ErrorCode(), ae.ErrorMessage())
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(map[string]string{"__type": errorNamespace + code, "message": msg})
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
