package tunnel

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/internal/pollread"
)

// The stream engine (the goroutine engine: EngineGoroutines, "goroutines"
// in Tunnel.Engine) runs a tunnel as a goroutine pair, one pump per
// direction, over any net.Conn: it is the engine of TLS tunnels and of
// every tunnel on a system without the event-driven engine (non-Linux),
// and of every tunnel when asked for (EngineGoroutines). A pump reads its
// source through the runtime poller without holding a buffer while idle
// (pollread), hands what it read to forward, and writes what forward
// queued itself, blocking with a deadline; the gateway's own close frame
// or keepalive ping due now is written by a goroutine of its own.

// bufSize is the size of a pooled read buffer. A tunnel holds one per
// direction only while bytes are in flight.
const bufSize = 16 << 10

var bufPool = pollread.NewPool(bufSize)

// stallProbe is the longest a write to a destination that accepts nothing
// waits before it looks again at the clock and at its source: a write
// deadline or a close deadline that came up meanwhile, or a source that hung
// up, is noticed within this time.
const stallProbe = 250 * time.Millisecond

// stream is a tunnel's state on the stream engine: each direction's
// sockets, reader and write state, and the close of both connections. It
// is the tunnel's engine (Tunnel.eng), one allocation per tunnel.
type stream struct {
	toNode, toClient goState
	closeOnce        sync.Once // closes both connections (closeConns)
	// lingerUntil is set by closeConns when the client's socket lingers
	// (see linger): finish hands it over, once the pumps are gone.
	lingerUntil time.Time
}

// goState is a half's state on the stream engine.
type goState struct {
	src, dst net.Conn
	reader   *pollread.Reader
	srcRaw   syscall.RawConn // probed for a hang-up while dst stalls; nil if none
	// turn signals the write turn given back: a pump whose frames wait
	// behind the gateway's keepalive ping sleeps on it. Its L is the
	// half's mu.
	turn sync.Cond
	ob   outBuf
	// armed is the write deadline set on dst in mono ns, 0 if none yet.
	// Only the holder of the write turn uses it.
	armed int64
	// sock is the TLSSocket under dst, a TLS connection, which wakes
	// below crypto/tls (see send); nil otherwise. grace is the grace
	// flag of the write to it in flight, read by the socket.
	sock  *TLSSocket
	grace atomic.Bool
	// final: dst makes a timed-out write final (a TLS connection without
	// a TLSSocket under it): a write runs to the first limit, at once.
	final bool
}

// newStream puts t's halves on the stream engine.
func newStream(t *Tunnel, client, node net.Conn) *stream {
	s := new(stream)
	s.toNode.init(&t.toNode, client, node)
	s.toClient.init(&t.toClient, node, client)
	return s
}

// init gives the half h its stream-engine state.
func (g *goState) init(h *half, src, dst net.Conn) {
	g.src, g.dst = src, dst
	g.turn.L = &h.mu
	if _, ok := dst.(interface{ NetConn() net.Conn }); ok {
		if s := tlsSocketOf(dst); s != nil {
			g.sock = s
			s.own(h)
		} else {
			g.final = true
		}
	}
	if src == nil {
		return
	}
	g.reader = pollread.NewReader(src, bufPool)
	g.srcRaw = hangUpSocket(src)
}

// of is h's state.
func (s *stream) of(h *half) *goState {
	if h.toClient {
		return &s.toClient
	}
	return &s.toNode
}

// streamState is the half's state on the stream engine; only that engine's
// code calls it.
func (h *half) streamState() *goState { return h.t.eng.(*stream).of(h) }

// The stream is the tunnel's engine (see engine): the pumps read and
// write themselves, and every write blocks with a deadline.

func (*stream) name() string { return "goroutines" }

func (*stream) start(t *Tunnel, cp, np []byte) {
	t.startKeepalive()
	go t.pumpClientToNode(cp)
	go t.pumpNodeToClient(np)
}

func (*stream) goAway(t *Tunnel, code uint16, reason string) {
	t.startClosing()
	t.toClient.injectClose(code, reason)
}

