package writer

import (
	"context"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ledger-dev/ledger/aggregates"
)

// The account's items, in its tenant's account partition: the profile
// (aggregates.AccountKey) and one email item per address
// (aggregates.AccountEmailKey), whose GSI1 entry finds it by address (the
// argument is at the top of accounts.go; docs/design.md has the layout):
// their codec, the read of the collection and the changes, each action with
// what its failed condition means.

// Attributes of the profile and email items.
const (
	attrAccount    = "accountId"
	attrFirstName  = "firstName"
	attrLastName   = "lastName"
	attrRole       = "role"
	attrEmail      = "email"
	attrEmailCount = "emailCount"
	attrIsPrimary  = "isPrimary"
	attrIsVerified = "isVerified"
	attrVerifiedAt = "verifiedAt"
)

// profileLayout is where a's profile fields are in its profile item (its
// emailCount apart).
func profileLayout(a *Account) itemLayout {
	return itemLayout{key: aggregates.AccountKey(a.Tenant, a.ID), entity: aggregates.EntityAccount, version: &a.Version,
		strings: map[string]*string{attrID: &a.ID, attrTenant: &a.Tenant, attrFirstName: &a.FirstName, attrLastName: &a.LastName,
			attrRole: &a.Role, attrStatus: &a.Status, attrEmail: &a.Email, attrCreatedAt: &a.CreatedAt, attrUpdatedAt: &a.UpdatedAt}}
}

// profileItem encodes a's profile, which counts its addresses.
func profileItem(a *Account) map[string]ddbtypes.AttributeValue {
	item := profileLayout(a).encode()
	item[attrEmailCount] = intAV(int64(len(a.Emails)))
	if a.SuspendedBy != "" {
		item[attrSuspendedBy] = strAV(a.SuspendedBy)
	}
	return item
}

func emailItem(tenant, account string, e AccountEmail) map[string]ddbtypes.AttributeValue {
	item := keyAV(aggregates.AccountEmailKey(tenant, account, e.Address))
	item[attrEntityType] = strAV(aggregates.EntityAccountEmail)
	item[attrTenant] = strAV(tenant)
	item[attrAccount] = strAV(account)
	item[attrEmail] = strAV(e.Address)
	item[attrIsPrimary] = boolAV(e.Primary)
	item[attrIsVerified] = boolAV(e.Verified)
	if e.VerifiedAt != "" {
		item[attrVerifiedAt] = strAV(e.VerifiedAt)
	}
	item[attrCreatedAt] = strAV(e.AddedAt)
	gsi := aggregates.AccountEmailIndexKey(tenant, e.Address)
	item[attrGSI1PK], item[attrGSI1SK] = strAV(gsi.PK), strAV(gsi.SK)
	return item
}

func decodeEmail(item map[string]ddbtypes.AttributeValue) AccountEmail {
	var e AccountEmail
	e.Address, _ = stringAttr(item, attrEmail)
	e.Primary = boolAttr(item, attrIsPrimary)
	e.Verified = boolAttr(item, attrIsVerified)
	e.VerifiedAt, _ = stringAttr(item, attrVerifiedAt)
	e.AddedAt, _ = stringAttr(item, attrCreatedAt)
	return e
}

// decodeAccounts groups the items of an account partition, in key order,
// into accounts: a profile, then its email items. emailCounts holds each
// profile's emailCount.
func decodeAccounts(items []map[string]ddbtypes.AttributeValue) (accounts []*Account, emailCounts []int64) {
	for _, item := range items {
		sk, _ := stringAttr(item, attrSK)
		id, address := aggregates.ParseAccountSK(sk)
		if address == "" {
			a := &Account{Emails: []AccountEmail{}}
			profileLayout(a).decode(item)
			// suspendedBy is stored only while suspended; one suspended
			// before it was recorded counts as an admin's.
			a.SuspendedBy, _ = stringAttr(item, attrSuspendedBy)
			a.SuspendedBy, _ = aggregates.SuspensionBy(aggregates.Status(a.Status), a.SuspendedBy, "", false)
			n, _ := intAttr(item, attrEmailCount)
			accounts = append(accounts, a)
			emailCounts = append(emailCounts, n)
			continue
		}
		if len(accounts) > 0 && accounts[len(accounts)-1].ID == id {
			a := accounts[len(accounts)-1]
			a.Emails = append(a.Emails, decodeEmail(item))
		}
	}
	return accounts, emailCounts
}

