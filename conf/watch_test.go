package conf

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchSeesWritesAndRenames pins both ways editors save: writing the
// file in place, and writing a new file renamed over it.
func TestWatchSeesWritesAndRenames(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "wsgate.toml")
	if err := os.WriteFile(path, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	calls := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Watch(ctx, path, 20*time.Millisecond, func() { calls <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	expect := func(what string) {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("no callback after %s", what)
		}
	}
	if err := os.WriteFile(path, []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("an in-place write")
	tmp := filepath.Join(dir, ".wsgate.toml.swp")
	if err := os.WriteFile(tmp, []byte("c"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	expect("a rename over the file")
	// A sibling file does not count.
	if err := os.WriteFile(filepath.Join(dir, "other.toml"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("d"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("a second write")
	select {
	case <-calls:
		t.Fatal("a burst gave more than one call")
	case <-time.After(100 * time.Millisecond):
	}
}
