// Package buildinfo says which build of wsgate is running: the module
// version, the VCS revision and the Go version, as the Go toolchain
// stamped them into the binary. `wsgate -version` prints it and the
// gateway exports it as the wsgate_build_info metric.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Unknown stands for a field the binary does not carry: a build without
// VCS information (-buildvcs=false, or outside a checkout) has no revision.
const Unknown = "unknown"

// Info is one binary's build. It is plain data.
type Info struct {
	// Version is the main module's version: a tag such as v1.2.0 when
	// built by `go install ...@v1.2.0` or from a tagged checkout, a
	// pseudo-version for other commits, "(devel)" when the toolchain
	// could not tell.
	Version string
	// Revision is the VCS commit the binary was built from, or Unknown.
	Revision string
	// Modified is true when the checkout had uncommitted changes.
	Modified bool
	// Time is the commit's time (RFC 3339), or "" when unknown.
	Time string
	// GoVersion is the toolchain that built the binary, such as go1.26.8.
	GoVersion string
}

// Read returns the running binary's build.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return From(bi)
}

// From returns the build that bi describes; a nil bi (a binary built
// without module support) gives what the runtime knows.
func From(bi *debug.BuildInfo) Info {
	in := Info{Version: "(devel)", Revision: Unknown, GoVersion: runtime.Version()}
	if bi == nil {
		return in
	}
	if bi.Main.Version != "" {
		in.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		case "vcs.time":
			in.Time = s.Value
		}
	}
	return in
}

// String renders the build on one line, as `wsgate -version` prints it:
// "wsgate v1.2.0 revision 4f1c... (modified) 2026-11-30T08:00:00Z go1.26.8 linux/amd64".
func (in Info) String() string {
	s := "wsgate " + in.Version + " revision " + in.Revision
	if in.Modified {
		s += " (modified)"
	}
	if in.Time != "" {
		s += " " + in.Time
	}
	return s + " " + in.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
}
