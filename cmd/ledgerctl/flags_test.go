package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ledger-dev/ledger/aggregates"
	"github.com/ledger-dev/ledger/infra/ddblocal/ddbtest"
	ledgertable "github.com/ledger-dev/ledger/table"
	"github.com/ledger-dev/ledger/writer"
)

func TestFlags_GetAndSetGuardedByVersion(t *testing.T) {
	ctx := context.Background()
	c := ddbtest.Client(t)
	table := ddbtest.NewTable(t, c)
	env := map[string]string{"LEDGER_TABLE": table, "AWS_ENDPOINT_URL": ddbtest.Endpoint(t)}

	code, out, errOut := run(t, env, "flags", "get")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "version 1")
	assert.Contains(t, out, "writesEnabled=true")
	assert.Contains(t, out, "tombstones=true", "a new table's deletes leave tombstones")

	code, out, errOut = run(t, env, "flags", "set", "writesEnabled=false", "maintenanceBanner=TRUE")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "version 2")
	code, out, _ = run(t, env, "flags", "get", "--json")
	require.Equal(t, exitOK, code)
	var view flagsView
	require.NoError(t, json.Unmarshal([]byte(out), &view))
	assert.Equal(t, flagsView{Table: table, Exists: true, Version: 2, UpdatedAt: view.UpdatedAt,
		Flags: map[string]bool{"writesEnabled": false, "maintenanceBanner": true, "tombstones": true}}, view)

	// A set against a version someone else moved on from loses, writing
	// nothing; so does creating an item that exists.
	code, _, errOut = run(t, env, "flags", "set", "--if-version", "1", "writesEnabled=true")
	assert.Equal(t, exitDiff, code)
	assert.Contains(t, errOut, "flags changed concurrently: expected version 1, found version 2")
	code, _, _ = run(t, env, "flags", "set", "writesEnabled=true", "--if-version", "0")
	assert.Equal(t, exitDiff, code)
	f, err := ledgertable.GetFlags(ctx, c, table)
	require.NoError(t, err)
	assert.False(t, f.WritesEnabled(), "not overwritten")
	assert.Equal(t, int64(2), f.Version)

	code, out, errOut = run(t, env, "flags", "set", "--if-version", "2", "writesEnabled=true")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "version 3")

	// A missing item is reported, and set creates it.
	k := aggregates.FlagsKey()
	_, err = c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: map[string]ddbtypes.AttributeValue{
		"PK": &ddbtypes.AttributeValueMemberS{Value: k.PK}, "SK": &ddbtypes.AttributeValueMemberS{Value: k.SK}}})
	require.NoError(t, err)
	code, out, _ = run(t, env, "flags", "get")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "missing (writes disabled)")
	code, out, errOut = run(t, env, "flags", "set", "writesEnabled=true")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "version 1")
	f, err = ledgertable.GetFlags(ctx, c, table)
	require.NoError(t, err)
	assert.True(t, f.Exists && f.WritesEnabled())

	for _, args := range [][]string{{"flags"}, {"flags", "toggle"}, {"flags", "set"}, {"flags", "set", "writesEnabled"},
		{"flags", "set", "writesEnabled=yes"}, {"flags", "set", "version=true"}, {"flags", "get", "extra"}} {
		code, _, _ := run(t, env, args...)
		assert.Equal(t, exitError, code, "%v", args)
	}
}

func TestToken_MintsATokenTheWriterAccepts(t *testing.T) {
	secret := strings.Repeat("s", 40)
	code, out, errOut := run(t, map[string]string{"LEDGER_JWT_SECRET": secret}, "token", "--tenant", "acme", "--ttl", "10m")
	require.Equal(t, exitOK, code, errOut)
	a, err := writer.NewAuthenticator(writer.AuthConfig{Secret: []byte(secret)})
	require.NoError(t, err)
	c, err := a.Authenticate(strings.TrimSpace(out))
	require.NoError(t, err)
	assert.Equal(t, "acme", c.Tenant)
	assert.WithinDuration(t, time.Now().Add(10*time.Minute), c.ExpiresAt.Time, 10*time.Second)

	// Issuer and audience follow the writer's environment variables.
	code, out, _ = run(t, map[string]string{"LEDGER_JWT_SECRET": secret, "LEDGER_JWT_ISSUER": "corp"}, "token", "--tenant", "acme")
	require.Equal(t, exitOK, code)
	_, err = a.Authenticate(strings.TrimSpace(out))
	assert.Error(t, err, "issuer corp is not the authenticator's")

	for name, c := range map[string]struct {
		env  map[string]string
		args []string
		want string
	}{
		"no secret":    {map[string]string{}, []string{"token", "--tenant", "acme"}, "LEDGER_JWT_SECRET"},
		"short secret": {map[string]string{"LEDGER_JWT_SECRET": "short"}, []string{"token", "--tenant", "acme"}, "at least 32"},
		"no tenant":    {map[string]string{"LEDGER_JWT_SECRET": secret}, []string{"token"}, "--tenant"},
		"bad tenant":   {map[string]string{"LEDGER_JWT_SECRET": secret}, []string{"token", "--tenant", "a#b"}, "a#b"},
		"bad ttl":      {map[string]string{"LEDGER_JWT_SECRET": secret}, []string{"token", "--tenant", "acme", "--ttl", "-1h"}, "--ttl"},
	} {
		code, _, errOut := run(t, c.env, c.args...)
		assert.Equal(t, exitError, code, name)
		assert.Contains(t, errOut, c.want, name)
	}
}
