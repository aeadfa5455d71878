package gateway

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/internal/testproc"
)

// TestACMEFirstStartLogSaysNoFault pins lines that cried wolf on a
// gateway's first ACME start: certmagic's INFO lines carried
// error="open .../users/.../ops.json: no such file or directory" (how it
// learns there is no account yet) and a Go pointer (cache=0x1f36...).
// The lines stay, without those fields.
func TestACMEFirstStartLogSaysNoFault(t *testing.T) {
	ports := newACMEPorts(t)
	_, table := startACMEEnv(t, ports, 0)
	table += fmt.Sprintf("  domains = [\"one.acme.test\"]\n  storage = %q\n", t.TempDir())
	var buf testproc.Buffer
	e := newEnvLog(t, 1, acmeGatewayConfig(ports, table, ""), jsonLog(&buf))
	waitACMELeaf(t, e.srv.TLSAddr().String(), "one.acme.test")
	pointer := regexp.MustCompile(`"0x[0-9a-f]{6,}"`)
	var acme, account, maintenance int
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, l)
		}
		if m["component"] != "acme" {
			continue
		}
		acme++
		if strings.Contains(l, "no such file or directory") {
			t.Errorf("line carries a missing file's error: %s", l)
		}
		if pointer.MatchString(l) {
			t.Errorf("line carries a Go pointer: %s", l)
		}
		switch m["msg"] {
		case "creating new account because no account for configured email is known to us":
			account++
		case "started background certificate maintenance":
			maintenance++
		}
	}
	if acme == 0 || account == 0 || maintenance == 0 {
		t.Errorf("%d certmagic lines, %d saying a new account is made, %d saying maintenance started; want each > 0; log:\n%s", acme, account, maintenance, buf.String())
	}
}
