package writer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/oklog/ulid/v2"

	"github.com/ledger-dev/ledger/aggregates"
)

// Accounts, in one place (the integrity argument is in directory.go).
//
// An account is an item collection in its tenant's account partition: the
// profile at {accountId}, then one item per email address at
// {accountId}#EMAIL#{address}, as seed 004 keeps a user's profile and email
// records together. Email items carry GSI1 (ACCOUNT#{address} / TENANT#{t}),
// the lookup by address across tenants; the profile does not, so a lookup
// finds each address once. Each verified address also has an owner item,
// EMAIL#{address} / UNIQUE, naming the account: the uniqueness guard.
// Unverified addresses reserve nothing (any number of accounts, in any
// tenants, may list one): otherwise anyone could block an address they do
// not control by adding it unverified. The owner item is put, on
// attribute_not_exists, by the transaction that verifies the address (at
// creation or by PATCH), so of the accounts listing an address at most one
// can ever verify it, and removing or deleting frees it.
//
// Invariants, each held by a condition in the transaction that could break
// it: every verified address belongs to exactly one account (owner items); an account
// has one to MaxEmailsPerAccount addresses, exactly one of them primary, and
// the primary is verified (validated at creation; the primary can only move
// to a verified address, by one transaction that turns the old one off on
// condition isPrimary = true, the new one on on condition isVerified = true,
// and sets the profile's denormalised email; the primary cannot be removed,
// on condition isPrimary = false). Every change of an account's emails
// increments the profile's version on condition that it is the version read,
// so each change acts on exactly the collection it read.

// Account is an account (a user of a tenant) as the API shows it. Email is
// the primary address; Emails lists every address in address order.
type Account struct {
	ID        string         `json:"id"`
	Tenant    string         `json:"tenant"`
	FirstName string         `json:"firstName"`
	LastName  string         `json:"lastName"`
	Role      string         `json:"role"`
	Status    string         `json:"status"`
	Email     string         `json:"email"`
	Emails    []AccountEmail `json:"emails"`
	CreatedAt string         `json:"createdAt"`
	UpdatedAt string         `json:"updatedAt"`
	Version   int64          `json:"version"`
}

// AccountEmail is one address of an account, normalised (trimmed,
// lower-case).
type AccountEmail struct {
	Address    string `json:"address"`
	Primary    bool   `json:"primary"`
	Verified   bool   `json:"verified"`
	VerifiedAt string `json:"verifiedAt,omitempty"`
	AddedAt    string `json:"addedAt"`
}

// AccountPage is a page of a tenant's account listing.
type AccountPage struct {
	Items      []Account `json:"items"`
	NextCursor string    `json:"nextCursor,omitempty"`
}

func (a *Account) email(address string) *AccountEmail {
	for i := range a.Emails {
		if a.Emails[i].Address == address {
			return &a.Emails[i]
		}
	}
	return nil
}

var (
	accountCreateFields = map[string]bool{"firstName": true, "lastName": true, "role": true, "status": true, "emails": true}
	emailCreateFields   = map[string]bool{"address": true, "verified": true, "primary": true}
	emailAddFields      = map[string]bool{"address": true, "verified": true}
	emailPatchFields    = map[string]bool{"primary": true, "verified": true}
)

func accountLocation(tenant, id string) string { return "/v1/tenants/" + tenant + "/accounts/" + id }

