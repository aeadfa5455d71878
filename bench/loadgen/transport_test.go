package loadgen

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway"
	"github.com/wsgate/wsgate/internal/testca"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/internal/wsframe"
)

// writeCA makes a test CA and a server certificate for 127.0.0.1 and
// "gw.test" and writes them to a temporary directory: the CA's PEM and
// the leaf's files.
func writeCA(t *testing.T) (ca *testca.CA, caFile, certFile, keyFile string) {
	t.Helper()
	ca, err := testca.New("wsload test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Server("127.0.0.1", "gw.test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if certFile, keyFile, err = leaf.WriteFiles(dir, "gw"); err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return ca, caFile, certFile, keyFile
}

// startTLSGateway starts an in-process gateway in front of addrs with a
// TLS listener that also speaks HTTP/2 (h2 = true); it returns the TLS
// listener's address and the CA that signed its certificate.
func startTLSGateway(t *testing.T, addrs []string) (string, *testca.CA) {
	t.Helper()
	ca, _, certFile, keyFile := writeCA(t)
	cfg := fmt.Sprintf(`
[gateway]
listen = "127.0.0.1:0"
drain_window = "200ms"
  [gateway.tls]
  listen = %q
  h2 = true
  [[gateway.tls.certificates]]
  cert_file = %q
  key_file = %q
[admin]
listen = ""
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = %q
  [[pools.nodes]]
  addr = %q
[[routes]]
path_prefix = "/"
pool = "relay"
`, testproc.FreeAddr(t), certFile, keyFile, addrs[0], addrs[1])
	c, err := conf.Parse("test.toml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(c, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv.TLSAddr().String(), ca
}

// TestScenariosOverTransports runs every scenario of TestScenarios over
// wss:// (TLS 1.3 and 1.2) and over HTTP/2 streams (-h2) through a
// gateway's TLS listener with h2 = true, and over cleartext HTTP/2
// straight to a relay: each meets its target, and the report names the
// transport, the TLS version and the ALPN protocol that ran, and how
// few connections carried the WebSockets over HTTP/2.
func TestScenariosOverTransports(t *testing.T) {
	rs, addrs := startRelays(t, 2)
	gw, ca := startTLSGateway(t, addrs)
	tls12 := &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12}
	tls13 := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS13}
	transports := []struct {
		name      string
		url       string
		tls       *tls.Config
		h2        bool
		transport string
		version   string
		alpn      string
	}{
		{"wss", "wss://" + gw + "/room/tr%d", tls13, false, "wss", "1.3", "http/1.1"},
		{"wss-tls12", "wss://" + gw + "/room/tr%d", tls12, false, "wss", "1.2", "http/1.1"},
		{"wss-h2", "wss://" + gw + "/room/tr%d", tls13, true, "wss+h2", "1.3", "h2"},
		{"h2c-relay", "ws://" + addrs[0] + "/room/tr%d", nil, true, "ws+h2c", "", ""},
	}
	for _, tr := range transports {
		dialer := func() Dialer {
			d := Dialer{TLS: tr.tls}
			if tr.h2 {
				d.H2 = NewH2Pool(16)
			}
			return d
		}
		check := func(t *testing.T, r *Report) {
			t.Helper()
			if r.Transport != tr.transport {
				t.Errorf("transport %q, want %q", r.Transport, tr.transport)
			}
			if tr.version != "" && (len(r.TLS) != 1 || r.TLS[tr.version] != r.Conns || r.ALPN[tr.alpn] != r.Conns) {
				t.Errorf("tls %v alpn %v over %d connections, want all TLS %s with ALPN %s", r.TLS, r.ALPN, r.Conns, tr.version, tr.alpn)
			}
			if tr.version == "" && len(r.TLS) != 0 {
				t.Errorf("tls %v over cleartext", r.TLS)
			}
			if tr.h2 && (r.Conns == 0 || r.Conns >= r.Connected) {
				t.Errorf("%d connections carried %d WebSockets over HTTP/2", r.Conns, r.Connected)
			}
			if !tr.h2 && r.Conns != r.Connected {
				t.Errorf("%d connections for %d WebSockets", r.Conns, r.Connected)
			}
		}
		t.Run(tr.name+"/idle", func(t *testing.T) {
			r := runOK(t, Config{Scenario: "idle", URL: tr.url, Dialer: dialer(), N: 100, Rate: 2000, Hold: 300 * time.Millisecond, Ping: 100 * time.Millisecond, Rooms: 20})
			if r.Connected != 100 || r.Held != 100 || r.Dropped != 0 || r.Failed != 0 {
				t.Fatalf("connected %d held %d dropped %d failed %v", r.Connected, r.Held, r.Dropped, r.FailedBy)
			}
			check(t, r)
			waitRelaysEmpty(t, rs)
		})
		t.Run(tr.name+"/churn", func(t *testing.T) {
			r := runOK(t, Config{Scenario: "churn", URL: tr.url, Dialer: dialer(), Concurrency: 4, Duration: 2 * time.Second})
			if r.Received == 0 || r.Received != r.Expected || r.Failed != 0 {
				t.Fatalf("round trips %d of %d, failed %v", r.Received, r.Expected, r.FailedBy)
			}
			check(t, r)
			waitRelaysEmpty(t, rs)
		})
		t.Run(tr.name+"/fanout", func(t *testing.T) {
			r := runOK(t, Config{Scenario: "fanout", URL: tr.url, Dialer: dialer(), Rooms: 4, Members: 3, MsgRate: 20, Size: 64, Duration: 500 * time.Millisecond})
			if r.Sent == 0 || r.Expected != 2*r.Sent || r.Delivered != 100 || r.Duplicates != 0 || r.OutOfOrder != 0 {
				t.Fatalf("sent %d expected %d received %d dup %d ooo %d", r.Sent, r.Expected, r.Received, r.Duplicates, r.OutOfOrder)
			}
			check(t, r)
			waitRelaysEmpty(t, rs)
		})
		t.Run(tr.name+"/fanout-frozen", func(t *testing.T) {
			// A frozen member over HTTP/2 stops its stream only: the
			// others on the same connection get everything.
			r := runOK(t, Config{Scenario: "fanout", URL: tr.url, Dialer: dialer(), Rooms: 2, Members: 3, Frozen: 2, MsgRate: 20, Size: 4096, Duration: 500 * time.Millisecond, Settle: 500 * time.Millisecond})
			if r.Frozen != 2 || r.Delivered != 100 || r.FrozenReceived == 0 {
				t.Fatalf("frozen %d delivered %v frozen received %d ended %v failed %v dropped %v", r.Frozen, r.Delivered, r.FrozenReceived, r.FrozenEnded, r.FailedBy, r.DroppedBy)
			}
			waitRelaysEmpty(t, rs)
		})
		t.Run(tr.name+"/reconnect-storm", func(t *testing.T) {
			r := runOK(t, Config{Scenario: "reconnect-storm", URL: tr.url, Dialer: dialer(), N: 60, Rate: 2000, After: 50 * time.Millisecond, Window: 200 * time.Millisecond, Rooms: 10})
			if r.Back != 60 || r.NotBack != 0 || r.Reconnect.Count != 60 {
				t.Fatalf("back %d not back %d reconnect %+v", r.Back, r.NotBack, r.Reconnect)
			}
			check(t, r)
			waitRelaysEmpty(t, rs)
		})
	}
}

