package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"golang.org/x/net/http2"

	"github.com/wsgate/wsgate/internal/h2client"
	"github.com/wsgate/wsgate/internal/redistest"
)

const ioTimeout = 10 * time.Second

// buildBinary compiles this command into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "relay-backend")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// proc is one running relay-backend process.
type proc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{} // closed once the process exited and err is set
	err  error
}

// startProc runs bin with args and an ephemeral port, and returns once the
// process logged its listening address and /healthz answers 200.
func startProc(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-listen", "127.0.0.1:0", "-drain-window", "100ms"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			t.Log(line)
			if strings.Contains(line, "msg=listening") {
				for f := range strings.FieldsSeq(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						addrc <- a
					}
				}
			}
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case p.addr = <-addrc:
	case <-p.done:
		t.Fatalf("process exited before listening: %v", p.err)
	case <-time.After(ioTimeout):
		t.Fatal("no listening line")
	}
	deadline := time.Now().Add(ioTimeout)
	for {
		status, _ := get(p.addr, "/healthz")
		if status == 200 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz never answered 200 (last %d)", status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for the exit status.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.done:
		var ee *exec.ExitError
		if errors.As(p.err, &ee) {
			t.Fatalf("exit code %d, want 0", ee.ExitCode())
		} else if p.err != nil {
			t.Fatalf("wait: %v", p.err)
		}
	case <-time.After(ioTimeout):
		t.Fatal("process did not exit after SIGTERM")
	}
}

func get(addr, path string) (int, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func join(t *testing.T, addr, room string) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: ioTimeout}
	c, _, err := d.DialContext(context.Background(), "ws://"+addr+"/room/"+room+"?hello=1", nil)
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(ioTimeout))
	if _, h, err := c.ReadMessage(); err != nil || !strings.Contains(string(h), `"type":"hello"`) {
		t.Fatalf("hello: %q %v", h, err)
	}
	return c
}

// readUntilClosed reads c on its own goroutine, as a live client does, so
// that it answers the server's close; the error that ended it is sent on the
// returned channel.
func readUntilClosed(c *websocket.Conn) chan error {
	ended := make(chan error, 1)
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(2 * ioTimeout))
		for range 1000 {
			if _, _, err := c.ReadMessage(); err != nil {
				ended <- err
				return
			}
		}
		ended <- errors.New("too many messages")
	}()
	return ended
}