func profileItem(a *Account) map[string]ddbtypes.AttributeValue {
	item := keyAV(aggregates.AccountKey(a.Tenant, a.ID))
	item[attrEntityType] = strAV(aggregates.EntityAccount)
	item[attrID] = strAV(a.ID)
	item[attrTenant] = strAV(a.Tenant)
	item[attrFirstName] = strAV(a.FirstName)
	item[attrLastName] = strAV(a.LastName)
	item[attrRole] = strAV(a.Role)
	item[attrStatus] = strAV(a.Status)
	item[attrEmail] = strAV(a.Email)
	item[attrEmailCount] = intAV(int64(len(a.Emails)))
	item[attrCreatedAt] = strAV(a.CreatedAt)
	item[attrUpdatedAt] = strAV(a.UpdatedAt)
	item[attrVersion] = intAV(a.Version)
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
			a.ID, _ = stringAttr(item, attrID)
			a.Tenant, _ = stringAttr(item, attrTenant)
			a.FirstName, _ = stringAttr(item, attrFirstName)
			a.LastName, _ = stringAttr(item, attrLastName)
			a.Role, _ = stringAttr(item, attrRole)
			a.Status, _ = stringAttr(item, attrStatus)
			a.Email, _ = stringAttr(item, attrEmail)
			a.CreatedAt, _ = stringAttr(item, attrCreatedAt)
			a.UpdatedAt, _ = stringAttr(item, attrUpdatedAt)
			a.Version, _ = intAttr(item, attrVersion)
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

// emailOwner is the owner item of address, held by the account.
func emailOwner(tenant, account, address string) owner {
	return owner{key: aggregates.EmailOwnerKey(address), entity: aggregates.EntityEmailOwner,
		valueAttr: attrEmail, value: address, tenant: tenant, holderAttr: attrAccount, holder: account}
}

// profileBump is the profile's part of every change to an account read at
// version read: the next version and updatedAt, more sets from u, on
// condition that the account is at the version read and not deleted.
func (s *Server) profileBump(a *Account, read int64, u *update) ddbtypes.TransactWriteItem {
	u.set(attrUpdatedAt, strAV(a.UpdatedAt)).set(attrVersion, intAV(a.Version)).set(attrEmailCount, intAV(int64(len(a.Emails))))
	return u.item(&s.cfg.Table, aggregates.AccountKey(a.Tenant, a.ID), "#v = :read AND #st <> :deleted",
		map[string]string{"#v": attrVersion, "#st": attrStatus},
		map[string]ddbtypes.AttributeValue{":read": intAV(read), ":deleted": strAV(string(aggregates.StatusDeleted))})
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

// accountPath validates the path's tenant and account.
func accountPath(r *http.Request) (tenant, account string, p *Problem) {
	if tenant, p = tenantPath(r); p != nil {
		return "", "", p
	}
	account = r.PathValue("account")
	if err := aggregates.ValidateID(account); err != nil {
		return "", "", fieldProblem("account", err.Error())
	}
	return tenant, account, nil
}

// emailPath validates the path of one address of an account.
func emailPath(r *http.Request) (tenant, account, address string, p *Problem) {
	if tenant, account, p = accountPath(r); p != nil {
		return "", "", "", p
	}
	if address, p = checkEmail("email", r.PathValue("email")); p != nil {
		return "", "", "", p
	}
	return tenant, account, address, nil
}

// accountResponse is the answer of a change to a: the account and its ETag.
func accountResponse(status int, a *Account) response {
	return versionedResponse(status, a, a.Version)
}

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

// parseNewEmails reads the emails of an account to create: 1 to
// MaxEmailsPerAccount distinct addresses, exactly one primary (the only one
// when there is one and none says so), the primary verified.
func parseNewEmails(raw json.RawMessage, now string) ([]AccountEmail, *Problem) {
	var list []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &list) != nil {
		return nil, fieldProblem("emails", `must be an array of {"address": …, "verified": …, "primary": …}`)
	}
	if len(list) == 0 || len(list) > aggregates.MaxEmailsPerAccount {
		return nil, fieldProblem("emails", fmt.Sprintf("give 1 to %d addresses", aggregates.MaxEmailsPerAccount))
	}
	var emails []AccountEmail
	seen := map[string]bool{}
	primary := -1
	for i, el := range list {
		field := "emails[" + strconv.Itoa(i) + "]"
		m, p := decodeObject(el, emailCreateFields)
		if p != nil {
			if p.Field != "" {
				p.Field = field + "." + p.Field
			} else {
				p.Field = field
			}
			return nil, p
		}
		if p := required(m, "address"); p != nil {
			p.Field = field + ".address"
			return nil, p
		}
		e := AccountEmail{AddedAt: now}
		if e.Address, p = parseEmail(field+".address", m["address"]); p != nil {
			return nil, p
		}
		if seen[e.Address] {
			return nil, fieldProblem(field+".address", "the address "+e.Address+" is given twice")
		}
		seen[e.Address] = true
		for name, dst := range map[string]*bool{"verified": &e.Verified, "primary": &e.Primary} {
			if raw, ok := m[name]; ok && !isNull(raw) {
				if *dst, p = parseBool(field+"."+name, raw); p != nil {
					return nil, p
				}
			}
		}
		if e.Verified {
			e.VerifiedAt = now
		}
		if e.Primary {
			if primary >= 0 {
				return nil, fieldProblem(field+".primary", "exactly one address is primary")
			}
			primary = i
		}
		emails = append(emails, e)
	}
	if primary < 0 {
		if len(emails) > 1 {
			return nil, fieldProblem("emails", "say which address is primary (\"primary\": true)")
		}
		primary = 0
		emails[0].Primary = true
	}
	if !emails[primary].Verified {
		return nil, fieldProblem("emails["+strconv.Itoa(primary)+"].verified", "the primary address must be verified")
	}
	return emails, nil
}

// createAccount serves POST /v1/tenants/{tenant}/accounts: one transaction
// of a check that the tenant exists, the profile, and per address its email
// item and its owner item, each put only where nothing is.
func (s *Server) createAccount(w http.ResponseWriter, r *http.Request) {
	tenant, p := tenantPath(r)
	if p != nil {
		p.write(w)
		return
	}
	key, body, ok := s.mutationRequest(w, r, true, "an account")
	if !ok {
		return
	}
	m, p := decodeObject(body, accountCreateFields)
	if p == nil {
		p = required(m, "firstName", "lastName", "emails")
	}
	a := Account{Tenant: tenant, Role: aggregates.RoleMember, Status: string(aggregates.StatusActive), Version: 1}
	if p == nil {
		a.FirstName, p = parseDisplayName("firstName", m["firstName"])
	}
	if p == nil {
		a.LastName, p = parseDisplayName("lastName", m["lastName"])
	}
	if raw, ok := m["role"]; p == nil && ok && !isNull(raw) {
		a.Role, p = parseChecked("role", raw, aggregates.ValidateRole)
	}
	if raw, ok := m["status"]; p == nil && ok && !isNull(raw) {
		a.Status, p = parseChecked("status", raw, aggregates.ValidateTenantStatus) // active or suspended at creation
	}
	now := s.cfg.Now().UTC()
	if p == nil {
		a.Emails, p = parseNewEmails(m["emails"], now.Format(time.RFC3339Nano))
	}
	for i, e := range a.Emails {
		if p == nil && e.Verified && !claimsOf(r).ProvesEmail(e.Address) {
			p = emailNotProven("emails["+strconv.Itoa(i)+"].verified", e.Address)
		}
	}
	if p != nil {
		p.write(w)
		return
	}
	sortEmails(a.Emails)
	for _, e := range a.Emails {
		if e.Primary {
			a.Email = e.Address
		}
	}
	var owners map[int]string // the index of each owner item in the change: its address
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body),
		prepare: func(context.Context) (*change, response, *Problem, error) {
			u, err := ulid.New(ulid.Timestamp(now), s.cfg.Entropy)
			if err != nil {
				return nil, response{}, nil, fmt.Errorf("new account id: %w", err)
			}
			a.ID = u.String()
			a.CreatedAt = now.Format(time.RFC3339Nano)
			a.UpdatedAt = a.CreatedAt
			ch := &change{op: "account_create", items: []ddbtypes.TransactWriteItem{
				s.tenantExists(tenant),
				s.putNew(profileItem(&a)),
			}}
			owners = map[int]string{}
			for _, e := range a.Emails {
				ch.items = append(ch.items, s.putNew(emailItem(tenant, a.ID, e)))
				if e.Verified {
					owners[len(ch.items)] = e.Address
					ch.items = append(ch.items, s.ownerPut(emailOwner(tenant, a.ID, e.Address), a.CreatedAt))
				}
			}
			resp := accountResponse(http.StatusCreated, &a)
			resp.location = accountLocation(tenant, a.ID)
			return ch, resp, nil, nil
		},
		conditionFailed: func(_ context.Context, f failure) (*Problem, bool, error) {
			switch address, owned := owners[f.index]; {
			case f.index == 0:
				return notFoundOf("tenant " + tenant), false, nil
			case owned: // an owner item: the address is taken
				return emailTaken("emails", address), false, nil
			}
			return nil, true, nil // an id collision: prepare a new id
		},
	})
}

