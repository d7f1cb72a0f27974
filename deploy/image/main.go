// Command image builds jaild's OCI image without a container engine, from
// files already on disk: a Debian root filesystem as a tar stream, whose
// /usr the sandboxes see (the daemon's "host" rootfs template binds the
// image's /usr read-only), and jaild's two static binaries.
// scripts/build-image.sh makes the root with mmdebstrap and calls it;
// `ctr images import` loads what it writes.
//
// The image is reproducible: the same root tar, binaries and epoch give the
// same digest. mmdebstrap makes the root reproducible itself (it honours
// SOURCE_DATE_EPOCH); here every entry's mtime becomes the epoch, owners
// stay numeric, and nothing of the build machine (time, user names, order
// of a directory listing) reaches a layer or the config.
//
// Two layers, so that a new jaild build ships only its binaries:
//   - the base: the root's entries in their order, without device nodes
//     (the runtime makes /dev) and without the package tools' caches;
//   - jaild: bin/jaild and bin/jaild-server in /usr/local/bin.
//
// go-containerregistry writes the image: it is the library crane, ko and
// kaniko build on, it makes layers from plain tar streams with no daemon,
// and it writes the OCI image layout that containerd, Docker and
// registries' copy tools read. The manifest digest it prints is the one a
// registry and `ctr images ls` show.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.base, "base", "", "tar of the root filesystem that makes the base layer (mmdebstrap's output)")
	flag.StringVar(&o.binDir, "bin", "bin", "directory holding jaild and jaild-server")
	flag.StringVar(&o.out, "out", "jaild-image.tar", "OCI layout archive to write (what `ctr images import` loads)")
	flag.StringVar(&o.ociDir, "oci", "", "also keep the OCI image layout in this directory (replaced)")
	flag.StringVar(&o.ref, "tag", "jaild:latest", "the image's name in the archive")
	flag.StringVar(&o.version, "version", "", "org.opencontainers.image.version label")
	flag.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision label")
	epoch := flag.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "seconds since 1970 for every timestamp (default $SOURCE_DATE_EPOCH, else 0)")
	flag.Parse()
	if flag.NArg() != 0 {
		fail(fmt.Errorf("unexpected arguments: %s", strings.Join(flag.Args(), " ")))
	}
	if o.base == "" {
		fail(fmt.Errorf("-base is required"))
	}
	if *epoch != "" {
		sec, err := strconv.ParseInt(*epoch, 10, 64)
		if err != nil || sec < 0 {
			fail(fmt.Errorf("-epoch %q: want a non-negative number of seconds", *epoch))
		}
		o.epoch = time.Unix(sec, 0).UTC()
	} else {
		o.epoch = time.Unix(0, 0).UTC()
	}
	digest, err := build(o)
	if err != nil {
		fail(err)
	}
	fmt.Println(digest)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}
