package h2serve

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"

	"github.com/fasthttp/websocket"
)

// wsKey stands in for the Sec-WebSocket-Key extended CONNECT does without
// (RFC 8441 section 5); the Upgrader's accept value computed from it is
// dropped with the rest of the 101 head.
const wsKey = "AAAAAAAAAAAAAAAAAAAAAA=="

// wsReadBuffer is the read buffer of a WebSocket over a stream. The
// stream buffers what arrives already (up to its window), so this one
// need only hold a frame header and a control frame: a larger one would
// be memory every idle member keeps (fasthttp/websocket keeps the
// hijack's reader when it is over 256 bytes).
const wsReadBuffer = 512

// UpgradeWebSocket opens a WebSocket over s, an extended CONNECT with
// :protocol websocket (RFC 8441 section 5), with up: the same checks and
// the same subprotocol choice as up.Upgrade makes on an HTTP/1.1 upgrade,
// and the same type of connection. Accepted, the stream is answered 200
// with the Sec-WebSocket-Protocol (and -Extensions) up chose; refused, it
// is answered with up's error status and body, and the error is returned.
//
// fasthttp/websocket builds a server *websocket.Conn only inside an
// upgrade, so this is one: up.Upgrade runs on a request carrying the
// stream's fields plus the Connection, Upgrade and Sec-WebSocket-Key of an
// HTTP/1.1 upgrade, and a ResponseWriter whose Hijack hands it the stream.
// The 101 head it writes on the stream becomes the stream's 200 HEADERS.
func UpgradeWebSocket(s *Stream, up *websocket.Upgrader) (*websocket.Conn, error) {
	req := s.Request()
	if req.Method != http.MethodConnect || req.Protocol != "websocket" {
		_ = s.Respond(http.StatusBadRequest, textPlain, []byte("not an extended CONNECT for a WebSocket\n"))
		return nil, errors.New("h2serve: not an extended CONNECT with :protocol websocket")
	}
	u, err := url.ParseRequestURI(req.Path)
	if err != nil {
		u = &url.URL{Path: req.Path}
	}
	h := req.Header.Clone()
	h.Set("Connection", "Upgrade")
	h.Set("Upgrade", "websocket")
	h.Set("Sec-Websocket-Key", wsKey)
	hr := &http.Request{
		Method:     http.MethodGet,
		URL:        u,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     h,
		Host:       req.Authority,
		RequestURI: req.Path,
		RemoteAddr: s.RemoteAddr().String(),
	}
	w := &upgradeResponse{s: s, header: http.Header{}}
	c, err := up.Upgrade(w, hr, nil)
	if err != nil {
		if !w.hijacked {
			w.respond()
		}
		return nil, err
	}
	return c, nil
}

var textPlain = http.Header{"Content-Type": {"text/plain; charset=utf-8"}}

// upgradeResponse is the http.ResponseWriter and http.Hijacker the
// Upgrader answers through: a refusal is kept and sent by respond, a
// success hijacks the stream.
type upgradeResponse struct {
	s        *Stream
	header   http.Header
	status   int
	body     bytes.Buffer
	hijacked bool
}

func (w *upgradeResponse) Header() http.Header { return w.header }

func (w *upgradeResponse) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *upgradeResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// respond sends the refusal the Upgrader wrote.
func (w *upgradeResponse) respond() {
	if w.status == 0 {
		w.status = http.StatusInternalServerError
	}
	_ = w.s.Respond(w.status, w.header, w.body.Bytes())
}

// Hijack hands the Upgrader the stream, as upgradeConn, and a reader over
// it that becomes the WebSocket's read buffer.
func (w *upgradeResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.hijacked = true
	uc := &upgradeConn{Stream: w.s}
	return uc, bufio.NewReadWriter(bufio.NewReaderSize(uc, wsReadBuffer), bufio.NewWriterSize(uc, 64)), nil
}

// upgradeConn is the stream under a WebSocket: its first Write, the
// Upgrader's 101 Switching Protocols head, is sent as the stream's 200
// HEADERS with the fields it chose (Sec-WebSocket-Protocol,
// Sec-WebSocket-Extensions, any other), less those of the HTTP/1.1
// upgrade (RFC 8441 section 5). Later Writes are the WebSocket's frames.
// The Upgrader writes its head before it returns the connection, and the
// WebSocket serializes its own writes, so answered needs no lock.
type upgradeConn struct {
	*Stream
	answered bool
}

func (c *upgradeConn) Write(p []byte) (int, error) {
	if c.answered {
		return c.Stream.Write(p)
	}
	c.answered = true
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(p)), nil)
	if err != nil {
		return 0, fmt.Errorf("h2serve: read the upgrade's response head: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return 0, fmt.Errorf("h2serve: the upgrade answered %d, not 101", resp.StatusCode)
	}
	h := resp.Header
	h.Del("Sec-Websocket-Accept")
	if err := c.Stream.WriteHeader(http.StatusOK, h); err != nil {
		return 0, err
	}
	return len(p), nil
}
