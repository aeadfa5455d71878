package tunnel

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// The framing both engines share: a half follows src's frames, decides what
// goes on to dst, and puts the gateway's own close frame or keepalive ping
// at a frame boundary. Nothing here reads or writes a socket: the engine
// reads src and hands what it read to forward, and writes what forward
// queued (see engine).

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
// A half is 144 bytes and two of them are most of an idle tunnel's memory
// (see TestTunnelSize): what only a closing or stalled half uses hangs off
// a pointer that is nil until then (why, tail), and what only the stream
// engine uses hangs off the tunnel's engine (see stream).
type half struct {
	t *Tunnel

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

// init ties the half to its tunnel; the engine gives it the rest.
func (h *half) init(t *Tunnel, toClient bool) { h.t, h.toClient = t, toClient }

// forward scans p, writes to dst what dst may still receive, and injects a
// pending close at the first frame boundary. The scan runs under mu; the
// writes run after it is released. It is the read path of both engines:
// the stream engine's pump and the poller's readSrc call it with what they
// read, and ob is where it queues what goes to dst: the half's own on the
// stream engine, the poller's one for all its tunnels on the event-driven
// engine (forward never runs twice at once on a poller, and what dst does
// not take is copied to the tail). Only the holder of the write turn uses
// ob.
func (h *half) forward(ob *outBuf, p []byte) {
	h.bytes.Add(uint64(len(p)))
	h.countBytes(uint64(len(p)))
	h.mu.Lock()
	if h.broken {
		h.mu.Unlock()
		return
	}
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
				h.queue(ob, p[start:i])
			}
			h.carryN = 0
			h.broken = true
			if h.pendingCode != 0 {
				h.queueClose(ob, h.pendingCode, h.pendingWhy())
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
			h.queue(ob, p[start:hdrAt])
			start = i
			h.queueClose(ob, h.owedCode, h.owedWhy())
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
			h.queue(ob, p[start:i])
			start = i
			h.queueClose(ob, h.pendingCode, h.pendingWhy())
		} else if h.pendingPing && !h.sentClose && !h.dstFailed {
			// The keepalive ping goes at the first frame end, also in
			// the middle of a read: a client reading a stream of large
			// frames gets it as soon as one ends.
			h.queue(ob, p[start:i])
			start = i
			h.pendingPing = false
			ob.seg[ob.n] = pingFrame
			ob.n++
		}
	}
	if ferr == nil {
		h.flush(ob, p[start:])
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
	h.countFrames(frames)
	// Bytes after src's own close frame are no one's business: a peer
	// stops reading at a close frame, so nothing after it is an error.
	ignoreErr := ferr != nil && h.srcClosed
	out, outClose := ob.seg[:ob.n], ob.close
	if len(out) > 0 && h.writing {
		// On goroutines, only the gateway's keepalive ping can hold the
		// turn here (its close sets sentClose, and queue then drops
		// everything): wait for it, so no frame is split. A close that
		// went out meanwhile, or a failed dst, ends what may follow. (The
		// poller never reads src while the turn is taken.)
		h.t.eng.waitTurn(h)
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
		h.t.eng.write(h, out, outClose)
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
func (h *half) flush(ob *outBuf, rest []byte) {
	held := h.sc.PartialHeader()
	if held > len(rest) {
		// The header began in an earlier read; all of rest belongs to it.
		h.carryN += uint8(copy(h.carry[h.carryN:], rest))
		return
	}
	h.queue(ob, rest[:len(rest)-held])
	h.carryN = uint8(copy(h.carry[:], rest[len(rest)-held:]))
}

// queue adds carried header bytes and b to ob, what forward writes, unless
// dst may no longer receive frames. Called with mu held, by the pump only.
func (h *half) queue(ob *outBuf, b []byte) {
	if h.sentClose || h.dstFailed {
		h.carryN = 0
		return
	}
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

// queueClose adds the gateway's own close frame to ob, what forward writes.
// Called with mu held at a frame boundary of dst, by the pump only.
func (h *half) queueClose(ob *outBuf, code uint16, reason string) {
	if h.sentClose || h.dstFailed {
		return
	}
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

// afterWrite ends a write of everything queued, which failed with err or
// went out whole. It returns the gateway's close frame (isClose) or
// keepalive ping to write next, when one was asked for meanwhile and dst
// now sits at a frame boundary, with the write turn still taken; otherwise
// nil, with the turn given back (the stream engine then wakes a pump
// waiting for it: see writeOut).
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
	return nil, false
}

// outSegs is the most segments one forward queues: the carried header
// bytes, a run of the read, the keepalive ping, the rest of the read, and
// the gateway's close frame.
const outSegs = 5

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
// on the stream engine a ping due now is written by a goroutine of its
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
	h.t.eng.writeOwnSoon(h, pingFrame, false)
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
	h.t.eng.closeDst(h)
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
	h.t.eng.writeOwnSoon(h, frame, true)
}

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
	h.t.eng.writeOwn(h, frame, true)
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
	h.t.eng.endDst(h)
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
