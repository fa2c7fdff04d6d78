package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

// flagsCmd runs 'ledgerctl flags get|set'.
func (e *environment) flagsCmd(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, "usage: ledgerctl flags get [--json] | ledgerctl flags set NAME=true|false ... [--if-version N]\n")
		return exitError
	}
	switch args[0] {
	case "get":
		return e.flagsGet(ctx, args[1:])
	case "set":
		return e.flagsSet(ctx, args[1:])
	}
	fmt.Fprintf(e.stderr, "ledgerctl: unknown flags command %q: want get or set\n", args[0])
	return exitError
}

// flagsView is the JSON form of the flags.
type flagsView struct {
	Table     string          `json:"table"`
	Exists    bool            `json:"exists"`
	Version   int64           `json:"version"`
	UpdatedAt string          `json:"updatedAt,omitempty"`
	Flags     map[string]bool `json:"flags"`
}

func (e *environment) printFlags(f table.Flags, asJSON bool) {
	if asJSON {
		b, _ := json.MarshalIndent(flagsView{Table: e.table, Exists: f.Exists, Version: f.Version, UpdatedAt: f.UpdatedAt, Flags: f.Values}, "", "  ")
		fmt.Fprintf(e.stdout, "%s\n", b)
		return
	}
	fmt.Fprintf(e.stdout, "flags of table %s: %s\n", e.table, f)
}

func (e *environment) flagsGet(ctx context.Context, args []string) int {
	fs := e.flags("flags get", "Prints the flags singleton (SETTINGS#APP / FLAGS#V1): its version, last update\nand every flag. A missing item means writes are disabled (the writer fails closed).")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return e.fail(fmt.Errorf("flags get: unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	c, err := e.dynamo(ctx)
	if err != nil {
		return e.fail(err)
	}
	f, err := table.GetFlags(ctx, c, e.table)
	if err != nil {
		return e.fail(err)
	}
	e.printFlags(f, *asJSON)
	return exitOK
}

func (e *environment) flagsSet(ctx context.Context, args []string) int {
	fs := e.flags("flags set NAME=true|false ...",
		"Sets flags on the singleton with one UpdateItem guarded by its version: the\n"+
			"version read just before (or --if-version), so a concurrent change is never\n"+
			"overwritten. Exits 1, writing nothing, when the flags changed meanwhile.\n"+
			"writesEnabled=false puts the writer in maintenance (mutations answer 503\n"+
			"within its cache time, 5 s by default). Creates the item if it is missing.")
	ifVersion := fs.Int64("if-version", -1, "apply only if the flags are at this `VERSION` (0: only if the item is missing)")
	asJSON := fs.Bool("json", false, "print the flags as written in JSON")
	// Flags may come before or after the NAME=VALUE arguments.
	var pairs []string
	for {
		if err := fs.Parse(args); err != nil {
			return exitError
		}
		if fs.NArg() == 0 {
			break
		}
		pairs = append(pairs, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pairs) == 0 {
		fs.Usage()
		return exitError
	}
	set := map[string]bool{}
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, "=")
		var b bool
		switch strings.ToLower(value) {
		case "true":
			b = true
		case "false":
		default:
			ok = false
		}
		if !ok {
			return e.fail(fmt.Errorf("flags set: %q: want NAME=true or NAME=false", p))
		}
		if err := table.ValidateFlagName(name); err != nil {
			return e.fail(err)
		}
		set[name] = b
	}

	c, err := e.dynamo(ctx)
	if err != nil {
		return e.fail(err)
	}
	expected := *ifVersion
	if expected < 0 {
		cur, err := table.GetFlags(ctx, c, e.table)
		if err != nil {
			return e.fail(err)
		}
		expected = cur.Version
		if !cur.Exists {
			expected = 0
		}
	}
	f, err := table.SetFlags(ctx, c, e.table, set, expected, time.Now())
	var conflict *table.FlagsConflictError
	if errors.As(err, &conflict) {
		fmt.Fprintf(e.stderr, "ledgerctl: %v; nothing written. Now: %s\nRun 'ledgerctl flags get' and set again.\n", conflict, conflict.Current)
		return exitDiff
	}
	if err != nil {
		return e.fail(err)
	}
	e.printFlags(f, *asJSON)
	return exitOK
}

// tokenCmd runs 'ledgerctl token': mint an HS256 token for local use.
func (e *environment) tokenCmd(_ context.Context, args []string) int {
	fs := e.flags("token --tenant T | --admin",
		"Prints an HS256 bearer token for the writer, signed with LEDGER_JWT_SECRET, for\n"+
			"local use and tests (production tokens come from an identity provider).\n"+
			"Use it as: curl -H \"Authorization: Bearer $(ledgerctl token --tenant acme)\" …\n"+
			"--admin adds the admin scope (claim scope \"admin\"): creating, listing and\n"+
			"changing tenants, lookups across tenants, and acting for any tenant.")
	tenant := fs.String("tenant", "", "the `TENANT` the token grants access to (required without --admin)")
	admin := fs.Bool("admin", false, "an admin-scoped token (scope \"admin\"); --tenant is then optional")
	subject := fs.String("subject", "ledgerctl", "the token's `SUBJECT` (sub)")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid, a `DURATION`")
	issuer := fs.String("issuer", orDefault(e.getenv("LEDGER_JWT_ISSUER"), writer.DefaultIssuer), "the `ISSUER` (iss) (env LEDGER_JWT_ISSUER)")
	audience := fs.String("audience", orDefault(e.getenv("LEDGER_JWT_AUDIENCE"), writer.DefaultAudience), "the `AUDIENCE` (aud) (env LEDGER_JWT_AUDIENCE)")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if fs.NArg() > 0 {
		return e.fail(fmt.Errorf("token: unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	if *tenant == "" && !*admin {
		return e.fail(errors.New("token: --tenant is required (or --admin)"))
	}
	secret := e.getenv("LEDGER_JWT_SECRET")
	if secret == "" {
		return e.fail(errors.New("token: LEDGER_JWT_SECRET is not set (the writer's HS256 secret, at least 32 bytes)"))
	}
	if *ttl <= 0 || *ttl > 30*24*time.Hour {
		return e.fail(fmt.Errorf("token: --ttl %s: want more than 0 and at most 720h", *ttl))
	}
	tok, err := writer.NewToken([]byte(secret), writer.TokenOptions{Tenant: *tenant, Admin: *admin, Subject: *subject, Issuer: *issuer, Audience: *audience, TTL: *ttl})
	if err != nil {
		return e.fail(err)
	}
	fmt.Fprintln(e.stdout, tok)
	return exitOK
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// refuseAboveProtocol reads the flags and refuses a command of this
// version that writes (what, e.g. "reconcile --repair") when the table
// is at a higher protocol (docs/runbook.md, "Protocols"): its writes are
// not this version's to make there. hint follows the refusal.
func (e *environment) refuseAboveProtocol(ctx context.Context, api table.FlagsAPI, what, hint string) error {
	f, err := table.GetFlags(ctx, api, e.table)
	if err != nil {
		return fmt.Errorf("%s: read the flags: %w", what, err)
	}
	if err := f.ProtocolAbove(table.Protocol); err != nil {
		return fmt.Errorf("%s refused: %w: run the ledgerctl of the table's protocol%s (docs/runbook.md, \"Protocols\")", what, err, hint)
	}
	return nil
}
