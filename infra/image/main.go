// Command image builds ledger's container images, for the writer
// (cmd/writer) and the poller (cmd/poller), without a container daemon or a
// registry, reproducibly, as OCI image archives: bin/image/NAME.tar is an
// OCI image layout (oci-layout, index.json, blobs/sha256/…) in a tar, holding
// one multi-platform image index (linux/amd64 and linux/arm64) named
// ledger/NAME:latest. `podman load`, `skopeo copy oci-archive:…` and, once
// extracted, `crane push` read it (docs/deploy.md, "Container images").
//
// The images are FROM scratch: no shell, no package manager, nothing to
// patch but ledger. Each is two layers: a base shared by both images
// (/etc/passwd and /etc/group naming the non-root user 65532 "nonroot", its
// home, /tmp) and the static (CGO_ENABLED=0) binary in /usr/local/bin. TLS
// roots for the AWS endpoints come from golang.org/x/crypto/x509roots/fallback,
// compiled into both binaries (cmd/writer/roots.go, cmd/poller/roots.go),
// which Go uses only where the system has no roots, as in these images:
// the roots are pinned by go.sum, so the image does not depend on the
// build machine's /etc/ssl, and they are updated with the module.
//
// Reproducible: the binaries are built with -trimpath, -buildvcs=false and
// no build id; every file time, the config's created time and the history
// are SOURCE_DATE_EPOCH (the Makefile passes the last commit's time; 0, the
// Unix epoch, when unset); layers are gzip-compressed by the standard
// library with fixed headers, and the archive's entries are sorted with
// fixed metadata. The same commit and Go version give the same digests and
// byte-identical archives wherever they are built.
//
//	go run ./infra/image -out bin/image     # what `make image` runs
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image is one container image `make image` builds.
type Image struct {
	Name        string // the archive is Name.tar, the image ledger/Name
	Pkg         string // the Go package of its main, relative to the module root
	Port        int    // the TCP port its default flags listen on (exposed)
	Description string
}

// Images are the images `make image` builds.
var Images = []Image{
	{Name: "writer", Pkg: "./cmd/writer", Port: 8080,
		Description: "ledger writer: the HTTP API (/v1), /healthz, /readyz and /metrics on :8080"},
	{Name: "poller", Pkg: "./cmd/poller", Port: 9102,
		Description: "ledger poller: consumes the table's stream exactly once; /metrics, /healthz and /readyz on :9102"},
}

// Platforms are the platforms of every image (ECS and Kubernetes on x86 and
// Graviton).
var Platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// The user the images run as: distroless's "nonroot", numeric so that
// Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
const (
	UID  = 65532
	User = "65532:65532"
	Home = "/home/nonroot"
)

// BinDir is where the binary is; the entrypoint is BinDir/Name.
const BinDir = "/usr/local/bin"

// RefNameAnnotation names the image in the archive's index.json (OCI image
// layout): podman and skopeo take the name from it.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// buildFlags make the binary independent of where and when it is built.
var buildFlags = []string{"-trimpath", "-ldflags", "-s -w -buildid=", "-buildvcs=false"}

// Options are what may differ between two builds of one commit.
type Options struct {
	Created  time.Time // file, config and history times (SOURCE_DATE_EPOCH)
	Revision string    // the org.opencontainers.image.revision label; omitted when empty
}

func main() {
	out := flag.String("out", "bin/image", "`DIR` for the archives (NAME.tar)")
	revision := flag.String("revision", "", "the source revision for the org.opencontainers.image.revision label (e.g. git rev-parse HEAD)")
	flag.Parse()
	created, err := sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(2)
	}
	digests, err := Build(context.Background(), ".", *out, Options{Created: created, Revision: *revision})
	if err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
	for _, im := range Images {
		fmt.Printf("%s  %s  (ledger/%s:latest)\n", digests[im.Name], filepath.Join(*out, im.Name+".tar"), im.Name)
	}
}

// sourceDateEpoch parses SOURCE_DATE_EPOCH (seconds since the epoch); empty
// is the epoch itself.
func sourceDateEpoch(v string) (time.Time, error) {
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil || s < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", v)
	}
	return time.Unix(s, 0).UTC(), nil
}

