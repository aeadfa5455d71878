package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/testproc"
)

// gatewayConfig is the config startGateway writes, for tests that start
// wsgate themselves.
func gatewayConfig(t *testing.T, st *stack) string {
	t.Helper()
	st.gwAddr, st.adminAddr = testproc.FreeAddr(t), testproc.FreeAddr(t)
	var b strings.Builder
	fmt.Fprintf(&b, "[gateway]\nlisten = %q\ndrain_window = \"2s\"\ndrain_timeout = \"15s\"\n[admin]\nlisten = %q\n", st.gwAddr, st.adminAddr)
	b.WriteString("[[pools]]\nname = \"relay\"\n  [pools.health]\n  interval = \"100ms\"\n  timeout = \"80ms\"\n")
	for _, a := range st.relayAddr {
		fmt.Fprintf(&b, "  [[pools.nodes]]\n  addr = %q\n", a)
	}
	b.WriteString("[[routes]]\npool = \"relay\"\n")
	path := filepath.Join(t.TempDir(), "wsgate.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// churn dials and closes WebSockets through the gateway from workers
// goroutines, each every period, until stop; it counts successes and keeps
// every failure.
type churn struct {
	ok       atomic.Int64
	mu       sync.Mutex
	failures []string
	wg       sync.WaitGroup
}

func startChurn(addr string, workers int, period time.Duration, stop <-chan struct{}) *churn {
	c := &churn{}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	for w := range workers {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			tick := time.NewTicker(period)
			defer tick.Stop()
			for i := 0; i < 100_000; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				conn, resp, err := d.Dial(fmt.Sprintf("ws://%s/room/churn-%d", addr, w), nil)
				if err != nil {
					status := 0
					if resp != nil {
						status = resp.StatusCode
					}
					c.mu.Lock()
					c.failures = append(c.failures, fmt.Sprintf("%s (status %d)", err, status))
					c.mu.Unlock()
					continue
				}
				c.ok.Add(1)
				conn.Close()
			}
		}()
	}
	return c
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// startUpgradable starts wsgate on the config file cfg with a pidfile and
// waits until it is ready. A process it starts on SIGUSR2 is stopped by the
// PID in the pidfile when the test ends.
func startUpgradable(t *testing.T, st *stack, cfg string) (*testproc.Proc, string) {
	t.Helper()
	pidfile := filepath.Join(t.TempDir(), "wsgate.pid")
	old := testproc.Start(t, "wsgate", testproc.Build(t, "./cmd/wsgate"), "-config", cfg, "-pidfile", pidfile)
	testproc.WaitHTTP(t, "http://"+st.adminAddr+"/readyz", http.StatusOK, 30*time.Second)
	oldPid := old.Pid()
	t.Cleanup(func() {
		// The new process was started by the old one; stop it by its PID.
		if pid := readPid(t, pidfile); pid != 0 && pid != oldPid {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Signal(syscall.SIGKILL)
			}
		}
	})
	return old, pidfile
}

// TestRestartRefusesNobody upgrades a running gateway with SIGUSR2 while
// handshakes churn at about 200/s: the new process takes over the same
// sockets, no handshake fails, every tunnel of the old process is closed
// with 1001, and the old process exits 0. With protocol = "h2" the old
// process's tunnels run on its HTTP/2 connections to the relays until
// its drain closes them, and the new process opens its own.
func TestRestartRefusesNobody(t *testing.T) {
	for _, protocol := range []string{"http1", "h2"} {
		t.Run(protocol, func(t *testing.T) { restartRefusesNobody(t, protocol) })
	}
}

// withProtocol sets pools.protocol in the config file cfg written by
// gatewayConfig.
func withProtocol(t *testing.T, cfg, protocol string) string {
	t.Helper()
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.Replace(string(b), "name = \"relay\"\n", fmt.Sprintf("name = \"relay\"\nprotocol = %q\n", protocol), 1))
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func restartRefusesNobody(t *testing.T, protocol string) {
	st := &stack{}
	startRelays(t, st, 2, "")
	old, pidfile := startUpgradable(t, st, withProtocol(t, gatewayConfig(t, st), protocol))
	oldPid := old.Pid()

	var tunnels []*client
	for i := range 40 {
		tunnels = append(tunnels, dial(t, st.gwAddr, i, fmt.Sprintf("old-%d", i%4)))
	}
	stop := make(chan struct{})
	ch := startChurn(st.gwAddr, 4, 20*time.Millisecond, stop)
	waitFor(t, func() bool { return ch.ok.Load() >= 100 })

	sig := time.Now()
	if err := old.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { pid := readPid(t, pidfile); return pid != 0 && pid != oldPid })
	ready := time.Since(sig)
	codes := readCloses(tunnels, 30*time.Second)
	for i, c := range codes {
		if c != "1001" {
			t.Errorf("old tunnel %d closed with %s, want 1001", i, c)
		}
	}
	if code, err := old.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("old process: exit %d, %v", code, err)
	}
	t.Logf("SIGUSR2 -> new process ready %v -> old process exited %v (drain_window 2s)", ready.Round(time.Millisecond), time.Since(sig).Round(time.Millisecond))
	newPid := readPid(t, pidfile)
	if newPid == 0 || newPid == oldPid {
		t.Fatalf("pidfile holds %d after the upgrade (old %d)", newPid, oldPid)
	}
	mark := ch.ok.Load()
	waitFor(t, func() bool { return ch.ok.Load() >= mark+100 })
	close(stop)
	ch.wg.Wait()
	testproc.WaitHTTP(t, "http://"+st.adminAddr+"/readyz", http.StatusOK, 10*time.Second)
	if len(ch.failures) > 0 {
		t.Fatalf("%d of %d handshakes failed across the restart: %v", len(ch.failures), int(ch.ok.Load())+len(ch.failures), ch.failures)
	}
	t.Logf("handshakes across the restart: %d ok, 0 failed; new pid %d", ch.ok.Load(), newPid)

	// The new process drains like any other.
	p, _ := os.FindProcess(newPid)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return p.Signal(syscall.Signal(0)) != nil })
}

