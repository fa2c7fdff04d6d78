package writer

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/ledger-dev/ledger/aggregates"
)

// An account's email addresses: the rules (at most MaxEmailsPerAccount,
// exactly one primary, the primary verified; see the top of accounts.go)
// as methods of Account, and the handlers of …/accounts/{account}/emails,
// whose changes are in store_account.go.

// The members of the email objects of a create, an add and a patch.
var (
	emailCreateFields = map[string]bool{"address": true, "verified": true, "primary": true}
	emailAddFields    = map[string]bool{"address": true, "verified": true}
	emailPatchFields  = map[string]bool{"primary": true, "verified": true}
)

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

// emailProof is nil when the request's token proves address
// (Claims.ProvesEmail), else the 403 email-not-proven of field, saying
// when the claim is the address only under Unicode folding. An address
// proven whose local part or a domain label mixes scripts
// (aggregates.EmailMixedScripts: a Cyrillic а among Latin letters, a
// look-alike of another address) is accepted, as the identity provider or
// the admin verified that very mailbox, and logged as a warning with the
// tenant and the scripts (not the address) for an operator to review.
func (s *Server) emailProof(r *http.Request, field, address string) *Problem {
	c := claimsOf(r)
	proves, folded := c.ProvesEmail(address)
	if !proves {
		return emailNotProven(field, address, folded)
	}
	if scripts := aggregates.EmailMixedScripts(address); scripts != nil {
		s.cfg.Logger.Warn("verified email address mixes scripts (a possible look-alike of another address)",
			"tenant", r.PathValue("tenant"), "subject", c.Subject, "admin", c.Admin(), "field", field, "scripts", scripts)
	}
	return nil
}

// sortEmails sorts emails by address, the order of their keys.
func sortEmails(emails []AccountEmail) {
	slices.SortFunc(emails, func(a, b AccountEmail) int { return strings.Compare(a.Address, b.Address) })
}

// addEmail serves POST …/accounts/{account}/emails, If-Match optional: the
// address's email item and owner item, put only where nothing is, and the
// profile's version, in one transaction (emailAdd). A taken address is 409
// email-taken and changes nothing.
func (s *Server) addEmail(w http.ResponseWriter, r *http.Request) {
	tenant, id, p := accountPath(r)
	var ifm ifMatch // optional
	if p == nil {
		ifm, p = parseIfMatch(r)
	}
	key, body, ok := s.mutationRequest(w, r, p, "")
	if !ok {
		return
	}
	address, verified, p := s.parseEmailAdd(r, body)
	if p != nil {
		p.write(w)
		return
	}
	s.mutateAccount(w, r, accountMutation{tenant: tenant, id: id, key: key, body: body, ifMatch: ifm,
		edit: func(a *Account, read, expected int64, now string) (*change, response, *Problem) {
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
func (s *Server) parseEmailAdd(r *http.Request, body []byte) (address string, verified bool, p *Problem) {
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
	if p == nil && verified {
		p = s.emailProof(r, "verified", address)
	}
	return address, verified, p
}

// patchEmail serves PATCH …/accounts/{account}/emails/{email}: {"verified":
// true} marks the address verified, {"primary": true} makes it the primary
// (editEmail), in one transaction on condition that the account is at the
// If-Match version (emailUpdate). Neither can be set false: another address
// is made primary instead, an unwanted one removed.
func (s *Server) patchEmail(w http.ResponseWriter, r *http.Request) {
	tenant, id, address, p := emailPath(r)
	ifm, key, body, ok := s.patchRequest(w, r, p, changeIfMatch)
	if !ok {
		return
	}
	verify, primary, p := s.parseEmailPatch(r, body, address)
	if p != nil {
		p.write(w)
		return
	}
	s.mutateAccount(w, r, accountMutation{tenant: tenant, id: id, key: key, body: body, ifMatch: ifm,
		edit: func(a *Account, read, expected int64, now string) (*change, response, *Problem) {
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
func (s *Server) parseEmailPatch(r *http.Request, body []byte, address string) (verify, primary bool, p *Problem) {
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
		if p == nil {
			p = s.emailProof(r, "verified", address)
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

// getEmail serves GET …/accounts/{account}/emails/{email}: the address as
// the account holds it (the Location of its add), with the account's
// version as the ETag; 404 when the account does not hold it.
func (s *Server) getEmail(w http.ResponseWriter, r *http.Request) {
	tenant, id, address, p := emailPath(r)
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
	e := a.email(address)
	if e == nil {
		noSuchEmail().write(w)
		return
	}
	versionedResponse(http.StatusOK, e, a.Version).write(w, false)
}

// removeEmail serves DELETE …/accounts/{account}/emails/{email}, If-Match
// optional, answering 204 like every delete: the email item (on condition that it is not the primary) and
// its owner item deleted, freeing the address, and the profile's version
// incremented, in one transaction (emailRemove). The primary cannot be
// removed (409 primary-email): make another address primary first.
func (s *Server) removeEmail(w http.ResponseWriter, r *http.Request) {
	tenant, id, address, p := emailPath(r)
	ifm, key, ok := s.deleteRequest(w, r, p)
	if !ok {
		return
	}
	s.mutateAccount(w, r, accountMutation{tenant: tenant, id: id, key: key, ifMatch: ifm,
		edit: func(a *Account, read, expected int64, now string) (*change, response, *Problem) {
			e, p := a.removeEmail(address, now)
			if p != nil {
				return nil, response{}, p
			}
			return s.emailRemove(a, read, expected, e), response{status: http.StatusNoContent}, nil
		},
	})
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
