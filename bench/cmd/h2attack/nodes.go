package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// echoNode is an HTTP/1.1 node: it echoes WebSocket messages, answers
// GETs 200 and reads POST bodies whole, counting the WebSocket handshakes,
// GETs (probes aside) and POSTs that reach it.
type echoNode struct {
	ln                      net.Listener
	srv                     *http.Server
	handshakes, gets, posts atomic.Int64

	mu    sync.Mutex
	conns map[*websocket.Conn]struct{}
}

func startEchoNode() (*echoNode, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	n := &echoNode{ln: ln, conns: map[*websocket.Conn]struct{}{}}
	n.srv = &http.Server{Handler: n, ReadHeaderTimeout: 10 * time.Second, ErrorLog: quietLog}
	go func() { _ = n.srv.Serve(ln) }()
	return n, nil
}

func (n *echoNode) addr() string { return n.ln.Addr().String() }

// quietLog takes the node's http.Server errors (connections the gateway
// cuts), which say nothing about the figures.
var quietLog = log.New(io.Discard, "", 0)

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (n *echoNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case websocket.IsWebSocketUpgrade(r):
		n.handshakes.Add(1)
		c, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		n.mu.Lock()
		n.conns[c] = struct{}{}
		n.mu.Unlock()
		defer func() {
			n.mu.Lock()
			delete(n.conns, c)
			n.mu.Unlock()
			c.Close()
		}()
		for {
			t, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := c.WriteMessage(t, msg); err != nil {
				return
			}
		}
	case r.Method == http.MethodPost:
		n.posts.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	default:
		if r.URL.Path != "/healthz" {
			n.gets.Add(1)
		}
		_, _ = io.WriteString(w, "ok")
	}
}

// close stops the node and ends its WebSockets.
func (n *echoNode) close() {
	_ = n.srv.Close()
	n.mu.Lock()
	for c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
}

// floodNode is a node of an h2 pool that misbehaves: it answers HTTP/1.1
// probes 200 and, over HTTP/2, offers extended CONNECT and answers each
// stream 200; once a client's first message comes on a connection, it
// stops reading it and sends PINGs (settings false) or SETTINGS toggling
// INITIAL_WINDOW_SIZE (settings true) as fast as the socket takes them,
// until the gateway cuts the connection or until, which the attack sets.
// It then reads what is left to read for a GOAWAY.
type floodNode struct {
	ln       net.Listener
	settings bool
	until    atomic.Int64 // unix nanoseconds; 0: floods last until cut

	frames, bytes atomic.Int64
	mu            sync.Mutex
	floods        int
	cuts          []time.Duration // how long each cut flood lasted
	timedOut      int             // floods that ran to until
	goAways       map[http2.ErrCode]int
	conns         map[net.Conn]struct{}
}

func startFloodNode(settings bool) (*floodNode, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	n := &floodNode{ln: ln, settings: settings, goAways: map[http2.ErrCode]int{}, conns: map[net.Conn]struct{}{}}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			n.mu.Lock()
			n.conns[nc] = struct{}{}
			n.mu.Unlock()
			go n.serve(nc)
		}
	}()
	return n, nil
}

func (n *floodNode) addr() string { return n.ln.Addr().String() }

// close stops the node and closes its connections.
func (n *floodNode) close() {
	n.ln.Close()
	n.mu.Lock()
	for c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
}

func (n *floodNode) serve(nc net.Conn) {
	defer func() {
		nc.Close()
		n.mu.Lock()
		delete(n.conns, nc)
		n.mu.Unlock()
	}()
	_ = nc.SetReadDeadline(time.Now().Add(3 * time.Minute))
	br := bufio.NewReader(nc)
	if p, err := br.Peek(4); err != nil || string(p) != "PRI " {
		for err == nil {
			var l string
			if l, err = br.ReadString('\n'); l == "\r\n" {
				break
			}
		}
		_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return
	}
	_, _ = br.Discard(len(http2.ClientPreface))
	fr := http2.NewFramer(nc, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var hbuf bytesBuffer
	enc := hpack.NewEncoder(&hbuf)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			hbuf.b = hbuf.b[:0]
			_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hbuf.b, EndHeaders: true})
		case *http2.DataFrame:
			if d := f.Data(); len(d) > 0 && d[0] != 0x88 { // a message, not a close
				n.flood(nc, fr)
				return
			}
		}
	}
}

// flood writes control frames on nc until a write fails, then reads what
// is left for a GOAWAY.
func (n *floodNode) flood(nc net.Conn, rfr *http2.Framer) {
	n.mu.Lock()
	n.floods++
	n.mu.Unlock()
	until := time.Unix(0, n.until.Load())
	_ = nc.SetWriteDeadline(until)
	cw := &countWriter{w: nc}
	bw := bufio.NewWriterSize(cw, 64<<10)
	wfr := http2.NewFramer(bw, nil)
	start := time.Now()
	var err error
	frames := int64(0)
	for i := 0; err == nil; i++ {
		if n.settings {
			err = wfr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535 - uint32(i&1)})
		} else {
			err = wfr.WritePing(false, [8]byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)})
		}
		if err == nil {
			frames++
		}
		if i&1023 == 0 && time.Now().After(until) {
			err = os.ErrDeadlineExceeded
		}
	}
	n.frames.Add(frames)
	n.bytes.Add(cw.n)
	lasted := time.Since(start)
	n.mu.Lock()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		n.timedOut++
	} else {
		n.cuts = append(n.cuts, lasted)
	}
	n.mu.Unlock()
	// What the gateway sent before the cut, up to its GOAWAY if it wrote
	// one, may still be readable.
	_ = nc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	for range 1 << 22 {
		f, err := rfr.ReadFrame()
		if err != nil {
			return
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			n.mu.Lock()
			n.goAways[g.ErrCode]++
			n.mu.Unlock()
			return
		}
	}
}

// report says what the flooding node got.
func (n *floodNode) report() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	cuts := slices.Clone(n.cuts)
	what := "PINGs"
	if n.settings {
		what = "SETTINGS"
	}
	s := fmt.Sprintf("%d floods, %d cut", n.floods, len(cuts))
	if len(cuts) > 0 {
		s += fmt.Sprintf(" (after %s, median)", fmtDur(median(cuts)))
	}
	if n.timedOut > 0 {
		s += fmt.Sprintf(", %d not cut by the end", n.timedOut)
	}
	s += fmt.Sprintf("; %d %s sent (%s); GOAWAY read: %s", n.frames.Load(), what, fmtBytes(n.bytes.Load()), codes(n.goAways))
	return s
}

// codes prints counts by HTTP/2 error code, "none" for none.
func codes(m map[http2.ErrCode]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%v x%d", k, m[k])
	}
	return s
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// bytesBuffer is the hpack encoder's output.
type bytesBuffer struct{ b []byte }

func (b *bytesBuffer) Write(p []byte) (int, error) { b.b = append(b.b, p...); return len(p), nil }