// TestDrainOverH2 drains the only relay mid-fanout with every member a
// stream of a few cleartext HTTP/2 connections to it: the relay sends
// GOAWAY, then 1001 on each stream; every member must come back on a new
// connection with ?since= and no ACKed write may be lost.
func TestDrainOverH2(t *testing.T) {
	rr := newRestartableRelay(t)
	admin := httptest.NewServer(rr)
	defer admin.Close()
	r, err := Run(context.Background(), Config{
		Scenario: "drain", URL: "ws://" + rr.addr + "/room/dh%d", Dialer: Dialer{H2: NewH2Pool(4)}, Rooms: 3, Members: 3, MsgRate: 20,
		Duration: 1500 * time.Millisecond, After: 300 * time.Millisecond, DrainURL: admin.URL,
		Window: 300 * time.Millisecond, GiveUp: 10 * time.Second, Settle: 5 * time.Second, Seed: 7, Log: tlog{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.CloseCodes["1001"] != 9 || r.Back != 9 || r.NotBack != 0 {
		t.Fatalf("close codes %v, back %d, not back %d", r.CloseCodes, r.Back, r.NotBack)
	}
	if r.LostWrites != 0 || r.Gaps != 0 || r.Duplicates != 0 || r.Acked != r.Sent || r.Delivered != 100 {
		t.Fatalf("lost %d gaps %d dups %d acked %d of %d delivered %v", r.LostWrites, r.Gaps, r.Duplicates, r.Acked, r.Sent, r.Delivered)
	}
	// 9 members, 4 streams a connection: 3 connections before the
	// drain, 3 after.
	if r.Transport != "ws+h2c" || r.Conns != 6 {
		t.Errorf("transport %q over %d connections, want ws+h2c over 6", r.Transport, r.Conns)
	}
}

// TestTLSFailures: a server whose certificate the client does not trust
// fails every dial under "tls" with the verifier's reason; an HTTP/2
// dial to a TLS listener without h2 says so; a refusal over HTTP/2 is
// counted by its status as over HTTP/1.1.
func TestTLSFailures(t *testing.T) {
	_, addrs := startRelays(t, 2)
	gw, ca := startTLSGateway(t, addrs)
	other, err := testca.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		url    string
		d      Dialer
		reason string
		msg    string
	}{
		{"unknown authority", "wss://" + gw + "/room/x", Dialer{TLS: &tls.Config{RootCAs: other.Pool()}}, ReasonTLS, "certificate signed by unknown authority"},
		{"unknown authority h2", "wss://" + gw + "/room/x", Dialer{TLS: &tls.Config{RootCAs: other.Pool()}, H2: NewH2Pool(0)}, ReasonTLS, "certificate signed by unknown authority"},
		{"name mismatch", "wss://localhost:" + gw[strings.LastIndex(gw, ":")+1:] + "/room/x", Dialer{TLS: &tls.Config{RootCAs: ca.Pool()}}, ReasonTLS, "not localhost"},
		{"refused over h2", "wss://" + gw + "/nope", Dialer{TLS: &tls.Config{InsecureSkipVerify: true}, H2: NewH2Pool(0)}, "http_404", "404"},
		{"refused over h2c", "ws://" + addrs[0] + "/room/", Dialer{H2: NewH2Pool(0)}, "http_400", "400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg, err := ParseTarget(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			tt.d.Timeout = 5 * time.Second
			c, err := tt.d.Dial(context.Background(), tg)
			if err == nil {
				c.Abort()
				t.Fatal("dial succeeded")
			}
			if got := Reason(err); got != tt.reason || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("reason %q (%v), want %q with %q", got, err, tt.reason, tt.msg)
			}
			if tt.d.H2 != nil {
				tt.d.H2.Close()
			}
		})
	}
}

