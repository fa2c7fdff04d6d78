package handler

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/processor"
)

// Event is a decoded Lambda DynamoDB stream event: its records in delivery
// order and, for a tumbling-window event, the window's properties.
type Event struct {
	Records []processor.Record
	// Window is nil for a standard event (one without a shardId or window).
	Window *Window
}

// Window holds the tumbling-window properties of an event
// (events.TimeWindowProperties).
type Window struct {
	Start, End     time.Time
	State          map[string]string
	ShardID        string
	EventSourceARN string
	// Final is isFinalInvokeForWindow: the window's state is dropped after
	// this invocation succeeds.
	Final bool
	// TerminatedEarly is isWindowTerminatedEarly: the window was cut short
	// and the next invocation starts with a fresh state.
	TerminatedEarly bool
}

// The Lambda event's JSON, with every image kept raw so that it is decoded
// once, by attributevalue.UnmarshalMapJSON, into the SDK's attribute values.
type wireEvent struct {
	Records []wireRecord `json:"Records"`
	wireWindow
}

type wireWindow struct {
	Window                  *wireWindowBounds `json:"window"`
	State                   map[string]string `json:"state"`
	ShardID                 string            `json:"shardId"`
	EventSourceARN          string            `json:"eventSourceARN"`
	IsFinalInvokeForWindow  bool              `json:"isFinalInvokeForWindow"`
	IsWindowTerminatedEarly bool              `json:"isWindowTerminatedEarly"`
}

type wireWindowBounds struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

type wireRecord struct {
	EventID        string `json:"eventID"`
	EventName      string `json:"eventName"`
	EventSourceARN string `json:"eventSourceARN"`
	// UserIdentity names DynamoDB's TTL service on a TTL deletion's record.
	UserIdentity *struct {
		Type        string `json:"type"`
		PrincipalID string `json:"principalId"`
	} `json:"userIdentity"`
	Dynamodb struct {
		// Kept raw: events.SecondsEpochTime would abort the whole event's
		// decoding on a malformed value instead of failing one record.
		ApproximateCreationDateTime json.RawMessage `json:"ApproximateCreationDateTime"`
		Keys                        json.RawMessage `json:"Keys"`
		NewImage                    json.RawMessage `json:"NewImage"`
		OldImage                    json.RawMessage `json:"OldImage"`
		SequenceNumber              string          `json:"SequenceNumber"`
		SizeBytes                   int64           `json:"SizeBytes"`
		StreamViewType              string          `json:"StreamViewType"`
	} `json:"dynamodb"`
}

// DecodeEvent decodes the JSON payload of a Lambda DynamoDB stream event,
// standard or tumbling-window, in one pass: the event is parsed once with
// the images left raw, and each image is decoded once with
// attributevalue.UnmarshalMapJSON. The records carry the same fields
// processor.FromLambda gives the aws-lambda-go event, without its decode,
// re-encode and decode again of every image.
//
// It never panics. A record that cannot be decoded completely (a field of
// the wrong JSON type, an image that is not a map of attribute values, an
// attribute value without a type or of an unknown type) comes back with
// DecodeErr set and whatever did decode, so that the processor quarantines
// it (or ignores it, when its keys say it is not a transaction); it never
// fails the event. A record without an eventID gets a stable synthetic one
// ("seq-" and its sequence number, else a hash of its JSON) and DecodeErr,
// so that run markers and quarantine items of malformed records never
// collide. DecodeEvent fails only when the payload is not a JSON object
// with a Records array, or its window properties are malformed: nothing in
// it can be identified then.
func DecodeEvent(payload []byte) (Event, error) {
	var w wireEvent
	err := json.Unmarshal(payload, &w)
	if err == nil {
		ev := Event{Records: make([]processor.Record, len(w.Records))}
		for i := range w.Records {
			ev.Records[i] = fromWire(&w.Records[i], nil, nil)
		}
		ev.Window, err = window(&w.wireWindow)
		return ev, err
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return Event{}, fmt.Errorf("event is not valid JSON: %w", err)
	}
	// Some field has the wrong JSON type. Decode record by record, so that
	// only the records at fault are marked.
	var loose struct {
		Records []json.RawMessage `json:"Records"`
		wireWindow
	}
	if err := json.Unmarshal(payload, &loose); err != nil {
		return Event{}, fmt.Errorf("event is not a DynamoDB stream event: %w", err)
	}
	ev := Event{Records: make([]processor.Record, len(loose.Records))}
	for i, raw := range loose.Records {
		var wr wireRecord
		err := json.Unmarshal(raw, &wr)
		if err != nil {
			err = fmt.Errorf("record %d: %w", i, err)
		}
		ev.Records[i] = fromWire(&wr, err, raw)
	}
	ev.Window, err = window(&loose.wireWindow)
	return ev, err
}

