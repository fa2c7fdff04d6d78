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
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/oklog/ulid/v2"

	"github.com/ledger-dev/ledger/aggregates"
)

// Accounts: the API type, its rules and its handlers; its items and the
// changes that write them are in store_account.go (the directory's
// integrity argument is in directory.go).
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
	emailCreateFields = map[string]bool{"address": true, "verified": true, "primary": true}
	emailAddFields    = map[string]bool{"address": true, "verified": true}
	emailPatchFields  = map[string]bool{"primary": true, "verified": true}
)

var (
	parseRole          = checked(aggregates.ValidateRole)
	parseAccountStatus = checked(aggregates.ValidateAccountStatus)
)

func accountLocation(tenant, id string) string { return "/v1/tenants/" + tenant + "/accounts/" + id }

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

// accountMutation is a change of the account at a request's path: the
// request's Idempotency-Key, its body (nil for a DELETE), the version its
// If-Match names (0: any) and whether the account may be deleted (for its
// own delete). edit changes a, read at version read, at now: it returns
// the change and the answer (a nil change: nothing to write, the answer
// as it is), or a problem.
type accountMutation struct {
	tenant, id string
	key        string
	body       []byte
	expected   int64
	deletedOK  bool
	edit       func(a *Account, read int64, now string) (*change, response, *Problem)
}

// mutateAccount serves m: it reads the account (readForChange) and
// commits the change edit makes of it, under the Idempotency-Key.
func (s *Server) mutateAccount(w http.ResponseWriter, r *http.Request, m accountMutation) {
	s.mutate(w, r, mutation{
		tenant: m.tenant, idemKey: m.key, fp: fingerprint(r, m.body), lookupFirst: true,
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			a, p, err := s.readForChange(ctx, m.tenant, m.id, m.expected, m.deletedOK)
			if a == nil {
				return nil, response{}, p, err
			}
			ch, resp, p := m.edit(a, a.Version, s.cfg.Now().UTC().Format(time.RFC3339Nano))
			return ch, resp, p, nil
		},
	})
}

// accountResponse is the answer of a change to a: the account and its ETag.
func accountResponse(status int, a *Account) response {
	return versionedResponse(status, a, a.Version)
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
	key, body, ok := s.mutationRequest(w, r, p, keyRequiredToCreate("an account"))
	if !ok {
		return
	}
	a := Account{Tenant: tenant, Role: aggregates.RoleMember, Status: string(aggregates.StatusActive), Version: 1}
	m, p := decodeFields(body,
		bodyField{"firstName", true, parseDisplayName, &a.FirstName},
		bodyField{"lastName", true, parseDisplayName, &a.LastName},
		bodyField{"role", false, parseRole, &a.Role},
		bodyField{"status", false, parseTenantStatus, &a.Status}, // active or suspended at creation
		bodyField{name: "emails", required: true})                // parsed below
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
			resp := accountResponse(http.StatusCreated, &a)
			resp.location = accountLocation(tenant, a.ID)
			return s.accountCreate(&a), resp, nil, nil
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
	tenant, limit, in, ok := s.tenantListing(w, r, "accounts", aggregates.AccountPK)
	if !ok {
		return
	}
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
	expected, key, body, ok := s.patchRequest(w, r, p, changeIfMatch)
	if !ok {
		return
	}
	var set Account // the fields the patch sets ("" where it does not)
	p = decodePatchFields(body,
		bodyField{"firstName", false, parseDisplayName, &set.FirstName}, bodyField{"lastName", false, parseDisplayName, &set.LastName},
		bodyField{"role", false, parseRole, &set.Role}, bodyField{"status", false, parseAccountStatus, &set.Status})
	if p != nil {
		p.write(w)
		return
	}
	s.mutateAccount(w, r, accountMutation{tenant: tenant, id: id, key: key, body: body, expected: expected,
		edit: func(a *Account, read int64, now string) (*change, response, *Problem) {
			u := newUpdate().patch(attrFirstName, &a.FirstName, set.FirstName).patch(attrLastName, &a.LastName, set.LastName).
				patch(attrRole, &a.Role, set.Role).patch(attrStatus, &a.Status, set.Status)
			a.Version++
			a.UpdatedAt = now
			return s.accountUpdate(a, read, expected, u), accountResponse(http.StatusOK, a), nil
		},
	})
}

