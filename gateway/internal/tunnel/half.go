package tunnel

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/internal/pollread"
	"github.com/wsgate/wsgate/internal/wsframe"
)

// bufSize is the size of a pooled read buffer. A tunnel holds one per
// direction only while bytes are in flight.
const bufSize = 16 << 10

var bufPool = pollread.NewPool(bufSize)

// stallProbe is the longest a write to a destination that accepts nothing
// waits before it looks again at the clock and at its source: a write
// deadline or a close deadline that came up meanwhile, or a source that hung
// up, is noticed within this time.
const stallProbe = 250 * time.Millisecond

var (
	errRateLimited  = errors.New("client over the route's frame or byte rate")
	errWriteTimeout = errors.New("destination accepted no byte within the write timeout")
	errCloseTimeout = errors.New("close handshake did not finish within the close timeout")
)

// half is one direction of a tunnel: it reads src, follows the frames and
// writes them to dst. Only its pump goroutine (on the event-driven engine,
// its poller) reads src. Only the holder of the write turn (writing) writes
// to dst: the pump with the bytes it forwards, or a goroutine sending the
// gateway's own close frame or keepalive ping; on the event-driven engine
// every write is the poller's, and the turn stays taken while a tail waits.
// mu guards the framing state and the turn and is never held across I/O;
// the counters are atomics, so Stats never waits on a write.
//
// A half is 152 bytes and two of them are most of an idle tunnel's memory
// (see TestTunnelSize): what only one engine uses, or only a closing or
// stalled half, hangs off a pointer that is nil until then (g, why, tail).
type half struct {
	t *Tunnel
	g *goState // the goroutine engine's own (src, dst, buffer); nil on the poller

	frames    atomic.Uint64
	bytes     atomic.Uint64
	closeCode atomic.Uint32 // code of src's close frame
	sentCode  atomic.Uint32 // code of the gateway's own close to dst

	mu sync.Mutex
	sc wsframe.Scanner
	// carry holds the first bytes of a header that is not complete yet;
	// they are not written until it is, so dst always sits at a frame
	// boundary unless a payload is in flight.
	carry  [wsframe.MaxHeaderLen]byte
	carryN uint8

	toClient bool // dst is the client: close frames go unmasked
	writing  bool // the write turn is taken: someone is writing to dst
	// pendingPing asks for the gateway's keepalive ping to dst at the
	// next frame boundary (node→client half only).
	pendingPing bool
	sentClose   bool // the gateway's own close frame to dst is queued or written
	srcClosed   bool // src sent a close frame
	broken      bool // framing lost: everything from src is dropped
	dstFailed   bool

	// The event-driven engine's flags, used by the poller only.
	readable   bool // src had an event since it last read short
	hup        bool // src's peer hung up or the socket failed
	urgent     bool // src reported urgent data: read it to EAGAIN
	ended      bool // reading src has ended
	stallArmed bool // a write-timeout timer is pending
	queued     bool // in the poller's list of halves to read on

	pendingCode uint16 // close to inject at the next boundary, 0 = none
	// owedCode is the close dst gets in place of src's close frame, or
	// when src ends without one (0 = none): set on the node→client half
	// when the client broke the framing rules, so the node's replies to
	// the client's earlier frames still reach it first.
	owedCode uint16
	why      *closeWhy // the reasons of pendingCode and owedCode; nil until either is set

	// tail holds what dst has not taken yet, on the event-driven engine
	// (poller only); nil while nothing waits. While it is there the write
	// turn stays taken and src is not read.
	tail *tail
}

// closeWhy holds the reason texts of a half's pending and owed closes,
// apart from the half: most tunnels never close on the gateway's behalf.
type closeWhy struct{ pending, owed string }

// setPending asks for the gateway's close with code and reason at dst's
// next frame boundary. Called with mu held.
func (h *half) setPending(code uint16, reason string) {
	h.pendingCode = code
	if h.why == nil {
		h.why = new(closeWhy)
	}
	h.why.pending = reason
}