// sortEmails sorts emails by address, the order of their keys.
func sortEmails(emails []AccountEmail) {
	slices.SortFunc(emails, func(a, b AccountEmail) int { return strings.Compare(a.Address, b.Address) })
}

// getAccount serves GET …/accounts/{account}: the profile and every
// address, strongly consistent.
func (s *Server) getAccount(w http.ResponseWriter, r *http.Request) {
	tenant, id, p := accountPath(r)
	if p != nil {
		p.write(w)
		return
	}
	a, err := s.readAccount(r.Context(), tenant, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if a == nil {
		notFoundOf("account").write(w)
		return
	}
	accountResponse(http.StatusOK, a).write(w, false)
}

// listAccounts serves GET /v1/tenants/{tenant}/accounts: the accounts in id
// (creation) order with their addresses, from strongly consistent Queries
// of the account partition. A page ends between accounts, never inside one.
func (s *Server) listAccounts(w http.ResponseWriter, r *http.Request) {
	tenant, p := tenantPath(r)
	if p != nil {
		p.write(w)
		return
	}
	limit, start, p := s.directoryList(r, tenant, "accounts")
	if p != nil {
		p.write(w)
		return
	}
	in := s.partitionQuery(aggregates.AccountPK(tenant), start)
	// Enough for limit+1 accounts of the most addresses in one page.
	in.Limit = aws.Int32(int32(min((limit+1)*(1+aggregates.MaxEmailsPerAccount), 1000)))
	var items []map[string]ddbtypes.AttributeValue
	more := false
	lastSK := "" // the sort key of the last item of the page's last account
	profiles := 0
read:
	for {
		out, err := s.api.Query(r.Context(), in)
		if err != nil {
			s.fail(w, r, s.dynamoError("Query", err))
			return
		}
		for _, item := range out.Items {
			sk, _ := stringAttr(item, attrSK)
			if _, address := aggregates.ParseAccountSK(sk); address == "" {
				if profiles == limit {
					more = true
					break read
				}
				profiles++
			}
			items = append(items, item)
			lastSK = sk
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	accounts, _ := decodeAccounts(items)
	page := AccountPage{Items: []Account{}}
	for _, a := range accounts {
		page.Items = append(page.Items, *a)
	}
	if more {
		page.NextCursor = s.directoryCursor(tenant, "accounts", lastSK)
	}
	writeJSON(w, http.StatusOK, page)
}

// patchAccount serves PATCH …/accounts/{account}: names, role and status,
// on condition that If-Match names the current version. A deleted account
// does not change.
func (s *Server) patchAccount(w http.ResponseWriter, r *http.Request) {
	tenant, id, p := accountPath(r)
	if p != nil {
		p.write(w)
		return
	}
	expected, key, body, ok := s.patchRequest(w, r)
	if !ok {
		return
	}
	m, p := decodePatchFields(body, "firstName", "lastName", "role", "status")
	set := map[string]string{}
	for _, f := range []struct {
		name  string
		parse func(string, json.RawMessage) (string, *Problem)
	}{
		{"firstName", parseDisplayName}, {"lastName", parseDisplayName},
		{"role", func(f string, raw json.RawMessage) (string, *Problem) {
			return parseChecked(f, raw, aggregates.ValidateRole)
		}},
		{"status", func(f string, raw json.RawMessage) (string, *Problem) {
			return parseChecked(f, raw, aggregates.ValidateAccountStatus)
		}},
	} {
		if raw, ok := m[f.name]; p == nil && ok {
			set[f.name], p = f.parse(f.name, raw)
		}
	}
	if p != nil {
		p.write(w)
		return
	}
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body), lookupFirst: true,
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			a, p, err := s.readForChange(ctx, tenant, id, expected, false)
			if a == nil {
				return nil, response{}, p, err
			}
			u := newUpdate()
			for name, v := range set {
				switch name {
				case "firstName":
					a.FirstName = v
				case "lastName":
					a.LastName = v
				case "role":
					a.Role = v
				case "status":
					a.Status = v
				}
				u.set(name, strAV(v))
			}
			read := a.Version
			a.Version++
			a.UpdatedAt = s.cfg.Now().UTC().Format(time.RFC3339Nano)
			return one("account_update", s.profileBump(a, read, u)), accountResponse(http.StatusOK, a), nil, nil
		},
		conditionFailed: func(ctx context.Context, _ failure) (*Problem, bool, error) {
			return s.accountChanged(ctx, tenant, id, expected)
		},
	})
}