// coherent reports whether a's emails agree with its profile: as many as
// the profile counts, exactly one primary, the profile's email.
func coherent(a *Account, emailCount int64) bool {
	primaries := 0
	for _, e := range a.Emails {
		if e.Primary {
			primaries++
			if e.Address != a.Email {
				return false
			}
		}
	}
	return primaries == 1 && int64(len(a.Emails)) == emailCount
}

// readAccount reads an account's item collection with one strongly
// consistent Query (nil when there is no such account). A Query is
// read-committed, not isolated from transactions: it can see some items of
// a committing transaction and not others. A collection whose emails
// disagree with its profile is such a torn read and is read again (a few
// times; then it is returned as it is).
func (s *Server) readAccount(ctx context.Context, tenant, id string) (*Account, error) {
	lo, hi := aggregates.AccountItemsRange(id)
	for attempt := 1; ; attempt++ {
		in := &dynamodb.QueryInput{
			TableName: &s.cfg.Table, ConsistentRead: aws.Bool(true),
			KeyConditionExpression:   aws.String("#pk = :pk AND #sk BETWEEN :lo AND :hi"),
			ExpressionAttributeNames: map[string]string{"#pk": attrPK, "#sk": attrSK},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
				":pk": strAV(aggregates.AccountPK(tenant)), ":lo": strAV(lo), ":hi": strAV(hi),
			},
		}
		var items []map[string]ddbtypes.AttributeValue
		for {
			out, err := s.api.Query(ctx, in)
			if err != nil {
				return nil, s.dynamoError("Query", err)
			}
			items = append(items, out.Items...)
			if out.LastEvaluatedKey == nil {
				break
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
		accounts, counts := decodeAccounts(items)
		if len(accounts) == 0 || accounts[0].ID != id {
			return nil, nil
		}
		if coherent(accounts[0], counts[0]) || attempt == 3 {
			return accounts[0], nil
		}
	}
}

// profileBump is the profile's part of every change to an account read at
// version read: the next version, updatedAt and emailCount, more sets from
// u, on condition that the account is at the version read and not deleted
// (accountChanged explains, expected being the version the client named).
func (s *Server) profileBump(a *Account, read, expected int64, u *update) action {
	u.set(attrUpdatedAt, strAV(a.UpdatedAt)).set(attrVersion, intAV(a.Version)).set(attrEmailCount, intAV(int64(len(a.Emails))))
	return action{
		item: u.item(&s.cfg.Table, aggregates.AccountKey(a.Tenant, a.ID), "#v = :read AND #st <> :deleted",
			map[string]string{"#v": attrVersion, "#st": attrStatus},
			map[string]ddbtypes.AttributeValue{":read": intAV(read), ":deleted": strAV(string(aggregates.StatusDeleted))}),
		onFail: func(ctx context.Context, _ map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
			return s.accountChanged(ctx, a.Tenant, a.ID, expected)
		},
	}
}

func emailTaken(field, address string) *Problem {
	p := problem(http.StatusConflict, ProblemEmailTaken, "the email address "+address+" is already in use")
	p.Field = field
	return p
}

func accountDeleted() *Problem {
	return problem(http.StatusConflict, ProblemAccountDeleted, "the account is deleted: it no longer changes (DELETE removes it and frees its addresses)")
}

func noSuchEmail() *Problem { return notFoundOf("email address on this account") }

// accountChanged explains a failed condition on an account's profile: 404
// when gone, 409 when deleted, 412 when the client named a version
// (expected > 0) that is no longer current, else retry (the request reads
// the account again).
func (s *Server) accountChanged(ctx context.Context, tenant, id string, expected int64) (*Problem, bool, error) {
	item, err := s.getItem(ctx, aggregates.AccountKey(tenant, id))
	if err != nil {
		return nil, false, err
	}
	if item == nil {
		return notFoundOf("account"), false, nil
	}
	if st, _ := stringAttr(item, attrStatus); st == string(aggregates.StatusDeleted) {
		return accountDeleted(), false, nil
	}
	if v, _ := intAttr(item, attrVersion); expected > 0 && v != expected {
		return s.versionConflict(v), false, nil
	}
	return nil, true, nil
}

// readForChange reads the account a change applies to and checks that it
// exists, is at the version the client named (expected > 0) and, unless
// deletedOK, is not deleted.
func (s *Server) readForChange(ctx context.Context, tenant, id string, expected int64, deletedOK bool) (*Account, *Problem, error) {
	a, err := s.readAccount(ctx, tenant, id)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case a == nil:
		return nil, notFoundOf("account"), nil
	case expected > 0 && a.Version != expected:
		return nil, s.versionConflict(a.Version), nil
	case !deletedOK && a.Status == string(aggregates.StatusDeleted):
		return nil, accountDeleted(), nil
	}
	return a, nil, nil
}

