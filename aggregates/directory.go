package aggregates

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/text/secure/precis"
	"golang.org/x/text/unicode/norm"
	"golang.org/x/text/width"
)

// The directory around the transactions: tenants, their branches and their
// accounts (users), with the rules a value must follow before it is stored.
// Keys are in keys.go; the writer enforces uniqueness and the other
// integrity rules with conditional writes (writer/directory.go).

// Status is the state of a tenant, branch or account.
type Status string

// Statuses. Tenants and branches are active or suspended; accounts may also
// be deleted (kept, with their email addresses reserved, until removed).
const (
	StatusActive    Status = "active"
	StatusSuspended Status = "suspended"
	StatusDeleted   Status = "deleted"
)

// ValidateTenantStatus reports whether s is a status a tenant or a branch
// can have: active or suspended.
func ValidateTenantStatus(s string) error {
	switch Status(s) {
	case StatusActive, StatusSuspended:
		return nil
	}
	return fmt.Errorf("%q: want active or suspended", truncateRunes(s, 32))
}

// Who suspended a branch or an account: the platform (an admin-scoped token) or the
// tenant itself. A suspension is lifted only by whoever may make it: the
// tenant lifts its own, only an admin lifts an admin's (SuspensionLiftable).
const (
	SuspendedByAdmin  = "admin"
	SuspendedByTenant = "tenant"
)

// SuspensionBy returns who holds a suspension after a status change to
// status ("" for none) by admin or not, of an item whose status is current
// and which was suspended by by ("" when active; a suspension stored
// without it, made before it was recorded, counts as an admin's). It fails
// when the change would lift, or take over, an admin's suspension with a
// tenant's token. A tenant suspending an admin-suspended branch again
// leaves the suspension the admin's; an admin suspending a
// tenant-suspended one makes it the admin's.
func SuspensionBy(current Status, by string, status Status, admin bool) (string, error) {
	if current == StatusSuspended && by == "" {
		by = SuspendedByAdmin
	}
	if current != StatusSuspended {
		by = ""
	}
	switch {
	case status == "":
		return by, nil
	case status == StatusActive && by == SuspendedByAdmin && !admin:
		return "", errors.New("an admin suspended it: only an admin-scoped token can lift the suspension")
	case status != StatusSuspended: // active, or an account deleted
		return "", nil
	case admin:
		return SuspendedByAdmin, nil
	case by == SuspendedByAdmin:
		return by, nil
	}
	return SuspendedByTenant, nil
}

// ValidateAccountStatus reports whether s is an account status: active,
// suspended or deleted.
func ValidateAccountStatus(s string) error {
	switch Status(s) {
	case StatusActive, StatusSuspended, StatusDeleted:
		return nil
	}
	return fmt.Errorf("%q: want active, suspended or deleted", truncateRunes(s, 32))
}

// Roles an account can have within its tenant.
const (
	RoleOwner  = "owner"
	RoleAdmin  = "admin"
	RoleMember = "member"
	RoleViewer = "viewer"
)

// ValidateRole reports whether s is a role: owner, admin, member or viewer.
func ValidateRole(s string) error {
	switch s {
	case RoleOwner, RoleAdmin, RoleMember, RoleViewer:
		return nil
	}
	return fmt.Errorf("%q: want owner, admin, member or viewer", truncateRunes(s, 32))
}

// MaxDisplayNameLength bounds display names (tenant and branch names, first
// and last names), in characters.
const MaxDisplayNameLength = 100

// ValidateDisplayName reports whether s is a valid display name: valid
// UTF-8, 1 to MaxDisplayNameLength printable characters, no leading or
// trailing space. Unlike breakdown names (ValidateName) it may hold '#'
// ("Store #12"): display names never appear in keys.
func ValidateDisplayName(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > MaxDisplayNameLength {
		return fmt.Errorf("%d characters, more than %d", n, MaxDisplayNameLength)
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return errors.New("leading or trailing space")
	}
	for i, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("character %U at %d not allowed: not printable", r, i)
		}
	}
	return nil
}

