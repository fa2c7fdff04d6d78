package table_test

import (
	"encoding/hex"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/table"
)

func sigItem() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"PK": table.S("TENANT#acme#BRANCH#north#TRANSACTION"), "SK": table.S("2026-11-20#01JD0000000000000000000000"),
		"entityType": table.S("TRANSACTION"), "id": table.S("01JD0000000000000000000000"),
		"type": table.S("EXPENSE"), "amount": &types.AttributeValueMemberN{Value: "12.5"}, "category": table.S("food"),
		"costCenter": table.S("ops"), "createdAt": table.S("2026-11-20T12:00:00Z"),
		"businessDate": table.S("2026-11-20"), "periods": table.S("DAILY#2026-11-20 MONTHLY#2026-11 YEARLY#2026"),
		"currency": table.S("BRL"), "description": table.S("lunch"), "version": table.Int(3),
		"updatedAt": table.S("2026-11-21T08:00:00Z"), "changes": table.Int(4),
	}
}

// The sig digests every attribute but sig itself, with its type
// (docs/design.md, "Transaction"; the second review's W-a).
func TestSig_DigestsEveryAttributeButItselfWithItsType(t *testing.T) {
	base := table.Sig(sigItem())
	require.Len(t, base, table.SigSize)
	for _, tc := range []struct {
		name    string
		change  func(map[string]types.AttributeValue)
		differs bool
	}{
		{"another partition", func(m map[string]types.AttributeValue) { m["PK"] = table.S("TENANT#acme#BRANCH#south#TRANSACTION") }, true},
		{"another sort key", func(m map[string]types.AttributeValue) { m["SK"] = table.S("2026-11-20#01JD0000000000000000000001") }, true},
		{"entityType", func(m map[string]types.AttributeValue) { m["entityType"] = table.S("TXN") }, true},
		{"type", func(m map[string]types.AttributeValue) { m["type"] = table.S("INCOME") }, true},
		{"amount", func(m map[string]types.AttributeValue) { m["amount"] = &types.AttributeValueMemberN{Value: "12.51"} }, true},
		{"amount as a string", func(m map[string]types.AttributeValue) { m["amount"] = table.S("12.5") }, true},
		{"category", func(m map[string]types.AttributeValue) { m["category"] = table.S("rent") }, true},
		{"costCenter removed", func(m map[string]types.AttributeValue) { delete(m, "costCenter") }, true},
		{"costCenter empty", func(m map[string]types.AttributeValue) { m["costCenter"] = table.S("") }, true},
		{"paymentMethod added", func(m map[string]types.AttributeValue) { m["paymentMethod"] = table.S("card") }, true},
		{"createdAt", func(m map[string]types.AttributeValue) { m["createdAt"] = table.S("2026-11-20T12:00:01Z") }, true},
		{"businessDate", func(m map[string]types.AttributeValue) { m["businessDate"] = table.S("2026-11-19") }, true},
		{"periods", func(m map[string]types.AttributeValue) { m["periods"] = table.S("DAILY#2026-11-20") }, true},
		{"currency", func(m map[string]types.AttributeValue) { m["currency"] = table.S("GBP") }, true},
		{"deletedAt", func(m map[string]types.AttributeValue) { m["deletedAt"] = table.S("2026-11-22T00:00:00Z") }, true},
		{"changes", func(m map[string]types.AttributeValue) { m["changes"] = table.Int(5) }, true},
		{"changes as BOOL", func(m map[string]types.AttributeValue) { m["changes"] = &types.AttributeValueMemberBOOL{Value: true} }, true},
		{"a value moved between fields", func(m map[string]types.AttributeValue) {
			m["category"], m["costCenter"] = table.S("foodops"), table.S("")
		}, true},
		{"the amount's trailing zero", func(m map[string]types.AttributeValue) { m["amount"] = &types.AttributeValueMemberN{Value: "12.50"} }, false},
		{"the amount with an exponent", func(m map[string]types.AttributeValue) { m["amount"] = &types.AttributeValueMemberN{Value: "1.25E1"} }, false},
		{"description", func(m map[string]types.AttributeValue) { m["description"] = table.S("dinner") }, true},
		{"version", func(m map[string]types.AttributeValue) { m["version"] = table.Int(9) }, true},
		{"updatedAt", func(m map[string]types.AttributeValue) { m["updatedAt"] = table.S("2027-01-01T00:00:00Z") }, true},
		{"probe", func(m map[string]types.AttributeValue) { m["probe"] = table.S("rebase-1") }, true},
		{"id", func(m map[string]types.AttributeValue) { m["id"] = table.S("01JD0000000000000000000002") }, true},
		{"an attribute the fold does not know", func(m map[string]types.AttributeValue) { m["note"] = table.S("x") }, true},
		{"a name moved to another attribute", func(m map[string]types.AttributeValue) {
			delete(m, "description")
			m["descriptionX"] = table.S("lunch")
		}, true},
		{"a map", func(m map[string]types.AttributeValue) {
			m["extra"] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a": table.S("1")}}
		}, true},
		{"sig itself", func(m map[string]types.AttributeValue) { m["sig"] = table.SigAV([]byte("x")) }, false},
		{"a set's members in another order", func(m map[string]types.AttributeValue) {
			m["tags"] = &types.AttributeValueMemberSS{Value: []string{"b", "a"}}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			item := sigItem()
			tc.change(item)
			if tc.differs {
				assert.NotEqual(t, base, table.Sig(item))
			} else {
				assert.Equal(t, base, table.Sig(item))
			}
		})
	}
}

// Members of a set and entries of a map are digested in a canonical
// order: what DynamoDB returns in any order digests alike.
func TestSig_SetsAndMapsInAnyOrderDigestAlike(t *testing.T) {
	a, b := sigItem(), sigItem()
	a["tags"] = &types.AttributeValueMemberSS{Value: []string{"a", "b", "c"}}
	b["tags"] = &types.AttributeValueMemberSS{Value: []string{"c", "a", "b"}}
	a["nums"] = &types.AttributeValueMemberNS{Value: []string{"1.50", "2"}}
	b["nums"] = &types.AttributeValueMemberNS{Value: []string{"2", "1.5"}}
	assert.Equal(t, table.Sig(a), table.Sig(b))
}

func TestCount_SetsTheCountAndAMatchingSigAndDropsTheProbe(t *testing.T) {
	item := sigItem()
	item["probe"] = table.S("rebase-1")
	table.Count(item, 7)
	c, ok := table.Changes(item)
	require.True(t, ok)
	assert.Equal(t, int64(7), c)
	assert.NotContains(t, item, "probe")
	assert.True(t, table.SigMatches(item))

	edited := maps.Clone(item)
	edited["amount"] = &types.AttributeValueMemberN{Value: "99"} // a console edit that keeps the count
	assert.False(t, table.SigMatches(edited))
	delete(edited, "sig")
	assert.False(t, table.SigMatches(edited), "no sig")
}

// The encoding is a contract (a consumer of another version checks sigs
// the writer wrote): the digest of a fixed item is pinned.
func TestSig_GoldenDigest(t *testing.T) {
	got := hex.EncodeToString(table.Sig(sigItem()))
	path := filepath.Join("testdata", "sig.golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got+"\n"), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(string(want)), got)
}