// TestKillOverTransports kills one of two relays under a relay.v1 fanout
// through the gateway's TLS listener, over wss:// and over HTTP/2
// streams: the members it held see the gateway's 1012, come back through
// the gateway to the other relay with ?since=, and no ACKed write is
// lost; the members on the other relay, on the same HTTP/2 connections,
// are not disturbed.
func TestKillOverTransports(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			rs, addrs := startRelays(t, 2)
			gw, ca := startTLSGateway(t, addrs)
			kill := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				go func() { _ = rs[0].Close(context.Background()) }()
				w.WriteHeader(http.StatusAccepted)
			}))
			defer kill.Close()
			d := Dialer{TLS: &tls.Config{RootCAs: ca.Pool()}}
			if h2 {
				d.H2 = NewH2Pool(0)
			}
			r, err := Run(context.Background(), Config{
				Scenario: "kill", URL: "wss://" + gw + "/room/k%d", Dialer: d, Rooms: 4, Members: 3, MsgRate: 20,
				Duration: 1500 * time.Millisecond, After: 300 * time.Millisecond, DrainURL: kill.URL,
				Window: 300 * time.Millisecond, GiveUp: 10 * time.Second, Settle: 5 * time.Second, Seed: 9, Log: tlog{t},
			})
			if err != nil {
				t.Fatal(err)
			}
			dropped := sum(r.CloseCodes)
			if dropped == 0 || dropped == 12 || r.CloseCodes["1012"] != dropped || r.Back != dropped || r.NotBack != 0 {
				t.Fatalf("close codes %v, back %d, not back %d", r.CloseCodes, r.Back, r.NotBack)
			}
			if r.LostWrites != 0 || r.Acked != r.Sent || r.Delivered != 100 {
				t.Fatalf("lost %d acked %d of %d delivered %v", r.LostWrites, r.Acked, r.Sent, r.Delivered)
			}
		})
	}
}

