package aggregates

import "testing"

// TestIsRollupLanePKForm: the form of a lane partition, valid or not, and
// nothing else (reconcile's strays are the form without a valid lane).
func TestIsRollupLanePKForm(t *testing.T) {
	tests := []struct {
		pk         string
		form, lane bool
	}{
		{RollupLanePK("acme", 0), true, true},
		{RollupLanePK("acme", RollupLanes-1), true, true},
		{"TENANT#acme#ROLLUPLANE#32", true, false},
		{"TENANT#acme#ROLLUPLANE#07", true, false},
		{"TENANT#acme#ROLLUPLANE#", true, false},
		{"TENANT##ROLLUPLANE#1", false, false},
		{"TENANT#a#b#ROLLUPLANE#1", false, false},
		{"TENANT#acme#ROLLUP#BRL#1", false, false},
		{"TENANT#acme#BRANCH#b#REPORTING", false, false},
	}
	for _, tt := range tests {
		if got := IsRollupLanePKForm(tt.pk); got != tt.form {
			t.Errorf("IsRollupLanePKForm(%q) = %v; want %v", tt.pk, got, tt.form)
		}
		if got := IsRollupLaneKey(tt.pk); got != tt.lane {
			t.Errorf("IsRollupLaneKey(%q) = %v; want %v", tt.pk, got, tt.lane)
		}
	}
}
