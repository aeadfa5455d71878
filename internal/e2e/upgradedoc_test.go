package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testproc"
)

// The paths the upgrade's commands in docs/operations.md name, which the
// test replaces with its own.
const (
	docBinary  = "/usr/local/bin/wsgate"
	docPidfile = "/run/wsgate.pid"
)

// upgradeSteps returns the shell commands of the upgrade in
// docs/operations.md ("Restarting without refusing anyone") as written:
// the section's one sh block.
func upgradeSteps(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Restarting without refusing anyone\n")
	if !ok {
		t.Fatal("docs/operations.md has no ## Restarting without refusing anyone section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) != 1 {
		t.Fatalf("found %d sh blocks in the restart section, want the upgrade's one", len(blocks))
	}
	steps := blocks[0][1]
	for _, s := range []string{docBinary, docPidfile, "wsgate-new", "USR2"} {
		if !strings.Contains(steps, s) {
			t.Fatalf("the upgrade's commands do not name %s:\n%s", s, steps)
		}
	}
	return steps
}

// copyExecutable copies the file src to dst with mode 0755.
func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDocumentedUpgrade runs the binary upgrade of docs/operations.md as
// a reader does: wsgate runs from an installed path, wsgate-new is in the
// working directory, and the section's commands run as written (only
// the binary's and the pidfile's paths are the test's). The doc said
// `cp wsgate-new /usr/local/bin/wsgate`, which fails with "Text file
// busy" while wsgate runs from that file, so the upgrade stopped there.
// Now the new process runs the installed file, the old one's WebSocket
// gets 1001 and the old process exits 0, and the client comes back to
// the new process.
func TestDocumentedUpgrade(t *testing.T) {
	steps := upgradeSteps(t)
	dir := t.TempDir()
	bin, pidfile := filepath.Join(dir, "bin", "wsgate"), filepath.Join(dir, "wsgate.pid")
	built := testproc.Build(t, "./cmd/wsgate")
	copyExecutable(t, built, bin)
	copyExecutable(t, built, filepath.Join(dir, "wsgate-new"))
	steps = strings.NewReplacer(docBinary, bin, docPidfile, pidfile).Replace(steps)

	st := &stack{}
	startRelays(t, st, 1, "")
	old := testproc.Start(t, "wsgate", bin, "-config", gatewayConfig(t, st), "-pidfile", pidfile, "-watch=false")
	oldPid := old.Pid()
	t.Cleanup(func() {
		// The new process was started by the old one: stop it by its PID.
		if pid := readPid(t, pidfile); pid != 0 && pid != oldPid {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Signal(syscall.SIGKILL)
			}
		}
	})
	waitFor(t, func() bool { return readPid(t, pidfile) == oldPid })
	c := dial(t, st.gwAddr, 1, "upgrade")

	sh := exec.Command("sh", "-e", "-c", steps)
	sh.Dir = dir
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the documented upgrade failed: %v\n%s\ncommands:\n%s", err, out, steps)
	}
	waitFor(t, func() bool { pid := readPid(t, pidfile); return pid != 0 && pid != oldPid })
	newPid := readPid(t, pidfile)
	exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", newPid))
	if err != nil {
		t.Fatal(err)
	}
	installed, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(exe, installed) {
		t.Fatalf("the new process %d does not run the installed %s", newPid, bin)
	}
	if codes := readCloses([]*client{c}, 30*time.Second); codes[0] != "1001" {
		t.Fatalf("the old process's WebSocket closed with %s, want 1001", codes[0])
	}
	if code, err := old.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("the old process: exit %d, %v", code, err)
	}
	// The old process is gone: the client comes back to the new one.
	back := dial(t, st.gwAddr, 2, "upgrade")
	_ = back.conn.Close()
	testproc.WaitHTTP(t, "http://"+st.adminAddr+"/readyz", http.StatusOK, 10*time.Second)
	p, err := os.FindProcess(newPid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return p.Signal(syscall.Signal(0)) != nil })
}
