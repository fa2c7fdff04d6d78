package aggregates

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func TestCanonicalEmail_OneFormPerMailbox(t *testing.T) {
	for _, spellings := range [][]string{
		{"josé@example.com", "jose\u0301@example.com", "JOSÉ@Example.COM", "  josé@example.com\t"},
		// The domain is mapped as UTS #46 maps it for lookup, as resolvers
		// do: styled letters and ignorable characters included.
		{"bob@example.com", "bob@ｅｘａｍｐｌｅ.com", "ｂｏｂ＠ｅｘａｍｐｌｅ．ｃｏｍ", "BOB@EXAMPLE.COM", "bob@example。com", "bob@𝐞𝐱𝐚𝐦𝐩𝐥𝐞.com", "bob@exa\u00admple.com"},
		{"carol@bücher.de", "carol@xn--bcher-kva.de", "carol@BÜCHER.de", "carol@XN--BCHER-KVA.DE"},
		{"σ@example.gr", "ς@example.gr", "Σ@example.gr"},
		{"strasse@example.de", "straße@example.de"},
		{"用户@例子.广告", "用户@例子。广告"},
	} {
		want, err := CanonicalEmail(spellings[0])
		if err != nil {
			t.Fatalf("CanonicalEmail(%q): %v", spellings[0], err)
		}
		for _, s := range spellings[1:] {
			got, err := CanonicalEmail(s)
			if err != nil || got != want {
				t.Errorf("CanonicalEmail(%q) = %q, %v; want %q (as %q)", s, got, err, want, spellings[0])
			}
		}
	}
	for in, want := range map[string]string{
		"  Ana.Silva+ledger@Example.COM \t": "ana.silva+ledger@example.com",
		"ÉLODIE@exemple.fr":                 "élodie@exemple.fr",
		"carol@xn--bcher-kva.de":            "carol@bücher.de",
		"bob@ｅｘａｍｐｌｅ.com":                   "bob@example.com",
	} {
		if got, err := CanonicalEmail(in); err != nil || got != want {
			t.Errorf("CanonicalEmail(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestCanonicalEmail_RefusesWhatHasNoCanonicalForm(t *testing.T) {
	for _, s := range []string{
		"𝐛𝐨𝐛@example.com",       // mathematical bold
		"ⓑⓞⓑ@example.com",       // circled
		"b\u200bob@example.com", // zero-width space
		"bob@xn--zz.com",        // an invalid A-label
		"bob@ex_ample.com",      // not LDH
		"bob@example.com.",      // trailing root dot
		"a b@example.com", "", "@example.com", "bob@", "bob", "\xff@example.com", "a#b@example.com",
		"bob@-example.com", "bob@localhost",
	} {
		if got, err := CanonicalEmail(s); err == nil {
			t.Errorf("CanonicalEmail(%q) = %q; want an error", s, got)
		}
	}
}

func TestCanonicalDocument(t *testing.T) {
	for in, want := range map[string]string{
		"12.345.678/0001-90": "12345678000190",
		"１２．３４５．６７８／０００１－９０": "12345678000190",
		" ab-12 c": "AB12C",
		"ＡＢ１２":     "AB12",
	} {
		if got, err := CanonicalDocument(in); err != nil || got != want {
			t.Errorf("CanonicalDocument(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", " - . /", "12#34", "12_34", "ção1", "١٢٣", strings.Repeat("9", MaxDocumentLength+1), "\xff"} {
		if got, err := CanonicalDocument(in); err == nil {
			t.Errorf("CanonicalDocument(%q) = %q; want an error", in, got)
		}
	}
}

// FuzzCanonicalEmail: a canonical form is a valid address, in NFC, without
// ASCII upper case, and its own canonical form; a spelling with its domain
// upper-cased or full-width has the same one.
func FuzzCanonicalEmail(f *testing.F) {
	for _, s := range []string{"josé@example.com", "jose\u0301@example.com", "bob@ｅｘａｍｐｌｅ.com", "carol@xn--bcher-kva.de",
		"ς@example.gr", "𝐛𝐨𝐛@example.com", "a.b+c@sub.example.co.uk", "用户@例子.广告", "x@y", "@", "a@b@c.com", "ß@straße.de"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := CanonicalEmail(s)
		if err != nil {
			return
		}
		if err := ValidateEmail(c); err != nil {
			t.Fatalf("CanonicalEmail(%q) = %q, which ValidateEmail refuses: %v", s, c, err)
		}
		if !utf8.ValidString(c) || !norm.NFC.IsNormalString(c) || strings.ToLower(c) != c && strings.ContainsAny(c, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			t.Fatalf("CanonicalEmail(%q) = %q: not NFC or has upper case", s, c)
		}
		again, err := CanonicalEmail(c)
		if err != nil || again != c {
			t.Fatalf("CanonicalEmail(%q) = %q, but CanonicalEmail(%q) = %q, %v", s, c, c, again, err)
		}
		at := strings.LastIndexByte(c, '@')
		if up, err := CanonicalEmail(c[:at] + "@" + strings.ToUpper(c[at+1:])); err == nil && up != c {
			t.Fatalf("domain upper-cased: CanonicalEmail(%q) = %q; want %q", c[:at]+"@"+strings.ToUpper(c[at+1:]), up, c)
		}
	})
}

// FuzzCanonicalDocument: a canonical document is valid, its own canonical
// form, and the same with separators added.
func FuzzCanonicalDocument(f *testing.F) {
	for _, s := range []string{"12.345.678/0001-90", "１２３", "ab-12 c", "ı1", "ſ", "", "#", "12\u00a034"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := CanonicalDocument(s)
		if err != nil {
			return
		}
		if err := ValidateDocument(c); err != nil {
			t.Fatalf("CanonicalDocument(%q) = %q, which ValidateDocument refuses: %v", s, c, err)
		}
		if again, err := CanonicalDocument(c); err != nil || again != c {
			t.Fatalf("CanonicalDocument(%q) = %q, but again %q, %v", s, c, again, err)
		}
		if sep, err := CanonicalDocument(" " + c[:len(c)/2] + ".-/" + strings.ToLower(c[len(c)/2:])); err != nil || sep != c {
			t.Fatalf("with separators: %q, %v; want %q", sep, err, c)
		}
	})
}
