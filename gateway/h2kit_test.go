package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// scriptedNode is a misbehaving node of an h2 pool: it answers HTTP/1.1
// probes 200 and, over HTTP/2, sends settings (nothing at all when silent)
// and hands each request's HEADERS to onStream, which writes what the
// node does; when onStream returns true the node stops reading (it floods
// or hangs) until its connection ends.
type scriptedNode struct {
	settings []http2.Setting
	silent   bool
	onStream func(n *nodeConn, id uint32) (stop bool)
	// seen, when set, is shown every frame the node reads.
	seen func(f http2.Frame)
}

// nodeConn is one connection of a scriptedNode.
type nodeConn struct {
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
}

// respond sends a header block of fields (name, value pairs) on id.
func (n *nodeConn) respond(id uint32, end bool, fields ...string) error {
	n.hbuf.Reset()
	for i := 0; i < len(fields); i += 2 {
		n.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return n.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: n.hbuf.Bytes(), EndHeaders: true, EndStream: end})
}

func (sn scriptedNode) start(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go sn.serve(nc)
		}
	}()
	return ln.Addr().String()
}

// h2PrefaceOrProbe reads what opens a connection to a test node of an
// "h2" pool: the HTTP/2 client preface, consumed (true), or an HTTP/1.1
// request, the health probe, answered 200 (false).
func h2PrefaceOrProbe(nc net.Conn, br *bufio.Reader) bool {
	if p, err := br.Peek(len(http2.ClientPreface)); err == nil && string(p) == http2.ClientPreface {
		br.Discard(len(p))
		return true
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil || l == "\r\n" {
			break
		}
	}
	io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	return false
}

func (sn scriptedNode) serve(nc net.Conn) {
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(nc)
	if !h2PrefaceOrProbe(nc, br) {
		return
	}
	if sn.silent {
		io.Copy(io.Discard, br)
		return
	}
	n := &nodeConn{fr: http2.NewFramer(nc, br)}
	n.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	n.fr.MaxHeaderListSize = 64 << 10
	n.fr.AllowIllegalWrites = true // CR/LF in a field, DATA on an idle stream
	n.enc = hpack.NewEncoder(&n.hbuf)
	n.fr.WriteSettings(append([]http2.Setting{{ID: http2.SettingEnableConnectProtocol, Val: 1}}, sn.settings...)...)
	for {
		f, err := n.fr.ReadFrame()
		if err != nil {
			return
		}
		if sn.seen != nil {
			sn.seen(f)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				n.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				n.fr.WritePing(true, f.Data)
			}
		case *http2.DataFrame:
			if d := f.Data(); len(d) > 0 && d[0] == 0x88 {
				// The gateway's close frame: the node ends its side
				// (without a close frame of its own).
				n.fr.WriteData(f.StreamID, true, nil)
			}
		case *http2.MetaHeadersFrame:
			if sn.onStream(n, f.StreamID) {
				io.Copy(io.Discard, nc) // until the gateway cuts it
				return
			}
		}
	}
}

// victims is clients of another pool that echo in rounds until stop,
// counting every round trip and every failure.
type victims struct {
	conns []*websocket.Conn
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	rtts  []time.Duration
	sent  int
	lost  int
}

func startVictims(e *env, n int) *victims {
	v := &victims{stop: make(chan struct{}), done: make(chan struct{})}
	for range n {
		v.conns = append(v.conns, e.mustDial("/echo"))
	}
	go func() {
		defer close(v.done)
		for r := 0; r < 100_000; r++ {
			select {
			case <-v.stop:
				return
			default:
			}
			for i, c := range v.conns {
				msg := fmt.Sprint("victim ", i, " round ", r)
				start := time.Now()
				_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				err := c.WriteMessage(websocket.TextMessage, []byte(msg))
				var got []byte
				if err == nil {
					_, got, err = c.ReadMessage()
				}
				v.mu.Lock()
				v.sent++
				if err != nil || string(got) != msg {
					v.lost++
				} else {
					v.rtts = append(v.rtts, time.Since(start))
				}
				v.mu.Unlock()
			}
		}
	}()
	return v
}