// MaxEmailsPerAccount bounds the email addresses of one account, so that
// every account operation fits one TransactWriteItems (two items per
// address plus the profile and the idempotency record, far below 100).
const MaxEmailsPerAccount = 10

// MaxEmailLength bounds an email address (RFC 5321: 254 octets in a path).
const MaxEmailLength = 254

// NormalizeEmail returns the form under which an email address is stored,
// indexed and kept unique, or s trimmed when it has none; CanonicalEmail
// says why not.
func NormalizeEmail(s string) string {
	c, err := CanonicalEmail(s)
	if err != nil {
		return strings.TrimSpace(s)
	}
	return c
}

// emailLocalProfile canonicalises the part of an address before '@': the
// PRECIS IdentifierClass (RFC 8264: letters, digits and ASCII punctuation;
// spaces, symbols, controls and compatibility characters such as
// mathematical or circled letters are refused rather than guessed at) with
// width folding (full-width letters are their ASCII selves), full case
// folding (so final sigma is sigma, and ß is ss), NFC and the Bidi rule.
var emailLocalProfile = precis.NewIdentifier(precis.FoldWidth, precis.FoldCase(), precis.Norm(norm.NFC), precis.BidiRule, precis.DisallowEmpty)

// emailDomainProfile canonicalises the domain: UTS #46 mapping for lookup
// (what mail clients and resolvers do: full-width and upper-case letters,
// ideographic full stops mapped; nontransitional, so ß stays ß), label
// validation, the Bidi rule, letters, digits and hyphens only, and DNS
// lengths.
var emailDomainProfile = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.BidiRule(), idna.ValidateLabels(true),
	idna.StrictDomainName(true), idna.VerifyDNSLength(true))

// CanonicalEmail returns the one form under which an email address is
// stored, indexed and kept unique, so that every spelling of one mailbox
// has the same form: surrounding white space removed and full-width forms
// folded (bob＠ｅｘａｍｐｌｅ.com is bob@example.com); the local part through
// emailLocalProfile (NFC, so josé in NFC and NFD are one; case folded, so
// σ and ς are one); the domain through IDNA (UTS #46) to its ASCII form and
// back to Unicode (bücher.de and xn--bcher-kva.de are bücher.de). Nothing
// provider-specific is rewritten (no dot or plus-tag removal). It fails,
// saying why, when s has no canonical form (a character the profiles
// refuse, an invalid domain) or the result is not an address ValidateEmail
// accepts.
func CanonicalEmail(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", errors.New("not valid UTF-8")
	}
	if len(s) > 4*MaxEmailLength {
		return "", fmt.Errorf("%d bytes, more than %d", len(s), MaxEmailLength)
	}
	s = width.Fold.String(strings.TrimSpace(s))
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return "", errors.New("no '@'")
	}
	local, domain := s[:at], s[at+1:]
	if local == "" {
		return "", errors.New("the part before '@' must be 1 to 64 bytes")
	}
	for _, atom := range strings.Split(local, ".") {
		if atom == "" {
			return "", errors.New("the part before '@' has a leading, trailing or doubled '.'")
		}
	}
	l, err := emailLocalProfile.String(local)
	if err != nil {
		return "", fmt.Errorf("the part before '@' has no canonical form (%v): use letters, digits and !$%%&'*+-/=?^_`{|}~, not spaces, symbols or styled letters such as 𝐛 or ⓑ", err)
	}
	if domain == "" {
		return "", errors.New("the domain is empty")
	}
	ascii, err := emailDomainProfile.ToASCII(domain)
	if err != nil {
		return "", fmt.Errorf("the domain is not a valid (internationalised) domain name: %v", err)
	}
	d, err := emailDomainProfile.ToUnicode(ascii)
	if err != nil {
		return "", fmt.Errorf("the domain is not a valid (internationalised) domain name: %v", err)
	}
	c := l + "@" + d
	if err := ValidateEmail(c); err != nil {
		return "", err
	}
	return c, nil
}

