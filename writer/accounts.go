package writer

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
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
// SuspendedBy says who suspended a suspended account, "admin" or "tenant"
// (absent otherwise): only an admin-scoped token lifts an admin's
// suspension, as for branches.
type Account struct {
	ID          string         `json:"id"`
	Tenant      string         `json:"tenant"`
	FirstName   string         `json:"firstName"`
	LastName    string         `json:"lastName"`
	Role        string         `json:"role"`
	Status      string         `json:"status"`
	SuspendedBy string         `json:"suspendedBy,omitempty"`
	Email       string         `json:"email"`
	Emails      []AccountEmail `json:"emails"`
	CreatedAt   string         `json:"createdAt"`
	UpdatedAt   string         `json:"updatedAt"`
	Version     int64          `json:"version"`
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
	ifMatch    ifMatch
	deletedOK  bool
	// edit makes the change of a, read at version read; expected is the
	// version If-Match named (0: any), for the 412 of a change that loses
	// a race.
	edit func(a *Account, read, expected int64, now string) (*change, response, *Problem)
}

// mutateAccount serves m: it reads the account (readForChange) and
// commits the change edit makes of it, under the Idempotency-Key.
func (s *Server) mutateAccount(w http.ResponseWriter, r *http.Request, m accountMutation) {
	s.mutate(w, r, s.directoryWrite(r, mutation{
		tenant: m.tenant, idemKey: m.key, fp: fingerprint(r, m.body), lookupFirst: true,
		prepare: func(ctx context.Context) (*change, response, *Problem, error) {
			a, p, err := s.readForChange(ctx, m.tenant, m.id, 0, true)
			if a == nil {
				return nil, response{}, p, err
			}
			expected, p := s.versionFor(m.ifMatch, a.Version)
			if p == nil && !m.deletedOK && a.Status == string(aggregates.StatusDeleted) {
				p = accountDeleted()
			}
			if p != nil {
				return nil, response{}, p, nil
			}
			ch, resp, p := m.edit(a, a.Version, expected, s.cfg.Now().UTC().Format(time.RFC3339Nano))
			return ch, resp, p, nil
		},
	}))
}

// accountResponse is the answer of a change to a: the account and its ETag.
func accountResponse(status int, a *Account) response {
	return versionedResponse(status, a, a.Version)
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
		if p == nil && e.Verified {
			p = s.emailProof(r, "emails["+strconv.Itoa(i)+"].verified", e.Address)
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
	a.SuspendedBy, _ = aggregates.SuspensionBy(aggregates.StatusActive, "", aggregates.Status(a.Status), claimsOf(r).Admin())
	s.mutate(w, r, s.directoryWrite(r, mutation{
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
	}))
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
// does not change. A status change records who made it (suspendedBy): a
// tenant's token lifting an admin's suspension is 403 suspended-by-admin.
func (s *Server) patchAccount(w http.ResponseWriter, r *http.Request) {
	tenant, id, p := accountPath(r)
	ifm, key, body, ok := s.patchRequest(w, r, p, changeIfMatch)
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
	s.mutateAccount(w, r, accountMutation{tenant: tenant, id: id, key: key, body: body, ifMatch: ifm,
		edit: func(a *Account, read, expected int64, now string) (*change, response, *Problem) {
			by, err := aggregates.SuspensionBy(aggregates.Status(a.Status), a.SuspendedBy, aggregates.Status(set.Status), claimsOf(r).Admin())
			if err != nil {
				return nil, response{}, suspendedByAdmin("account "+a.ID, err)
			}
			u := newUpdate().patch(attrFirstName, &a.FirstName, set.FirstName).patch(attrLastName, &a.LastName, set.LastName).
				patch(attrRole, &a.Role, set.Role).patch(attrStatus, &a.Status, set.Status)
			if set.Status != "" {
				if a.SuspendedBy = by; by != "" {
					u.set(attrSuspendedBy, strAV(by))
				} else {
					u.remove(attrSuspendedBy)
				}
			}
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
	ifm, key, ok := s.deleteRequest(w, r, p)
	if !ok {
		return
	}
	s.mutateAccount(w, r, accountMutation{tenant: tenant, id: id, key: key, ifMatch: ifm, deletedOK: true,
		edit: func(a *Account, _, expected int64, _ string) (*change, response, *Problem) {
			return s.accountDelete(a, expected), response{status: http.StatusNoContent}, nil
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