// waitRounds waits until the victims made n more rounds.
func (v *victims) waitRounds(t *testing.T, n int) {
	t.Helper()
	v.mu.Lock()
	want := v.sent + n*len(v.conns)
	v.mu.Unlock()
	for i := 0; ; i++ {
		v.mu.Lock()
		sent := v.sent
		v.mu.Unlock()
		if sent >= want {
			return
		}
		if i == 10000 {
			t.Fatalf("the victims made %d round trips, want %d", sent, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// end stops the rounds and returns what the victims saw: p50, p99,
// delivered share.
func (v *victims) end() (p50, p99 time.Duration, delivered float64) {
	close(v.stop)
	<-v.done
	for _, c := range v.conns {
		c.Close()
	}
	slices.Sort(v.rtts)
	if len(v.rtts) == 0 {
		return 0, 0, 0
	}
	q := func(p float64) time.Duration { return v.rtts[int(float64(len(v.rtts)-1)*p)] }
	return q(.5), q(.99), float64(v.sent-v.lost) / float64(v.sent)
}

// TestH2MisbehavingNodes is the kit of misbehaving nodes at the gateway:
// for each, what the gateway gives the node's client (a status for a
// handshake, a close code for an open WebSocket), while 20 clients of
// another pool echo throughout and must lose nothing; their round trips
// (p50, p99) and delivered share are logged for each, not asserted. The
// h2 package's tests pin the protocol side of each (see docs/security.md).
func TestH2MisbehavingNodes(t *testing.T) {
	longValue := strings.Repeat("v", 20<<10)
	cases := []struct {
		name   string
		node   scriptedNode
		status int // the client's handshake answer, or 101 then...
		close  int // ...this close code (0: the WebSocket stays open)
		dials  int // clients (default 1)
		send   int // bytes each sends once open
		// either: 101 then close 1012 is as good as status (the node
		// errs right after its 200, before or after the gateway took
		// the stream).
		either bool
	}{
		{"never SETTINGS", scriptedNode{silent: true}, http.StatusBadGateway, 0, 1, 0, false},
		{"MAX_CONCURRENT_STREAMS 0", scriptedNode{settings: []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 0}}}, http.StatusBadGateway, 0, 1, 0, false},
		{"MAX_CONCURRENT_STREAMS 1", scriptedNode{settings: []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 1}}, onStream: func(n *nodeConn, id uint32) bool {
			n.respond(id, false, ":status", "200")
			return false
		}}, http.StatusSwitchingProtocols, 0, 3, 0, false},
		{"no WINDOW_UPDATE", scriptedNode{onStream: func(n *nodeConn, id uint32) bool {
			n.respond(id, false, ":status", "200")
			return false
		}}, http.StatusSwitchingProtocols, 1012, 1, 256 << 10, false},
		{"RST_STREAM on every stream", scriptedNode{onStream: func(n *nodeConn, id uint32) bool {
			n.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			return false
		}}, http.StatusBadGateway, 0, 1, 0, false},
		{"CR/LF in a response field", scriptedNode{onStream: func(n *nodeConn, id uint32) bool {
			n.respond(id, false, ":status", "200", "x-evil", "a\r\nSet-Cookie: stolen=1")
			return false
		}}, http.StatusBadGateway, 0, 1, 0, false},
		{"oversized header block", scriptedNode{onStream: func(n *nodeConn, id uint32) bool {
			n.respond(id, false, ":status", "200", "x-long", longValue)
			return false
		}}, http.StatusBadGateway, 0, 1, 0, false},
		{"GOAWAY below the live stream", scriptedNode{onStream: func(n *nodeConn, id uint32) bool {
			n.respond(id, false, ":status", "200")
			n.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			return false
		}}, http.StatusBadGateway, 0, 1, 0, true},
		{"DATA on a stream never opened", scriptedNode{onStream: func(n *nodeConn, id uint32) bool {
			n.respond(id, false, ":status", "200")
			n.fr.WriteData(id+1000, false, []byte("stray"))
			return false
		}}, http.StatusBadGateway, 0, 1, 0, true},
		{"PING flood", scriptedNode{onStream: func(n *nodeConn, id uint32) bool {
			n.respond(id, false, ":status", "200")
			for i := range 10_000_000 {
				if n.fr.WritePing(false, [8]byte{byte(i), byte(i >> 8), byte(i >> 16)}) != nil {
					break
				}
			}
			return true
		}}, http.StatusBadGateway, 0, 1, 0, true},
		{"SETTINGS flood", scriptedNode{onStream: func(n *nodeConn, id uint32) bool {
			n.respond(id, false, ":status", "200")
			for i := range 10_000_000 {
				if n.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(i % 2 * 65535)}) != nil {
					break
				}
			}
			return true
		}}, http.StatusBadGateway, 0, 1, 0, true},
	}
	echo := closingServer(t)
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			bad := tt.node.start(t)
			e := newEnv(t, 0, fmt.Sprintf(`
[gateway]
listen = %%[1]q
write_timeout = "1s"
[admin]
listen = ""
[[pools]]
name = "bad"
protocol = "h2"
h2_connections = 1
connect_timeout = "300ms"
connect_tries = 1
  [pools.health]
  eject_after = 1000
  [[pools.nodes]]
  addr = %q
[[pools]]
name = "echo"
  [[pools.nodes]]
  addr = %q
[[routes]]
path_prefix = "/bad"
pool = "bad"
[[routes]]
path_prefix = "/"
pool = "echo"
`, bad, echo))
			v := startVictims(e, 20)
			v.waitRounds(t, 10) // a baseline before
			var got []string
			var clients []*websocket.Conn
			for range tt.dials {
				c, resp, err := e.dial("/bad", nil)
				switch {
				case resp == nil:
					t.Errorf("no answer: %v", err)
					got = append(got, err.Error())
					continue
				case resp.StatusCode != tt.status && !(tt.either && resp.StatusCode == http.StatusSwitchingProtocols):
					t.Errorf("the node's client got %d (%v), want %d", resp.StatusCode, err, tt.status)
				}
				got = append(got, fmt.Sprint(resp.StatusCode))
				if c != nil {
					clients = append(clients, c)
				}
			}
			for _, c := range clients {
				if tt.send > 0 {
					_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
					c.WriteMessage(websocket.BinaryMessage, make([]byte, tt.send))
				}
				if code := tt.close; code != 0 || tt.either {
					if tt.either {
						code = 1012
					}
					_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
					_, _, err := c.ReadMessage()
					if !websocket.IsCloseError(err, code) {
						t.Errorf("the node's client: %v, want close %d", err, code)
					}
					got = append(got, fmt.Sprint("then close ", code))
				}
				c.Close()
			}
			v.waitRounds(t, 10) // and after
			p50, p99, delivered := v.end()
			t.Logf("%s: the node's clients got %s; victims p50 %v, p99 %v, delivered %.2f%% of %d", tt.name, strings.Join(got, ", "), p50, p99, 100*delivered, v.sent)
			if delivered != 1 {
				t.Errorf("victims lost %d of %d round trips", v.lost, v.sent)
			}
			e.waitZero()
		})
	}
}