// deleteAccount serves DELETE …/accounts/{account}, If-Match optional: the
// profile, every email item and every owner item in one transaction, on
// condition that the account is at the version read (so no address was
// added meanwhile). It frees the account's addresses.
func (s *Server) deleteAccount(w http.ResponseWriter, r *http.Request) {
	tenant, id, p := accountPath(r)
	expected, key, ok := s.deleteRequest(w, r, p)
	if !ok {
		return
	}
	s.mutateAccount(w, r, accountMutation{tenant: tenant, id: id, key: key, expected: expected, deletedOK: true,
		edit: func(a *Account, _ int64, _ string) (*change, response, *Problem) {
			return s.accountDelete(a, expected), response{status: http.StatusNoContent}, nil
		},
	})
}

// addEmail serves POST …/accounts/{account}/emails, If-Match optional: the
// address's email item and owner item, put only where nothing is, and the
// profile's version, in one transaction (emailAdd). A taken address is 409
// email-taken and changes nothing.
func (s *Server) addEmail(w http.ResponseWriter, r *http.Request) {
	tenant, id, p := accountPath(r)
	var expected int64 // 0 for "*": any version
	if p == nil {
		expected, _, _, p = parseIfMatch(r)
	}
	key, body, ok := s.mutationRequest(w, r, p, "")
	if !ok {
		return
	}
	address, verified, p := parseEmailAdd(r, body)
	if p != nil {
		p.write(w)
		return
	}
	s.mutateAccount(w, r, accountMutation{tenant: tenant, id: id, key: key, body: body, expected: expected,
		edit: func(a *Account, read int64, now string) (*change, response, *Problem) {
			e, p := a.addEmail(address, verified, now)
			if p != nil {
				return nil, response{}, p
			}
			resp := accountResponse(http.StatusCreated, a)
			resp.location = accountLocation(tenant, id) + "/emails/" + url.PathEscape(address)
			return s.emailAdd(a, read, expected, e), resp, nil
		},
	})
}

// parseEmailAdd reads the body of an address to add: the address and
// whether it is verified, which the token must prove.
func parseEmailAdd(r *http.Request, body []byte) (address string, verified bool, p *Problem) {
	m, p := decodeObject(body, emailAddFields)
	if p == nil {
		p = required(m, "address")
	}
	if p == nil {
		address, p = parseEmail("address", m["address"])
	}
	if raw, ok := m["verified"]; p == nil && ok && !isNull(raw) {
		verified, p = parseBool("verified", raw)
	}
	if p == nil && verified && !claimsOf(r).ProvesEmail(address) {
		p = emailNotProven("verified", address)
	}
	return address, verified, p
}

// addEmail adds address to a at now, verified or not: 409 when a already
// has it or has as many addresses as allowed. It returns the address
// added; a is as it will be.
func (a *Account) addEmail(address string, verified bool, now string) (AccountEmail, *Problem) {
	if a.email(address) != nil {
		p := problem(http.StatusConflict, ProblemEmailTaken, "the email address "+address+" is already an address of this account")
		p.Field = "address"
		return AccountEmail{}, p
	}
	if len(a.Emails) >= aggregates.MaxEmailsPerAccount {
		return AccountEmail{}, problem(http.StatusConflict, ProblemTooManyEmails,
			fmt.Sprintf("the account has %d addresses, the most allowed; remove one first", len(a.Emails)))
	}
	e := AccountEmail{Address: address, Verified: verified, AddedAt: now}
	if verified {
		e.VerifiedAt = now
	}
	a.Emails = append(a.Emails, e)
	sortEmails(a.Emails)
	a.Version++
	a.UpdatedAt = now
	return e, nil
}