// EmailClaimProves reports whether an identity provider's email claim
// proves address, a canonical address (CanonicalEmail): whether the claim
// spells the stored form itself, not merely another spelling that
// CanonicalEmail folds into the same key. The claim is trimmed; its domain
// is compared in its canonical IDNA form (Example.COM and
// xn--bcher-kva.de prove example.com and bücher.de); its local part after
// Unicode simple lower-casing, character by character, and NFC (so JOSÉ
// and jose + U+0301 prove josé) — and nothing else: no full case folding
// (ß does not prove ss, ς does not prove σ), no width folding (full-width
// ｂ does not prove b), and a character that NFC would replace by another
// (a singleton: the Kelvin sign K, the Ohm sign Ω, the Ångström sign Å, CJK
// compatibility ideographs) proves nothing, so the Kelvin sign does not
// prove k. A mailbox whose stored form its claim does not spell (straße,
// stored as strasse) is verified with an admin-scoped token. folded
// reports that the claim is address under CanonicalEmail nonetheless, so
// that a refusal can say why.
func EmailClaimProves(claim, address string) (proves, folded bool) {
	claim = strings.TrimSpace(claim)
	c, err := CanonicalEmail(claim)
	if err != nil || c != address {
		return false, false
	}
	at, cat := strings.LastIndexByte(claim, '@'), strings.LastIndexByte(c, '@')
	if at < 0 || cat < 0 {
		return false, true
	}
	local := claim[:at]
	for _, r := range local {
		if s := string(r); norm.NFC.String(s) != s {
			return false, true // a singleton: a look-alike of the character NFC makes of it
		}
	}
	if norm.NFC.String(strings.Map(unicode.ToLower, local)) != c[:cat] {
		return false, true
	}
	return true, false // the domain: c's is the claim's, canonical
}

// compatibleScripts are scripts written together (UTS #39's "highly
// restrictive" sets: Japanese, Korean and Chinese with Bopomofo, each with
// Latin): letters of these do not make a label mixed with each other.
var compatibleScripts = map[string]bool{"Han": true, "Hiragana": true, "Katakana": true, "Hangul": true, "Bopomofo": true}