func TestBinary(t *testing.T) {
	bin := buildBinary(t)

	t.Run("single replica drains on SIGTERM", func(t *testing.T) {
		p := startProc(t, bin, "-id", "solo")
		if status, body := get(p.addr, "/info"); status != 200 || !strings.Contains(body, `"replica":"solo"`) {
			t.Fatalf("/info = %d %q", status, body)
		}
		ended := readUntilClosed(join(t, p.addr, "r"))
		p.stop(t)
		err := <-ended
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
			t.Fatalf("client saw %v, want close 1001", err)
		}
	})

	t.Run("two replicas on redis", func(t *testing.T) {
		srv := redistest.Start(t)
		p1 := startProc(t, bin, "-id", "one", "-redis", srv.URL())
		p2 := startProc(t, bin, "-id", "two", "-redis", srv.URL())
		a := join(t, p1.addr, "shared")
		b := join(t, p2.addr, "shared")
		_ = a.SetWriteDeadline(time.Now().Add(ioTimeout))
		if err := a.WriteMessage(websocket.BinaryMessage, []byte("across")); err != nil {
			t.Fatal(err)
		}
		_ = b.SetReadDeadline(time.Now().Add(ioTimeout))
		typ, m, err := b.ReadMessage()
		if err != nil || typ != websocket.BinaryMessage || string(m) != "across" {
			t.Fatalf("b read %d %q %v", typ, m, err)
		}
		endedA, endedB := readUntilClosed(a), readUntilClosed(b)
		p1.stop(t)
		p2.stop(t)
		for _, ended := range []chan error{endedA, endedB} {
			if err := <-ended; !websocket.IsCloseError(err, websocket.CloseGoingAway) {
				t.Fatalf("client saw %v, want close 1001", err)
			}
		}
	})

	// Redis killed under two replicas: every client of both gets close
	// 1012, not a bare TCP close; the processes stay up, unready (503)
	// until Redis is back, then serve again and still drain cleanly.
	t.Run("redis killed", func(t *testing.T) {
		srv := redistest.Start(t)
		procs := []*proc{
			startProc(t, bin, "-id", "one", "-redis", srv.URL()),
			startProc(t, bin, "-id", "two", "-redis", srv.URL()),
		}
		var ended []chan error
		for i := range 4 {
			ended = append(ended, readUntilClosed(join(t, procs[i%2].addr, []string{"x", "y"}[i/2])))
		}
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		for i, e := range ended {
			if err := <-e; !websocket.IsCloseError(err, websocket.CloseServiceRestart) {
				t.Errorf("client %d saw %v, want close 1012", i, err)
			}
		}
		for _, p := range procs {
			if status, body := get(p.addr, "/healthz"); status != 503 || body != "bus unavailable" {
				t.Errorf("/healthz with Redis gone = %d %q", status, body)
			}
		}
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			deadline := time.Now().Add(ioTimeout)
			for status, body := get(p.addr, "/healthz"); status != 200; status, body = get(p.addr, "/healthz") {
				if time.Now().After(deadline) {
					t.Fatalf("/healthz with Redis back = %d %q", status, body)
				}
				time.Sleep(10 * time.Millisecond)
			}
			ended := readUntilClosed(join(t, p.addr, "x"))
			p.stop(t)
			if err := <-ended; !websocket.IsCloseError(err, websocket.CloseGoingAway) {
				t.Fatalf("client saw %v, want close 1001", err)
			}
		}
	})

	// The port speaks HTTP/2 with prior knowledge too: a member over an
	// extended CONNECT stream and one over HTTP/1.1 share a room, and
	// SIGTERM gives the HTTP/2 connection GOAWAY and its member 1001.
	t.Run("HTTP/2 on the same port", func(t *testing.T) {
		p := startProc(t, bin, "-h2-max-streams", "3")
		hc, err := h2client.Dial(p.addr, ioTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer hc.Close()
		if v := hc.Settings()[http2.SettingMaxConcurrentStreams]; v != 3 {
			t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want 3", v)
		}
		a, _, err := hc.Dialer(ioTimeout).Dial("ws://relay/room/both?hello=1", nil)
		if err != nil {
			t.Fatalf("join over h2: %v", err)
		}
		_ = a.SetReadDeadline(time.Now().Add(ioTimeout))
		if _, h, err := a.ReadMessage(); err != nil || !strings.Contains(string(h), `"type":"hello"`) {
			t.Fatalf("hello over h2: %q %v", h, err)
		}
		b := join(t, p.addr, "both")
		_ = a.SetWriteDeadline(time.Now().Add(ioTimeout))
		if err := a.WriteMessage(websocket.TextMessage, []byte("over h2")); err != nil {
			t.Fatal(err)
		}
		_ = b.SetReadDeadline(time.Now().Add(ioTimeout))
		if _, m, err := b.ReadMessage(); err != nil || string(m) != "over h2" {
			t.Fatalf("HTTP/1.1 member read %q %v", m, err)
		}
		endedA, endedB := readUntilClosed(a), readUntilClosed(b)
		p.stop(t)
		for _, ended := range []chan error{endedA, endedB} {
			if err := <-ended; !websocket.IsCloseError(err, websocket.CloseGoingAway) {
				t.Fatalf("client saw %v, want close 1001", err)
			}
		}
		if g := hc.GoAways(); len(g) == 0 || g[0].Code != http2.ErrCodeNo {
			t.Fatalf("GOAWAYs: %+v", g)
		}
	})

	t.Run("bad flag", func(t *testing.T) {
		out, err := exec.Command(bin, "-send-queue", "0").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "send-queue") {
			t.Fatalf("exit %v, output %s", err, out)
		}
	})
}