// deleteAccount serves DELETE …/accounts/{account}, If-Match optional: the
// profile, every email item and every owner item in one transaction, on
// condition that the account is at the version read (so no address was
// added meanwhile). It frees the account's addresses.
func (s *Server) deleteAccount(w http.ResponseWriter, r *http.Request) {
	tenant, id, p := accountPath(r)
	if p != nil {
		p.write(w)
		return
	}
	expected, key, ok := s.deleteRequest(w, r)
	if !ok {
		return
	}
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, nil), lookupFirst: true,
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			a, p, err := s.readForChange(ctx, tenant, id, expected, true)
			if a == nil {
				return nil, response{}, p, err
			}
			ch := &change{op: "account_delete", items: []ddbtypes.TransactWriteItem{{Delete: &ddbtypes.Delete{
				TableName: &s.cfg.Table, Key: keyAV(aggregates.AccountKey(tenant, id)),
				ConditionExpression:       aws.String("#v = :read"),
				ExpressionAttributeNames:  map[string]string{"#v": attrVersion},
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":read": intAV(a.Version)},
			}}}}
			for _, e := range a.Emails {
				ch.items = append(ch.items,
					ddbtypes.TransactWriteItem{Delete: &ddbtypes.Delete{TableName: &s.cfg.Table, Key: keyAV(aggregates.AccountEmailKey(tenant, id, e.Address))}})
				if e.Verified {
					ch.items = append(ch.items, s.ownerDelete(emailOwner(tenant, id, e.Address)))
				}
			}
			return ch, response{status: http.StatusNoContent}, nil, nil
		},
		conditionFailed: func(ctx context.Context, f failure) (*Problem, bool, error) {
			if f.index > 0 {
				return nil, false, fmt.Errorf("account %s/%s: an owner item of its addresses does not name it", tenant, id)
			}
			item, err := s.getItem(ctx, aggregates.AccountKey(tenant, id))
			switch {
			case err != nil:
				return nil, false, err
			case item == nil:
				return notFoundOf("account"), false, nil
			case expected > 0:
				v, _ := intAttr(item, attrVersion)
				return s.versionConflict(v), false, nil
			}
			return nil, true, nil
		},
	})
}

