package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/testproc"
)

// startHAProxy runs HAProxy with a cleartext HTTP front end (HTTP/2
// found by its preface, with extended CONNECT, RFC 8441; HTTP/1.1
// otherwise) in front of the HTTP/1.1 server at backend, to which it
// passes each WebSocket, a stream or a connection, as an HTTP/1.1
// upgrade, and returns the front end's address once it listens. It
// skips the test when HAProxy is not installed.
func startHAProxy(t *testing.T, backend string) string {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/haproxy"); err != nil {
			t.Skip("haproxy not installed (Debian: apt-get install haproxy)")
		}
	}
	front := testproc.FreeAddr(t)
	cfgPath := filepath.Join(t.TempDir(), "haproxy.cfg")
	haCfg := fmt.Sprintf(`global
  maxconn 1000
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  timeout tunnel 1h
frontend fe
  bind %s
  default_backend node
backend node
  server n1 %s
`, front, backend)
	if err := os.WriteFile(cfgPath, []byte(haCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	testproc.Start(t, "haproxy", bin, "-f", cfgPath, "-db")
	for i := 0; ; i++ {
		nc, err := net.Dial("tcp", front)
		if err == nil {
			nc.Close()
			return front
		}
		if i == 1000 {
			t.Fatalf("haproxy does not listen on %s", front)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// closingServer is an HTTP/1.1 WebSocket server for the HAProxy tests.
// On /close/CODE it waits for one message, sends closingMessages
// messages and its close frame (CODE, reason "bye CODE") at once, and
// drops the connection (with ?wait, only once the client's close came
// back); on /echo it echoes until the close handshake. Anything else is
// answered 200 (health probes).
func closingServer(t *testing.T) string {
	t.Helper()
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			return
		}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if r.URL.Path == "/echo" {
			for {
				typ, msg, err := c.ReadMessage()
				if err != nil {
					return // the close frame was answered by the default handler
				}
				if err := c.WriteMessage(typ, msg); err != nil {
					return
				}
			}
		}
		code, err := strconv.Atoi(r.URL.Path[len("/close/"):])
		if err != nil {
			return
		}
		if _, _, err := c.ReadMessage(); err != nil {
			return
		}
		for i := range closingMessages {
			if err := c.WriteMessage(websocket.TextMessage, []byte(fmt.Sprint("last ", i))); err != nil {
				return
			}
		}
		_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(code, fmt.Sprint("bye ", code)))
		if r.URL.Query().Has("wait") {
			for {
				if _, _, err := c.ReadMessage(); err != nil {
					return
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// closingMessages is how many messages closingServer sends before its
// close frame.
const closingMessages = 3

// TestH2HAProxyKeepsTheNodesEnd pins the loss of WebSockets' ends behind
// HAProxy on an h2 pool: HAProxy sends a stream's last DATA (the server's
// close frame), END_STREAM, then RST_STREAM(CANCEL) microseconds later,
// and the gateway threw the unread data away at the reset: about four
// ends in ten reached the client as the gateway's 1012 instead of the
// server's last messages and close, and a client that sent a valid
// message then a bad frame lost the echo of the message. Every message
// and the server's close code and reason must reach the client, as they
// do over an http1 pool, which runs the same rounds for comparison.
func TestH2HAProxyKeepsTheNodesEnd(t *testing.T) {
	front := startHAProxy(t, closingServer(t))
	rounds := 1000
	if testing.Short() {
		rounds = 100
	}
	for _, proto := range []string{"h2", "http1"} {
		t.Run(proto, func(t *testing.T) {
			n := rounds
			if proto == "http1" {
				n = rounds / 5 // the comparison: a few are enough
			}
			var logBuf testproc.Buffer
			e := newEnvLog(t, 0, "[log]\naccess = true\n"+poolConf(fmt.Sprintf("protocol = %q\nh2_connections = 1", proto), front),
				slog.New(slog.NewTextHandler(&logBuf, nil)))
			var failed atomic.Int32
			var wg sync.WaitGroup
			next := atomic.Int32{}
			for range 8 {
				wg.Go(func() {
					for {
						i := int(next.Add(1)) - 1
						if i >= n {
							return
						}
						if err := haproxyRound(e, i); err != nil {
							if failed.Add(1) <= 5 {
								t.Errorf("round %d: %v", i, err)
							}
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%d of %d WebSockets lost their end", failed.Load(), n)
			e.waitZero()
			// The access log says how each ended: never as a node gone.
			ends := map[string]int{}
			for _, l := range strings.Split(logBuf.String(), "\n") {
				if i := strings.Index(l, " end="); i >= 0 {
					ends[strings.Fields(l[i+1:])[0]]++
				}
			}
			t.Logf("access log: %v", ends)
			if ends["end=node_gone"] > 0 {
				t.Errorf("%d tunnels ended as node_gone", ends["end=node_gone"])
			}
		})
	}
}

// haproxyRound runs one WebSocket of TestH2HAProxyKeepsTheNodesEnd: round
// i picks a close code, a normal close handshake, or a client's bad frame.
func haproxyRound(e *env, i int) error {
	codes := []int{1000, 1002, 1003, 1007, 1011}
	if i%7 == 6 {
		return badFrameRound(e)
	}
	code := codes[i%len(codes)]
	path := fmt.Sprint("/close/", code)
	if i%7 == 5 {
		path += "?wait" // the server waits for the client's close
	}
	c, _, err := e.dial(path, nil)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := c.WriteMessage(websocket.TextMessage, []byte("go")); err != nil {
		return err
	}
	for k := range closingMessages {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return fmt.Errorf("%s: message %d: %w", path, k, err)
		}
		if want := fmt.Sprint("last ", k); string(msg) != want {
			return fmt.Errorf("%s: message %q, want %q", path, msg, want)
		}
	}
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != code || ce.Text != fmt.Sprint("bye ", code) {
		return fmt.Errorf("%s: after the messages: %v, want the server's close %d", path, err, code)
	}
	return nil
}

// badFrameRound sends a valid message then a frame of a reserved opcode:
// the client must get the echo of the message, then the gateway's 1002.
func badFrameRound(e *env) error {
	c, _, err := e.dial("/echo", nil)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := c.WriteMessage(websocket.TextMessage, []byte("valid")); err != nil {
		return err
	}
	// FIN, opcode 0x3 (reserved), masked, empty.
	if _, err := c.UnderlyingConn().Write([]byte{0x83, 0x80, 1, 2, 3, 4}); err != nil {
		return err
	}
	_, msg, err := c.ReadMessage()
	if err != nil || string(msg) != "valid" {
		return fmt.Errorf("bad frame: echo %q %v, want the valid message's", msg, err)
	}
	_, _, err = c.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseProtocolError) {
		return fmt.Errorf("bad frame: %v, want 1002", err)
	}
	return nil
}
