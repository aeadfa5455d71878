package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeDeploymentGODEBUG pins that the README's real deployment
// starts the gateway with the GODEBUG the image and the systemd unit give
// it (docs/operations.md, "The Go runtime's monitor"): it started
// bin/wsgate without it, so a reader who followed the README ran the
// gateway at more CPU per handshake than the deployments the project
// ships.
func TestReadmeDeploymentGODEBUG(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## A real deployment\n")
	if !ok {
		t.Fatal("README.md has no ## A real deployment section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	runs := 0
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		for _, line := range strings.Split(block[1], "\n") {
			cmd, _, _ := strings.Cut(line, "#")
			f := strings.Fields(cmd)
			i := index(f, "bin/wsgate")
			if i < 0 || index(f, "-check") >= 0 {
				continue // not the gateway, or only its -check
			}
			runs++
			if !strings.Contains(strings.Join(f[:i], " "), "GODEBUG="+runtimeGODEBUG) {
				t.Errorf("README.md starts the gateway without GODEBUG=%s: %s", runtimeGODEBUG, strings.TrimSpace(line))
			}
		}
	}
	if runs == 0 {
		t.Fatal("README.md's real deployment starts no bin/wsgate")
	}
}
