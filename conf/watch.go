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
// (vim, emacs, sed -i, kubectl's symlink swaps) are seen too. Bursts of
// events within settle (0 = DefaultSettle) give one call.
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
	go watchLoop(ctx, w, abs, settle, onChange)
	return nil
}

func watchLoop(ctx context.Context, w *fsnotify.Watcher, abs string, settle time.Duration, onChange func()) {
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
			if filepath.Clean(ev.Name) != abs || !ev.Has(fsnotify.Write|fsnotify.Create|fsnotify.Rename) {
				continue
			}
			timer.Reset(settle)
		case _, ok := <-w.Errors:
			if !ok {
				return
			}
		case <-timer.C:
			onChange()
		}
	}
}
