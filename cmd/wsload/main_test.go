package main

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/bench/loadgen"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

// startRelay serves an in-process relay on a loopback port.
func startRelay(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := relay.New(relay.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go func() { _ = r.Serve(ln) }()
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return ln.Addr().String()
}

// wsload runs the built binary and returns its stdout, stderr and exit
// code.
func wsload(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	bin := testproc.Build(t, "./cmd/wsload")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run wsload: %v", err)
	}
	return out.String(), errb.String(), code
}

func TestIdleJSON(t *testing.T) {
	addr := startRelay(t)
	out, errs, code := wsload(t, "idle", "-url", "ws://"+addr+"/room/r%d", "-n", "50", "-hold", "1s", "-json",
		"-threshold", "dropped==0", "-threshold", "connected>=50")
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	var r loadgen.Report
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value on stdout:\n%s", out)
	}
	if r.Scenario != "idle" || r.Connected != 50 || r.Held != 50 || !r.Passed || len(r.Thresholds) != 2 || r.RSSBytes <= 0 {
		t.Fatalf("report %+v", r)
	}
	if r.Connect.Hist != nil {
		t.Error("the final report carries raw histograms")
	}
	if !strings.Contains(errs, "wsload idle") {
		t.Errorf("no summary table on stderr:\n%s", errs)
	}
}

func TestExitCodes(t *testing.T) {
	addr := startRelay(t)
	url := "ws://" + addr + "/room/r%d"
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"threshold violated", []string{"idle", "-url", url, "-n", "5", "-hold", "100ms", "-threshold", "connected>5"}, exitFailed},
		{"unknown metric", []string{"idle", "-url", url, "-threshold", "nope<1"}, exitUsage},
		{"unknown scenario", []string{"soak", "-url", url}, exitUsage},
		{"no url", []string{"idle"}, exitUsage},
		{"procs merge", []string{"fanout", "-url", url, "-rooms", "4", "-members", "2", "-rate", "20", "-duration", "300ms", "-procs", "2",
			"-threshold", "delivered==100", "-threshold", "connected==8"}, exitOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errs, code := wsload(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errs)
			}
		})
	}
}

// closedAddr returns a loopback address nothing listens on: a dial there
// is refused at once.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestExitOneWhenNothingConnects pins issue 19 item 6: every scenario run
// against a port that refuses every connection exited 0 (the report said
// "connected 0 failed 50"), although exit 1 means the run failed. Each
// scenario now exits 1 when it falls short of its target, unless a
// threshold on the connection counts says otherwise.
func TestExitOneWhenNothingConnects(t *testing.T) {
	url := "ws://" + closedAddr(t) + "/room/r%d"
	fan := []string{"-rooms", "2", "-members", "2", "-duration", "200ms", "-settle", "100ms"}
	chaos := append(slices.Clone(fan), "-after", "50ms", "-window", "50ms", "-give-up", "300ms", "-kill-cmd", "true")
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"idle", []string{"idle", "-n", "5", "-hold", "100ms"}, exitFailed},
		{"churn", []string{"churn", "-c", "2", "-duration", "300ms"}, exitFailed},
		{"fanout", append([]string{"fanout"}, fan...), exitFailed},
		{"reconnect-storm", []string{"reconnect-storm", "-n", "4", "-after", "100ms", "-window", "50ms", "-give-up", "300ms"}, exitFailed},
		{"kill", append([]string{"kill"}, chaos...), exitFailed},
		{"drain", append([]string{"drain"}, chaos...), exitFailed},
		{"idle procs", []string{"idle", "-n", "4", "-hold", "100ms", "-procs", "2"}, exitFailed},
		// Thresholds on the connection counts replace the target: a
		// run that expects refusals can say so.
		{"refusal expected", []string{"fanout", "-rooms", "2", "-members", "2", "-duration", "100ms", "-settle", "100ms",
			"-threshold", "connected==0", "-threshold", "failed_by.dial==4"}, exitOK},
		{"shortfall allowed", []string{"idle", "-n", "5", "-hold", "100ms", "-threshold", "short<=5"}, exitOK},
		{"shortfall over", []string{"idle", "-n", "5", "-hold", "100ms", "-threshold", "short<=4"}, exitFailed},
		{"storm not_back allowed", []string{"reconnect-storm", "-n", "4", "-after", "100ms", "-threshold", "not_back<=4"}, exitFailed}, // short==0 still holds
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{tt.args[0], "-url", url, "-timeout", "2s"}, tt.args[1:]...)
			out, errs, code := wsload(t, append(args, "-json")...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errs)
			}
			var r loadgen.Report
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("no report: %v\n%s", err, out)
			}
			if r.Connected != 0 || r.Failed == 0 || r.Passed != (tt.code == exitOK) {
				t.Fatalf("report connected %d failed %d passed %v thresholds %+v", r.Connected, r.Failed, r.Passed, r.Thresholds)
			}
		})
	}
}

// headerServer answers a WebSocket upgrade with 101 when the request
// carries every header of want, else 401, and counts the upgrades.
func headerServer(t *testing.T, want http.Header) (string, *atomic.Int64) {
	t.Helper()
	var upgrades atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, vs := range want {
			if !slices.Equal(r.Header.Values(k), vs) {
				http.Error(w, "missing "+k, http.StatusUnauthorized)
				return
			}
		}
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("no hijacker")
			return
		}
		conn, brw, err := hj.Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			base64.StdEncoding.EncodeToString(sum[:]))
		if brw.Flush() != nil {
			return
		}
		upgrades.Add(1)
		// Hold the connection until the client goes; a close frame from
		// the client is answered by closing the socket.
		_, _ = io.Copy(io.Discard, brw)
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), &upgrades
}

