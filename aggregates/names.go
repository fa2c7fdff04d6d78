package aggregates

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// The character rules for what goes into keys and breakdown maps. Keys are
// built by concatenation with '#' as the delimiter (keys.go), so a value
// holding '#' could forge another entity's key: TENANT#a#BRANCH#b is both
// tenant "a", branch "b" and tenant "a#BRANCH#b" with no branch. The writer
// refuses such values at its edge with these checks; the stream consumers
// still aggregate whatever lands in the table.

// MaxIDLength bounds tenant, branch and transaction ids.
const MaxIDLength = 64

// MaxNameLength bounds breakdown names (category, cost centre, payment
// method), in characters.
const MaxNameLength = 64

// ValidateID reports whether s is a valid tenant, branch or transaction id:
// 1 to MaxIDLength ASCII letters, digits, '-', '_' or '.', starting with a
// letter or digit. Nothing else (no '#', no '/', no spaces, no non-ASCII)
// can appear in an id, so ids can never break the key grammar, a URL path
// segment or a log line.
func ValidateID(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	if len(s) > MaxIDLength {
		return fmt.Errorf("longer than %d characters", MaxIDLength)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '-' || c == '_' || c == '.') && i > 0:
		default:
			return fmt.Errorf("character %q at %d not allowed: use letters, digits, '-', '_' or '.', starting with a letter or digit", rune(c), i)
		}
	}
	return nil
}

// ValidateName reports whether s is a valid breakdown name (category, cost
// centre or payment method): valid UTF-8, 1 to MaxNameLength characters,
// each a printable character (letters, marks, digits, punctuation, symbols
// and the ASCII space) other than '#', with no leading or trailing space.
// Control and invisible formatting characters (zero-width, bidirectional
// overrides) are refused so two names that look alike are alike.
func ValidateName(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > MaxNameLength {
		return fmt.Errorf("%d characters, more than %d", n, MaxNameLength)
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return errors.New("leading or trailing space")
	}
	for i, r := range s {
		switch {
		case r == '#':
			return fmt.Errorf("character '#' at %d not allowed: it is the key delimiter", i)
		case !unicode.IsPrint(r):
			return fmt.Errorf("character %U at %d not allowed: not printable", r, i)
		}
	}
	return nil
}