// pendingWhy is the reason of the pending close. Called with mu held.
func (h *half) pendingWhy() string {
	if h.why == nil {
		return ""
	}
	return h.why.pending
}

// owedWhy is the reason of the owed close. Called with mu held.
func (h *half) owedWhy() string {
	if h.why == nil {
		return ""
	}
	return h.why.owed
}

// tail is what a destination has not taken yet on the event-driven
// engine, with the clocks of its write timeout.
type tail struct {
	b            []byte
	lastProgress int64 // mono ns: when dst last took a byte of the tail
	graceUntil   int64 // mono ns: how long a tail ending in the gateway's close may wait past the close deadline
	close        bool  // b ends with the gateway's close frame
	shut         bool  // dst's stream ends once b is written (endInsideFrame)
	ping         int32 // the bytes of b up to the end of the keepalive ping in it; 0: none
}

func (h *half) init(t *Tunnel, src, dst net.Conn, toClient, polled bool) {
	h.t, h.toClient = t, toClient
	if polled {
		return // the poller has the sockets
	}
	h.initGo(src, dst)
}

// initGo gives the half its goroutine-engine state.
func (h *half) initGo(src, dst net.Conn) {
	h.g = &goState{src: src, dst: dst}
	h.g.turn = sync.NewCond(&h.mu)
	if _, ok := dst.(interface{ NetConn() net.Conn }); ok {
		if s := tlsSocketOf(dst); s != nil {
			h.g.sock = s
			s.own(h)
		} else {
			h.g.final = true
		}
	}
	if src == nil {
		return
	}
	h.g.reader = pollread.NewReader(src, bufPool)
	h.g.srcRaw = hangUpSocket(src)
}

// out is where forward queues what goes to dst: the half's own on
// goroutines, the poller's one for all its tunnels on the event-driven
// engine (forward never runs twice at once on a poller, and what dst does
// not take is copied to the tail). Only the holder of the write turn uses
// it.
func (h *half) out() *outBuf {
	if h.g != nil {
		return &h.g.ob
	}
	return h.t.pl.out
}

// pump reads src until it fails, forwarding what it reads, and returns the
// read error.
func (h *half) pump(pending []byte) error {
	if len(pending) > 0 {
		h.forward(pending)
	}
	for {
		bp, n, err := h.g.reader.Read()
		if n > 0 {
			h.forward((*bp)[:n])
		}
		bufPool.Put(bp)
		if err != nil {
			return err
		}
	}
}

