package table

// This file holds the fixes for DynamoDB Local's differences from AWS, in
// one place (table/streamquirks_test.go pins each against a live DynamoDB
// Local; docs/design.md, "DynamoDB Local"):
//
//   - its stream images write an empty map as an untagged {} (FixEmptyMaps
//     for the Streams client, FixEmptyMapImage for recorded wire JSON);
//   - its error responses fail the SDK's response CRC32 check
//     (LocalChecksums).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// FixEmptyMaps is a DynamoDB Streams client API option (append it to
// dynamodbstreams.Options.APIOptions) that works around a quirk of
// DynamoDB Local 3.3.1: it writes an empty map attribute in stream images
// as a bare {} with no type tag, where AWS writes {"M":{}}, and the SDK's
// decoder then silently yields the previous attribute's value or nil (see
// streamquirks_test.go). The middleware sits just inside the
// operation's deserializer and rewrites, in successful GetRecords response
// bodies only, every {} that stands where an attribute value belongs (an
// image's or a map's value, a list's element) into {"M":{}}. Strings, key
// names and everything else are left alone; bodies without a {} are passed
// through untouched.
func FixEmptyMaps(stack *middleware.Stack) error {
	return stack.Deserialize.Insert(emptyMapFix{}, "OperationDeserializer", middleware.After)
}

type emptyMapFix struct{}

func (emptyMapFix) ID() string { return "LedgerFixEmptyMaps" }

func (emptyMapFix) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleDeserialize(ctx, in)
	if err != nil || middleware.GetOperationName(ctx) != "GetRecords" {
		return out, md, err
	}
	resp, ok := out.RawResponse.(*smithyhttp.Response)
	if !ok || resp.StatusCode != 200 || resp.Body == nil || resp.Header.Get("Content-Encoding") != "" {
		return out, md, err
	}
	body, rerr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if rerr != nil {
		return out, md, fmt.Errorf("read GetRecords response: %w", rerr)
	}
	if fixed, ferr := fixEmptyMaps(body); ferr == nil {
		body = fixed
	}
	// A body that does not parse is handed over as it came: the SDK's
	// decoder reports it.
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return out, md, err
}

var emptyObject = regexp.MustCompile(`\{\s*\}`)

// fixEmptyMaps rewrites untagged {} attribute values of a GetRecords JSON
// body into {"M":{}}. It returns body itself when there is nothing to fix.
func fixEmptyMaps(body []byte) ([]byte, error) {
	if !emptyObject.Match(body) {
		return body, nil
	}
	var page map[string]json.RawMessage
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, err
	}
	var records []map[string]json.RawMessage
	if raw, ok := page["Records"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &records); err != nil {
			return nil, err
		}
	}
	changed := false
	for _, rec := range records {
		raw, ok := rec["dynamodb"]
		if !ok || isNull(raw) {
			continue
		}
		var sr map[string]json.RawMessage
		if err := json.Unmarshal(raw, &sr); err != nil {
			return nil, err
		}
		srChanged := false
		for _, name := range []string{"Keys", "NewImage", "OldImage"} {
			img, ok := sr[name]
			if !ok || isNull(img) {
				continue
			}
			fixed, c, err := fixAttributeMap(img)
			if err != nil {
				return nil, err
			}
			if c {
				sr[name], srChanged = fixed, true
			}
		}
		if srChanged {
			b, err := json.Marshal(sr)
			if err != nil {
				return nil, err
			}
			rec["dynamodb"], changed = b, true
		}
	}
	if !changed {
		return body, nil
	}
	b, err := json.Marshal(records)
	if err != nil {
		return nil, err
	}
	page["Records"] = b
	return json.Marshal(page)
}

var emptyMapValue = json.RawMessage(`{"M":{}}`)

// fixAttributeMap fixes a JSON object of name → attribute value.
func fixAttributeMap(raw json.RawMessage) (json.RawMessage, bool, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, false, err
	}
	changed := false
	for k, v := range m {
		fixed, c, err := fixAttributeValue(v)
		if err != nil {
			return nil, false, err
		}
		if c {
			m[k], changed = fixed, true
		}
	}
	if !changed {
		return raw, false, nil
	}
	b, err := json.Marshal(m)
	return b, true, err
}

// fixAttributeValue fixes one attribute value: {} itself, or inside an M
// or an L.
func fixAttributeValue(raw json.RawMessage) (json.RawMessage, bool, error) {
	t := bytes.TrimSpace(raw)
	if emptyObject.Match(t) && len(emptyObject.Find(t)) == len(t) {
		return emptyMapValue, true, nil
	}
	if !emptyObject.Match(t) || len(t) == 0 || t[0] != '{' {
		return raw, false, nil
	}
	var av map[string]json.RawMessage
	if err := json.Unmarshal(t, &av); err != nil {
		return nil, false, err
	}
	changed := false
	if m, ok := av["M"]; ok && !isNull(m) {
		fixed, c, err := fixAttributeMap(m)
		if err != nil {
			return nil, false, err
		}
		if c {
			av["M"], changed = fixed, true
		}
	}
	if l, ok := av["L"]; ok && !isNull(l) {
		var elems []json.RawMessage
		if err := json.Unmarshal(l, &elems); err != nil {
			return nil, false, err
		}
		lChanged := false
		for i, e := range elems {
			fixed, c, err := fixAttributeValue(e)
			if err != nil {
				return nil, false, err
			}
			if c {
				elems[i], lChanged = fixed, true
			}
		}
		if lChanged {
			b, err := json.Marshal(elems)
			if err != nil {
				return nil, false, err
			}
			av["L"], changed = b, true
		}
	}
	if !changed {
		return raw, false, nil
	}
	b, err := json.Marshal(av)
	return b, true, err
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// FixEmptyMapImage rewrites every untagged {} attribute value of a stream
// image's wire JSON (an object of attribute values) into {"M":{}}, at any
// depth, as AWS writes it; the image is returned as it came when there is
// nothing to fix.
func FixEmptyMapImage(image json.RawMessage) (json.RawMessage, error) {
	fixed, _, err := fixAttributeMap(image)
	return fixed, err
}

// LocalChecksums turns off the response CRC32 check for a configuration
// whose endpoint is local (IsLocalEndpoint), and for every DynamoDB client
// made from cfg whose resolved endpoint is (service-specific endpoint
// variables count): DynamoDB Local's error responses fail it, and the SDK
// then logs "failed to close HTTP response body ... did not match expected
// checksum" on every error.
func LocalChecksums(cfg *aws.Config) {
	if cfg.BaseEndpoint != nil && IsLocalEndpoint(*cfg.BaseEndpoint) {
		cfg.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	}
	cfg.ServiceOptions = append(cfg.ServiceOptions, skipChecksumLocally)
}

// skipChecksumLocally is a service option: it turns off DynamoDB's response
// CRC32 validation when the client's resolved endpoint is local. It runs
// after the client resolved its endpoint.
func skipChecksumLocally(_ string, so any) {
	if o, ok := so.(*dynamodb.Options); ok && o.BaseEndpoint != nil && IsLocalEndpoint(*o.BaseEndpoint) {
		o.DisableValidateResponseChecksum = true
	}
}

// IsLocalEndpoint reports whether endpoint looks like a local DynamoDB
// rather than AWS: plain http, localhost, or a loopback address. AWS
// endpoints are always https.
func IsLocalEndpoint(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	if u.Scheme == "http" {
		return true
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