// emailNotVerified is the 409 of making an unverified address primary.
func emailNotVerified(address string) *Problem {
	return problem(http.StatusConflict, ProblemEmailNotVerified, "the address "+address+" is not verified: only a verified address can be primary")
}

// emailIsPrimary is the 409 of removing the primary address.
func emailIsPrimary(address string) *Problem {
	return problem(http.StatusConflict, ProblemPrimaryEmail, "the address "+address+" is the primary: make another verified address primary first")
}

// accountCreate puts a's profile and, per address, its email item and,
// when verified, its owner item, each only where nothing is, on condition
// that the tenant exists. A taken address is 409 email-taken; an id
// collision prepares a new id.
func (s *Server) accountCreate(a *Account) *change {
	ch := newChange("account_create", s.tenantExists(a.Tenant), action{item: s.putNew(profileItem(a)), onFail: prepareAgain})
	for _, e := range a.Emails {
		ch.add(action{item: s.putNew(emailItem(a.Tenant, a.ID, e)), onFail: prepareAgain})
		if e.Verified {
			ch.add(s.ownerPut(emailOwner(a.Tenant, a.ID, e.Address), a.CreatedAt, emailTaken("emails", e.Address)))
		}
	}
	return ch
}

// accountUpdate sets u's profile fields of a, read at version read
// (profileBump).
func (s *Server) accountUpdate(a *Account, read, expected int64, u *update) *change {
	return newChange("account_update", s.profileBump(a, read, expected, u))
}

// accountDelete deletes a's profile, every email item and every owner item,
// on condition that the account is at the version read (so no address was
// added meanwhile). A failed condition is 404 when the account is gone, 412
// when the client named a version (expected > 0), else read again.
func (s *Server) accountDelete(a *Account, expected int64) *change {
	k := aggregates.AccountKey(a.Tenant, a.ID)
	changed := func(ctx context.Context, _ map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
		item, err := s.getItem(ctx, k)
		switch {
		case err != nil:
			return nil, false, err
		case item == nil:
			return notFoundOf("account"), false, nil
		}
		return s.changedSinceRead(item, expected)
	}
	ch := newChange("account_delete", action{
		item: ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{
			TableName: &s.cfg.Table, Key: keyAV(k),
			ConditionExpression:       aws.String("#v = :read"),
			ExpressionAttributeNames:  map[string]string{"#v": attrVersion},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":read": intAV(a.Version)},
		}},
		onFail: changed,
	})
	for _, e := range a.Emails {
		ch.add(action{item: ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{
			TableName: &s.cfg.Table, Key: keyAV(aggregates.AccountEmailKey(a.Tenant, a.ID, e.Address)),
		}}})
		if e.Verified {
			ch.add(s.ownerDelete(emailOwner(a.Tenant, a.ID, e.Address)))
		}
	}
	return ch
}

// emailAdd puts e, a new address of a (read at version read), where no
// item is, and, when it is verified, its owner item (only a verified
// address is reserved): a taken address is 409 email-taken.
func (s *Server) emailAdd(a *Account, read, expected int64, e AccountEmail) *change {
	ch := newChange("email_add", s.profileBump(a, read, expected, newUpdate()),
		action{item: s.putNew(emailItem(a.Tenant, a.ID, e)), onFail: prepareAgain})
	if e.Verified {
		ch.add(s.ownerPut(emailOwner(a.Tenant, a.ID, e.Address), e.AddedAt, emailTaken("address", e.Address)))
	}
	return ch
}

