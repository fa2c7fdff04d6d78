package writer

import (
	"context"
	"slices"
	"testing"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
)

// keyOf names the item an action writes or checks, by its key.
func keyOf(t *testing.T, it ddbtypes.TransactWriteItem) string {
	t.Helper()
	var k map[string]ddbtypes.AttributeValue
	switch {
	case it.Put != nil:
		k = it.Put.Item
	case it.Update != nil:
		k = it.Update.Key
	case it.Delete != nil:
		k = it.Delete.Key
	case it.ConditionCheck != nil:
		k = it.ConditionCheck.Key
	}
	pk, _ := stringAttr(k, attrPK)
	sk, _ := stringAttr(k, attrSK)
	require.NotEmpty(t, pk, "an action without a key")
	return pk + " / " + sk
}

// explainAt explains a failed condition of the item of ch at key, wherever
// it stands: nil for a retry.
func explainAt(t *testing.T, ch *change, key string) *Problem {
	t.Helper()
	for i, a := range ch.actions {
		if keyOf(t, a.item) != key {
			continue
		}
		p, retry, err := ch.explain(context.Background(), failure{index: i})
		require.NoError(t, err, "item %s at %d", key, i)
		if retry {
			return nil
		}
		require.NotNil(t, p, "item %s at %d", key, i)
		return p
	}
	t.Fatalf("no item %s in the change", key)
	return nil
}

// TestChangeExplain_AFailedConditionIsExplainedByItsOwnItemInAnyOrder is the
// guard against explaining a cancellation by the position of the item that
// failed: the changes of the directory are built, their actions put in
// every order this test tries (as written, reversed, rotated), and the
// failure of each item must give the same answer whatever its position.
func TestChangeExplain_AFailedConditionIsExplainedByItsOwnItemInAnyOrder(t *testing.T) {
	s := &Server{cfg: Config{Table: "ledger"}}
	verified := func(address string) AccountEmail {
		return AccountEmail{Address: address, Verified: true, VerifiedAt: "2026-01-01T00:00:00Z", AddedAt: "2026-01-01T00:00:00Z"}
	}
	account := &Account{ID: "01ACCOUNT", Tenant: "acme", Email: "a@example.com", Version: 3,
		Emails: []AccountEmail{verified("a@example.com"), verified("b@example.com"), {Address: "c@example.com", AddedAt: "2026-01-01T00:00:00Z"}}}
	branch := Branch{ID: "north", Tenant: "acme", Document: "12345678000195", Version: 2, CreatedAt: "2026-01-01T00:00:00Z"}
	tenantKey := keyOf(t, s.tenantExists("acme").item)
	ownerKey := func(o owner) string { return o.key.PK + " / " + o.key.SK }
	cases := []struct {
		name string
		ch   func() *change
		want map[string]string // item → problem type ("" for a retry)
	}{
		{"branch create", func() *change { return s.branchCreate(branch) }, map[string]string{
			tenantKey: ProblemNotFound,
			keyOf(t, ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{Item: keyAV(aggregates.BranchKey("acme", "north"))}}): ProblemAlreadyExists,
			ownerKey(documentOwner("acme", "north", branch.Document)):                                                    ProblemDocumentTaken,
		}},
		{"account create", func() *change { return s.accountCreate(account) }, map[string]string{
			tenantKey: ProblemNotFound,
			keyOf(t, ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{Item: keyAV(aggregates.AccountKey("acme", account.ID))}}):                       "",
			keyOf(t, ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{Item: keyAV(aggregates.AccountEmailKey("acme", account.ID, "a@example.com"))}}): "",
			keyOf(t, ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{Item: keyAV(aggregates.AccountEmailKey("acme", account.ID, "b@example.com"))}}): "",
			keyOf(t, ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{Item: keyAV(aggregates.AccountEmailKey("acme", account.ID, "c@example.com"))}}): "",
			ownerKey(emailOwner("acme", account.ID, "a@example.com")):                                                                              ProblemEmailTaken,
			ownerKey(emailOwner("acme", account.ID, "b@example.com")):                                                                              ProblemEmailTaken,
		}},
		{"branch update taking a new document", func() *change {
			ch, _ := s.branchUpdate(branch, 2, branchPatch{document: "98765432000198"}, "2026-01-02T00:00:00Z")
			return ch
		}, map[string]string{
			ownerKey(documentOwner("acme", "north", "98765432000198")): ProblemDocumentTaken,
		}},
	}
	orders := map[string]func([]action) []action{
		"as built": func(a []action) []action { return a },
		"reversed": func(a []action) []action { slices.Reverse(a); return a },
		"rotated":  func(a []action) []action { return append(a[1:], a[0]) },
	}
	for _, c := range cases {
		for name, order := range orders {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				ch := c.ch()
				ch.actions = order(slices.Clone(ch.actions))
				for item, want := range c.want {
					p := explainAt(t, ch, item)
					if want == "" {
						assert.Nil(t, p, "a failed condition on %s prepares again", item)
						continue
					}
					assert.Equal(t, want, p.Type, "a failed condition on %s", item)
				}
			})
		}
	}
}

// TestChangeExplain_ATakenAddressNamesItselfWhereverItStands checks that of
// several owner items in one create, the one whose condition failed is the
// address the 409 names, in any order.
func TestChangeExplain_ATakenAddressNamesItselfWhereverItStands(t *testing.T) {
	s := &Server{cfg: Config{Table: "ledger"}}
	a := &Account{ID: "01ACCOUNT", Tenant: "acme", Version: 1}
	for _, address := range []string{"a@example.com", "b@example.com", "c@example.com"} {
		a.Emails = append(a.Emails, AccountEmail{Address: address, Verified: true})
	}
	for _, reversed := range []bool{false, true} {
		ch := s.accountCreate(a)
		if reversed {
			slices.Reverse(ch.actions)
		}
		for i, act := range ch.actions {
			if act.item.Put == nil {
				continue
			}
			address, isOwner := act.item.Put.Item[attrEmail].(*ddbtypes.AttributeValueMemberS)
			if !isOwner || keyOf(t, act.item) != keyOf(t, ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{Item: keyAV(aggregates.EmailOwnerKey(address.Value))}}) {
				continue
			}
			p, _, err := ch.explain(context.Background(), failure{index: i})
			require.NoError(t, err)
			require.NotNil(t, p)
			assert.Equal(t, ProblemEmailTaken, p.Type)
			assert.Contains(t, p.Detail, address.Value, "reversed %v: the owner item at %d", reversed, i)
		}
	}
}

// TestChangeExplain_RefusesWhatCannotFail checks that a failure reported on
// an unconditional item, or outside the change, is an error rather than an
// answer borrowed from another item.
func TestChangeExplain_RefusesWhatCannotFail(t *testing.T) {
	s := &Server{cfg: Config{Table: "ledger"}}
	a := &Account{ID: "01ACCOUNT", Tenant: "acme", Version: 4,
		Emails: []AccountEmail{{Address: "a@example.com", Primary: true, Verified: true}}}
	ch := s.accountDelete(a, 0)
	require.Len(t, ch.actions, 3) // the profile, the email item, its owner item
	for _, c := range []struct {
		name  string
		index int
	}{{"the email item's delete has no condition", 1}, {"the owner item must name the account", 2}, {"past the end", 3}, {"before the start", -1}} {
		t.Run(c.name, func(t *testing.T) {
			p, retry, err := ch.explain(context.Background(), failure{index: c.index})
			assert.Error(t, err)
			assert.Nil(t, p)
			assert.False(t, retry)
		})
	}
}
