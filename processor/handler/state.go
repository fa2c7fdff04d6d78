package handler

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// The tumbling-window state: the records of the window not committed yet,
// carried from one invocation to the next by the event source mapping
// (events.TimeWindowProperties.State, a map of strings of at most 1 MB).
//
// Each invocation appends one chunk, "c0", "c1", ...: the records it
// received in a compact JSON form, deflated and base64-encoded. Earlier
// chunks are passed through untouched, so an invocation that does not
// commit decodes nothing it received before. Records that are not about a
// transaction (the processor ignores them from their keys alone) are
// carried as keys only: their images never matter.
const (
	stateVersionKey = "ledger.v"
	stateVersion    = "1"
	stateStreamKey  = "ledger.stream"
	stateShardKey   = "ledger.shard"
	stateCountKey   = "ledger.records"
	stateLastKey    = "ledger.last"
	// stateCommittedKey: the checkpoint an early commit of this window
	// moved to; records arriving later at or below it are reported.
	stateCommittedKey = "ledger.committed"
	stateChunkKey     = "c"
)

// stateRecord is a processor.Record in the state's compact form.
type stateRecord struct {
	ID   string          `json:"i"`
	Name string          `json:"n,omitempty"`
	Seq  string          `json:"s"`
	ARN  string          `json:"a,omitempty"` // only when it differs from the state's stream
	View string          `json:"v,omitempty"`
	Time int64           `json:"t,omitempty"` // ApproximateCreation, Unix nanoseconds
	Size int64           `json:"z,omitempty"`
	Keys json.RawMessage `json:"k,omitempty"`
	Old  json.RawMessage `json:"o,omitempty"`
	New  json.RawMessage `json:"w,omitempty"`
	Err  string          `json:"e,omitempty"`
}

// windowState is the decoded form of a window's state.
type windowState struct {
	stream, shard string
	chunks        []string // encoded chunks, in order
	count         int
	last          string
	committed     string // see stateCommittedKey
}

// parseState reads a window's state as the event delivered it. An empty or
// absent state is a fresh window. A state of another stream or shard, or
// of an unknown version, is an error: it cannot be ours.
func parseState(m map[string]string, stream, shard string) (windowState, error) {
	st := windowState{stream: stream, shard: shard}
	if len(m) == 0 {
		return st, nil
	}
	if v := m[stateVersionKey]; v != stateVersion {
		return st, fmt.Errorf("window state has version %q; want %q (was the function switched from another consumer?)", v, stateVersion)
	}
	if m[stateStreamKey] != stream || m[stateShardKey] != shard {
		return st, fmt.Errorf("window state belongs to stream %q shard %q, not to this event's stream %q shard %q",
			m[stateStreamKey], m[stateShardKey], stream, shard)
	}
	chunks := 0
	for k := range m {
		switch k {
		case stateVersionKey, stateStreamKey, stateShardKey, stateCountKey, stateLastKey, stateCommittedKey:
			continue
		}
		if _, ok := chunkIndex(k); !ok {
			return st, fmt.Errorf("window state has an unknown entry %q", k)
		}
		chunks++
	}
	for i := 0; i < chunks; i++ {
		c, ok := m[stateChunkKey+strconv.Itoa(i)]
		if !ok {
			return st, fmt.Errorf("window state lacks chunk %d of %d", i, chunks)
		}
		st.chunks = append(st.chunks, c)
	}
	n, err := strconv.Atoi(m[stateCountKey])
	if err != nil || n < 0 {
		return st, fmt.Errorf("window state: bad record count %q", m[stateCountKey])
	}
	st.count, st.last, st.committed = n, m[stateLastKey], m[stateCommittedKey]
	return st, nil
}

// add appends recs as a new chunk.
func (st *windowState) add(recs []processor.Record) error {
	if len(recs) == 0 {
		return nil
	}
	c, err := encodeChunk(recs, st.stream)
	if err != nil {
		return err
	}
	st.chunks = append(st.chunks, c)
	st.count += len(recs)
	for i := range recs { // the highest, not the last: a window's records may come out of order
		if seq := recs[i].SequenceNumber; st.last == "" || processor.CompareSequence(seq, st.last) > 0 {
			st.last = seq
		}
	}
	return nil
}

// state returns the map to hand back to the event source mapping. An empty
// window state is an empty, non-nil map: a response without a state
// property counts as a failed invocation.
func (st *windowState) state() map[string]string {
	m := map[string]string{}
	if st.count == 0 && st.committed == "" {
		return m
	}
	if st.committed != "" {
		m[stateCommittedKey] = st.committed
	}
	m[stateVersionKey] = stateVersion
	m[stateStreamKey] = st.stream
	m[stateShardKey] = st.shard
	m[stateCountKey] = strconv.Itoa(st.count)
	if st.last != "" {
		m[stateLastKey] = st.last
	}
	for i, c := range st.chunks {
		m[stateChunkKey+strconv.Itoa(i)] = c
	}
	return m
}

