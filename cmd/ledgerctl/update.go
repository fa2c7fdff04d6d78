package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ledger-dev/ledger/cmd/ledgerctl/internal/writerapi"
)

// directoryUpdate runs 'ledgerctl tenant|branch update': a PATCH of the
// attributes given, at the version read first (or --if-match), through the
// writer's API. A calendar or report-periods change applies to the
// transactions written after it; it says how to move the history.
func (e *environment) directoryUpdate(ctx context.Context, kind string, args []string) int {
	fs := e.flags(kind+" update", "Changes a tenant or branch through the writer's API (a PATCH at the version read, or --if-match).\n\n"+directoryUsage)
	base := fs.String("url", orDefault(e.getenv("LEDGER_WRITER_URL"), defaultWriterURL), "the writer's base `URL` (env LEDGER_WRITER_URL)")
	asJSON := fs.Bool("json", false, "print JSON as the API answers it")
	id := fs.String("id", "", "the "+kind+"'s `ID`")
	name := fs.String("name", "", "a new display `NAME`")
	status := fs.String("status", "", "active or suspended")
	ifMatch := fs.Int64("if-match", 0, "change only if the "+kind+" is at this `VERSION` (default: the version read first)")
	tenant := new(string)
	var reportPeriods *string
	var cal calendarFlags
	currency := new(string)
	if kind == "branch" {
		tenant = fs.String("tenant", "", "the `TENANT` id")
		cal = addCalendarFlags(fs, "", "", "", "")
		currency = addCurrencyFlag(fs, "")
	} else {
		reportPeriods = addReportPeriodsFlag(fs, "")
	}
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	switch {
	case fs.NArg() > 0:
		return e.fail(fmt.Errorf("%s update: unexpected arguments: %s", kind, strings.Join(fs.Args(), " ")))
	case *id == "":
		return e.fail(fmt.Errorf("%s update: --id is required", kind))
	case kind == "branch" && *tenant == "":
		return e.fail(errors.New("branch update: --tenant is required"))
	}
	c, err := e.directoryClient(*base)
	if err != nil {
		return e.fail(err)
	}
	out := directoryOutput{w: e.stdout, json: *asJSON}
	version := *ifMatch
	if version == 0 {
		got, err := c.get(ctx, kind, *tenant, *id)
		if err != nil {
			return e.directoryAnswer(kind, got, err, out)
		}
		var v struct {
			Version int64 `json:"version"`
		}
		if err := json.Unmarshal(got, &v); err != nil {
			return e.fail(fmt.Errorf("%s update: read %s: %w", kind, *id, err))
		}
		version = v.Version
	}
	etag := strconv.Quote(strconv.FormatInt(version, 10))
	recalendar := false
	var patch func(ctx context.Context, key string) (writerAnswer, error)
	switch kind {
	case "tenant":
		body := writerapi.TenantPatch{Name: optional[string](*name), Status: optional[writerapi.Status](*status)}
		if *reportPeriods != "" {
			names, err := parseReportPeriodsFlag(*reportPeriods)
			if err != nil {
				return e.fail(fmt.Errorf("tenant update: %w", err))
			}
			body.ReportPeriods, recalendar = &names, true
		}
		patch = func(ctx context.Context, key string) (writerAnswer, error) {
			return c.api.PatchTenantWithApplicationMergePatchPlusJSONBodyWithResponse(ctx, *id, &writerapi.PatchTenantParams{IfMatch: etag, IdempotencyKey: &key},
				writerapi.PatchTenantApplicationMergePatchPlusJSONRequestBody(body))
		}
	case "branch":
		body := writerapi.BranchPatch{Name: optional[string](*name), Status: optional[writerapi.Status](*status), Currency: optional[string](*currency)}
		if c, _ := cal.calendar(); c != nil {
			body.Calendar, recalendar = (*writerapi.CalendarPatch)(c), true
		}
		patch = func(ctx context.Context, key string) (writerAnswer, error) {
			return c.api.PatchBranchWithApplicationMergePatchPlusJSONBodyWithResponse(ctx, *tenant, *id, &writerapi.PatchBranchParams{IfMatch: etag, IdempotencyKey: &key},
				writerapi.PatchBranchApplicationMergePatchPlusJSONRequestBody(body))
		}
	}
	got, err := c.send(ctx, true, patch)
	code := e.directoryAnswer(kind, got, err, out)
	if code == exitOK && recalendar {
		scope := "--tenant " + *id
		if kind == "branch" {
			scope = "--tenant " + *tenant + " --branch " + *id
		}
		fmt.Fprintf(e.stderr, "ledgerctl: the change applies to transactions written from now on; 'ledgerctl rebucket %s' moves the history\n", scope)
	}
	return code
}
