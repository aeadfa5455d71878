package deprules

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/wsgate/wsgate/"

// gatewaySide are the module's folders on the gateway's side of the wire:
// the relay must not depend on them, so that it stays a stand-in for any
// team's relay.
var gatewaySide = []string{"gateway", "balancer", "health", "conf", "plugins", "cmd", "bench", "deploy"}

// TestDependencyRules holds the rules issue 20 set for the tree, tests
// included: nothing in internal/ imports gateway/ or relay-backend/ (they
// are leaf libraries), and relay-backend/ imports nothing of the gateway's
// side. The load generator, which speaks the relay's protocol, lives in
// bench/ for that reason. And the production binary, cmd/wsgate (its
// tests aside), links no package of relay-backend/: the demo, which runs
// the reference relay in process, is cmd/wsgate-demo for that reason.
func TestDependencyRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-test", "-f", "{{.ImportPath}}|{{join .Deps \",\"}}",
		module+"internal/...", module+"relay-backend/...", module+"cmd/wsgate").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	checked, wsgate := 0, false
	for line := range strings.Lines(string(out)) {
		pkg, deps, _ := strings.Cut(strings.TrimSpace(line), "|")
		name := strings.TrimPrefix(strings.Fields(pkg)[0], module)
		var banned []string
		switch {
		case strings.HasPrefix(name, "internal/"):
			banned = []string{"gateway", "relay-backend"}
		case strings.HasPrefix(name, "relay-backend"):
			banned = gatewaySide
		case pkg == module+"cmd/wsgate":
			banned = []string{"relay-backend"}
			wsgate = true
		default:
			continue
		}
		checked++
		for _, d := range strings.Split(deps, ",") {
			rel, ok := strings.CutPrefix(d, module)
			if !ok {
				continue
			}
			for _, b := range banned {
				if rel == b || strings.HasPrefix(rel, b+"/") {
					t.Errorf("%s depends on %s", pkg, d)
				}
			}
		}
	}
	if checked == 0 || !wsgate {
		t.Fatalf("go list named no package of internal/ or relay-backend/, or not cmd/wsgate:\n%s", out)
	}
}
