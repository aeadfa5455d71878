package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

const ioTimeout = 10 * time.Second

// server is one relay serving on a loopback port.
type server struct {
	*relay.Relay
	addr string
}

func startRelay(t *testing.T, o relay.Options) *server {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testproc.Logger(t) // before the close below: its lines are kept too
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	r := relay.New(o)
	served := make(chan error, 1)
	go func() { served <- r.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("close relay: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &server{Relay: r, addr: ln.Addr().String()}
}

// dial joins room on s. With hello it also reads the hello frame, which the
// relay sends only once the client is a member, and returns it.
func dial(t *testing.T, s *server, room string, hello bool) (*websocket.Conn, []byte) {
	t.Helper()
	u := "ws://" + s.addr + "/room/" + room
	if hello {
		u += "?hello=1"
	}
	d := websocket.Dialer{HandshakeTimeout: ioTimeout}
	c, resp, err := d.Dial(u, nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (status %d)", u, err, status)
	}
	t.Cleanup(func() { _ = c.Close() })
	if !hello {
		return c, nil
	}
	typ, b := read(t, c)
	if typ != websocket.TextMessage {
		t.Fatalf("hello frame type %d", typ)
	}
	return c, b
}

func read(t *testing.T, c *websocket.Conn) (int, []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(ioTimeout))
	typ, b, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return typ, b
}

func send(t *testing.T, c *websocket.Conn, typ int, b []byte) {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(ioTimeout))
	if err := c.WriteMessage(typ, b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// closeCode reads until the connection ends and returns the close code the
// server sent (-1 if it ended without a close frame).
func closeCode(t *testing.T, c *websocket.Conn) (int, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(2 * ioTimeout))
	for range 1 << 20 {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code, ce.Text
		}
		return -1, err.Error()
	}
	t.Fatal("connection did not end")
	return 0, ""
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(ioTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitIdle waits until s holds no connection, room or subscription.
func waitIdle(t *testing.T, s *server) {
	t.Helper()
	waitFor(t, s.Info().Replica+" to return to 0", func() bool {
		i := s.Info()
		return i.Connections == 0 && i.Rooms == 0 && i.Subscriptions == 0
	})
}

func httpGet(t *testing.T, s *server, path string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: ioTimeout}
	resp, err := c.Get("http://" + s.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body of %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

func msg(typ int, s string) string { return fmt.Sprintf("%d:%s", typ, s) }
