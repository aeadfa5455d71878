package conf

import (
	"context"
	"fmt"
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

// TestWatchSeesConfigMapSwap pins the Kubernetes ConfigMap update, which
// the name filter used to drop: the kubelet mounts path as a symlink to
// ..data/wsgate.toml, ..data as a symlink to a timestamped directory, and
// updates by writing a new timestamped directory, pointing a ..data_tmp
// symlink at it, renaming ..data_tmp over ..data and removing the old
// directory. No event names wsgate.toml; the swap must still be seen, and
// the callback must read the new content through path.
func TestWatchSeesConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "wsgate.toml")
	// write makes a timestamped directory holding content, as the kubelet
	// does, and returns its name.
	write := func(stamp, content string) string {
		t.Helper()
		ts := "..2026_11_30_08_" + stamp
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ts, "wsgate.toml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return ts
	}
	old := write("00_00.000000001", "v1")
	if err := os.Symlink(old, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "wsgate.toml"), path); err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Watch(ctx, path, 20*time.Millisecond, func() {
		b, _ := os.ReadFile(path)
		seen <- string(b)
	}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"v2", "v3"} {
		ts := write(fmt.Sprintf("%02d_00.000000001", i+1), want)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(ts, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
		old = ts
		select {
		case got := <-seen:
			if got != want {
				t.Fatalf("swap %d: callback read %q, want %q", i+1, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no callback after ConfigMap swap %d", i+1)
		}
	}
}
