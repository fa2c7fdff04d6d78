package aggregates

import (
	"archive/zip"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
)

// The IANA time zone data every calendar is computed with, embedded: the
// same rules on every host and in every binary (a Lambda function needs no
// zone files on disk), whatever zone files a system has. time.LoadLocation
// would read a system's own zone files first, so that two hosts with
// different tzdata releases could stamp one instant with different
// business dates, and reconcile and rebucket on a third disagree with both.
//
// zoneinfo.zip is Go 1.26.8's $GOROOT/lib/time/zoneinfo.zip (IANA tzdata
// 2025c), the file time/tzdata embeds. To take a newer tzdata release:
//
//	cp "$(go env GOROOT)/lib/time/zoneinfo.zip" aggregates/
//
// then run `ledgerctl reconcile`: a branch whose zone's rules changed for
// instants already stamped is named as not in its calendar, and
// `ledgerctl rebucket` moves those transactions.
//
//go:embed zoneinfo.zip
var zoneinfoZip []byte

var zoneData = sync.OnceValues(func() (map[string]*zip.File, error) {
	r, err := zip.NewReader(bytes.NewReader(zoneinfoZip), int64(len(zoneinfoZip)))
	if err != nil {
		return nil, fmt.Errorf("embedded zone data: %w", err)
	}
	files := make(map[string]*zip.File, len(r.File))
	for _, f := range r.File {
		files[f.Name] = f
	}
	return files, nil
})

var zoneCache sync.Map // name → *time.Location

// LoadZone loads an IANA time zone from the embedded zone data (never from
// the system's): the one way calendars, their tests and the tools load
// zones.
func LoadZone(name string) (*time.Location, error) {
	if name == "UTC" {
		return time.UTC, nil
	}
	if loc, ok := zoneCache.Load(name); ok {
		return loc.(*time.Location), nil
	}
	files, err := zoneData()
	if err != nil {
		return nil, err
	}
	f, ok := files[name]
	if !ok {
		return nil, fmt.Errorf("unknown time zone %s", name)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("time zone %s: %w", name, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("time zone %s: %w", name, err)
	}
	loc, err := time.LoadLocationFromTZData(name, data)
	if err != nil {
		return nil, fmt.Errorf("time zone %s: %w", name, err)
	}
	zoneCache.Store(name, loc)
	return loc, nil
}

// ZoneNames lists every zone of the embedded data, sorted.
func ZoneNames() ([]string, error) {
	files, err := zoneData()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}
