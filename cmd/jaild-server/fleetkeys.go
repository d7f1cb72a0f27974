package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jaild/jaild/internal/command"
	"github.com/jaild/jaild/route"
)

// fleetKeys are a fleet daemon's key files: the signing key (--fleet-key)
// and the keys it also accepts (--fleet-key-accept). They are read at the
// start, and again whenever one of them changes, so that a daemon steps
// through a key rotation without a restart, which would lose its sessions.
type fleetKeys struct {
	sign   string
	accept []string
	every  time.Duration // how often watch looks; 0: never
	log    *slog.Logger

	// seen are the stamps of the files as last read, whether they loaded
	// or were refused: a refused set is not read again until it changes.
	seen []fileStamp
}

// newFleetKeys checks the file names: no empty one, none given twice.
func newFleetKeys(sign string, accept []string, log *slog.Logger) (*fleetKeys, error) {
	k := &fleetKeys{sign: sign, log: log}
	names := []string{filepath.Clean(sign)}
	for _, v := range accept {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f == "" {
				return nil, command.UsageError("--fleet-key-accept: an empty file name")
			}
			switch i := slices.Index(names, filepath.Clean(f)); {
			case i == 0:
				return nil, command.UsageError("--fleet-key-accept %s is the --fleet-key file: the signing key is always accepted", f)
			case i > 0:
				return nil, command.UsageError("--fleet-key-accept %s is given twice", f)
			}
			names = append(names, filepath.Clean(f))
			k.accept = append(k.accept, f)
		}
	}
	return k, nil
}

// load reads every key file (route.LoadKey: length, permissions) and
// refuses one key held in two files, which is a rotation step gone wrong
// (the new key copied over the old one, a Secret named twice).
func (k *fleetKeys) load() (sign []byte, accept [][]byte, err error) {
	files := k.files()
	// Stamped before reading: a file changed while it is read is read
	// again at the next look.
	k.seen = k.stamps()
	keys := make([][]byte, len(files))
	for i, f := range files {
		if keys[i], err = route.LoadKey(f); err != nil {
			flag := "--fleet-key-accept"
			if i == 0 {
				flag = "--fleet-key"
			}
			return nil, nil, fmt.Errorf("%s: %w", flag, err)
		}
		for j := range i {
			if bytes.Equal(keys[i], keys[j]) {
				return nil, nil, fmt.Errorf("--fleet-key-accept %s holds the same key as %s: give each key once", f, files[j])
			}
		}
	}
	return keys[0], keys[1:], nil
}

// files are the key files, the signing key's first.
func (k *fleetKeys) files() []string { return append([]string{k.sign}, k.accept...) }

// stamps are the files' stamps now; a file that cannot be stat'ed has the
// zero stamp.
func (k *fleetKeys) stamps() []fileStamp {
	var out []fileStamp
	for _, f := range k.files() {
		var s fileStamp
		if fi, err := os.Stat(f); err == nil {
			s = stampOf(fi)
		}
		out = append(out, s)
	}
	return out
}

// watch reloads rt's keys when the files change, every k.every, until ctx
// ends.
func (k *fleetKeys) watch(ctx context.Context, rt *route.Router) {
	if k.every == 0 {
		return
	}
	t := time.NewTicker(k.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.reload(rt)
		}
	}
}

// reload gives rt the files' keys if any file changed since it was last
// read. A set that fails to load (a file half written, open to others, a
// key in two files while an operator swaps them) keeps the keys in use: a
// daemon refusing every session id would be worse.
func (k *fleetKeys) reload(rt *route.Router) {
	if slices.Equal(k.stamps(), k.seen) {
		return
	}
	sign, accept, err := k.load()
	if err == nil {
		err = rt.SetKeys(sign, accept)
	}
	if err != nil {
		k.log.Warn("fleet key files changed but cannot be loaded; keeping the keys in use", "err", err)
		return
	}
	k.log.Info("fleet keys reloaded", keyAttrs(sign, accept)...)
}

// keyAttrs name the keys in a log line, by their route.KeyID.
func keyAttrs(sign []byte, accept [][]byte) []any {
	ids := []string{}
	for _, a := range accept {
		ids = append(ids, route.KeyID(a))
	}
	return []any{"sign_key", route.KeyID(sign), "accept_keys", ids}
}