// emailEdit is a change of one address of an account: verifying marks it
// verified (and reserves it), promoting makes it the primary instead of
// oldPrimary.
type emailEdit struct {
	address              string
	verifying, promoting bool
	oldPrimary           string
}

// emailUpdate writes edit of a (read at version read) in one transaction
// (seed 004): the profile's version, and its email when promoting; the
// address's item, on condition that it exists and, when promoting without
// verifying, is verified; when promoting, the old primary off on condition
// isPrimary = true; when verifying, the address's owner item, only if no
// one holds it.
func (s *Server) emailUpdate(a *Account, read, expected int64, edit emailEdit) *change {
	now := a.UpdatedAt
	k := aggregates.AccountEmailKey(a.Tenant, a.ID, edit.address)
	profile, this := newUpdate(), newUpdate()
	cond, names, values := "attribute_exists(#pk)", map[string]string{"#pk": attrPK}, map[string]ddbtypes.AttributeValue{}
	if edit.verifying {
		this.set(attrIsVerified, boolAV(true)).set(attrVerifiedAt, strAV(now))
	}
	if edit.promoting {
		profile.set(attrEmail, strAV(edit.address))
		this.set(attrIsPrimary, boolAV(true))
		if !edit.verifying {
			cond += " AND #ver = :true"
			names["#ver"], values[":true"] = attrIsVerified, boolAV(true)
		}
	}
	thisChanged := s.emailChanged(k, func(item map[string]ddbtypes.AttributeValue) *Problem {
		if !boolAttr(item, attrIsVerified) {
			return emailNotVerified(edit.address)
		}
		return nil
	})
	ch := newChange("email_update", s.profileBump(a, read, expected, profile),
		action{item: this.item(&s.cfg.Table, k, cond, names, values), onFail: thisChanged})
	if edit.promoting { // the old primary changed meanwhile: read again
		ch.add(action{item: newUpdate().set(attrIsPrimary, boolAV(false)).item(&s.cfg.Table,
			aggregates.AccountEmailKey(a.Tenant, a.ID, edit.oldPrimary), "#pr = :true",
			map[string]string{"#pr": attrIsPrimary}, map[string]ddbtypes.AttributeValue{":true": boolAV(true)}),
			onFail: prepareAgain})
	}
	if edit.verifying {
		ch.add(s.ownerPut(emailOwner(a.Tenant, a.ID, edit.address), now, emailTaken("email", edit.address)))
	}
	return ch
}

// emailRemove deletes e, an address of a (read at version read), on
// condition that it is not the primary, and, when it was verified, frees
// it (an unverified address reserved nothing).
func (s *Server) emailRemove(a *Account, read, expected int64, e AccountEmail) *change {
	k := aggregates.AccountEmailKey(a.Tenant, a.ID, e.Address)
	thisChanged := s.emailChanged(k, func(item map[string]ddbtypes.AttributeValue) *Problem {
		if boolAttr(item, attrIsPrimary) {
			return emailIsPrimary(e.Address)
		}
		return nil
	})
	ch := newChange("email_remove", s.profileBump(a, read, expected, newUpdate()), action{
		item: ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{
			TableName: &s.cfg.Table, Key: keyAV(k),
			ConditionExpression:       aws.String("#pr = :false"),
			ExpressionAttributeNames:  map[string]string{"#pr": attrIsPrimary},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":false": boolAV(false)},
		}},
		onFail: thisChanged,
	})
	if e.Verified {
		ch.add(s.ownerDelete(emailOwner(a.Tenant, a.ID, e.Address)))
	}
	return ch
}

// emailChanged explains a failed condition on the email item at k from the
// item as it is: 404 when it is gone, refusal's problem when it has one,
// else a change since the read: read again.
func (s *Server) emailChanged(k aggregates.Key, refusal func(item map[string]ddbtypes.AttributeValue) *Problem) onFail {
	return func(ctx context.Context, old map[string]ddbtypes.AttributeValue) (*Problem, bool, error) {
		item, err := s.current(ctx, k, old)
		switch {
		case err != nil:
			return nil, false, err
		case item == nil:
			return noSuchEmail(), false, nil
		}
		if p := refusal(item); p != nil {
			return p, false, nil
		}
		return nil, true, nil
	}
}