// addEmail serves POST …/accounts/{account}/emails, If-Match optional: the
// address's email item and owner item, put only where nothing is, and the
// profile's version, in one transaction. A taken address is 409
// email-taken and changes nothing.
func (s *Server) addEmail(w http.ResponseWriter, r *http.Request) {
	tenant, id, p := accountPath(r)
	if p != nil {
		p.write(w)
		return
	}
	expected, _, _, p := parseIfMatch(r) // 0 for "*": any version
	if p != nil {
		p.write(w)
		return
	}
	key, body, ok := s.mutationRequest(w, r, false, "")
	if !ok {
		return
	}
	m, p := decodeObject(body, emailAddFields)
	if p == nil {
		p = required(m, "address")
	}
	var address string
	var verified bool
	if p == nil {
		address, p = parseEmail("address", m["address"])
	}
	if raw, ok := m["verified"]; p == nil && ok && !isNull(raw) {
		verified, p = parseBool("verified", raw)
	}
	if p == nil && verified && !claimsOf(r).ProvesEmail(address) {
		p = emailNotProven("verified", address)
	}
	if p != nil {
		p.write(w)
		return
	}
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body), lookupFirst: true,
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			a, p, err := s.readForChange(ctx, tenant, id, expected, false)
			if a == nil {
				return nil, response{}, p, err
			}
			if a.email(address) != nil {
				p := problem(http.StatusConflict, ProblemEmailTaken, "the email address "+address+" is already an address of this account")
				p.Field = "address"
				return nil, response{}, p, nil
			}
			if len(a.Emails) >= aggregates.MaxEmailsPerAccount {
				return nil, response{}, problem(http.StatusConflict, ProblemTooManyEmails,
					fmt.Sprintf("the account has %d addresses, the most allowed; remove one first", len(a.Emails))), nil
			}
			read := a.Version
			now := s.cfg.Now().UTC().Format(time.RFC3339Nano)
			e := AccountEmail{Address: address, Verified: verified, AddedAt: now}
			if verified {
				e.VerifiedAt = now
			}
			a.Emails = append(a.Emails, e)
			sortEmails(a.Emails)
			a.Version++
			a.UpdatedAt = now
			resp := accountResponse(http.StatusCreated, a)
			resp.location = accountLocation(tenant, id) + "/emails/" + url.PathEscape(address)
			ch := &change{op: "email_add", items: []ddbtypes.TransactWriteItem{
				s.profileBump(a, read, newUpdate()),
				s.putNew(emailItem(tenant, id, e)),
			}}
			if verified { // only a verified address is reserved
				ch.items = append(ch.items, s.ownerPut(emailOwner(tenant, id, address), now))
			}
			return ch, resp, nil, nil
		},
		conditionFailed: func(ctx context.Context, f failure) (*Problem, bool, error) {
			switch f.index {
			case 0:
				return s.accountChanged(ctx, tenant, id, expected)
			case 2:
				return emailTaken("address", address), false, nil
			}
			return nil, true, nil
		},
	})
}

