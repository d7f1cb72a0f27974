package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// writeRoot writes a small root tar with the kinds of entries a real
// mmdebstrap root has, each entry's mtime set to mtime.
func writeRoot(t *testing.T, file string, mtime time.Time) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	entries := []tar.Header{
		{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755},
		{Typeflag: tar.TypeSymlink, Name: "./bin", Linkname: "usr/bin"},
		{Typeflag: tar.TypeDir, Name: "./usr/", Mode: 0o755},
		{Typeflag: tar.TypeDir, Name: "./usr/bin/", Mode: 0o755},
		{Typeflag: tar.TypeReg, Name: "./usr/bin/sh", Mode: 0o755, Uname: "builder", Uid: 0},
		{Typeflag: tar.TypeLink, Name: "./usr/bin/sh2", Linkname: "./usr/bin/sh"},
		{Typeflag: tar.TypeChar, Name: "./dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3},
		{Typeflag: tar.TypeDir, Name: "./var/cache/apt/archives/", Mode: 0o755},
		{Typeflag: tar.TypeReg, Name: "./var/cache/apt/archives/x.deb", Mode: 0o644},
		{Typeflag: tar.TypeReg, Name: "./etc/shadow", Mode: 0o640, Gid: 42,
			PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "x"}},
	}
	for _, h := range entries {
		h.ModTime = mtime
		body := []byte(nil)
		if h.Typeflag == tar.TypeReg {
			body = []byte("content of " + h.Name)
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func writeBins(t *testing.T, dir string) {
	t.Helper()
	for _, b := range binaries {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\necho "+b+"\n"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

func testOptions(t *testing.T, rootMtime time.Time) options {
	dir := t.TempDir()
	writeRoot(t, filepath.Join(dir, "root.tar"), rootMtime)
	writeBins(t, dir)
	return options{
		base: filepath.Join(dir, "root.tar"), binDir: dir, out: filepath.Join(dir, "image.tar"),
		ociDir: filepath.Join(dir, "oci"), ref: "jaild:test", version: "v1", epoch: time.Unix(1764028800, 0).UTC(),
	}
}

// The same inputs give the same digest, whatever the build machine's
// clock, the files' own times or the output paths; another epoch gives
// another.
func TestReproducible(t *testing.T) {
	a := testOptions(t, time.Unix(1, 0))
	b := testOptions(t, time.Now())
	da, err := build(a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := build(b)
	if err != nil {
		t.Fatal(err)
	}
	if da != db {
		t.Fatalf("same inputs, two digests: %s and %s", da, db)
	}
	fa, _ := os.ReadFile(a.out)
	fb, _ := os.ReadFile(b.out)
	if string(fa) != string(fb) {
		t.Error("same inputs, the archives differ")
	}
	b.epoch = b.epoch.Add(time.Second)
	dc, err := build(b)
	if err != nil {
		t.Fatal(err)
	}
	if dc == da {
		t.Error("another epoch gave the same digest")
	}
}

// The image holds the root without device nodes, caches or xattrs, the two
// binaries, and a config that starts jaild serve.
func TestImageContent(t *testing.T) {
	o := testOptions(t, time.Now())
	digest, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	img := imageFromArchive(t, o.out, digest)
	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	base := readLayer(t, layers[0])
	for _, want := range []string{"bin", "usr/", "usr/bin/sh", "usr/bin/sh2", "etc/shadow", "var/cache/apt/archives/"} {
		if _, ok := base[want]; !ok {
			t.Errorf("base layer lacks %s (has %v)", want, keys(base))
		}
	}
	for _, gone := range []string{"dev/null", "var/cache/apt/archives/x.deb"} {
		if _, ok := base[gone]; ok {
			t.Errorf("base layer holds %s", gone)
		}
	}
	if h := base["usr/bin/sh2"]; h != nil && h.Linkname != "usr/bin/sh" {
		t.Errorf("hard link target %q, want usr/bin/sh", h.Linkname)
	}
	if h := base["etc/shadow"]; h != nil && (len(h.PAXRecords) != 0 || h.Gid != 42 || h.Mode != 0o640) {
		t.Errorf("etc/shadow: pax %v gid %d mode %o", h.PAXRecords, h.Gid, h.Mode)
	}
	for name, h := range base {
		if !h.ModTime.Equal(o.epoch) || h.Uname != "" {
			t.Errorf("%s: mtime %v uname %q", name, h.ModTime, h.Uname)
		}
	}
	bins := readLayer(t, layers[1])
	for _, b := range binaries {
		if h := bins["usr/local/bin/"+b]; h == nil || h.Mode != 0o755 {
			t.Errorf("jaild layer: %s is %+v", b, h)
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/jaild"}) || !slices.Equal(cfg.Config.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %v cmd %v", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	if !cfg.Created.Time.Equal(o.epoch) || cfg.Config.Labels["org.opencontainers.image.version"] != "v1" {
		t.Errorf("created %v labels %v", cfg.Created, cfg.Config.Labels)
	}
}

// imageFromArchive unpacks the OCI layout archive at file and returns its
// one image, checking its name and digest.
func imageFromArchive(t *testing.T, file, digest string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			os.MkdirAll(p, 0o755)
			continue
		}
		data, _ := io.ReadAll(tr)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("OCI layout index: %+v, %v", m, err)
	}
	desc := m.Manifests[0]
	if desc.Digest.String() != digest || desc.Annotations["io.containerd.image.name"] != "docker.io/library/jaild:test" ||
		desc.Annotations["org.opencontainers.image.ref.name"] != "test" {
		t.Errorf("index entry %+v, want digest %s", desc, digest)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestMissingBinary(t *testing.T) {
	o := testOptions(t, time.Now())
	os.Remove(filepath.Join(o.binDir, "jaild-server"))
	if _, err := build(o); err == nil {
		t.Fatal("built an image without jaild-server")
	}
}

type layerReader interface {
	Uncompressed() (io.ReadCloser, error)
}

func readLayer(t *testing.T, l layerReader) map[string]*tar.Header {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
}

func keys(m map[string]*tar.Header) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