// forward scans p, writes to dst what dst may still receive, and injects a
// pending close at the first frame boundary. The scan runs under mu; the
// writes run after it is released.
func (h *half) forward(p []byte) {
	h.bytes.Add(uint64(len(p)))
	h.mu.Lock()
	if h.broken {
		h.mu.Unlock()
		return
	}
	ob := h.out()
	ob.n, ob.close = 0, false
	start, i := 0, 0
	closed := false
	var frames uint64
	var ferr error
	for i < len(p) {
		atBoundary := h.sc.AtBoundary()
		inHeader := atBoundary || h.sc.PartialHeader() > 0
		k, end, err := h.sc.Advance(p[i:])
		if err != nil {
			// Whole frames before the offending header go out; the
			// header itself (here or held in carry) never does.
			if atBoundary {
				h.queue(p[start:i])
			}
			h.carryN = 0
			h.broken = true
			if h.pendingCode != 0 {
				h.queueClose(h.pendingCode, h.pendingWhy())
			}
			ferr = err
			break
		}
		hdrAt := i
		i += k
		if inHeader && h.owedCode != 0 && !h.sentClose && h.sc.PartialHeader() == 0 &&
			h.sc.Header().Op == wsframe.OpClose {
			// src's close frame answers the gateway's close, not dst:
			// what src sent before it goes out, then the close dst is
			// owed, and nothing of src's close frame does.
			if hdrAt == 0 {
				h.carryN = 0 // the close's header began in an earlier read
			}
			h.queue(p[start:hdrAt])
			start = i
			h.queueClose(h.owedCode, h.owedWhy())
		}
		if !end {
			continue
		}
		frames++
		if h.sc.Header().Op == wsframe.OpClose {
			closed = true
			h.srcClosed = true
			h.closeCode.Store(uint32(h.sc.CloseCode()))
			if h.toClient {
				h.t.noteClose(ByNode)
			} else {
				h.t.noteClose(ByClient)
			}
			// src's close goes to dst instead of the gateway's: a
			// second close frame would follow the first.
			h.pendingCode = 0
		}
		if h.pendingCode != 0 && !h.sentClose {
			h.queue(p[start:i])
			start = i
			h.queueClose(h.pendingCode, h.pendingWhy())
		} else if h.pendingPing && !h.sentClose && !h.dstFailed {
			// The keepalive ping goes at the first frame end, also in
			// the middle of a read: a client reading a stream of large
			// frames gets it as soon as one ends.
			h.queue(p[start:i])
			start = i
			h.pendingPing = false
			ob.seg[ob.n] = pingFrame
			ob.n++
		}
	}
	if ferr == nil {
		h.flush(p[start:])
	}
	if ferr == nil && !h.toClient && h.t.rate != nil && !h.t.rate.read(frames, len(p), mono(time.Now())) {
		// Over the route's rate: what this read brought still goes
		// out; the client then gets 1008 as for a frame over the
		// limit, and nothing it sends from now on goes on. A cut
		// inside a frame ends the node's stream there rather than
		// waiting for the frame's end, which a drip would put off
		// (see endInsideFrame).
		ferr = errRateLimited
		h.broken = true
	}
	h.frames.Add(frames)
	// Bytes after src's own close frame are no one's business: a peer
	// stops reading at a close frame, so nothing after it is an error.
	ignoreErr := ferr != nil && h.srcClosed
	out, outClose := ob.seg[:ob.n], ob.close
	if len(out) > 0 && h.writing && h.g != nil {
		// On goroutines, only the gateway's keepalive ping can hold the
		// turn here (its close sets sentClose, and queue then drops
		// everything): wait for it, so no frame is split. A close that
		// went out meanwhile, or a failed dst, ends what may follow.
		for h.writing {
			h.g.turn.Wait()
		}
		if h.dstFailed || (h.sentClose && !outClose) {
			out = nil
		}
	}
	if len(out) > 0 {
		h.writing = true
	}
	h.mu.Unlock()

	if closed {
		// The close handshake bounds the writes that carry src's close.
		h.t.startClosing()
	}
	if len(out) > 0 {
		h.write(out, outClose)
	}
	if ferr != nil && !ignoreErr {
		h.framingError(ferr)
		return
	}
	if closed {
		h.t.sideClosed(!h.toClient)
	}
}

// flush queues rest, keeping back the bytes of an incomplete header. Called
// with mu held.
func (h *half) flush(rest []byte) {
	held := h.sc.PartialHeader()
	if held > len(rest) {
		// The header began in an earlier read; all of rest belongs to it.
		h.carryN += uint8(copy(h.carry[h.carryN:], rest))
		return
	}
	h.queue(rest[:len(rest)-held])
	h.carryN = uint8(copy(h.carry[:], rest[len(rest)-held:]))
}

// queue adds carried header bytes and b to what forward writes, unless dst
// may no longer receive frames. Called with mu held, by the pump only.
func (h *half) queue(b []byte) {
	if h.sentClose || h.dstFailed {
		h.carryN = 0
		return
	}
	ob := h.out()
	if h.carryN > 0 {
		n := copy(ob.held[:], h.carry[:h.carryN])
		h.carryN = 0
		ob.seg[ob.n] = ob.held[:n]
		ob.n++
	}
	if len(b) > 0 {
		ob.seg[ob.n] = b
		ob.n++
	}
}

