package main

import (
	"archive/zip"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPackage_TwoBuildsAreByteIdentical builds every function twice, into
// two directories, and compares the zips byte for byte; then checks what a
// zip holds: one executable "bootstrap", a static linux/arm64 binary.
func TestPackage_TwoBuildsAreByteIdentical(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the functions")
	}
	ctx := context.Background()
	a, b := t.TempDir(), t.TempDir()
	sumsA, err := Package(ctx, "../..", a)
	require.NoError(t, err)
	// Make the second build's inputs look different where it must not matter.
	time.Sleep(1100 * time.Millisecond)
	sumsB, err := Package(ctx, "../..", b)
	require.NoError(t, err)
	assert.Equal(t, sumsA, sumsB)

	for _, f := range Functions {
		za, err := os.ReadFile(filepath.Join(a, f.Name+".zip"))
		require.NoError(t, err)
		zb, err := os.ReadFile(filepath.Join(b, f.Name+".zip"))
		require.NoError(t, err)
		require.True(t, bytes.Equal(za, zb), "%s.zip differs between two builds", f.Name)

		zr, err := zip.NewReader(bytes.NewReader(za), int64(len(za)))
		require.NoError(t, err)
		require.Len(t, zr.File, 1, f.Name)
		e := zr.File[0]
		assert.Equal(t, "bootstrap", e.Name)
		assert.Equal(t, os.FileMode(0o755), e.Mode().Perm())
		assert.Equal(t, zipTime, e.Modified.UTC())
		rc, err := e.Open()
		require.NoError(t, err)
		bin, err := io.ReadAll(rc)
		require.NoError(t, err)
		ef, err := elf.NewFile(bytes.NewReader(bin))
		require.NoError(t, err)
		assert.Equal(t, elf.EM_AARCH64, ef.Machine, f.Name)
		assert.Nil(t, ef.Section(".interp"), "%s: statically linked (CGO_ENABLED=0)", f.Name)
	}
}
