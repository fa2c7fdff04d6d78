package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBuild_TwoBuildsGiveTheSameDigests builds every image twice, into two
// directories, and requires the same index digests and byte-identical
// archives; then reads each archive as an OCI image layout and checks what
// a runtime sees: the name, both platforms, the non-root user, the
// entrypoint, the exposed port, the labels and the files, and runs the
// host platform's binary from the image's layers.
func TestBuild_TwoBuildsGiveTheSameDigests(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the writer and the poller")
	}
	ctx := context.Background()
	o := Options{Created: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC), Revision: "0123456789abcdef"}
	a, b := t.TempDir(), t.TempDir()
	digestsA, err := Build(ctx, "../..", a, o)
	require.NoError(t, err)
	// Make the second build's inputs look different where it must not matter.
	time.Sleep(1100 * time.Millisecond)
	digestsB, err := Build(ctx, "../..", b, o)
	require.NoError(t, err)
	assert.Equal(t, digestsA, digestsB)

	for _, im := range Images {
		t.Run(im.Name, func(t *testing.T) {
			ta, err := os.ReadFile(filepath.Join(a, im.Name+".tar"))
			require.NoError(t, err)
			tb, err := os.ReadFile(filepath.Join(b, im.Name+".tar"))
			require.NoError(t, err)
			require.True(t, bytes.Equal(ta, tb), "%s.tar differs between two builds", im.Name)

			dir := untar(t, ta)
			top, err := layout.ImageIndexFromPath(dir)
			require.NoError(t, err)
			tm, err := top.IndexManifest()
			require.NoError(t, err)
			require.Len(t, tm.Manifests, 1)
			assert.Equal(t, "ledger/"+im.Name+":latest", tm.Manifests[0].Annotations[RefNameAnnotation])
			assert.Equal(t, types.OCIImageIndex, tm.Manifests[0].MediaType)
			assert.Equal(t, digestsA[im.Name], tm.Manifests[0].Digest.String())

			idx, err := top.ImageIndex(tm.Manifests[0].Digest)
			require.NoError(t, err)
			im2, err := idx.IndexManifest()
			require.NoError(t, err)
			require.Len(t, im2.Manifests, len(Platforms))
			for i, desc := range im2.Manifests {
				require.NotNil(t, desc.Platform)
				assert.Equal(t, Platforms[i], *desc.Platform)
				img, err := idx.Image(desc.Digest)
				require.NoError(t, err)
				checkImage(t, im, *desc.Platform, img, o)
			}
		})
	}
}

// checkImage checks one platform's image: its config and its files, and
// runs its binary with --help when the platform is the host's.
func checkImage(t *testing.T, im Image, p v1.Platform, img v1.Image, o Options) {
	t.Helper()
	mt, err := img.MediaType()
	require.NoError(t, err)
	assert.Equal(t, types.OCIManifestSchema1, mt)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, p.Architecture, cf.Architecture)
	assert.Equal(t, "linux", cf.OS)
	assert.True(t, cf.Created.Equal(o.Created), "created %s; want %s", cf.Created, o.Created)
	assert.Equal(t, "layers", cf.RootFS.Type)
	assert.Equal(t, "65532:65532", cf.Config.User)
	assert.Equal(t, []string{"/usr/local/bin/" + im.Name}, cf.Config.Entrypoint)
	assert.Empty(t, cf.Config.Cmd)
	assert.Equal(t, map[string]struct{}{map[string]string{"writer": "8080/tcp", "poller": "9102/tcp"}[im.Name]: {}}, cf.Config.ExposedPorts)
	assert.Equal(t, "ledger-"+im.Name, cf.Config.Labels["org.opencontainers.image.title"])
	assert.Equal(t, o.Revision, cf.Config.Labels["org.opencontainers.image.revision"])
	assert.Equal(t, "2026-11-01T12:00:00Z", cf.Config.Labels["org.opencontainers.image.created"])
	assert.NotEmpty(t, cf.Config.Labels["org.opencontainers.image.description"])
	assert.Nil(t, cf.Config.Healthcheck, "no HEALTHCHECK: FROM scratch has nothing to run one with (docs/deploy.md)")
	require.Len(t, cf.History, 2)
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 2)
	for _, l := range layers {
		lmt, err := l.MediaType()
		require.NoError(t, err)
		assert.Equal(t, types.OCILayer, lmt)
	}

	files := map[string]*tar.Header{}
	contents := map[string][]byte{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		files[h.Name] = h
		contents[h.Name], err = io.ReadAll(tr)
		require.NoError(t, err)
		assert.True(t, h.ModTime.Equal(o.Created), "%s: mtime %s", h.Name, h.ModTime)
	}
	assert.Contains(t, string(contents["etc/passwd"]), "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
	assert.Contains(t, string(contents["etc/group"]), "nonroot:x:65532:\n")
	require.Contains(t, files, "home/nonroot")
	assert.Equal(t, 65532, files["home/nonroot"].Uid)
	require.Contains(t, files, "tmp")
	assert.Equal(t, int64(0o1777), files["tmp"].Mode&0o7777)
	bin := "usr/local/bin/" + im.Name
	require.Contains(t, files, bin)
	assert.Equal(t, int64(0o755), files[bin].Mode&0o7777)
	assert.Equal(t, 0, files[bin].Uid, "the binary belongs to root: the user cannot change it")

	ef, err := elf.NewFile(bytes.NewReader(contents[bin]))
	require.NoError(t, err)
	assert.Equal(t, map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture], ef.Machine)
	assert.Nil(t, ef.Section(".interp"), "statically linked (CGO_ENABLED=0)")

	if p.Architecture != runtime.GOARCH || runtime.GOOS != "linux" {
		return
	}
	exe := filepath.Join(t.TempDir(), im.Name)
	require.NoError(t, os.WriteFile(exe, contents[bin], 0o755))
	out, err := exec.Command(exe, "--help").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "usage: "+im.Name)
}

// untar extracts an archive of regular files and directories into a new
// directory.
func untar(t *testing.T, b []byte) string {
	t.Helper()
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return dir
		}
		require.NoError(t, err)
		require.False(t, strings.Contains(h.Name, ".."), h.Name)
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			require.NoError(t, os.MkdirAll(p, 0o755))
			continue
		}
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, data, 0o644))
	}
}

func TestSourceDateEpoch(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"", time.Unix(0, 0).UTC(), false},
		{"1764000000", time.Unix(1764000000, 0).UTC(), false},
		{"-1", time.Time{}, true},
		{"yesterday", time.Time{}, true},
	} {
		got, err := sourceDateEpoch(tc.in)
		if tc.err {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.True(t, got.Equal(tc.want), "%q: got %s; want %s", tc.in, got, tc.want)
	}
}
