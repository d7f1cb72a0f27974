package policy

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// The watch follows the directory by its path, not by the inode it had at
// start. inotify watches inodes: after mv P P.old; mv P.new P a watch on P
// sees P.old, and after rm -rf P and a restore it sees nothing. So the
// parent is watched too, for P (or a symlink named P) being created,
// removed, renamed or replaced, and after every settled burst of events the
// whole watch is made again from what the path names now, before the set
// is reloaded: a change made after the new watch is armed raises an event,
// one made before is in the reload. Symlinks are followed where they lead:
// a symlinked root (P -> P.v2) is watched at its target, and the directory
// of every symlinked .rego file's target too, so the Kubernetes ConfigMap
// layout (P/x.rego -> ..data/x.rego, ..data -> ..2026_11_25_xx swapped by
// rename) reloads on the swap, which renames ..data inside P.

// watch arms the first watch and starts the loop that re-arms it.
func (e *Engine) watch() error {
	w, err := e.arm()
	if err != nil {
		return err
	}
	e.wg.Add(1)
	go e.loop(w)
	return nil
}

// arm returns a new watcher on the directory's parent and on every
// directory of the tree as the path names it now. A missing tree is no
// error (its return is seen in the parent); a missing parent is logged,
// as nothing would then tell that the directory came back.
func (e *Engine) arm() (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("policy: watch %s: %w", e.opts.Dir, err)
	}
	dir := filepath.Clean(e.opts.Dir)
	if err := w.Add(filepath.Dir(dir)); err != nil {
		e.log.Error("policy directory's parent cannot be watched: a replaced or restored directory is not seen until restart", "dir", dir, "err", err)
	}
	if err := addTree(w, dir); err != nil && !os.IsNotExist(err) {
		e.log.Warn("policy watch", "dir", dir, "err", err)
	}
	return w, nil
}

// addTree watches root (through a symlink) and each directory under it,
// and the directory each symlinked .rego file leads to; it skips what
// regoFiles skips, except ..-prefixed directories (a ConfigMap's
// ..2026_11_25_xx, where its links lead).
func addTree(w *fsnotify.Watcher, root string) error {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	return filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 && strings.HasSuffix(d.Name(), ".rego") {
			if target, err := filepath.EvalSymlinks(p); err == nil {
				_ = w.Add(filepath.Dir(target))
			}
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		if p != real && strings.HasPrefix(d.Name(), ".") && !strings.HasPrefix(d.Name(), "..") {
			return filepath.SkipDir
		}
		return w.Add(p)
	})
}

// loop reloads once events have stopped for the debounce interval,
// re-arming the watch first. It owns the watcher and closes it.
func (e *Engine) loop(w *fsnotify.Watcher) {
	defer e.wg.Done()
	defer func() { _ = w.Close() }()
	dir := filepath.Clean(e.opts.Dir)
	parent := filepath.Dir(dir)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-e.stop:
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if filepath.Dir(ev.Name) == parent && ev.Name != dir {
				continue // the directory's siblings
			}
			timer.Reset(e.opts.Debounce)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			// An overflow loses events: reload to be sure.
			e.log.Warn("policy watch", "dir", e.opts.Dir, "err", err)
			timer.Reset(e.opts.Debounce)
		case <-timer.C:
			if nw, err := e.arm(); err != nil {
				e.log.Error("policy watch cannot be re-armed: keeping the old one", "dir", e.opts.Dir, "err", err)
			} else {
				_ = w.Close()
				w = nw
			}
			e.reload()
		}
	}
}