// size is the state's size as JSON in the response, which is what the
// event source mapping's 1 MB limit applies to.
func (st *windowState) size() int {
	n := 2
	for k, v := range st.state() {
		n += len(k) + len(v) + 6 // quotes, colon, comma; keys and values need no escaping
	}
	return n
}

// records decodes every carried record, in order.
func (st *windowState) records() ([]processor.Record, error) {
	out := make([]processor.Record, 0, st.count)
	for i, c := range st.chunks {
		recs, err := decodeChunk(c, st.stream)
		if err != nil {
			return nil, fmt.Errorf("window state chunk %d: %w", i, err)
		}
		out = append(out, recs...)
	}
	if len(out) != st.count {
		return nil, fmt.Errorf("window state holds %d records; its count says %d", len(out), st.count)
	}
	return out, nil
}

// isTransaction mirrors the processor's first decision about a record:
// records whose keys are present and are not a transaction's are ignored
// whatever their images hold.
func isTransaction(r *processor.Record) bool {
	if r.Keys == nil {
		return true
	}
	pk, ok := r.Keys[table.AttrPK].(*ddbtypes.AttributeValueMemberS)
	return ok && aggregates.IsTransactionKey(pk.Value)
}

func encodeChunk(recs []processor.Record, stream string) (string, error) {
	out := make([]stateRecord, len(recs))
	for i := range recs {
		r := &recs[i]
		sr := stateRecord{ID: r.EventID, Name: r.EventName, Seq: r.SequenceNumber, View: r.StreamViewType, Size: r.SizeBytes}
		if r.StreamARN != stream {
			sr.ARN = r.StreamARN
		}
		if !r.ApproximateCreation.IsZero() {
			sr.Time = r.ApproximateCreation.UnixNano()
		}
		var err error
		if sr.Keys, err = marshalImage(r.Keys); err != nil {
			return "", fmt.Errorf("record %s: keys: %w", r.EventID, err)
		}
		if isTransaction(r) {
			if sr.Old, err = marshalImage(r.OldImage); err != nil {
				return "", fmt.Errorf("record %s: old image: %w", r.EventID, err)
			}
			if sr.New, err = marshalImage(r.NewImage); err != nil {
				return "", fmt.Errorf("record %s: new image: %w", r.EventID, err)
			}
			if r.DecodeErr != nil {
				sr.Err = r.DecodeErr.Error()
			}
		}
		out[i] = sr
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	b64 := base64.NewEncoder(base64.StdEncoding, &buf)
	zw, err := flate.NewWriter(b64, flate.BestSpeed)
	if err != nil {
		return "", err
	}
	if _, err := zw.Write(raw); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	if err := b64.Close(); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func decodeChunk(c, stream string) ([]processor.Record, error) {
	zr := flate.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(c)))
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("inflate: %w", err)
	}
	var in []stateRecord
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, err
	}
	out := make([]processor.Record, len(in))
	for i, sr := range in {
		r := processor.Record{EventID: sr.ID, EventName: sr.Name, SequenceNumber: sr.Seq, StreamARN: stream,
			StreamViewType: sr.View, SizeBytes: sr.Size}
		if sr.ARN != "" {
			r.StreamARN = sr.ARN
		}
		if sr.Time != 0 {
			r.ApproximateCreation = time.Unix(0, sr.Time).UTC()
		}
		if r.Keys, err = image(sr.Keys); err != nil {
			return nil, fmt.Errorf("record %s: keys: %w", sr.ID, err)
		}
		if r.OldImage, err = image(sr.Old); err != nil {
			return nil, fmt.Errorf("record %s: old image: %w", sr.ID, err)
		}
		if r.NewImage, err = image(sr.New); err != nil {
			return nil, fmt.Errorf("record %s: new image: %w", sr.ID, err)
		}
		if sr.Err != "" {
			r.DecodeErr = errors.New(sr.Err)
		}
		out[i] = r
	}
	return out, nil
}

func marshalImage(m map[string]ddbtypes.AttributeValue) (json.RawMessage, error) {
	if m == nil {
		return nil, nil
	}
	return attributevalue.MarshalMapJSON(m)
}

func chunkIndex(key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, stateChunkKey)
	if !ok || rest == "" {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil && i >= 0 && strconv.Itoa(i) == rest
}
