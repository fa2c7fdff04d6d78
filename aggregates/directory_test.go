package aggregates

import (
	"strings"
	"testing"
)

func TestNormalizeEmail_TrimsAndLowerCasesOnly(t *testing.T) {
	for in, want := range map[string]string{
		"  Ana.Silva+ledger@Example.COM \t": "ana.silva+ledger@example.com",
		"ÉLODIE@exemple.fr":                 "élodie@exemple.fr",
		"a.b@x.io":                          "a.b@x.io",
	} {
		if got := NormalizeEmail(in); got != want {
			t.Errorf("NormalizeEmail(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestValidateEmail(t *testing.T) {
	ok := []string{"a@b.co", "ana.silva+ledger@example.com", "x_y-z@sub.example.co.uk", "élodie@exemple.fr", "o'brien@x.ie",
		"1@2.3", strings.Repeat("l", 64) + "@example.com", "user@xn--bcher-kva.example", "用户@例子.广告"}
	for _, s := range ok {
		if err := ValidateEmail(s); err != nil {
			t.Errorf("ValidateEmail(%q) = %v; want nil", s, err)
		}
	}
	bad := []string{"", "plain", "@example.com", "a@", "a@localhost", "a@b..c", "a@-b.com", "a@b-.com", ".a@b.com", "a.@b.com",
		"a..b@c.com", "a b@c.com", "a#b@c.com", `"q"@c.com`, "a@[1.2.3.4]", "a@b.com\n", "a\x00@b.com", "a@b_c.com",
		strings.Repeat("l", 65) + "@example.com", "a@" + strings.Repeat("d", 64) + ".com", "a@" + strings.Repeat("d.", 130) + "com", "\xff@b.com"}
	for _, s := range bad {
		if err := ValidateEmail(s); err == nil {
			t.Errorf("ValidateEmail(%q) = nil; want an error", s)
		}
	}
}

func TestNormalizeDocument_DropsSeparatorsAndUpperCases(t *testing.T) {
	for in, want := range map[string]string{
		"12.345.678/0001-90": "12345678000190",
		" 12345678000190 ":   "12345678000190",
		"ab-12 c":            "AB12C",
	} {
		got := NormalizeDocument(in)
		if got != want {
			t.Errorf("NormalizeDocument(%q) = %q; want %q", in, got, want)
		}
		if err := ValidateDocument(got); err != nil {
			t.Errorf("ValidateDocument(%q) = %v; want nil", got, err)
		}
	}
	for _, in := range []string{"", " - . /", "12#34", "12_34", "ção1", strings.Repeat("9", MaxDocumentLength+1)} {
		if err := ValidateDocument(NormalizeDocument(in)); err == nil {
			t.Errorf("ValidateDocument(NormalizeDocument(%q)) = nil; want an error", in)
		}
	}
}

func TestValidateDisplayName_AllowsHashButNotControls(t *testing.T) {
	for _, s := range []string{"Store #12", "Acme Ltda.", "São Paulo – Centro", "x", strings.Repeat("é", MaxDisplayNameLength)} {
		if err := ValidateDisplayName(s); err != nil {
			t.Errorf("ValidateDisplayName(%q) = %v; want nil", s, err)
		}
	}
	for _, s := range []string{"", " lead", "trail ", "tab\t", "nl\n", "zw\u200b", "\xff", strings.Repeat("é", MaxDisplayNameLength+1)} {
		if err := ValidateDisplayName(s); err == nil {
			t.Errorf("ValidateDisplayName(%q) = nil; want an error", s)
		}
	}
}

func TestValidateStatusesAndRoles(t *testing.T) {
	for _, c := range []struct {
		f    func(string) error
		ok   []string
		fail []string
	}{
		{ValidateTenantStatus, []string{"active", "suspended"}, []string{"", "deleted", "Active", "x"}},
		{ValidateAccountStatus, []string{"active", "suspended", "deleted"}, []string{"", "ACTIVE", "gone"}},
		{ValidateRole, []string{"owner", "admin", "member", "viewer"}, []string{"", "root", "Admin"}},
	} {
		for _, s := range c.ok {
			if err := c.f(s); err != nil {
				t.Errorf("%q: %v; want nil", s, err)
			}
		}
		for _, s := range c.fail {
			if err := c.f(s); err == nil {
				t.Errorf("%q: nil; want an error", s)
			}
		}
	}
}

func TestAccountKeys_AnAccountsRangeHoldsItsItemsAndNoOneElses(t *testing.T) {
	lo, hi := AccountItemsRange("A1")
	in := []string{AccountKey("t", "A1").SK, AccountEmailKey("t", "A1", "a@b.co").SK, AccountEmailKey("t", "A1", "~@~.~").SK}
	out := []string{"A", "A0", "A10", "A1-x", "A1.x", "A1_x", "A2", AccountEmailKey("t", "A10", "a@b.co").SK}
	for _, sk := range in {
		if sk < lo || sk > hi {
			t.Errorf("%q outside [%q, %q]; want inside", sk, lo, hi)
		}
	}
	for _, sk := range out {
		if sk >= lo && sk <= hi {
			t.Errorf("%q inside [%q, %q]; want outside", sk, lo, hi)
		}
	}
	acc, email := ParseAccountSK(AccountEmailKey("t", "A1", "x@y.z").SK)
	if acc != "A1" || email != "x@y.z" {
		t.Errorf("ParseAccountSK = %q, %q; want A1, x@y.z", acc, email)
	}
	if acc, email := ParseAccountSK("A1"); acc != "A1" || email != "" {
		t.Errorf("ParseAccountSK(profile) = %q, %q; want A1, \"\"", acc, email)
	}
}
