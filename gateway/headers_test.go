package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/gateway/internal/upgrade"
)

// headRecorder is a node that records the head of every request it gets
// but health probes, byte for byte, and answers a handshake 101 (then
// reads the stream until it ends) and any other request 200 "ok".
type headRecorder struct {
	addr  string
	mu    sync.Mutex
	heads []string
}

func newHeadRecorder(t *testing.T) *headRecorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &headRecorder{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var conns sync.Map
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conns.Delete(c)
				defer c.Close()
				r.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		conns.Range(func(k, _ any) bool { _ = k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	return r
}

// serve answers the requests on one connection.
func (r *headRecorder) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		var head strings.Builder
		key := ""
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			head.WriteString(line)
			if name, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "Sec-WebSocket-Key") {
				key = strings.TrimSpace(v)
			}
			if line == "\r\n" {
				break
			}
		}
		if strings.HasPrefix(head.String(), "GET /healthz ") {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
			continue
		}
		r.mu.Lock()
		r.heads = append(r.heads, head.String())
		r.mu.Unlock()
		if key != "" {
			_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+
				upgrade.AcceptKey([]byte(key))+"\r\n\r\n")
			_, _ = io.Copy(io.Discard, br)
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}
}

// seen returns the request heads recorded so far.
func (r *headRecorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.heads...)
}

// askOnce sends req on a new connection to addr and reads one answer:
// its status and body.
func askOnce(t *testing.T, addr, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // a bound, not a speed
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("answer to %q: %v", req, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return resp.StatusCode, ""
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRouteRefusesBadHeaderNamesAndTwoAuthorizations pins issue 19 item
// 12 on the client listener: a header whose name is not a token
// ("Content Length", which fasthttp takes) was forwarded to the node, and
// a request with two Authorization headers was decided by the first. Both
// get 400 naming the problem, on the plain HTTP and the handshake branch,
// and never reach the node.
func TestRouteRefusesBadHeaderNamesAndTwoAuthorizations(t *testing.T) {
	node := newHeadRecorder(t)
	e := rawNodeEnv(t, node.addr, "")
	get := "GET /api HTTP/1.1\r\nHost: gw.test\r\n"
	hs := "GET /ws HTTP/1.1\r\nHost: gw.test\r\n" + wsHeaders
	for _, tc := range []struct {
		name, req string
		want      string // in the 400's body
	}{
		{"plain, space in a name", get + "Content Length: 5\r\n\r\n", `header name "Content Length" is not a token`},
		{"handshake, space in a name", hs + "Bad Name: x\r\n\r\n", `header name "Bad Name" is not a token`},
		{"plain, two Authorization", get + "Authorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n", "more than one Authorization header"},
		{"handshake, two Authorization", hs + "Authorization: Bearer a\r\nauthorization: Bearer b\r\n\r\n", "more than one Authorization header"},
	} {
		code, body := askOnce(t, e.gw, tc.req)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want 400 with %q", tc.name, code, body, tc.want)
		}
	}
	if heads := node.seen(); len(heads) > 0 {
		t.Errorf("the node got %d refused requests, the first:\n%s", len(heads), heads[0])
	}
	// The same requests without the fault reach the node.
	for _, req := range []string{get + "Content-Length: 0\r\nAuthorization: Bearer a\r\n\r\n", hs + "Authorization: Bearer a\r\n\r\n"} {
		if code, body := askOnce(t, e.gw, req); code != http.StatusOK && code != http.StatusSwitchingProtocols {
			t.Errorf("%q: %d %q, want it through", req, code, body)
		}
	}
	if heads := node.seen(); len(heads) != 2 {
		t.Errorf("the node got %d requests, want the 2 good ones", len(heads))
	}
}

// TestAdminRefusesTwoAuthorizations pins issue 19 item 12 on the admin
// listener: with two Authorization headers the first decided, so a
// request whose first header carried the token passed. It gets 400 in
// either order; one header still decides as before, and a token that is a
// prefix or an extension of the right one (the comparison is of digests
// now) is refused.
func TestAdminRefusesTwoAuthorizations(t *testing.T) {
	t.Setenv("WSGATE_TEST_TOKEN", "s3cret-token")
	cfg := strings.Replace(withAdminListen(oneNodeWith("", "", "")), "[admin]\nlisten = \"127.0.0.1:0\"\n",
		"[admin]\nlisten = \"127.0.0.1:0\"\ntoken_env = \"WSGATE_TEST_TOKEN\"\n", 1)
	e := newEnv(t, 1, cfg)
	admin := e.srv.AdminAddr().String()
	for _, tc := range []struct {
		auth []string
		want int
	}{
		{[]string{"Bearer s3cret-token", "Bearer wrong"}, http.StatusBadRequest},
		{[]string{"Bearer wrong", "Bearer s3cret-token"}, http.StatusBadRequest},
		{[]string{"Bearer s3cret-token", "Bearer s3cret-token"}, http.StatusBadRequest},
		{[]string{"Bearer s3cret-token"}, http.StatusOK},
		{[]string{"Bearer s3cret"}, http.StatusUnauthorized},
		{[]string{"Bearer s3cret-token2"}, http.StatusUnauthorized},
		{[]string{"Bearer "}, http.StatusUnauthorized},
		{[]string{"s3cret-token"}, http.StatusUnauthorized},
		{nil, http.StatusUnauthorized},
	} {
		req := "GET /api/nodes HTTP/1.1\r\nHost: 127.0.0.1\r\n"
		for _, a := range tc.auth {
			req += "Authorization: " + a + "\r\n"
		}
		code, body := askOnce(t, admin, req+"\r\n")
		if code != tc.want {
			if len(body) > 80 {
				body = body[:80] + "..."
			}
			t.Errorf("Authorization %s: %d %s, want %d", strconv.Quote(fmt.Sprint(tc.auth)), code, body, tc.want)
		}
		if code == http.StatusBadRequest && !strings.Contains(body, "Authorization headers") {
			t.Errorf("Authorization %q: 400 %s, want it to name the headers", tc.auth, body)
		}
	}
}
