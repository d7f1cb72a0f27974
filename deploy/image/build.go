package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// options are the image's inputs and where it goes.
type options struct {
	base     string    // root filesystem tar
	binDir   string    // holds jaild and jaild-server
	out      string    // OCI layout archive
	ociDir   string    // OCI image layout, if set
	ref      string    // name:tag in the archive
	version  string    // label
	revision string    // label
	epoch    time.Time // every timestamp
}

// binaries are what the jaild layer holds, from options.binDir, installed
// under binPath.
var binaries = []string{"jaild", "jaild-server"}

const binPath = "usr/local/bin"

// build writes the image and returns its manifest digest.
func build(o options) (string, error) {
	tag, err := name.NewTag(o.ref)
	if err != nil {
		return "", fmt.Errorf("-tag %q: %w", o.ref, err)
	}
	base, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return baseLayer(o.base, o.epoch) },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return "", fmt.Errorf("base layer from %s: %w", o.base, err)
	}
	bins, err := binLayer(o.binDir, o.epoch)
	if err != nil {
		return "", err
	}
	jaild, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(bins)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return "", fmt.Errorf("jaild layer: %w", err)
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1),
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: o.epoch}, CreatedBy: "mmdebstrap root: " + filepath.Base(o.base)}},
		mutate.Addendum{Layer: jaild, History: v1.History{Created: v1.Time{Time: o.epoch}, CreatedBy: "jaild binaries"}})
	if err != nil {
		return "", err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: o.epoch}
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = imageConfig(o)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return "", err
	}
	dir := o.ociDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "jaild-image-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(tmp)
		dir = filepath.Join(tmp, "oci")
	}
	if err := writeLayout(dir, tag, img); err != nil {
		return "", err
	}
	if err := archiveDir(dir, o.out, o.epoch); err != nil {
		return "", fmt.Errorf("write %s: %w", o.out, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// imageConfig is how a runtime starts the image: `jaild serve` on its
// defaults unless the pod's args say otherwise (the Helm chart's do).
func imageConfig(o options) v1.Config {
	labels := map[string]string{
		"org.opencontainers.image.title":       "jaild",
		"org.opencontainers.image.description": "runs untrusted commands in fresh libcontainer sandboxes (needs a privileged container)",
		"org.opencontainers.image.created":     o.epoch.Format(time.RFC3339),
	}
	if o.version != "" {
		labels["org.opencontainers.image.version"] = o.version
	}
	if o.revision != "" {
		labels["org.opencontainers.image.revision"] = o.revision
	}
	return v1.Config{
		Entrypoint:   []string{"/" + binPath + "/jaild"},
		Cmd:          []string{"serve"},
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
		StopSignal:   "SIGTERM",
		WorkingDir:   "/",
		Labels:       labels,
	}
}

// writeLayout writes an OCI layout at dir holding img alone, named tag:
// containerd's import takes the whole name from io.containerd.image.name,
// OCI tools the tag from org.opencontainers.image.ref.name.
func writeLayout(dir string, tag name.Tag, img v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          containerdName(tag),
		"org.opencontainers.image.ref.name": tag.TagStr(),
	}))
}

// containerdName is tag as containerd names images: Docker Hub is
// docker.io, where go-containerregistry says index.docker.io.
func containerdName(tag name.Tag) string {
	reg := tag.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	return reg + "/" + tag.RepositoryStr() + ":" + tag.TagStr()
}

// archiveDir writes the tree at dir as a tar to file, in lexical order,
// every entry timestamped epoch and owned by root: an OCI layout archive
// (`ctr images import`, `docker load`, skopeo's oci-archive:) whose bytes
// depend on the layout alone.
func archiveDir(dir, file string, epoch time.Time) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: epoch, Format: tar.FormatPAX}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// baseLayer streams the root tar at file as a layer: entries in their
// order, normalized by keep.
func baseLayer(file string, epoch time.Time) (io.ReadCloser, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		err := filterTar(f, pw, epoch)
		f.Close()
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// filterTar copies the entries of r that belong in an image to w, with
// their timestamps set to epoch and names and owners made plain.
func filterTar(r io.Reader, w io.Writer, epoch time.Time) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("read root tar: %w", err)
		}
		if !keep(h) {
			continue
		}
		if err := tw.WriteHeader(normalize(h, epoch)); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// dropped are files of the package tools that a root keeps and an image
// must not: caches rebuilt on demand, and backups with a build's state.
var dropped = []string{
	"var/cache/apt/archives/",
	"var/lib/apt/lists/",
	"var/cache/ldconfig/aux-cache",
	"var/cache/debconf/config.dat-old",
	"var/cache/debconf/templates.dat-old",
	"var/log/",
}

// keep reports whether an entry of the root belongs in the image. Device
// nodes do not: every runtime makes /dev itself, and a layer with device
// nodes cannot be unpacked without privileges.
func keep(h *tar.Header) bool {
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	default:
		return false
	}
	n := cleanName(h.Name)
	for _, d := range dropped {
		// The directories themselves stay: only what is under them goes.
		if strings.HasSuffix(d, "/") && strings.HasPrefix(n, d) && n != d {
			return false
		}
		if n == d {
			return false
		}
	}
	return n != ""
}

// normalize is h as the layer records it. Extended attributes (file
// capabilities among them) are dropped: no sandbox may gain a capability,
// and a layer's xattrs depend on the filesystem it was built on.
func normalize(h *tar.Header, epoch time.Time) *tar.Header {
	n := &tar.Header{
		Typeflag: h.Typeflag,
		Name:     cleanName(h.Name),
		Linkname: h.Linkname,
		Size:     h.Size,
		Mode:     h.Mode & 0o7777,
		Uid:      h.Uid,
		Gid:      h.Gid,
		ModTime:  epoch,
		Format:   tar.FormatPAX,
	}
	if h.Typeflag == tar.TypeLink {
		n.Linkname = cleanName(h.Linkname)
	}
	if h.Typeflag == tar.TypeDir {
		n.Name += "/"
	}
	if h.Typeflag != tar.TypeReg {
		n.Size = 0
	}
	return n
}

// cleanName is a tar entry's path relative to the root, without "./" or a
// trailing slash ("" for the root itself).
func cleanName(p string) string {
	p = path.Clean("/" + p)
	return strings.TrimPrefix(p, "/")
}

// binLayer is the tar of the jaild layer.
func binLayer(dir string, epoch time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"usr/", "usr/local/", binPath + "/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, b := range binaries {
		data, err := os.ReadFile(filepath.Join(dir, b))
		if err != nil {
			return nil, fmt.Errorf("jaild layer: %w (scripts/setup.sh builds it)", err)
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: binPath + "/" + b, Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