// TestSIGHUPReloads rewrites the config and sends SIGHUP: the generation
// moves on and the new cap applies, with the old tunnel untouched.
func TestSIGHUPReloads(t *testing.T) {
	st := &stack{}
	startRelays(t, st, 2, "")
	cfg := gatewayConfig(t, st)
	gw := testproc.Start(t, "wsgate", testproc.Build(t, "./cmd/wsgate"), "-config", cfg, "-watch=false")
	testproc.WaitHTTP(t, "http://"+st.adminAddr+"/readyz", http.StatusOK, 30*time.Second)
	c := dial(t, st.gwAddr, 0, "hup")
	b, _ := os.ReadFile(cfg)
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), "name = \"relay\"\n", "name = \"relay\"\nmax_conns_per_node = 1\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := gw.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitGeneration(t, st.adminAddr, 2)
	// Cap 1 per node, one tunnel open: one more fits, the next gets 503.
	second := dial(t, st.gwAddr, 1, "hup")
	_, resp, err := websocket.DefaultDialer.Dial("ws://"+st.gwAddr+"/room/hup", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third client with a cap of 1 per node: %v %v, want 503", err, resp)
	}
	second.conn.Close()
	if err := c.conn.WriteMessage(websocket.TextMessage, []byte("still here")); err != nil {
		t.Fatalf("tunnel from before the reload: %v", err)
	}
	c.conn.Close()
}

// waitGeneration waits until the gateway whose admin listens on adminAddr
// says (GET /api/reload) that config generation n is in force.
func waitGeneration(t *testing.T, adminAddr string, n int) {
	t.Helper()
	want := fmt.Sprintf(`"generation": %d`, n)
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + adminAddr + "/api/reload")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return strings.Contains(string(b), want)
	})
}

// waitFor polls cond until it holds, failing after 30s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTwoProcessesShareAPort starts two wsgate processes on one port with
// reuse_port. It pins a bug where the command ignored reuse_port and the
// second process failed with "address already in use".
func TestTwoProcessesShareAPort(t *testing.T) {
	st := &stack{}
	startRelays(t, st, 1, "")
	path := gatewayConfig(t, st)
	b, _ := os.ReadFile(path)
	shared := strings.Replace(string(b), "[gateway]\n", "[gateway]\nreuse_port = true\n", 1)
	second := strings.Replace(shared, st.adminAddr, testproc.FreeAddr(t), 1)
	if err := os.WriteFile(path, []byte(shared), 0o644); err != nil {
		t.Fatal(err)
	}
	path2 := path + ".2"
	if err := os.WriteFile(path2, []byte(second), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := testproc.Build(t, "./cmd/wsgate")
	one := testproc.Start(t, "wsgate-1", bin, "-config", path, "-watch=false")
	two := testproc.Start(t, "wsgate-2", bin, "-config", path2, "-watch=false")
	testproc.WaitHTTP(t, "http://"+st.adminAddr+"/readyz", http.StatusOK, 30*time.Second)
	waitFor(t, func() bool { return strings.Contains(two.Output(), "wsgate listening") || two.Signal(0) != nil })
	if !strings.Contains(two.Output(), "wsgate listening") {
		t.Fatalf("second process did not start:\n%s", two.Output())
	}
	dial(t, st.gwAddr, 0, "shared").conn.Close()
	_ = one
}

// TestRestartAfterListenChange reloads a config whose gateway.listen moved
// to a new address, then restarts with SIGUSR2. It pins a bug where the
// old socket was handed over under the new address: the new process
// served the old address and never opened the new one. Now the new
// process listens on the new address and, once the old one has exited,
// nothing serves the old address.
func TestRestartAfterListenChange(t *testing.T) {
	st := &stack{}
	startRelays(t, st, 1, "")
	cfg := gatewayConfig(t, st)
	pidfile := filepath.Join(t.TempDir(), "wsgate.pid")
	old := testproc.Start(t, "wsgate", testproc.Build(t, "./cmd/wsgate"), "-config", cfg, "-pidfile", pidfile, "-watch=false")
	testproc.WaitHTTP(t, "http://"+st.adminAddr+"/readyz", http.StatusOK, 30*time.Second)
	oldPid := old.Pid()
	t.Cleanup(func() {
		if pid := readPid(t, pidfile); pid != 0 && pid != oldPid {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Signal(syscall.SIGKILL)
			}
		}
	})
	dial(t, st.gwAddr, 0, "before").conn.Close()

	moved := testproc.FreeAddr(t)
	b, _ := os.ReadFile(cfg)
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), st.gwAddr, moved, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := old.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitGeneration(t, st.adminAddr, 2)
	if err := old.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { pid := readPid(t, pidfile); return pid != 0 && pid != oldPid })
	if code, err := old.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("old process: exit %d, %v", code, err)
	}
	dial(t, moved, 1, "after").conn.Close()
	if c, err := net.DialTimeout("tcp", st.gwAddr, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("the old address %s is still served after the restart onto %s", st.gwAddr, moved)
	}
}
