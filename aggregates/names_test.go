package aggregates

import (
	"strings"
	"testing"
)

func TestValidateID(t *testing.T) {
	ok := []string{"acme", "a", "Acme-01", "north_2", "v1.2", "01HZX3J5K8N7Q2W4E6R8T0Y9UA", strings.Repeat("x", MaxIDLength)}
	for _, s := range ok {
		if err := ValidateID(s); err != nil {
			t.Errorf("ValidateID(%q) = %v; want nil", s, err)
		}
	}
	bad := []string{"", "a#b", "acme#BRANCH#x", "#", "-a", ".", "..", "_x", "a b", "a/b", "a%23", "café", "a\x00", "a\n",
		strings.Repeat("x", MaxIDLength+1)}
	for _, s := range bad {
		if err := ValidateID(s); err == nil {
			t.Errorf("ValidateID(%q) = nil; want an error", s)
		}
	}
}

func TestValidateName(t *testing.T) {
	ok := []string{"food", "a.b", "café ☕", "with space", "k:v", "sl/ash", "R&D", "x", "日本語", strings.Repeat("é", MaxNameLength)}
	for _, s := range ok {
		if err := ValidateName(s); err != nil {
			t.Errorf("ValidateName(%q) = %v; want nil", s, err)
		}
	}
	bad := []string{"", "x#y", "#", " lead", "trail ", "tab\there", "new\nline", "nul\x00", "zero\u200bwidth", "bidi\u202e",
		"nbsp\u00a0x", "\xff\xfe", strings.Repeat("é", MaxNameLength+1)}
	for _, s := range bad {
		if err := ValidateName(s); err == nil {
			t.Errorf("ValidateName(%q) = nil; want an error", s)
		}
	}
}