// queueClose adds the gateway's own close frame to what forward writes.
// Called with mu held at a frame boundary of dst, by the pump only.
func (h *half) queueClose(code uint16, reason string) {
	if h.sentClose || h.dstFailed {
		return
	}
	ob := h.out()
	ob.seg[ob.n] = h.takeClose(code, reason)
	ob.n++
	ob.close = true
}

// takeClose builds the gateway's close frame for dst and records it as
// sent; the caller holds mu and has the write turn (or is about to take
// it). A partial header not yet written is dropped with the rest.
func (h *half) takeClose(code uint16, reason string) []byte {
	h.pendingCode = 0
	h.carryN = 0
	h.sentClose = true
	h.sentCode.Store(uint32(code))
	h.t.noteClose(ByGateway)
	if h.toClient {
		return wsframe.AppendClose(nil, code, reason, nil)
	}
	var key [4]byte
	k := rand.Uint32()
	key[0], key[1], key[2], key[3] = byte(k), byte(k>>8), byte(k>>16), byte(k>>24)
	return wsframe.AppendClose(nil, code, reason, &key)
}

// closable reports whether the gateway's close may go to dst now: dst sits
// at a frame boundary (or framing is lost and nothing more goes out).
// Called with mu held.
func (h *half) closable() bool {
	return h.broken || h.sc.AtBoundary() || h.sc.PartialHeader() > 0
}

// write writes out to dst on the tunnel's engine, the last segment being
// the gateway's close frame when lastIsClose. The caller holds the write
// turn.
func (h *half) write(out [][]byte, lastIsClose bool) {
	if h.t.pl != nil {
		h.writeNB(out, lastIsClose)
		return
	}
	h.writeOut(out, lastIsClose)
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
		if err != nil {
			h.failDst(err)
			return
		}
		if out == nil {
			return
		}
	}
}

// afterWrite ends a write of everything queued, which failed with err or
// went out whole. It returns the gateway's close frame (isClose) or
// keepalive ping to write next, when one was asked for meanwhile and dst
// now sits at a frame boundary, with the write turn still taken; otherwise
// nil, with the turn given back.
func (h *half) afterWrite(err error) (next [][]byte, isClose bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err != nil:
		h.dstFailed = true
	case h.pendingCode != 0 && !h.sentClose && h.closable():
		return [][]byte{h.takeClose(h.pendingCode, h.pendingWhy())}, true
	case h.pendingPing && !h.sentClose && !h.broken && h.closable():
		h.pendingPing = false
		return [][]byte{pingFrame}, false
	}
	h.writing = false
	if h.g != nil {
		h.g.turn.Broadcast()
	}
	return nil, false
}

// outSegs is the most segments one forward queues: the carried header
// bytes, a run of the read, the keepalive ping, the rest of the read, and
// the gateway's close frame.
const outSegs = 5

// goState is a half's state on the goroutine engine only.
type goState struct {
	src, dst net.Conn
	reader   *pollread.Reader
	srcRaw   syscall.RawConn // probed for a hang-up while dst stalls; nil if none
	// turn signals the write turn given back: a pump whose frames wait
	// behind the gateway's keepalive ping sleeps on it.
	turn *sync.Cond
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
	// closeOnce, the client→node half's only, closes both connections
	// (Tunnel.closeConns).
	closeOnce sync.Once
}

// outBuf is what one forward queues for dst, written once the half's lock
// is released (see outSegs); held keeps the carried header bytes.
type outBuf struct {
	seg   [outSegs][]byte
	n     int
	close bool
	held  [wsframe.MaxHeaderLen]byte
}

// pingFrame is the gateway's keepalive ping to a client: unmasked, no
// payload (RFC 6455 section 5.5.2).
var pingFrame = []byte{0x89, 0x00}

