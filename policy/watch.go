package policy

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watch starts watching the directory tree. inotify is not recursive: each
// directory is added, and each one created later as its event arrives.
func (e *Engine) watch() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("policy: watch %s: %w", e.opts.Dir, err)
	}
	e.watcher = w
	if err := e.addTree(e.opts.Dir); err != nil {
		// The load fails too and says why; a directory made later is
		// not seen, so say that here.
		e.log.Error("policy directory cannot be watched: restart jaild after fixing it", "dir", e.opts.Dir, "err", err)
	}
	e.wg.Add(1)
	go e.loop()
	return nil
}

func (e *Engine) addTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != root && strings.HasPrefix(d.Name(), ".") && !strings.HasPrefix(d.Name(), "..") {
			return filepath.SkipDir
		}
		return e.watcher.Add(p)
	})
}

// loop reloads once events have stopped for the debounce interval.
func (e *Engine) loop() {
	defer e.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-e.stop:
			return
		case ev, ok := <-e.watcher.Events:
			if !ok {
				return
			}
			if ev.Has(fsnotify.Create) {
				// A new directory: watch it and what is already in it.
				_ = e.addTree(ev.Name)
			}
			timer.Reset(e.opts.Debounce)
		case err, ok := <-e.watcher.Errors:
			if !ok {
				return
			}
			// An overflow loses events: reload to be sure.
			e.log.Warn("policy watch", "dir", e.opts.Dir, "err", err)
			timer.Reset(e.opts.Debounce)
		case <-timer.C:
			e.reload()
		}
	}
}