// TestH2FrozenStreamBounded: of two members on one HTTP/2 connection,
// one does not read; a third sends them 800 KiB. The reader gets every
// message, and what the frozen one holds unread stays within its
// stream's window: the relay is stopped by flow control, not by an
// unbounded buffer in wsload.
func TestH2FrozenStreamBounded(t *testing.T) {
	rs, addrs := startRelays(t, 1)
	tg, err := ParseTarget("ws://" + addrs[0] + "/room/frozen")
	if err != nil {
		t.Fatal(err)
	}
	d := Dialer{H2: NewH2Pool(8), Timeout: 5 * time.Second}
	defer d.H2.Close()
	dial := func() *Conn {
		c, err := d.Dial(context.Background(), tg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	frozen, reader, sender := dial(), dial(), dial()
	if frozen.LocalAddr().String() != reader.LocalAddr().String() {
		t.Fatalf("two connections (%v, %v), want one", frozen.LocalAddr(), reader.LocalAddr())
	}
	const msgs, size = 100, 8 << 10
	got := make(chan int, msgs)
	go func() {
		n := 0
		_, _ = reader.ReadLoop(func(_ wsframe.Opcode, p []byte) {
			if len(p) == size {
				n++
				got <- n
			}
		})
	}()
	go func() { _, _ = sender.ReadLoop(func(wsframe.Opcode, []byte) {}) }()
	for joined := time.Now().Add(10 * time.Second); rs[0].Info().Connections < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(joined) {
			t.Fatalf("the relay holds %d members, want 3", rs[0].Info().Connections)
		}
	}
	payload := make([]byte, size)
	for range msgs {
		if err := sender.Write(wsframe.OpBinary, payload); err != nil {
			t.Fatal(err)
		}
	}
	timeout := time.After(10 * time.Second)
	for n := 0; n < msgs; {
		select {
		case n = <-got:
		case <-timeout:
			t.Fatalf("the reader got %d of %d messages", n, msgs)
		}
	}
	s := frozen.nc.(*h2Stream)
	s.c.mu.Lock()
	held := len(s.rbuf)
	s.c.mu.Unlock()
	if held == 0 || held > h2StreamWindow {
		t.Fatalf("the frozen stream holds %d bytes unread, want 1 to %d", held, h2StreamWindow)
	}
	for _, c := range []*Conn{frozen, reader, sender} {
		c.Abort()
	}
	waitRelaysEmpty(t, rs)
}

// TestH2StreamIDsUsedUp: a connection that has opened its last stream
// identifier takes no new stream (the next WebSocket opens a new
// connection) and is closed once its last stream ended.
func TestH2StreamIDsUsedUp(t *testing.T) {
	rs, addrs := startRelays(t, 1)
	tg, err := ParseTarget("ws://" + addrs[0] + "/room/ids")
	if err != nil {
		t.Fatal(err)
	}
	d := Dialer{H2: NewH2Pool(8), Timeout: 5 * time.Second}
	defer d.H2.Close()
	first, err := d.Dial(context.Background(), tg)
	if err != nil {
		t.Fatal(err)
	}
	hc := first.nc.(*h2Stream).c
	hc.mu.Lock()
	hc.nextID = maxStreamID // the relay accepts any higher odd identifier
	hc.mu.Unlock()
	last, err := d.Dial(context.Background(), tg)
	if err != nil {
		t.Fatal(err)
	}
	if last.nc.(*h2Stream).c != hc || last.nc.(*h2Stream).id != maxStreamID {
		t.Fatalf("stream %d, want %d on the first connection", last.nc.(*h2Stream).id, maxStreamID)
	}
	next, err := d.Dial(context.Background(), tg)
	if err != nil {
		t.Fatal(err)
	}
	if next.nc.(*h2Stream).c == hc {
		t.Fatal("a stream opened on a connection without identifiers left")
	}
	first.Abort()
	last.Abort()
	select {
	case <-hc.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the used-up connection stayed open after its last stream")
	}
	next.Abort()
	waitRelaysEmpty(t, rs)
}

// TestH2ConnectionLost: when an HTTP/2 connection ends under its
// streams (here its socket is closed under it, as a killed server would
// end it), every WebSocket on it ends without a close frame (1006), and
// the next dial opens a new connection.
func TestH2ConnectionLost(t *testing.T) {
	rs, addrs := startRelays(t, 1)
	tg, err := ParseTarget("ws://" + addrs[0] + "/room/lost")
	if err != nil {
		t.Fatal(err)
	}
	d := Dialer{H2: NewH2Pool(8), Timeout: 5 * time.Second}
	defer d.H2.Close()
	codes := make(chan uint16, 3)
	var hc *h2Conn
	for range 3 {
		c, err := d.Dial(context.Background(), tg)
		if err != nil {
			t.Fatal(err)
		}
		hc = c.nc.(*h2Stream).c
		go func() {
			code, _ := c.ReadLoop(func(wsframe.Opcode, []byte) {})
			codes <- code
		}()
	}
	_ = hc.nc.Close()
	for range 3 {
		select {
		case code := <-codes:
			if code != CloseAbnormal {
				t.Errorf("close code %d, want %d", code, CloseAbnormal)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a stream outlived its connection")
		}
	}
	c, err := d.Dial(context.Background(), tg)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Fresh || c.nc.(*h2Stream).c == hc {
		t.Fatal("a dial after the loss used the lost connection")
	}
	c.Abort()
	waitRelaysEmpty(t, rs)
}
