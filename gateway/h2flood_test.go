package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// pingFloodNode answers HTTP/1.1 probes 200 and, over HTTP/2 with
// extended CONNECT, accepts a stream (200) and, once the client's first
// message is in, stops reading and sends PINGs as fast as its socket
// takes them, until the gateway cuts it; sent counts them.
func pingFloodNode(t *testing.T, sent *atomic.Int64) string {
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
			go func() {
				defer nc.Close()
				nc.SetDeadline(time.Now().Add(30 * time.Second))
				br := bufio.NewReader(nc)
				if !h2PrefaceOrProbe(nc, br) {
					return
				}
				fr := http2.NewFramer(nc, br)
				fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
				fr.WriteSettings(http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1})
				var hbuf bytes.Buffer
				enc := hpack.NewEncoder(&hbuf)
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						return
					}
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if !f.IsAck() {
							fr.WriteSettingsAck()
						}
					case *http2.MetaHeadersFrame:
						hbuf.Reset()
						enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
						fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hbuf.Bytes(), EndHeaders: true})
					case *http2.DataFrame: // the client's first message: the tunnel is up
						for i := range 10_000_000 {
							if fr.WritePing(false, [8]byte{byte(i), byte(i >> 8), byte(i >> 16)}) != nil {
								return
							}
							sent.Add(1)
						}
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestH2NodePingFloodCut pins a node's PING flood on an h2 pool (it took
// the gateway from 26 MB to 4.68 GB and other pools' clients from p99 1.5
// ms to seconds): the flooding node's connection is cut, its client gets
// 1012, and clients of another pool echo every message before, during and
// after. Their round trips are logged (p50, p99), not asserted.
func TestH2NodePingFloodCut(t *testing.T) {
	var sent atomic.Int64
	flood := pingFloodNode(t, &sent)
	echo := closingServer(t)
	e := newEnv(t, 0, fmt.Sprintf(`
[gateway]
listen = %%[1]q
[admin]
listen = ""
[[pools]]
name = "flood"
protocol = "h2"
h2_connections = 1
  [[pools.nodes]]
  addr = %q
[[pools]]
name = "echo"
  [[pools.nodes]]
  addr = %q
[[routes]]
path_prefix = "/flood"
pool = "flood"
[[routes]]
path_prefix = "/"
pool = "echo"
`, flood, echo))
	const victims, rounds = 20, 50
	var vs []*websocket.Conn
	for range victims {
		c := e.mustDial("/echo")
		defer c.Close()
		vs = append(vs, c)
	}
	echoAll := func() []time.Duration {
		var rtts []time.Duration
		for r := range rounds {
			for i, c := range vs {
				start := time.Now()
				echoOnce(t, c, fmt.Sprint("victim ", i, " round ", r))
				rtts = append(rtts, time.Since(start))
			}
		}
		slices.Sort(rtts)
		return rtts
	}
	before := echoAll()

	fc := e.mustDial("/flood")
	defer fc.Close()
	if err := fc.WriteMessage(websocket.TextMessage, []byte("go")); err != nil {
		t.Fatal(err)
	}
	during := make(chan []time.Duration, 1)
	go func() { during <- echoAll() }()
	_ = fc.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, _, err := fc.ReadMessage(); !websocket.IsCloseError(err, 1012) {
		t.Fatalf("the flooding node's client: %v, want 1012", err)
	}
	d := <-during
	after := echoAll()
	q := func(r []time.Duration, p float64) time.Duration { return r[int(float64(len(r)-1)*p)] }
	t.Logf("node PINGs sent before the cut: %d; victims' round trips (%d each) p50/p99: before %v/%v, during %v/%v, after %v/%v",
		sent.Load(), len(before), q(before, .5), q(before, .99), q(d, .5), q(d, .99), q(after, .5), q(after, .99))
	for _, c := range vs {
		c.Close()
	}
	fc.Close()
	e.waitZero()
}
