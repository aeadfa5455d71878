package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testproc"
)

// TestSystemdUnit checks deploy/systemd/wsgate.service against wsgate and
// runs its ExecStart on loopback (the config it names being the reference
// conf/wsgate.toml its header installs) under a notify socket the test
// holds, as systemd would: READY=1 with the process's MAINPID; ExecReload's
// SIGHUP reloads; the documented SIGUSR2 upgrade hands the sockets to a new
// process that sends its own MAINPID (what NotifyAccess=all is for) and
// serves while the old one exits 0. No socket unit ships: wsgate opens and
// hands over its own sockets and takes none from systemd.
func TestSystemdUnit(t *testing.T) {
	u := readUnit(t, filepath.Join("systemd", "wsgate.service"))
	if _, err := os.Stat(filepath.Join("systemd", "wsgate.socket")); err == nil {
		t.Errorf("systemd/wsgate.socket exists, but wsgate does not take sockets from systemd (LISTEN_FDS)")
	}
	if v := u.one(t, "Service", "Type"); v != "notify" {
		t.Errorf("Type=%s: wsgate sends READY=1; want notify", v)
	}
	if v := u.one(t, "Service", "NotifyAccess"); v != "all" {
		t.Errorf("NotifyAccess=%s: the process after an upgrade must be heard; want all", v)
	}
	if v := u.one(t, "Service", "ExecReload"); v != "/bin/kill -HUP $MAINPID" {
		t.Errorf("ExecReload=%s: want SIGHUP to the main process", v)
	}
	if v := u.one(t, "Service", "KillSignal"); v != "SIGTERM" {
		t.Errorf("KillSignal=%s: SIGTERM drains", v)
	}
	exec0 := strings.Fields(u.one(t, "Service", "ExecStart"))
	if exec0[0] != "/usr/local/bin/wsgate" {
		t.Errorf("ExecStart runs %s", exec0[0])
	}
	args := exec0[1:]
	if v, _ := flagValue(args, "config"); v != "/etc/wsgate/wsgate.toml" {
		t.Fatalf("ExecStart -config %q: the unit's header installs conf/wsgate.toml as /etc/wsgate/wsgate.toml", v)
	}
	pidfile, ok := flagValue(args, "pidfile")
	if !ok || filepath.Dir(pidfile) != "/run/"+u.one(t, "Service", "RuntimeDirectory") {
		t.Errorf("-pidfile %q is not in the RuntimeDirectory", pidfile)
	}
	reference := filepath.Join(root, "conf", "wsgate.toml")
	text, err := os.ReadFile(reference)
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, reference, string(text))
	if stop, err := time.ParseDuration(u.one(t, "Service", "TimeoutStopSec") + "s"); err != nil || stop <= cfg.Gateway.DrainTimeout.Duration {
		t.Errorf("TimeoutStopSec %v must exceed drain_timeout %s", stop, cfg.Gateway.DrainTimeout)
	}
	wsgateCheck(t, withFlag(t, args, "config", reference))

	// Run it as systemd would, on loopback.
	gw, admin := testproc.FreeAddr(t), testproc.FreeAddr(t)
	local := writeTemp(t, "wsgate.toml", replaceOnce(t, string(text),
		fmt.Sprintf("listen = %q", cfg.Gateway.Listen), fmt.Sprintf("listen = %q", gw),
		fmt.Sprintf("listen = %q", cfg.Admin.Listen), fmt.Sprintf("listen = %q", admin),
		fmt.Sprintf("drain_window = %q", cfg.Gateway.DrainWindow.String()), `drain_window = "100ms"`))
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	args = withFlag(t, withFlag(t, args, "config", local), "pidfile", filepath.Join(dir, "wsgate.pid"))
	cmd := exec.Command(testproc.Build(t, "./cmd/wsgate"), args...)
	// The unit's Environment= lines, as systemd passes them.
	env := u["Service"]["Environment"]
	if !slices.Contains(env, "GODEBUG="+runtimeGODEBUG) {
		t.Errorf("Environment=%q: want GODEBUG=%s", env, runtimeGODEBUG)
	}
	cmd.Env = append(append(os.Environ(), env...), "NOTIFY_SOCKET="+sock)
	p := testproc.StartCmd(t, "wsgate", cmd)
	if pid := readMainPID(t, notify); pid != p.Pid() {
		t.Fatalf("MAINPID=%d, want the started process %d", pid, p.Pid())
	}

	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitReload(t, admin, 2)

	if err := p.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	next := readMainPID(t, notify)
	if next == p.Pid() || next <= 0 {
		t.Fatalf("after SIGUSR2, MAINPID=%d (old process %d)", next, p.Pid())
	}
	t.Cleanup(func() { stopPid(t, next) })
	// The process after the upgrade runs with the unit's GODEBUG too.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", next)); err != nil || !slices.Contains(strings.Split(string(b), "\x00"), "GODEBUG="+runtimeGODEBUG) {
		t.Errorf("the process after the upgrade lacks GODEBUG=%s (%v)", runtimeGODEBUG, err)
	}
	if code, err := p.Wait(20 * time.Second); code != 0 || err != nil {
		t.Fatalf("old process after the upgrade: exit %d, %v", code, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "wsgate.pid")); strings.TrimSpace(string(b)) != strconv.Itoa(next) {
		t.Errorf("pidfile holds %q, want the new process %d", b, next)
	}
	if code := get(t, "http://"+admin+"/readyz"); code != http.StatusOK {
		t.Errorf("after the upgrade /readyz answers %d", code)
	}
}

// readMainPID reads notify messages until one with READY=1 and MAINPID.
func readMainPID(t *testing.T, c *net.UnixConn) int {
	t.Helper()
	buf := make([]byte, 4096)
	for range 20 {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		n, _, err := c.ReadFromUnix(buf)
		if err != nil {
			t.Fatalf("notify socket: %v", err)
		}
		msg := string(buf[:n])
		if !strings.Contains(msg, "READY=1") {
			continue
		}
		for _, line := range strings.Split(msg, "\n") {
			if v, ok := strings.CutPrefix(line, "MAINPID="); ok {
				pid, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("notify %q: %v", msg, err)
				}
				return pid
			}
		}
		t.Fatalf("notify %q: READY=1 without MAINPID", msg)
	}
	t.Fatalf("no READY=1 in 20 notify messages")
	return 0
}

// waitReload polls GET /api/reload until the config generation is gen.
func waitReload(t *testing.T, admin string, gen int) {
	t.Helper()
	var last string
	for range 100 {
		resp, err := http.Get("http://" + admin + "/api/reload")
		if err == nil {
			var v struct {
				Result     string `json:"result"`
				Generation int    `json:"generation"`
			}
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err == nil && v.Result == "ok" && v.Generation == gen {
				return
			}
			last = fmt.Sprintf("%+v %v", v, err)
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no reload to generation %d: %s", gen, last)
}

// stopPid sends SIGTERM to pid, a process the test's gateway started, and
// waits (bounded) for it to go; then SIGKILL if it did not.
func stopPid(t *testing.T, pid int) {
	if gone(pid) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for range 200 {
		if gone(pid) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("process %d still running 10 s after SIGTERM; killing it", pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}