// patchEmail serves PATCH …/accounts/{account}/emails/{email}: {"verified":
// true} marks the address verified, {"primary": true} makes it the primary
// in one transaction (seed 004): the old primary off on condition
// isPrimary = true, this one on on condition isVerified = true (or verified
// by the same request), and the profile's email and version set on
// condition that it is at the If-Match version. Neither can be set false:
// another address is made primary instead, an unwanted one removed.
func (s *Server) patchEmail(w http.ResponseWriter, r *http.Request) {
	tenant, id, address, p := emailPath(r)
	if p != nil {
		p.write(w)
		return
	}
	expected, key, body, ok := s.patchRequest(w, r)
	if !ok {
		return
	}
	m, p := decodeObject(body, emailPatchFields)
	if p == nil && len(m) == 0 {
		p = problem(http.StatusBadRequest, ProblemInvalidJSON, "the patch changes nothing: give \"primary\": true or \"verified\": true")
	}
	var primary, verify bool
	if raw, ok := m["primary"]; p == nil && ok {
		if primary, p = parseBool("primary", raw); p == nil && !primary {
			p = fieldProblem("primary", "only true: to change the primary address, make another address primary")
		}
	}
	if raw, ok := m["verified"]; p == nil && ok {
		if verify, p = parseBool("verified", raw); p == nil && !verify {
			p = fieldProblem("verified", "only true: verification cannot be withdrawn; remove the address instead")
		}
		if p == nil && !claimsOf(r).ProvesEmail(address) {
			p = emailNotProven("verified", address)
		}
	}
	if p != nil {
		p.write(w)
		return
	}
	notVerified := func() *Problem {
		return problem(http.StatusConflict, ProblemEmailNotVerified, "the address "+address+" is not verified: only a verified address can be primary")
	}
	var oldPrimary string
	ownerIndex := -1 // the owner item's index in the change, when verifying
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, body), lookupFirst: true,
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			a, p, err := s.readForChange(ctx, tenant, id, expected, false)
			if a == nil {
				return nil, response{}, p, err
			}
			e := a.email(address)
			if e == nil {
				return nil, response{}, noSuchEmail(), nil
			}
			verifying := verify && !e.Verified
			promoting := primary && !e.Primary
			if promoting && !e.Verified && !verifying {
				return nil, response{}, notVerified(), nil
			}
			if !verifying && !promoting {
				return nil, accountResponse(http.StatusOK, a), nil, nil // already so
			}
			read := a.Version
			now := s.cfg.Now().UTC().Format(time.RFC3339Nano)
			a.Version++
			a.UpdatedAt = now
			profile := newUpdate()
			this := newUpdate()
			thisCond := "attribute_exists(#pk)"
			thisNames := map[string]string{"#pk": attrPK}
			thisValues := map[string]ddbtypes.AttributeValue{}
			if verifying {
				e.Verified, e.VerifiedAt = true, now
				this.set(attrIsVerified, boolAV(true)).set(attrVerifiedAt, strAV(now))
			}
			ch := &change{op: "email_update"}
			if promoting {
				oldPrimary = a.Email
				if old := a.email(oldPrimary); old != nil {
					old.Primary = false
				}
				e.Primary = true
				a.Email = address
				profile.set(attrEmail, strAV(address))
				this.set(attrIsPrimary, boolAV(true))
				if !verifying {
					thisCond += " AND #ver = :true"
					thisNames["#ver"], thisValues[":true"] = attrIsVerified, boolAV(true)
				}
			}
			ch.items = append(ch.items, s.profileBump(a, read, profile),
				this.item(&s.cfg.Table, aggregates.AccountEmailKey(tenant, id, address), thisCond, thisNames, thisValues))
			if promoting {
				ch.items = append(ch.items, newUpdate().set(attrIsPrimary, boolAV(false)).item(&s.cfg.Table,
					aggregates.AccountEmailKey(tenant, id, oldPrimary), "#pr = :true",
					map[string]string{"#pr": attrIsPrimary}, map[string]ddbtypes.AttributeValue{":true": boolAV(true)}))
			}
			ownerIndex = -1
			if verifying { // verifying reserves the address: only if no one holds it
				ownerIndex = len(ch.items)
				ch.items = append(ch.items, s.ownerPut(emailOwner(tenant, id, address), now))
			}
			return ch, accountResponse(http.StatusOK, a), nil, nil
		},
		conditionFailed: func(ctx context.Context, f failure) (*Problem, bool, error) {
			switch f.index {
			case ownerIndex:
				return emailTaken("email", address), false, nil
			case 0:
				return s.accountChanged(ctx, tenant, id, expected)
			case 1:
				item, err := s.current(ctx, aggregates.AccountEmailKey(tenant, id, address), f.old)
				switch {
				case err != nil:
					return nil, false, err
				case item == nil:
					return noSuchEmail(), false, nil
				case !boolAttr(item, attrIsVerified):
					return notVerified(), false, nil
				}
			}
			return nil, true, nil // the old primary changed: read again
		},
	})
}

