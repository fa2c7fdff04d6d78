// Command lambdazip builds ledger's Lambda functions for the template
// (infra/template.yaml) as reproducible deployment packages: for each of
// cmd/lambda (consumer.zip) and cmd/writer (writer.zip), a linux/arm64
// static binary named bootstrap (provided.al2023), built with -trimpath and
// without build id, zipped with fixed metadata. The same source and Go
// version give byte-identical zips wherever they are built.
//
//	go run ./infra/lambdazip -out bin/package     # what `make package` runs
package main

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Function is one Lambda function the template deploys.
type Function struct {
	Name string // the zip is Name.zip
	Pkg  string // the Go package of its main, relative to the module root
}

// Functions are the packages `make package` builds, as the template's
// CodeUri names them.
var Functions = []Function{
	{Name: "consumer", Pkg: "./cmd/lambda"},
	{Name: "writer", Pkg: "./cmd/writer"},
}

// zipTime is every entry's modification time: the zip format's epoch, so
// no build time leaks into the package.
var zipTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// buildFlags make the binary independent of where and when it is built.
var buildFlags = []string{"-trimpath", "-tags", "lambda.norpc", "-ldflags", "-s -w -buildid=", "-buildvcs=false"}

func main() {
	out := flag.String("out", "bin/package", "`DIR` for the zips (and the binaries, in DIR/NAME/bootstrap)")
	flag.Parse()
	sums, err := Package(context.Background(), ".", *out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lambdazip: %v\n", err)
		os.Exit(1)
	}
	for _, f := range Functions {
		fmt.Printf("%s  %s\n", sums[f.Name], filepath.Join(*out, f.Name+".zip"))
	}
}

// Package builds every function of the module rooted at root into outDir
// and returns the SHA-256 of each zip by name.
func Package(ctx context.Context, root, outDir string) (map[string]string, error) {
	sums := map[string]string{}
	for _, f := range Functions {
		bin := filepath.Join(outDir, f.Name, "bootstrap")
		if err := build(ctx, root, f.Pkg, bin); err != nil {
			return nil, err
		}
		zipPath := filepath.Join(outDir, f.Name+".zip")
		sum, err := zipBootstrap(bin, zipPath)
		if err != nil {
			return nil, err
		}
		sums[f.Name] = sum
	}
	return sums, nil
}

func build(ctx context.Context, root, pkg, out string) error {
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	args := append([]string{"build"}, buildFlags...)
	args = append(args, "-o", abs, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %v: %s", pkg, err, stderr.String())
	}
	return nil
}

// zipBootstrap writes a zip holding bin as "bootstrap" (mode 0755, fixed
// time, no extra fields) and returns its SHA-256.
func zipBootstrap(bin, zipPath string) (string, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(w, flate.BestCompression)
	})
	h := &zip.FileHeader{Name: "bootstrap", Method: zip.Deflate, Modified: zipTime}
	h.SetMode(0o755)
	w, err := zw.CreateHeader(h)
	if err != nil {
		return "", err
	}
	if _, err := w.Write(data); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	if err := os.WriteFile(zipPath, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), nil
}
