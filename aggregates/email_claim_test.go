package aggregates_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ledger-dev/ledger/aggregates"
)

func TestEmailClaimProves_OnlyTheStoredFormsOwnSpelling(t *testing.T) {
	for _, c := range []struct {
		claim, address string
		proves, folded bool
	}{
		{"bob@example.com", "bob@example.com", true, false},
		{" Bob@Example.COM ", "bob@example.com", true, false},
		{"josé@xn--bcher-kva.de", "josé@bücher.de", true, false},
		{"JOSE\u0301@bücher.de", "josé@bücher.de", true, false}, // NFD, upper case
		{"JOSÉ@bücher.de", "josé@bücher.de", true, false},
		{"straße@example.de", "strasse@example.de", false, true},     // full case folding
		{"\u212aate@example.com", "kate@example.com", false, true},   // the Kelvin sign
		{"\u2126mega@example.com", "ωmega@example.com", false, true}, // the Ohm sign
		{"\u03c2@example.gr", "\u03c3@example.gr", false, true},      // final sigma
		{"\uff42ob@example.com", "bob@example.com", false, true},     // full width
		{"alice@example.com", "bob@example.com", false, false},
		{"not an address", "bob@example.com", false, false},
	} {
		proves, folded := aggregates.EmailClaimProves(c.claim, c.address)
		assert.Equal(t, c.proves, proves, "%q proves %q", c.claim, c.address)
		assert.Equal(t, c.folded, folded, "%q folds to %q", c.claim, c.address)
	}
}

func TestEmailMixedScripts_ReportsALabelMixingScripts(t *testing.T) {
	for _, c := range []struct {
		address string
		want    []string
	}{
		{"paypal@example.com", nil},
		{"p\u0430ypal@example.com", []string{"Cyrillic", "Latin"}}, // Cyrillic а in the local part
		{"bob@p\u0430ypal.com", []string{"Cyrillic", "Latin"}},     // in a domain label
		{"abc\u03c3@example.com", []string{"Greek", "Latin"}},
		{"\u03c3\u03c4@example.gr", nil}, // Greek local part, Latin domain: each part one script
		{"山田taro@例え.jp", nil},            // Han, Hiragana and Latin are written together
		{"\u0440\u0430\u0443\u0440\u0430l@example.com", []string{"Cyrillic", "Latin"}},
		{"\u0440\u0430\u0443\u0440\u0430@example.com", nil}, // wholly Cyrillic: not this check's to find
	} {
		assert.Equal(t, c.want, aggregates.EmailMixedScripts(c.address), "%q", c.address)
	}
}