// removeEmail serves DELETE …/accounts/{account}/emails/{email}, If-Match
// optional: the email item (on condition that it is not the primary) and
// its owner item deleted, freeing the address, and the profile's version
// incremented, in one transaction. The primary cannot be removed (409
// primary-email): make another address primary first.
func (s *Server) removeEmail(w http.ResponseWriter, r *http.Request) {
	tenant, id, address, p := emailPath(r)
	if p != nil {
		p.write(w)
		return
	}
	expected, key, ok := s.deleteRequest(w, r)
	if !ok {
		return
	}
	isPrimary := func() *Problem {
		return problem(http.StatusConflict, ProblemPrimaryEmail, "the address "+address+" is the primary: make another verified address primary first")
	}
	s.mutate(w, r, mutation{
		tenant: tenant, idemKey: key, fp: fingerprint(r, nil), lookupFirst: true,
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			a, p, err := s.readForChange(ctx, tenant, id, expected, false)
			if a == nil {
				return nil, response{}, p, err
			}
			e := a.email(address)
			switch {
			case e == nil:
				return nil, response{}, noSuchEmail(), nil
			case e.Primary:
				return nil, response{}, isPrimary(), nil
			}
			read := a.Version
			kept := a.Emails[:0:0]
			for _, x := range a.Emails {
				if x.Address != address {
					kept = append(kept, x)
				}
			}
			a.Emails = kept
			a.Version++
			a.UpdatedAt = s.cfg.Now().UTC().Format(time.RFC3339Nano)
			ch := &change{op: "email_remove", items: []ddbtypes.TransactWriteItem{
				s.profileBump(a, read, newUpdate()),
				{Delete: &ddbtypes.Delete{
					TableName: &s.cfg.Table, Key: keyAV(aggregates.AccountEmailKey(tenant, id, address)),
					ConditionExpression:       aws.String("#pr = :false"),
					ExpressionAttributeNames:  map[string]string{"#pr": attrIsPrimary},
					ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":false": boolAV(false)},
				}},
			}}
			if e.Verified { // an unverified address reserved nothing
				ch.items = append(ch.items, s.ownerDelete(emailOwner(tenant, id, address)))
			}
			return ch, accountResponse(http.StatusOK, a), nil, nil
		},
		conditionFailed: func(ctx context.Context, f failure) (*Problem, bool, error) {
			switch f.index {
			case 0:
				return s.accountChanged(ctx, tenant, id, expected)
			case 1:
				item, err := s.current(ctx, aggregates.AccountEmailKey(tenant, id, address), f.old)
				switch {
				case err != nil:
					return nil, false, err
				case item == nil:
					return noSuchEmail(), false, nil
				case boolAttr(item, attrIsPrimary):
					return isPrimary(), false, nil
				}
				return nil, true, nil
			}
			return nil, false, fmt.Errorf("account %s/%s: the owner item of %s does not name it", tenant, id, address)
		},
	})
}

// lookupAccount serves GET /v1/accounts:lookup?email= (admin): the account
// holding a verified address, in any tenant. The address's owner item names
// the tenant and the account (one strongly consistent GetItem, the same
// item that keeps the address unique); a read of the account confirms it.
// Unverified addresses, which any number of accounts may list, are held by
// no one (404). (GSI1 entries, one per email item, are not consulted: they
// lag the table, and unverified copies of an address would crowd them.)
func (s *Server) lookupAccount(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if p := singleParams(q, map[string]bool{"email": true}); p != nil {
		p.write(w)
		return
	}
	address, p := checkEmail("email", q.Get("email"))
	if p != nil {
		p.write(w)
		return
	}
	owner, err := s.getItem(r.Context(), aggregates.EmailOwnerKey(address))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if owner != nil {
		tenant, _ := stringAttr(owner, attrTenant)
		id, _ := stringAttr(owner, attrAccount)
		a, err := s.readAccount(r.Context(), tenant, id)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if a != nil {
			if e := a.email(address); e != nil && e.Verified {
				accountResponse(http.StatusOK, a).write(w, false)
				return
			}
		}
	}
	notFoundOf("account with this verified email address").write(w)
}
