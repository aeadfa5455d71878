package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	platform := " " + runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want Info
		line string
	}{
		{"from a checkout", &debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/wsgate/wsgate", Version: "v1.2.0"},
			Settings: []debug.BuildSetting{
				{Key: "vcs", Value: "git"},
				{Key: "vcs.revision", Value: "4f1c0ffee"},
				{Key: "vcs.time", Value: "2026-11-30T08:00:00Z"},
				{Key: "vcs.modified", Value: "true"},
			},
		}, Info{Version: "v1.2.0", Revision: "4f1c0ffee", Modified: true, Time: "2026-11-30T08:00:00Z", GoVersion: "go1.26.8"},
			"wsgate v1.2.0 revision 4f1c0ffee (modified) 2026-11-30T08:00:00Z go1.26.8" + platform},
		{"without VCS information", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			Info{Version: "(devel)", Revision: Unknown, GoVersion: "go1.26.8"},
			"wsgate (devel) revision unknown go1.26.8" + platform},
		{"no build info", nil, Info{Version: "(devel)", Revision: Unknown, GoVersion: runtime.Version()},
			"wsgate (devel) revision unknown " + runtime.Version() + platform},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := From(tc.bi)
			if got != tc.want {
				t.Fatalf("From = %+v, want %+v", got, tc.want)
			}
			if got.String() != tc.line {
				t.Fatalf("String = %q, want %q", got.String(), tc.line)
			}
		})
	}
}