// fromWire converts one decoded record. recErr is an error from decoding
// the record itself; it takes precedence over image errors. raw is the
// record's JSON when known (it names a record without eventID or sequence
// number).
func fromWire(w *wireRecord, recErr error, raw []byte) processor.Record {
	d := &w.Dynamodb
	rec := processor.Record{
		EventID:        w.EventID,
		EventName:      w.EventName,
		SequenceNumber: d.SequenceNumber,
		StreamARN:      w.EventSourceARN,
		StreamViewType: d.StreamViewType,
		SizeBytes:      d.SizeBytes,
		DecodeErr:      recErr,
	}
	if u := w.UserIdentity; u != nil {
		rec.ByTTL = processor.IsTTLIdentity(u.Type, u.PrincipalID)
	}
	setErr := func(err error) {
		if rec.DecodeErr == nil {
			rec.DecodeErr = err
		}
	}
	if t, err := creationTime(d.ApproximateCreationDateTime); err != nil {
		setErr(fmt.Errorf("approximate creation time: %w", err))
	} else {
		rec.ApproximateCreation = t
	}
	var err error
	if rec.Keys, err = image(d.Keys); err != nil {
		setErr(fmt.Errorf("keys: %w", err))
	}
	if rec.OldImage, err = image(d.OldImage); err != nil {
		setErr(fmt.Errorf("old image: %w", err))
	}
	if rec.NewImage, err = image(d.NewImage); err != nil {
		setErr(fmt.Errorf("new image: %w", err))
	}
	if rec.EventID == "" {
		setErr(errors.New("record has no eventID"))
		rec.EventID = syntheticID(&rec, raw)
	}
	return rec
}

// syntheticID names a record that has no eventID, the same way on every
// delivery: by its sequence number, else by a hash of its JSON.
func syntheticID(r *processor.Record, raw []byte) string {
	if r.SequenceNumber != "" {
		return "seq-" + r.SequenceNumber
	}
	if raw == nil {
		if ev, err := processor.ToLambda(*r); err == nil {
			raw, _ = json.Marshal(ev)
		}
	}
	sum := sha256.Sum256(raw)
	return "sha256-" + hex.EncodeToString(sum[:16])
}

// creationTime decodes ApproximateCreationDateTime (epoch seconds, possibly
// fractional) exactly as events.SecondsEpochTime does, and keeps it only
// when positive, as processor.FromLambda does.
func creationTime(raw json.RawMessage) (time.Time, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return time.Time{}, nil
	}
	var t events.SecondsEpochTime
	if err := t.UnmarshalJSON(raw); err != nil {
		return time.Time{}, err
	}
	if t.IsZero() || t.Unix() <= 0 {
		return time.Time{}, nil
	}
	return t.UTC(), nil
}

// image decodes one image or the keys; absent or null is nil.
func image(raw json.RawMessage) (map[string]ddbtypes.AttributeValue, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	m, err := attributevalue.UnmarshalMapJSON(raw)
	if err != nil {
		return nil, err
	}
	for name, v := range m {
		if err := checkValue(name, v); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// checkValue rejects what UnmarshalMapJSON lets through without an error:
// an attribute value with no type ({} or {"S": null}, as DynamoDB Local
// writes an empty map) decodes to nil, and one with an unknown type tag to
// an UnknownUnionMember.
func checkValue(path string, v ddbtypes.AttributeValue) error {
	switch v := v.(type) {
	case nil:
		return fmt.Errorf("attribute %q has no value", path)
	case *ddbtypes.UnknownUnionMember:
		return fmt.Errorf("attribute %q has unknown type %q", path, v.Tag)
	case *ddbtypes.AttributeValueMemberM:
		for k, e := range v.Value {
			if err := checkValue(path+"."+k, e); err != nil {
				return err
			}
		}
	case *ddbtypes.AttributeValueMemberL:
		for i, e := range v.Value {
			if err := checkValue(path+"["+strconv.Itoa(i)+"]", e); err != nil {
				return err
			}
		}
	}
	return nil
}

func window(w *wireWindow) (*Window, error) {
	if w.ShardID == "" && w.Window == nil && w.State == nil && !w.IsFinalInvokeForWindow && !w.IsWindowTerminatedEarly {
		return nil, nil
	}
	out := &Window{
		State:           w.State,
		ShardID:         w.ShardID,
		EventSourceARN:  w.EventSourceARN,
		Final:           w.IsFinalInvokeForWindow,
		TerminatedEarly: w.IsWindowTerminatedEarly,
	}
	if w.Window != nil {
		var err error
		if w.Window.Start != "" {
			if out.Start, err = time.Parse(time.RFC3339, w.Window.Start); err != nil {
				return nil, fmt.Errorf("window start: %w", err)
			}
		}
		if w.Window.End != "" {
			if out.End, err = time.Parse(time.RFC3339, w.Window.End); err != nil {
				return nil, fmt.Errorf("window end: %w", err)
			}
		}
	}
	return out, nil
}
