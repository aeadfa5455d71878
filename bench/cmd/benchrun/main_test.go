package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestPeersGoesWithUp checks that -peers alone is a usage error (exit 2)
// that names -up, before anything is built or started.
func TestPeersGoesWithUp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"-peers"}, &out, &errOut); code != 2 {
		t.Fatalf("run -peers = %d, want 2 (stderr %q)", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), "-peers goes with -up") {
		t.Fatalf("stderr %q does not say -peers goes with -up", errOut.String())
	}
	if out.Len() != 0 {
		t.Fatalf("stdout %q, want nothing", out.String())
	}
}