// abort closes both connections now, also a client's socket closeConns
// chose to let linger (its pump is then cut by the close, not by a read
// deadline that may not have reached it).
func (s *stream) abort(t *Tunnel) {
	s.closeOnce.Do(func() { s.closeBoth(t) })
	closeConn(t.client)
}

// armClose bounds the reads by a deadline on both connections; the writes
// look at the close deadline themselves (see send).
func (s *stream) armClose(t *Tunnel, dl time.Time) {
	_ = t.client.SetReadDeadline(dl)
	_ = s.toClient.src.SetReadDeadline(dl)
}

func (s *stream) finish(t *Tunnel) {
	if !s.lingerUntil.IsZero() {
		go linger(plainSocket(t.client), s.lingerUntil, func() { closeConn(t.client) })
	}
	t.finish()
}

func (s *stream) closeConns(t *Tunnel) {
	s.closeOnce.Do(func() {
		if until, ok := t.clientLingers(); ok {
			// The client's pump stops at its next read; the last pump
			// out calls finish, after this (closeOnce orders them).
			s.lingerUntil = until
			closeConn(s.toClient.src)
			s.cutClient(t)
			return
		}
		s.closeBoth(t)
	})
}

// closeBoth closes the client's connection and the node's.
func (s *stream) closeBoth(t *Tunnel) {
	closeConn(t.client)
	closeConn(s.toClient.src) // the node's: a TLSSocket under a TLS node connection too
}

// cutClient ends the reading of the client as a read deadline does.
func (*stream) cutClient(t *Tunnel) { _ = t.client.SetReadDeadline(time.Unix(1, 0)) }

func (*stream) write(h *half, out [][]byte, lastIsClose bool) { h.writeOut(out, lastIsClose) }

func (*stream) writeOwn(h *half, frame []byte, isClose bool) {
	h.writeOut([][]byte{frame}, isClose)
}

func (*stream) writeOwnSoon(h *half, frame []byte, isClose bool) { go h.sendOwn(frame, isClose) }

// waitTurn waits until the write turn is given back. Called with mu held.
func (s *stream) waitTurn(h *half) {
	g := s.of(h)
	for h.writing {
		g.turn.Wait()
	}
}

func (s *stream) closeDst(h *half) {
	g := s.of(h)
	if g.final {
		// A TLS connection whose write timed out is broken for good:
		// no close_notify (crypto/tls would wait up to 5 s for room).
		_ = g.dst.(interface{ NetConn() net.Conn }).NetConn().Close()
	}
	closeConn(g.dst)
}

func (s *stream) endDst(h *half) {
	g := s.of(h)
	if cw, ok := g.dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = g.dst.Close()
	}
}

// pumpClientToNode forwards the client's frames to the node until the client
// side ends.
func (t *Tunnel) pumpClientToNode(pending []byte) {
	t.clientEnded(t.toNode.pump(pending))
}

// pumpNodeToClient forwards the node's frames to the client until the node
// side ends.
func (t *Tunnel) pumpNodeToClient(pending []byte) {
	t.nodeEnded(t.toClient.pump(pending))
}

// pump reads src until it fails, forwarding what it reads, and returns the
// read error.
func (h *half) pump(pending []byte) error {
	g := h.streamState()
	if len(pending) > 0 {
		h.forward(&g.ob, pending)
	}
	for {
		bp, n, err := g.reader.Read()
		if n > 0 {
			h.forward(&g.ob, (*bp)[:n])
		}
		bufPool.Put(bp)
		if err != nil {
			return err
		}
	}
}

// writeOut writes out to dst, the last segment being the gateway's close
// frame when lastIsClose; then, if a close was asked for meanwhile and dst
// now sits at a frame boundary, it writes that too. The caller holds the
// write turn; writeOut gives it back.
func (h *half) writeOut(out [][]byte, lastIsClose bool) {
	for {
		var err error
		for i, b := range out {
			if isPing(b) {
				err = h.sendPing(b)
			} else {
				err = h.send(b, lastIsClose && i == len(out)-1)
			}
			if err != nil {
				break
			}
		}
		out, lastIsClose = h.afterWrite(err)
		if out == nil {
			// The turn is given back: a pump waiting for it goes on.
			h.streamState().turn.Broadcast()
		}
		if err != nil {
			h.failDst(err)
			return
		}
		if out == nil {
			return
		}
	}
}

