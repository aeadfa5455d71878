package upgrade

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
	"github.com/wsgate/wsgate/internal/httpheader"
	"github.com/wsgate/wsgate/internal/proxyproto"
	"golang.org/x/sys/unix"
)

// maxUpstreamAnswer is the largest body of a non-101 answer from a node that
// is passed on to the client (a relay's 400 or 401, say).
const maxUpstreamAnswer = 64 << 10

// ErrClientGone is returned by DialNode when the client went away (its
// HTTP/2 stream was reset) while the node was being dialed, and by
// OpenNodeStream when it went away before the node answered: the node is
// no less healthy for it.
var ErrClientGone = errors.New("the client went away before its node answered")

// ErrUpstream marks a node that failed the handshake: it could not be
// reached, answered 5xx, or answered a 101 that does not prove it speaks
// WebSocket for this key. The next node is tried.
var ErrUpstream = errors.New("upstream handshake failed")

// NodeConn is a node connection whose 101 has been read.
type NodeConn struct {
	Conn    net.Conn
	Pending []byte // bytes the node sent after its 101
	Header  []byte // the 101 response for the client
}

// responseReaders holds the readers nodes' answers are read with.
var responseReaders sync.Pool

// DialNode dials n, sends req and reads the node's answer. On a 101 it
// fills up with the upgraded connection, its header for the client
// appended to hdr (see clientResponse); it returns a non-101 answer below
// 500 to pass on, or an error wrapping ErrUpstream, or one wrapping
// upstream.ErrLocalDial when the dial failed on the gateway's side (which says
// nothing about n).
//
// With [pools.tls] the connection is TLS over a tunnel.TLSSocket, so the
// tunnel's writes to the node wake below crypto/tls as its writes to a
// TLS client do; a send_proxy_v2 pool's PROXY header, at the start of
// req, goes before the TLS handshake.
//
// polled says the tunnel is to run on the event-driven engine: a node
// without TLS is then dialed as a bare socket its poller watches from the
// connect on (tunnel.NodeSocket), so the tunnel takes it over as it is.
//
// gone, when not nil, is asked once the connection is made (after its
// TLS handshake, for a TLS pool), before req is written: true (the client
// has gone, see Gone) closes the connection unwritten and returns
// ErrClientGone, so the node never gets a request whose client is gone.
func DialNode(p *upstream.Pool, n *balancer.Node, req, accept []byte, up *NodeConn, hdr []byte, polled bool, gone func() bool) (*fasthttp.Response, error) {
	var (
		conn net.Conn
		err  error
	)
	if polled && p.TLS == nil {
		conn, err = dialSocket(p, n.Addr())
	}
	if conn == nil && err == nil {
		var head []byte
		if p.TLS != nil && p.SendProxy {
			if _, k, err := proxyproto.Parse(req); err == nil {
				head, req = req[:k], req[k:]
			}
		}
		conn, err = p.DialNode(n.Addr(), head, upstream.ALPNHTTP1, wrapTLSSocket)
	}
	if err != nil {
		if errors.Is(err, upstream.ErrLocalDial) {
			return nil, fmt.Errorf("dial %s: %w", n.Addr(), err)
		}
		return nil, fmt.Errorf("%w: dial: %w", ErrUpstream, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = conn.Close()
		}
	}()
	if gone != nil && gone() {
		return nil, fmt.Errorf("dial %s: %w", n.Addr(), ErrClientGone)
	}
	_ = conn.SetDeadline(time.Now().Add(p.ConnectTimeout))
	if _, err := conn.Write(req); err != nil {
		if _, bare := conn.(*tunnel.NodeSocket); bare {
			// A NodeSocket's connect ends on its first write: a
			// refusal or an unreachable node shows here.
			return nil, fmt.Errorf("%w: connect and write request: %w", ErrUpstream, err)
		}
		return nil, fmt.Errorf("%w: write request: %w", ErrUpstream, err)
	}
	br, _ := responseReaders.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReaderSize(conn, 4096)
	} else {
		br.Reset(conn)
	}
	defer func() { br.Reset(nil); responseReaders.Put(br) }()

	resp := fasthttp.AcquireResponse()
	resp.Header.SetNoDefaultContentType(true)
	if err := resp.Header.Read(br); err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, fmt.Errorf("%w: read response: %w", ErrUpstream, err)
	}
	code := resp.StatusCode()
	switch {
	case code >= 500:
		fasthttp.ReleaseResponse(resp)
		return nil, fmt.Errorf("%w: node answered %d", ErrUpstream, code)
	case code != fasthttp.StatusSwitchingProtocols:
		err := resp.ReadBody(br, maxUpstreamAnswer)
		if err != nil {
			fasthttp.ReleaseResponse(resp)
			return nil, fmt.Errorf("%w: read %d answer: %w", ErrUpstream, code, err)
		}
		return resp, nil
	}
	defer fasthttp.ReleaseResponse(resp)
	if !bytes.EqualFold(resp.Header.Peek("Upgrade"), []byte("websocket")) {
		return nil, fmt.Errorf("%w: 101 without Upgrade: websocket", ErrUpstream)
	}
	if !bytes.Equal(resp.Header.Peek("Sec-WebSocket-Accept"), accept) {
		return nil, fmt.Errorf("%w: wrong Sec-WebSocket-Accept", ErrUpstream)
	}
	*up = NodeConn{Conn: conn, Header: clientResponse(hdr, &resp.Header)}
	if k := br.Buffered(); k > 0 {
		b, _ := br.Peek(k)
		up.Pending = append([]byte(nil), b...)
	}
	_ = conn.SetDeadline(time.Time{})
	ok = true
	return nil, nil
}

// dialSocket dials addr of p as a tunnel.NodeSocket. It returns neither a
// connection nor an error when the node is to be dialed with Go's net
// package instead (addr is a name, or no poller runs).
func dialSocket(p *upstream.Pool, addr string) (net.Conn, error) {
	fd, remote, err := p.Dialer.DialSocket(addr)
	if errors.Is(err, upstream.ErrNoSocketDial) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s, err := tunnel.WatchSocket(fd, remote)
	if err != nil {
		_ = unix.Close(fd)
		return nil, nil
	}
	return s, nil
}

// wrapTLSSocket puts a tunnel.TLSSocket under a node's TLS connection.
func wrapTLSSocket(c net.Conn) net.Conn { return tunnel.NewTLSSocket(c) }

// clientResponse appends to b the node's 101 rendered for the client: its
// headers as sent, less the framing headers that do not belong on a 101.
func clientResponse(b []byte, h *fasthttp.ResponseHeader) []byte {
	b = append(b, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"...)
	for k, v := range h.All() {
		switch {
		case httpheader.Is(k, "upgrade"), httpheader.Is(k, "connection"), httpheader.Is(k, "content-length"),
			httpheader.Is(k, "content-type"), httpheader.Is(k, "transfer-encoding"):
			continue
		}
		b = append(b, k...)
		b = append(b, ": "...)
		b = append(b, v...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}
