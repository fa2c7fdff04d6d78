package writer

import (
	"context"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// The idempotency record (aggregates.IdempotencyKey, or
// PlatformIdempotencyKey for requests of no tenant): its codec and its condition (the
// protocol is in idempotency.go). It also has status (the response's) and
// createdAt, and expires at expiresAt (DynamoDB TTL).

// Attribute names of idempotency records.
const (
	attrFingerprint = "fingerprint"
	attrBody        = "body"
	attrLocation    = "location"
	attrETag        = "etag"
)

// idemRecord is a stored idempotency record.
type idemRecord struct {
	fingerprint string
	resp        response
}

// lookup reads the live record of key, nil when there is none.
func (s *Server) lookup(ctx context.Context, key aggregates.Key) (*idemRecord, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.cfg.Table, Key: keyAV(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, s.dynamoError("GetItem", err)
	}
	if out.Item == nil {
		return nil, nil
	}
	if exp, ok := intAttr(out.Item, attrExpiresAt); ok && exp < s.cfg.Now().Unix() {
		return nil, nil
	}
	rec := &idemRecord{}
	rec.fingerprint, _ = stringAttr(out.Item, attrFingerprint)
	status, _ := intAttr(out.Item, attrStatus)
	rec.resp.status = int(status)
	rec.resp.problem = status >= 400 // a refusal (idempotency.go); a success otherwise
	if b, ok := stringAttr(out.Item, attrBody); ok {
		rec.resp.body = []byte(b)
	}
	rec.resp.location, _ = stringAttr(out.Item, attrLocation)
	rec.resp.etag, _ = stringAttr(out.Item, attrETag)
	return rec, nil
}

func (s *Server) idemPut(key aggregates.Key, fp string, resp response) *ddbtypes.Put {
	now := s.cfg.Now()
	item := keyAV(key)
	item[attrEntityType] = strAV(aggregates.EntityIdempotency)
	current, _, _ := strings.Cut(fp, " ")
	item[attrFingerprint] = strAV(current)
	item[attrStatus] = intAV(int64(resp.status))
	if len(resp.body) > 0 {
		item[attrBody] = strAV(string(resp.body))
	}
	if resp.location != "" {
		item[attrLocation] = strAV(resp.location)
	}
	if resp.etag != "" {
		item[attrETag] = strAV(resp.etag)
	}
	item[attrCreatedAt] = strAV(now.UTC().Format(time.RFC3339Nano))
	item[attrExpiresAt] = intAV(now.Add(s.cfg.IdempotencyTTL).Unix())
	return &ddbtypes.Put{
		TableName:                 &s.cfg.Table,
		Item:                      item,
		ConditionExpression:       aws.String("attribute_not_exists(#pk) OR #exp < :now"),
		ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#exp": attrExpiresAt},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":now": intAV(now.Unix())},
	}
}
