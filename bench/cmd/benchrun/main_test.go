package main

import (
	"bytes"
	"context"
	"os"
	"slices"
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

// TestShippedGODEBUG checks that make bench gives the gateways the GODEBUG
// the Dockerfile and the systemd unit ship with.
func TestShippedGODEBUG(t *testing.T) {
	for file, want := range map[string]string{
		"../../../Dockerfile":                    "ENV " + shippedGODEBUG,
		"../../../deploy/systemd/wsgate.service": "Environment=" + shippedGODEBUG,
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Split(string(b), "\n"), want) {
			t.Errorf("%s has no line %q: make bench would not measure the gateway as it ships", file, want)
		}
	}
}

func TestWithShippedGODEBUG(t *testing.T) {
	tests := []struct {
		name     string
		env, out []string
	}{
		{"none", nil, []string{shippedGODEBUG}},
		{"others kept", []string{"GOGC=200"}, []string{shippedGODEBUG, "GOGC=200"}},
		{"own GODEBUG wins", []string{"GOGC=200", "GODEBUG=gctrace=1"}, []string{"GOGC=200", "GODEBUG=gctrace=1"}},
		{"empty GODEBUG wins", []string{"GODEBUG="}, []string{"GODEBUG="}},
		{"a name that only starts alike", []string{"GODEBUGX=1"}, []string{shippedGODEBUG, "GODEBUGX=1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := withShippedGODEBUG(tc.env); !slices.Equal(got, tc.out) {
				t.Fatalf("withShippedGODEBUG(%q) = %q, want %q", tc.env, got, tc.out)
			}
		})
	}
}
