package writer

import (
	"archive/zip"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ledger-dev/ledger/aggregates"
)

// zoneNames lists the IANA zones of the Go toolchain's zone data (the data
// time/tzdata embeds), or skips the test when it cannot be found.
func zoneNames(t *testing.T) []string {
	t.Helper()
	root := os.Getenv("GOROOT")
	if root == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			t.Skipf("no GOROOT: %v", err)
		}
		root = strings.TrimSpace(string(out))
	}
	z, err := zip.OpenReader(filepath.Join(root, "lib", "time", "zoneinfo.zip"))
	if err != nil {
		t.Skipf("no zone data list: %v", err)
	}
	defer z.Close()
	var names []string
	for _, f := range z.File {
		if !strings.HasSuffix(f.Name, "/") {
			names = append(names, f.Name)
		}
	}
	return names
}

// TestBusinessDateUTCBound_HoldsInEveryZoneAtEveryTransition checks the
// bound listing by business date rests on: a transaction of business date
// D has a UTC date from D−businessDateUTCBefore to D+businessDateUTCAfter,
// in every zone of the embedded data, for cut-offs from 00:00 to 23:59, at
// instants around every offset change from 1970 to 2040 (where the bound
// is tight: skipped dates, the ±12 h and +14 h zones) and at random ones.
func TestBusinessDateUTCBound_HoldsInEveryZoneAtEveryTransition(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(22, 1))
	lo, hi := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	zones, instants := 0, 0
	for _, name := range zoneNames(t) {
		loc, err := aggregates.LoadZone(name)
		if err != nil {
			continue // not a zone (the zip holds a few other files)
		}
		zones++
		var at []time.Time
		for x := lo; x.Before(hi); {
			_, end := x.In(loc).ZoneBounds()
			if end.IsZero() || !end.After(x) || !end.Before(hi) {
				break
			}
			for _, d := range []time.Duration{-25 * time.Hour, -12 * time.Hour, -time.Hour, -time.Nanosecond, 0, time.Hour, 12 * time.Hour, 25 * time.Hour} {
				at = append(at, end.Add(d))
			}
			x = end
		}
		for range 50 {
			at = append(at, lo.Add(time.Duration(rng.Int64N(int64(hi.Sub(lo))))))
		}
		for _, start := range []string{"00:00", "23:59", aggregates.FormatDayStart(rng.IntN(24 * 60))} {
			c, err := aggregates.NewCalendar(name, start, "MONDAY", 1)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for _, x := range at {
				d := c.BusinessDate(x)
				utc := aggregates.DateOf(x)
				if utc.Before(d.AddDays(-businessDateUTCBefore)) || d.AddDays(businessDateUTCAfter).Before(utc) {
					t.Errorf("%s, day from %s: %s (UTC date %s) has business date %s: outside D-%d … D+%d", name, start, x.Format(time.RFC3339Nano), utc, d,
						businessDateUTCBefore, businessDateUTCAfter)
				}
				instants++
			}
		}
	}
	if zones < 300 {
		t.Fatalf("%d zones: the zone data list is not the whole database", zones)
	}
	t.Logf("%d zones, %d (instant, cut-off) pairs", zones, instants)
}
