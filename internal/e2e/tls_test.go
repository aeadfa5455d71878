package e2e

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/browsertest"
	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/internal/testca"
	"github.com/wsgate/wsgate/internal/testproc"
)

// tlsSetup is a test CA, a server certificate for localhost and
// 127.0.0.1 written to files, and the [gateway.tls] table naming them.
type tlsSetup struct {
	ca       *testca.CA
	leaf     *testca.Leaf
	certFile string
	keyFile  string
	addr     string // the TLS listener
	table    string
}

func newTLSSetup(t *testing.T) *tlsSetup {
	t.Helper()
	ca, err := testca.New("wsgate e2e CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Server("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	s := &tlsSetup{ca: ca, leaf: leaf, addr: testproc.FreeAddr(t)}
	if s.certFile, s.keyFile, err = leaf.WriteFiles(t.TempDir(), "gw"); err != nil {
		t.Fatal(err)
	}
	s.table = fmt.Sprintf("[gateway.tls]\nlisten = %q\n[[gateway.tls.certificates]]\ncert_file = %q\nkey_file = %q\n",
		s.addr, s.certFile, s.keyFile)
	return s
}

// dialWSS connects a client through the TLS listener to room and reads
// the relay's hello frame.
func (s *tlsSetup) dialWSS(t *testing.T, id int, room string) *client {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second,
		TLSClientConfig: &tls.Config{RootCAs: s.ca.Pool(), ServerName: "localhost"}}
	conn, resp, err := d.Dial(fmt.Sprintf("wss://%s/room/%s?hello=1", s.addr, room), nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("client %d: wss dial: %v (status %d)", id, err, status)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	var h hello
	if err := conn.ReadJSON(&h); err != nil || h.Type != "hello" {
		t.Fatalf("client %d: hello: %v %+v", id, err, h)
	}
	return &client{id: id, room: room, conn: conn, replica: h.Replica}
}

// served is the certificate the TLS listener serves now.
func (s *tlsSetup) served(t *testing.T) []byte {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", s.addr,
		&tls.Config{ServerName: "localhost", InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Raw
}

// TestTLSReloadAndRestart runs wsgate with a TLS listener in front of two
// relay processes on Redis: wss tunnels carry frames across replicas; a certificate
// rewritten on disk is served to new handshakes while the tunnels carry
// on; SIGUSR2 hands the TLS listener to the new process, which serves wss
// on the same port, and the old process's TLS tunnels get 1001.
func TestTLSReloadAndRestart(t *testing.T) {
	rs := newTLSSetup(t)
	st := &stack{}
	startRelays(t, st, 2, redistest.Start(t).URL())
	cfg := gatewayConfig(t, st)
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, append(b, "\n"+rs.table...), 0o644); err != nil {
		t.Fatal(err)
	}
	old, pidfile := startUpgradable(t, st, cfg)
	oldPid := old.Pid()

	var tunnels []*client
	for i := range 8 {
		tunnels = append(tunnels, rs.dialWSS(t, i, fmt.Sprintf("tls-%d", i)))
	}
	talk := func() {
		t.Helper()
		for i, c := range tunnels {
			peer := rs.dialWSS(t, 100+i, c.room)
			msg := fmt.Sprintf("to-%d", i)
			if err := peer.conn.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			_ = c.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, got, err := c.conn.ReadMessage(); err != nil || string(got) != msg {
				t.Fatalf("tunnel %d: got %q, %v", i, got, err)
			}
			_ = peer.conn.Close()
		}
	}
	talk()

	next, err := rs.ca.Server("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	tmp := rs.certFile + ".new"
	if err := os.WriteFile(tmp, next.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	kt := rs.keyFile + ".new"
	if err := os.WriteFile(kt, next.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// As a certificate manager does: each file renamed over the old one.
	if err := os.Rename(kt, rs.keyFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, rs.certFile); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return bytes.Equal(rs.served(t), next.Cert.Raw) })
	talk() // the tunnels from before the reload carry on

	if err := old.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { pid := readPid(t, pidfile); return pid != 0 && pid != oldPid })
	for i, c := range readCloses(tunnels, 30*time.Second) {
		if c != "1001" {
			t.Errorf("old TLS tunnel %d closed with %s, want 1001", i, c)
		}
	}
	if code, err := old.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("old process: exit %d, %v", code, err)
	}
	// The new process serves wss on the inherited TLS socket, with the
	// certificate now on disk.
	c := rs.dialWSS(t, 200, "after")
	_ = c.conn.Close()
	if !bytes.Equal(rs.served(t), next.Cert.Raw) {
		t.Fatal("the new process serves another certificate than the one on disk")
	}
	newPid := readPid(t, pidfile)
	p, _ := os.FindProcess(newPid)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return p.Signal(syscall.Signal(0)) != nil })
	waitRelaysEmpty(t, st)
}