// Build builds every image of the module rooted at root into outDir
// (outDir/NAME.tar) and returns each image index's digest by name: the
// digest a registry shows once the archive is pushed.
func Build(ctx context.Context, root, outDir string, o Options) (map[string]string, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "ledger-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	base, err := baseLayer(o.Created)
	if err != nil {
		return nil, err
	}
	digests := map[string]string{}
	for _, im := range Images {
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		for _, p := range Platforms {
			bin := filepath.Join(work, im.Name+"-"+p.Architecture)
			if err := goBuild(ctx, root, im.Pkg, bin, p); err != nil {
				return nil, err
			}
			img, err := image(im, p, base, bin, o)
			if err != nil {
				return nil, fmt.Errorf("image %s %s: %w", im.Name, p, err)
			}
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
		}
		d, err := idx.Digest()
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", im.Name, err)
		}
		digests[im.Name] = d.String()
		if err := writeArchive(filepath.Join(work, im.Name), filepath.Join(outDir, im.Name+".tar"), idx, "ledger/"+im.Name+":latest", o.Created); err != nil {
			return nil, fmt.Errorf("image %s: %w", im.Name, err)
		}
	}
	return digests, nil
}

// image is one platform's image of im: the base layer, then the binary.
func image(im Image, p v1.Platform, base v1.Layer, bin string, o Options) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	app, err := layer(o.Created, []entry{{name: path.Join(BinDir, im.Name)[1:], mode: 0o755, data: data}})
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "ledger-" + im.Name,
		"org.opencontainers.image.description": im.Description,
		"org.opencontainers.image.created":     o.Created.Format(time.RFC3339),
	}
	if o.Revision != "" {
		labels["org.opencontainers.image.revision"] = o.Revision
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Created:      v1.Time{Time: o.Created},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			User:         User,
			Entrypoint:   []string{path.Join(BinDir, im.Name)},
			ExposedPorts: map[string]struct{}{strconv.Itoa(im.Port) + "/tcp": {}},
			Env:          []string{"PATH=" + BinDir, "HOME=" + Home},
			WorkingDir:   Home,
			Labels:       labels,
			StopSignal:   "SIGTERM",
		},
	})
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Created}
	return mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "infra/image: nonroot user 65532, /tmp", Comment: "base"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: "infra/image: go build " + strings.Join(buildFlags, " ") + " " + im.Pkg}},
	)
}

// baseLayer is what both images share: the non-root user and its home, /tmp
// and the binary's directory.
func baseLayer(created time.Time) (v1.Layer, error) {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:" + Home + ":/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:65532:\n"
	return layer(created, []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: UID},
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
	})
}

// entry is one file (or, with a name ending in "/", directory) of a layer.
type entry struct {
	name string
	mode int64
	uid  int
	data []byte
}

// layer is a gzip-compressed tar of entries, in the given order, with fixed
// times and owners.
func layer(created time.Time, entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: created, Format: tar.FormatPAX}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
}

// goBuild builds pkg for platform p into out: static, without paths, VCS
// stamp or build id.
func goBuild(ctx context.Context, root, pkg, out string, p v1.Platform) error {
	args := append([]string{"build"}, buildFlags...)
	args = append(args, "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS="+p.OS, "GOARCH="+p.Architecture, "CGO_ENABLED=0", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %v: %s", pkg, p, err, stderr.String())
	}
	return nil
}

// writeArchive writes idx as an OCI image layout in dir, its one entry
// named ref, then tars dir into archive (entries sorted, fixed times and
// owners).
func writeArchive(dir, archive string, idx v1.ImageIndex, ref string, created time.Time) error {
	top := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{
		Add:        idx,
		Descriptor: v1.Descriptor{Annotations: map[string]string{RefNameAnnotation: ref}},
	})
	if _, err := layout.Write(dir, top); err != nil {
		return fmt.Errorf("oci layout: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error { // lexical order
		if err != nil || p == dir {
			return err
		}
		name := filepath.ToSlash(strings.TrimPrefix(p, dir+string(filepath.Separator)))
		h := &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, ModTime: created, Format: tar.FormatPAX}
		var data []byte
		if d.IsDir() {
			h.Name, h.Mode, h.Typeflag = name+"/", 0o755, tar.TypeDir
		} else if data, err = os.ReadFile(p); err != nil {
			return err
		}
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(archive, buf.Bytes(), 0o644)
}