// TestHeaderFlag pins issue 19 item 6: -H 'Name: value' (repeatable) is
// sent on every handshake, so a route behind a header-token plugin can
// be loaded; without it the same route refuses every connection.
func TestHeaderFlag(t *testing.T) {
	addr, upgrades := headerServer(t, http.Header{"X-Token": {"s3cret"}, "X-Tenant": {"a", "b"}})
	url := "ws://" + addr + "/room/r%d"
	out, errs, code := wsload(t, "idle", "-url", url, "-n", "6", "-hold", "100ms", "-procs", "2",
		"-H", "X-Token: s3cret", "-H", "X-Tenant: a", "-H", "X-Tenant:b", "-json")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if n := upgrades.Load(); n != 6 {
		t.Fatalf("%d upgrades reached the server, want 6\n%s", n, errs)
	}
	out, errs, code = wsload(t, "idle", "-url", url, "-n", "3", "-hold", "100ms", "-json")
	if code != exitFailed || !strings.Contains(out, `"http_401":3`) {
		t.Fatalf("without -H: exit %d, want %d with 3 http_401\nstdout: %s\nstderr: %s", code, exitFailed, out, errs)
	}
}

// TestHeaderFlagRefused pins issue 19 item 6: a malformed -H, or one
// naming a header wsload writes itself, is a usage error.
func TestHeaderFlagRefused(t *testing.T) {
	url := "ws://" + closedAddr(t) + "/room/r%d"
	for _, h := range []string{"X-Token", "X-Token s3cret", ": v", "Bad Name: v", "X-Token: a\rb", "X-Token: a\x7fb", "Upgrade: h2c",
		"sec-websocket-key: x", "Host: example.com", "Content-Length: 5"} {
		t.Run(h, func(t *testing.T) {
			out, errs, code := wsload(t, "idle", "-url", url, "-n", "1", "-hold", "10ms", "-H", h)
			if code != exitUsage || !strings.Contains(errs, "-H") {
				t.Fatalf("exit %d, want %d with an error naming -H\nstdout: %s\nstderr: %s", code, exitUsage, out, errs)
			}
		})
	}
}

// TestDrainSignalUSR2 runs the scenario that proves an upgrade with the
// signal an upgrade uses: `wsload drain -kill-pid PID -signal USR2`
// against a wsgate process in front of a relay. wsload refused the
// signal (`unknown signal "USR2"`, a usage error) and the only way was
// -kill-cmd. Now the old process hands its sockets over and drains:
// every client gets 1001, comes back (to the new process, the pidfile
// says which), and no write is lost.
func TestDrainSignalUSR2(t *testing.T) {
	relayAddr := startRelay(t)
	dir := t.TempDir()
	gwAddr := testproc.FreeAddr(t)
	cfg := filepath.Join(dir, "wsgate.toml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `[gateway]
listen = %q
drain_window = "500ms"
drain_timeout = "10s"
[admin]
listen = ""
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = %q
[[routes]]
pool = "relay"
`, gwAddr, relayAddr), 0o644); err != nil {
		t.Fatal(err)
	}
	pidfile := filepath.Join(dir, "wsgate.pid")
	old := testproc.Start(t, "wsgate", testproc.Build(t, "./cmd/wsgate"), "-config", cfg, "-pidfile", pidfile, "-watch=false")
	oldPid := old.Pid()
	t.Cleanup(func() {
		// The new process was started by the old one: stop it by its PID.
		if pid := readPid(pidfile); pid != 0 && pid != oldPid {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Signal(syscall.SIGKILL)
			}
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for readPid(pidfile) != oldPid {
		if time.Now().After(deadline) {
			t.Fatalf("wsgate did not write its pidfile within 30s:\n%s", old.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}

	out, errs, code := wsload(t, "drain", "-url", "ws://"+gwAddr+"/room/r%d", "-rooms", "2", "-members", "3", "-rate", "20",
		"-duration", "2s", "-after", "500ms", "-window", "300ms", "-give-up", "20s", "-settle", "3s",
		"-kill-pid", strconv.Itoa(oldPid), "-signal", "USR2", "-json")
	if code != exitOK {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitOK, out, errs)
	}
	var r loadgen.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("no report: %v\n%s", err, out)
	}
	if r.CloseCodes["1001"] != 6 || r.Back != 6 || r.NotBack != 0 || r.LostWrites != 0 || r.Acked == 0 {
		t.Fatalf("close codes %v, back %d, not back %d, lost %d, acked %d\n%s", r.CloseCodes, r.Back, r.NotBack, r.LostWrites, r.Acked, errs)
	}
	if c, err := old.Wait(20 * time.Second); err != nil || c != 0 {
		t.Fatalf("the old process: exit %d, %v", c, err)
	}
	if pid := readPid(pidfile); pid == 0 || pid == oldPid {
		t.Fatalf("the pidfile names %d after the upgrade (old %d)", pid, oldPid)
	}
}

// readPid reads a pidfile, 0 when it is missing or not yet written.
func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}