// EmailMixedScripts reports look-alike risk in an address: the scripts of
// the local part or of a domain label that mixes letters of more than one
// script (a Cyrillic а among Latin letters: pаypal), sorted, or nil. Common
// and Inherited characters (digits, punctuation, combining marks) belong to
// every script; Latin with Han, Hiragana, Katakana, Hangul and Bopomofo
// (compatibleScripts) is not mixed, as UTS #39 has it. It is a small check,
// not UTS #39's confusable detection: a label wholly in one look-alike
// script (all Cyrillic раураl) is not reported.
func EmailMixedScripts(address string) []string {
	at := strings.LastIndexByte(address, '@')
	if at < 0 {
		return nil
	}
	parts := append([]string{address[:at]}, strings.Split(address[at+1:], ".")...)
	found := map[string]bool{}
	for _, part := range parts {
		seen := map[string]bool{}
		for _, r := range part {
			if !unicode.IsLetter(r) {
				continue
			}
			if s := scriptOf(r); s != "" {
				seen[s] = true
			}
		}
		mixed := len(seen) > 1
		if slices.ContainsFunc(slices.Collect(maps.Keys(seen)), func(s string) bool { return compatibleScripts[s] }) {
			// Latin and the CJK scripts count as one.
			mixed = slices.ContainsFunc(slices.Collect(maps.Keys(seen)), func(s string) bool { return s != "Latin" && !compatibleScripts[s] })
		}
		if mixed {
			for s := range seen {
				found[s] = true
			}
		}
	}
	if len(found) == 0 {
		return nil
	}
	out := make([]string, 0, len(found))
	for s := range found {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// scriptOf is the Unicode script of a letter, "" for Common and Inherited.
func scriptOf(r rune) string {
	if r < utf8.RuneSelf {
		return "Latin"
	}
	for name, table := range unicode.Scripts {
		if name != "Common" && name != "Inherited" && unicode.Is(table, r) {
			return name
		}
	}
	return ""
}

// ValidateEmail reports whether s, already normalised, is an address the
// directory accepts: local@domain, at most MaxEmailLength bytes; the local
// part 1 to 64 bytes of letters, digits and !$%&'*+-/=?^_`{|}~ with single
// dots between them (RFC 5322 dot-atom, non-ASCII letters allowed as RFC
// 6531 does, '#' refused: it is the key delimiter); the domain two or more
// dot-separated labels of letters, digits and inner hyphens. Quoted local
// parts, comments and address literals are refused.
func ValidateEmail(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	if len(s) > MaxEmailLength {
		return fmt.Errorf("%d bytes, more than %d", len(s), MaxEmailLength)
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return errors.New("no '@'")
	}
	local, domain := s[:at], s[at+1:]
	if local == "" || len(local) > 64 {
		return errors.New("the part before '@' must be 1 to 64 bytes")
	}
	for _, atom := range strings.Split(local, ".") {
		if atom == "" {
			return errors.New("the part before '@' has a leading, trailing or doubled '.'")
		}
		for _, r := range atom {
			switch {
			case r == '#':
				return errors.New("character '#' not allowed: it is the key delimiter")
			case r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!$%&'*+-/=?^_`{|}~", r)):
			case r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)):
			default:
				return fmt.Errorf("character %q not allowed before '@'", r)
			}
		}
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return errors.New("the domain needs at least one '.' (example.com)")
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return errors.New("the domain has an empty or over-long label")
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("domain label %q starts or ends with '-'", l)
		}
		for _, r := range l {
			if !(r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
				r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r))) {
				return fmt.Errorf("character %q not allowed in the domain", r)
			}
		}
	}
	return nil
}

// MaxDocumentLength bounds a normalised branch document number.
const MaxDocumentLength = 32

// NormalizeDocument returns the form under which a branch's document number
// (a company registration number such as a CNPJ, "12.345.678/0001-90") is
// stored, indexed and kept unique: the separators ' ', '.', '-' and '/'
// removed, full-width forms folded and letters upper-cased, so that "12.345.678/0001-90" and
// "12345678000190" are the same document. ValidateDocument checks the
// result.
func NormalizeDocument(s string) string {
	return strings.ToUpper(strings.Map(func(r rune) rune {
		switch r {
		case ' ', '.', '-', '/':
			return -1
		}
		return r
	}, width.Fold.String(strings.TrimSpace(s))))
}

// CanonicalDocument returns the one form under which a document number is
// stored, indexed and kept unique (NormalizeDocument, which also folds
// full-width digits and separators to ASCII), or why it has none
// (ValidateDocument).
func CanonicalDocument(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", errors.New("not valid UTF-8")
	}
	if len(s) > 4*MaxDocumentLength {
		return "", fmt.Errorf("%d bytes, more than %d characters", len(s), MaxDocumentLength)
	}
	c := NormalizeDocument(s)
	if err := ValidateDocument(c); err != nil {
		return "", err
	}
	return c, nil
}

// ValidateDocument reports whether s, already normalised, is a document
// number: 1 to MaxDocumentLength ASCII letters and digits.
func ValidateDocument(s string) error {
	if s == "" {
		return errors.New("empty (after removing spaces, '.', '-' and '/')")
	}
	if len(s) > MaxDocumentLength {
		return fmt.Errorf("%d characters, more than %d", len(s), MaxDocumentLength)
	}
	for i, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Errorf("character %q at %d not allowed: use ASCII letters and digits (and the separators ' ', '.', '-', '/')", r, i)
		}
	}
	return nil
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
