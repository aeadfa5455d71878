package conf

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultSettle is how long Watch waits after the last change before it
// calls back, so an editor's several writes become one reload.
const DefaultSettle = 100 * time.Millisecond

// Watch calls onChange whenever the file at path may have new content,
// until ctx ends. It watches the file's directory rather than the file, so
// editors that save by writing a new file and renaming it over the old one
// (vim, emacs, sed -i) are seen too. When path is a symlink, a change of
// the file it resolves to counts as a change of the file: a Kubernetes
// ConfigMap volume updates by renaming a new "..data" symlink over the old
// one (path -> ..data/wsgate.toml -> ..<timestamp>/wsgate.toml), which
// names no event after path itself. Bursts of events within settle
// (0 = DefaultSettle) give one call.
func Watch(ctx context.Context, path string, settle time.Duration, onChange func()) error {
	if settle <= 0 {
		settle = DefaultSettle
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		w.Close()
		return fmt.Errorf("watch %s: %w", path, err)
	}
	go watchLoop(ctx, w, abs, resolve(abs), settle, onChange)
	return nil
}

// resolve is the file abs names once every symlink on the way is
// followed, or "" when it cannot be resolved now (the file is missing).
func resolve(abs string) string {
	r, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return ""
	}
	return r
}

// watchLoop turns the directory's events into calls of onChange: an event
// on the file itself, or any event after which the file resolves to
// another existing target than before (real holds the last one seen).
func watchLoop(ctx context.Context, w *fsnotify.Watcher, abs, real string, settle time.Duration, onChange func()) {
	defer w.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			self := filepath.Clean(ev.Name) == abs && ev.Has(fsnotify.Write|fsnotify.Create|fsnotify.Rename)
			now := resolve(abs)
			moved := now != "" && now != real // a missing file is no news
			real = now
			if self || moved {
				timer.Reset(settle)
			}
		case _, ok := <-w.Errors:
			if !ok {
				return
			}
		case <-timer.C:
			onChange()
		}
	}
}