// injectPing sends the gateway's keepalive ping to dst now if dst sits at
// a frame boundary, or at the end of the frame in flight. It does nothing
// once a close has gone to dst or is due. Like injectClose it never waits:
// on the goroutine engine a ping due now is written by a goroutine of its
// own.
func (h *half) injectPing() {
	h.mu.Lock()
	if h.sentClose || h.srcClosed || h.dstFailed || h.broken || h.pendingCode != 0 || h.pendingPing {
		h.mu.Unlock()
		return
	}
	if h.writing || !h.closable() {
		h.pendingPing = true
		h.mu.Unlock()
		return
	}
	h.writing = true
	h.mu.Unlock()
	if h.t.pl != nil {
		h.writeNB([][]byte{pingFrame}, false)
		return
	}
	go h.writeOut([][]byte{pingFrame}, false)
}

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
	g := h.g
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
	if h.srcHungUp() {
		h.t.startClosing()
	}
}

// failDst stops the writes to dst after one failed. A dst that accepted
// nothing in time is closed, so the other direction's read of it fails too
// and tells the surviving side. A dst whose connection failed (reset, broken
// pipe) is not: the other direction still reads it, and a close frame its
// peer sent before it went is read and passed on, never replaced by a close
// of the gateway's own; that read ends by itself at the failure, and the
// close timeout, started here, bounds it. The reader records why the side
// ended, since only it knows whether a close frame came first.
func (h *half) failDst(err error) {
	switch {
	case errors.Is(err, errWriteTimeout):
		h.t.setReason(EndWriteTimeout)
	case errors.Is(err, errCloseTimeout):
		h.t.setReason(EndCloseTimeout)
	default:
		// Closed by the tunnel, which said why, or failed.
		h.t.startClosing()
		return
	}
	if h.t.pl != nil {
		h.shutdownDst()
		return
	}
	if h.g.final {
		// A TLS connection whose write timed out is broken for good:
		// no close_notify (crypto/tls would wait up to 5 s for room).
		_ = h.g.dst.(interface{ NetConn() net.Conn }).NetConn().Close()
	}
	closeConn(h.g.dst)
}

// srcEnded records why reading src stopped.
func (h *half) srcEnded(err error) {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		// Read deadlines are set only when the close starts.
		h.t.setReason(EndCloseTimeout)
	case errors.Is(err, net.ErrClosed), h.sawClose():
		// The tunnel closed it, or src said goodbye first.
	case h.toClient:
		h.t.setReason(EndNodeGone)
	default:
		h.t.setReason(EndClientGone)
	}
}

// injectClose sends the gateway's close frame to dst now if dst sits at a
// frame boundary, or at the end of the frame in flight. It does nothing when
// a close already went to dst, from the gateway or passed through from src.
// It never waits on I/O: a close due now is written by a goroutine of its
// own, and one due while the pump is writing is left to the pump.
func (h *half) injectClose(code uint16, reason string) {
	h.mu.Lock()
	if h.sentClose || h.srcClosed || h.dstFailed || h.pendingCode != 0 {
		h.mu.Unlock()
		return
	}
	if h.writing || !h.closable() {
		h.setPending(code, reason)
		h.mu.Unlock()
		return
	}
	frame := h.takeClose(code, reason)
	h.writing = true
	h.mu.Unlock()
	if h.t.pl != nil {
		h.writeNB([][]byte{frame}, true) // on the poller; never blocks
		return
	}
	go h.sendClose(frame)
}

// sendClose writes the gateway's close frame with the write turn taken.
func (h *half) sendClose(frame []byte) { h.writeOut([][]byte{frame}, true) }

