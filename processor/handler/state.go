package handler

import (
	"compress/flate"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/processor"
	"github.com/ledger-dev/ledger/table"
)

// The tumbling-window state, carried from one invocation of a window to the
// next by the event source mapping (events.TimeWindowProperties.State, a
// map of strings of at most 1 MB). It holds no records: a commit reads them
// from the stream (processor.CommitShardRange). It holds where the window's
// records lie in the shard and how many arrived since its last commit:
const (
	stateVersionKey = "ledger.v"
	stateVersion    = "2"
	stateStreamKey  = "ledger.stream"
	stateShardKey   = "ledger.shard"
	stateFirstKey   = "ledger.first"   // the lowest sequence number delivered in the window
	stateLastKey    = "ledger.last"    // the highest
	stateCountKey   = "ledger.records" // records delivered since the window's last commit
	// Version 1 (before ledger read windows from the stream) carried the
	// records themselves in chunks "c0", "c1", ...; such a state, met
	// once after an upgrade, is read for its first and last record.
	stateVersion1 = "1"
	stateChunkKey = "c"
)

// windowState is the decoded form of a window's state.
type windowState struct {
	stream, shard string
	first, last   string
	count         int
}

// parseState reads a window's state as the event delivered it. An empty or
// absent state is a fresh window. A state of another stream or shard, or
// of an unknown version, is an error: it cannot be ours.
func parseState(m map[string]string, stream, shard string) (windowState, error) {
	st := windowState{stream: stream, shard: shard}
	if len(m) == 0 {
		return st, nil
	}
	v := m[stateVersionKey]
	if v != stateVersion && v != stateVersion1 {
		return st, fmt.Errorf("window state has version %q; want %q (was the function switched from another consumer?)", v, stateVersion)
	}
	if m[stateStreamKey] != stream || m[stateShardKey] != shard {
		return st, fmt.Errorf("window state belongs to stream %q shard %q, not to this event's stream %q shard %q",
			m[stateStreamKey], m[stateShardKey], stream, shard)
	}
	n, err := strconv.Atoi(m[stateCountKey])
	if err != nil || n < 0 {
		return st, fmt.Errorf("window state: bad record count %q", m[stateCountKey])
	}
	st.count, st.first, st.last = n, m[stateFirstKey], m[stateLastKey]
	if v == stateVersion1 {
		return st, st.readVersion1(m)
	}
	for k := range m {
		switch k {
		case stateVersionKey, stateStreamKey, stateShardKey, stateCountKey, stateFirstKey, stateLastKey:
		default:
			return st, fmt.Errorf("window state has an unknown entry %q", k)
		}
	}
	return st, nil
}

// readVersion1 finds the first record of a version-1 state among the
// records it carries (its last and count are ledger.last and
// ledger.records, as in version 2).
func (st *windowState) readVersion1(m map[string]string) error {
	defer func(n int) { st.count = n }(st.count)
	for k, c := range m {
		if !strings.HasPrefix(k, stateChunkKey) || strings.HasPrefix(k, "ledger.") {
			continue
		}
		recs, err := decodeChunk(c)
		if err != nil {
			return fmt.Errorf("window state (version 1) entry %s: %w", k, err)
		}
		st.see(recs)
	}
	return nil
}

// see widens the window's range to recs and counts them. The range is by
// sequence number, not delivery order: a window's records may come out of
// order.
func (st *windowState) see(recs []processor.Record) {
	for i := range recs {
		seq := recs[i].SequenceNumber
		if seq == "" {
			continue
		}
		if st.first == "" || processor.CompareSequence(seq, st.first) < 0 {
			st.first = seq
		}
		if st.last == "" || processor.CompareSequence(seq, st.last) > 0 {
			st.last = seq
		}
	}
	st.count += len(recs)
}

// state returns the map to hand back to the event source mapping. A window
// with nothing delivered yet is an empty, non-nil map: a response without
// a state property counts as a failed invocation.
func (st *windowState) state() map[string]string {
	m := map[string]string{}
	if st.last == "" {
		return m
	}
	m[stateVersionKey] = stateVersion
	m[stateStreamKey] = st.stream
	m[stateShardKey] = st.shard
	m[stateFirstKey] = st.first
	m[stateLastKey] = st.last
	m[stateCountKey] = strconv.Itoa(st.count)
	return m
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

// decodeChunk reads the records of a version-1 state's chunk (compact
// JSON, deflated, base64): only their sequence numbers matter now.
func decodeChunk(c string) ([]processor.Record, error) {
	zr := flate.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(c)))
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("inflate: %w", err)
	}
	var in []struct {
		Seq string `json:"s"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, err
	}
	out := make([]processor.Record, len(in))
	for i, r := range in {
		out[i].SequenceNumber = r.Seq
	}
	return out, nil
}