// wssProbe is what the page's WebSocket saw.
type wssProbe struct {
	Got    []string `json:"got"`
	Closed *int     `json:"closed"`
	Open   bool     `json:"open"`
}

// wssJoinJS opens window.probe's WebSocket to wss:// on the page's host.
const wssJoinJS = `(() => {
  const s = window.probe = {got: [], closed: null, waiters: []};
  const wake = () => { for (const w of s.waiters.splice(0)) w(); };
  s.ws = new WebSocket("wss://" + location.host + %s);
  s.ws.onmessage = (e) => { s.got.push(typeof e.data === "string" ? e.data : "(binary)"); wake(); };
  s.ws.onclose = (e) => { s.closed = e.code; wake(); };
  return true;
})()`

// wssWaitJS resolves once window.probe has n messages or has closed
// (wantClose: only once closed).
const wssWaitJS = `new Promise((resolve) => {
  const s = window.probe;
  const check = () => {
    if (s.closed !== null || (!%t && s.got.length >= %d)) {
      resolve(JSON.stringify({got: s.got, closed: s.closed, open: s.ws.readyState === WebSocket.OPEN}));
    } else {
      s.waiters.push(check);
    }
  };
  check();
})`

// TestBrowserWSSThroughGateway has headless Chromium load a page over
// https through the gateway's TLS listener, with a certificate from the
// test's CA (Chromium is told to accept that certificate's key), open a
// wss:// WebSocket to a relay, exchange frames with a Go client in the
// same room, and get close 1001 when the gateway drains (SIGTERM).
func TestBrowserWSSThroughGateway(t *testing.T) {
	rs := newTLSSetup(t)
	ctx := browsertest.Start(t, chromedp.Flag("ignore-certificate-errors-spki-list", rs.leaf.SPKIHash()))
	st := &stack{}
	startRelays(t, st, 1, "")
	startGateway(t, st, "", rs.table)

	run := func(js string) string {
		t.Helper()
		out, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("browser: %v", err)
		}
		return out
	}
	wait := func(n int, wantClose bool) wssProbe {
		t.Helper()
		var p wssProbe
		if err := json.Unmarshal([]byte(run(fmt.Sprintf(wssWaitJS, wantClose, n))), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("https://"+rs.addr+"/info")); err != nil {
		t.Fatalf("browser: navigate over https: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(wssJoinJS, strconv.Quote("/room/browser?hello=1")))); err != nil {
		t.Fatalf("browser: %v", err)
	}
	if p := wait(1, false); p.Closed != nil || !p.Open {
		t.Fatalf("Chromium's wss WebSocket: %+v", p)
	}
	peer := rs.dialWSS(t, 1, "browser")
	defer peer.conn.Close()
	if err := peer.conn.WriteMessage(websocket.TextMessage, []byte("from-go")); err != nil {
		t.Fatal(err)
	}
	if p := wait(2, false); p.Closed != nil || p.Got[1] != "from-go" {
		t.Fatalf("Chromium got %q (closed %v), want hello then from-go", p.Got, p.Closed)
	}
	run(`(() => { window.probe.ws.send("from-browser"); return ""; })()`)
	_ = peer.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, got, err := peer.conn.ReadMessage(); err != nil || string(got) != "from-browser" {
		t.Fatalf("Go client got %q, %v", got, err)
	}

	if err := st.gw.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p := wait(0, true)
	if p.Closed == nil || *p.Closed != 1001 {
		t.Fatalf("Chromium's WebSocket closed with %v, want 1001", p.Closed)
	}
	if code, err := st.gw.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("gateway: exit %d, %v", code, err)
	}
}