// patchEmail serves PATCH …/accounts/{account}/emails/{email}: {"verified":
// true} marks the address verified, {"primary": true} makes it the primary
// (editEmail), in one transaction on condition that the account is at the
// If-Match version (emailUpdate). Neither can be set false: another address
// is made primary instead, an unwanted one removed.
func (s *Server) patchEmail(w http.ResponseWriter, r *http.Request) {
	tenant, id, address, p := emailPath(r)
	expected, key, body, ok := s.patchRequest(w, r, p, changeIfMatch)
	if !ok {
		return
	}
	verify, primary, p := parseEmailPatch(r, body, address)
	if p != nil {
		p.write(w)
		return
	}
	s.mutateAccount(w, r, accountMutation{tenant: tenant, id: id, key: key, body: body, expected: expected,
		edit: func(a *Account, read int64, now string) (*change, response, *Problem) {
			edit, changed, p := a.editEmail(address, verify, primary, now)
			switch {
			case p != nil:
				return nil, response{}, p
			case !changed:
				return nil, accountResponse(http.StatusOK, a), nil // already so
			}
			return s.emailUpdate(a, read, expected, edit), accountResponse(http.StatusOK, a), nil
		},
	})
}

// parseEmailPatch reads the body of a PATCH of one address: verify and
// primary, each only true, at least one; verifying needs a token that
// proves the address.
func parseEmailPatch(r *http.Request, body []byte, address string) (verify, primary bool, p *Problem) {
	m, p := decodeObject(body, emailPatchFields)
	if p == nil && len(m) == 0 {
		p = problem(http.StatusBadRequest, ProblemInvalidJSON, "the patch changes nothing: give \"primary\": true or \"verified\": true")
	}
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
	return verify, primary, p
}

// editEmail applies the rule of seed 004 to a PATCH of address that
// verifies it (verify) and/or makes it the primary (primary), at now: only
// a verified address (or one this edit verifies) can be primary, and there
// is exactly one primary. It is 404 when a has no such address, 409 when
// the address would become primary unverified; changed is false when it is
// already so. On a change, a is as it will be.
func (a *Account) editEmail(address string, verify, primary bool, now string) (edit emailEdit, changed bool, p *Problem) {
	e := a.email(address)
	if e == nil {
		return emailEdit{}, false, noSuchEmail()
	}
	edit = emailEdit{address: address, verifying: verify && !e.Verified, promoting: primary && !e.Primary}
	if edit.promoting && !e.Verified && !edit.verifying {
		return emailEdit{}, false, emailNotVerified(address)
	}
	if !edit.verifying && !edit.promoting {
		return edit, false, nil
	}
	a.Version++
	a.UpdatedAt = now
	if edit.verifying {
		e.Verified, e.VerifiedAt = true, now
	}
	if edit.promoting {
		edit.oldPrimary = a.Email
		if old := a.email(edit.oldPrimary); old != nil {
			old.Primary = false
		}
		e.Primary = true
		a.Email = address
	}
	return edit, true, nil
}

// removeEmail serves DELETE …/accounts/{account}/emails/{email}, If-Match
// optional: the email item (on condition that it is not the primary) and
// its owner item deleted, freeing the address, and the profile's version
// incremented, in one transaction (emailRemove). The primary cannot be
// removed (409 primary-email): make another address primary first.
func (s *Server) removeEmail(w http.ResponseWriter, r *http.Request) {
	tenant, id, address, p := emailPath(r)
	expected, key, ok := s.deleteRequest(w, r, p)
	if !ok {
		return
	}
	s.mutateAccount(w, r, accountMutation{tenant: tenant, id: id, key: key, expected: expected,
		edit: func(a *Account, read int64, now string) (*change, response, *Problem) {
			e, p := a.removeEmail(address, now)
			if p != nil {
				return nil, response{}, p
			}
			return s.emailRemove(a, read, expected, e), accountResponse(http.StatusOK, a), nil
		},
	})
}

// removeEmail removes address from a at now: 404 when a has no such
// address, 409 when it is the primary. It returns the address removed; a
// is as it will be.
func (a *Account) removeEmail(address, now string) (AccountEmail, *Problem) {
	e := a.email(address)
	switch {
	case e == nil:
		return AccountEmail{}, noSuchEmail()
	case e.Primary:
		return AccountEmail{}, emailIsPrimary(address)
	}
	removed := *e
	kept := a.Emails[:0:0]
	for _, x := range a.Emails {
		if x.Address != address {
			kept = append(kept, x)
		}
	}
	a.Emails = kept
	a.Version++
	a.UpdatedAt = now
	return removed, nil
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