// sendOwn writes the gateway's own close frame (isClose) or keepalive ping
// with the write turn taken: the goroutine of a frame due now.
func (h *half) sendOwn(frame []byte, isClose bool) { h.writeOut([][]byte{frame}, isClose) }

// send writes all of b to dst. It fails when dst accepts no byte for the
// write timeout, or when the close deadline passes; a close frame of the
// gateway's own (grace) gets at least lastWordTimeout past the close
// deadline. While dst accepts nothing it wakes every stallProbe to look
// at the close deadline, which another goroutine may have set meanwhile,
// and at src: a source that hung up starts the close, so the tunnel ends
// within the close timeout even when dst never reads again.
//
// A TLS connection cannot wake that way: crypto/tls makes a timed-out
// write final. On one over a TLSSocket the socket wakes below crypto/tls
// with the same clocks (see TLSSocket.Write); on any other, one write runs
// to the first limit.
func (h *half) send(b []byte, grace bool) error {
	g := h.streamState()
	if g.sock != nil {
		g.grace.Store(grace)
		_, err := g.dst.Write(b)
		return err
	}
	start := time.Now()
	last, now := start, start // last: when dst last accepted a byte
	for {
		until, err := h.writeLimit(start, last, grace)
		if !now.Before(until) {
			return err
		}
		wake := until
		if !g.final {
			wake = earliest(until, now.Add(h.probe()))
		}
		// A deadline already set no later than wake and at least half a
		// probe away serves as well: setting one costs about a tenth
		// of a small write. Not for a write that cannot wake again.
		armed := monoTime(g.armed)
		if g.armed == 0 || wake.Before(armed) || armed.Sub(now) < h.probe()/2 || (g.final && !wake.Equal(armed)) {
			_ = g.dst.SetWriteDeadline(wake)
			g.armed = mono(wake)
		}
		n, werr := g.dst.Write(b)
		if werr == nil {
			return nil
		}
		if !errors.Is(werr, os.ErrDeadlineExceeded) {
			return werr
		}
		if g.final {
			return err
		}
		g.armed = 0 // it fired: set one again, whatever the clocks say
		b = b[n:]
		now = time.Now()
		if n > 0 {
			last = now
		}
		h.stalled()
	}
}

// sendPing sends the keepalive ping b and records where it lies in the
// client's socket: between the bytes written to the socket before the
// write and after it (TLS's record around it included).
func (h *half) sendPing(b []byte) error {
	from, placed := h.t.clientWritten()
	if err := h.send(b, false); err != nil {
		return err
	}
	if end, ok := h.t.clientWritten(); placed && ok && end > from {
		h.t.notePing(from, end)
	}
	return nil
}

// writeLimit is when a write to dst begun at start, whose last byte dst
// took at last, fails, and the error it fails with: the write timeout
// after last, or the close deadline (for the gateway's own close frame,
// grace, at least lastWordTimeout after start), whichever comes first.
func (h *half) writeLimit(start, last time.Time, grace bool) (time.Time, error) {
	t := h.t
	limit := t.closeDeadline()
	if grace {
		if g := start.Add(lastWordTimeout); limit.IsZero() || g.After(limit) {
			limit = g
		}
	}
	stall := last.Add(t.writeTimeoutOrDefault())
	if !limit.IsZero() && limit.Before(stall) {
		return limit, errCloseTimeout
	}
	return stall, errWriteTimeout
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// probe is how often a write to a dst that accepts nothing wakes to look
// at the clocks and at src: stallProbe, or a quarter of a shorter close
// timeout.
func (h *half) probe() time.Duration {
	if ct := h.t.closeTimeout / 4; ct > 0 && ct < stallProbe {
		return ct
	}
	return stallProbe
}

// stalled is called each time a write to dst wakes with bytes still to
// write: a source that hung up meanwhile starts the close, so the close
// deadline bounds the write.
func (h *half) stalled() {
	if h.streamState().srcHungUp() {
		h.t.startClosing()
	}
}

var _ engine = (*stream)(nil)