// lastWord writes the gateway's close frame to dst from the pump that has
// just stopped reading src, so it goes out before the tunnel closes its
// connections: the close dst is owed if any, else code. With a write to
// dst in flight it is left to follow that write. It does nothing when a
// close already went to dst or dst sits inside a frame.
func (h *half) lastWord(code uint16, reason string) {
	h.mu.Lock()
	if h.sentClose || h.srcClosed || h.dstFailed || !h.closable() {
		h.mu.Unlock()
		return
	}
	if h.owedCode != 0 {
		code, reason = h.owedCode, h.owedWhy()
	}
	if h.writing {
		// A write to dst is in flight (a tail on the poller, the
		// gateway's own frame on goroutines): the close follows it.
		if h.pendingCode == 0 {
			h.setPending(code, reason)
		}
		h.mu.Unlock()
		return
	}
	frame := h.takeClose(code, reason)
	h.writing = true
	h.mu.Unlock()
	h.write([][]byte{frame}, true)
}

// framingError answers a frame that broke the rules or the route's limit.
// A bad node frame: the client gets 1014 and the node 1002 at once. A bad
// client frame: the node gets 1001 at once, and the client its 1002 (1009
// for a frame over the limit) only after the node's replies to the client's
// earlier frames, in place of the node's close frame (see owe). Either way
// the sender is treated as done since its close frame can no longer be
// found.
func (h *half) framingError(err error) {
	t := h.t
	if h.toClient {
		// The node misbehaved.
		t.toClient.injectClose(CodeBadGateway, "bad frame from upstream")
		t.toNode.injectClose(CodeProtocolError, "protocol error")
		t.sideClosed(false)
		return
	}
	code, why := CodeProtocolError, "protocol error"
	switch {
	case errors.Is(err, wsframe.ErrTooLarge):
		code, why = CodeTooBig, "frame too large"
	case errors.Is(err, errRateLimited):
		code, why = CodePolicy, "rate limit exceeded"
	}
	t.toClient.owe(code, why)
	if !errors.Is(err, errRateLimited) || !t.toNode.endInsideFrame() {
		t.toNode.injectClose(CodeGoingAway, "client closed")
	}
	t.sideClosed(true)
}

// endInsideFrame ends the stream to dst when the client was cut inside a
// frame (over its rate in the middle of a payload, as a drip is): no close
// frame can follow a part of a frame, so dst gets nothing more than what
// was already forwarded, and its connection is shut for writing once that
// is written, as if the client had vanished there; dst
// then sees the end of its stream and closes, and the tunnel ends. It
// reports false, doing nothing, when dst sits at a frame boundary.
func (h *half) endInsideFrame() bool {
	h.mu.Lock()
	if h.sc.AtBoundary() || h.sc.PartialHeader() > 0 || h.sentClose || h.dstFailed {
		h.mu.Unlock()
		return false
	}
	h.dstFailed = true
	h.mu.Unlock()
	if h.t.pl != nil {
		if h.tail != nil {
			// What dst has not taken yet goes first: the frames before
			// the cut, as the goroutine engine's synchronous writes do.
			h.tail.shut = true
			return true
		}
		h.shutdownDstWrite()
		return true
	}
	if cw, ok := h.g.dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = h.g.dst.Close()
	}
	return true
}

// owe makes code the close dst gets in place of src's close frame, or when
// src ends without one or the close timeout passes, unless a close already
// went to dst. Until then src's frames still go to dst.
func (h *half) owe(code uint16, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sentClose || h.srcClosed || h.dstFailed || h.owedCode != 0 {
		return
	}
	h.owedCode = code
	if h.why == nil {
		h.why = new(closeWhy)
	}
	h.why.owed = reason
}

// sawClose reports whether src sent a close frame.
func (h *half) sawClose() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.srcClosed
}

// stats reads the counters without the lock.
func (h *half) stats() (frames, bytes uint64, closeCode, sentCode uint16) {
	return h.frames.Load(), h.bytes.Load(), uint16(h.closeCode.Load()), uint16(h.sentCode.Load())
}
