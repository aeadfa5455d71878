package tunnel

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"

	"github.com/wsgate/wsgate/internal/pollread"
	"github.com/wsgate/wsgate/internal/wsframe"
)

// bufSize is the size of a pooled read buffer. A tunnel holds one per
// direction only while bytes are in flight.
const bufSize = 16 << 10

var bufPool = pollread.NewPool(bufSize)

// half is one direction of a tunnel: it reads src, follows the frames and
// writes them to dst. Only its pump goroutine reads src; writes to dst happen
// under mu, from the pump or from injectClose.
type half struct {
	t        *Tunnel
	src, dst net.Conn
	reader   *pollread.Reader
	toClient bool // dst is the client: close frames go unmasked

	mu sync.Mutex
	sc wsframe.Scanner
	// carry holds the first bytes of a header that is not complete yet;
	// they are not written until it is, so dst always sits at a frame
	// boundary unless a payload is in flight.
	carry       [wsframe.MaxHeaderLen]byte
	carryN      int
	pendingCode uint16 // close to inject at the next boundary, 0 = none
	pendingWhy  string
	sentClose   bool // the gateway wrote its own close frame to dst
	srcClosed   bool // src sent a close frame
	broken      bool // framing lost: everything from src is dropped
	dstFailed   bool
	frames      uint64
	bytes       uint64
	closeCode   uint16 // code of src's close frame
	sentCode    uint16 // code of the gateway's own close to dst
}

func (h *half) init(t *Tunnel, src, dst net.Conn, toClient bool) {
	h.t, h.src, h.dst, h.toClient = t, src, dst, toClient
	h.reader = pollread.NewReader(src, bufPool)
}

// pump reads src until it fails, forwarding what it reads.
func (h *half) pump(pending []byte) {
	if len(pending) > 0 {
		h.forward(pending)
	}
	for {
		bp, n, err := h.reader.Read()
		if n > 0 {
			h.forward((*bp)[:n])
		}
		bufPool.Put(bp)
		if err != nil {
			return
		}
	}
}

// forward scans p, writes to dst what dst may still receive, and injects a
// pending close at the first frame boundary.
func (h *half) forward(p []byte) {
	h.mu.Lock()
	h.bytes += uint64(len(p))
	if h.broken {
		h.mu.Unlock()
		return
	}
	start, i := 0, 0
	closed := false
	var ferr error
	for i < len(p) {
		atBoundary := h.sc.AtBoundary()
		k, end, err := h.sc.Advance(p[i:])
		if err != nil {
			// Whole frames before the offending header go out; the
			// header itself (here or held in carry) never does.
			if atBoundary {
				h.write(p[start:i])
			}
			h.carryN = 0
			h.broken = true
			if h.pendingCode != 0 {
				h.writeClose(h.pendingCode, h.pendingWhy)
			}
			ferr = err
			break
		}
		i += k
		if !end {
			continue
		}
		h.frames++
		if h.sc.Header().Op == wsframe.OpClose {
			closed = true
			h.srcClosed = true
			h.closeCode = h.sc.CloseCode()
		}
		if h.pendingCode != 0 && !h.sentClose {
			h.write(p[start:i])
			start = i
			h.writeClose(h.pendingCode, h.pendingWhy)
		}
	}
	if ferr == nil {
		h.flush(p[start:])
	}
	h.mu.Unlock()

	if ferr != nil {
		h.framingError(ferr)
		return
	}
	if closed {
		h.t.sideClosed(!h.toClient)
	}
}

// flush writes rest, keeping back the bytes of an incomplete header.
func (h *half) flush(rest []byte) {
	held := h.sc.PartialHeader()
	if held > len(rest) {
		// The header began in an earlier read; all of rest belongs to it.
		h.carryN += copy(h.carry[h.carryN:], rest)
		return
	}
	h.write(rest[:len(rest)-held])
	h.carryN = copy(h.carry[:], rest[len(rest)-held:])
}

// write sends carried header bytes and b to dst, unless dst may no longer
// receive frames. Called with mu held.
func (h *half) write(b []byte) {
	if h.sentClose || h.dstFailed {
		h.carryN = 0
		return
	}
	if h.carryN > 0 {
		c := h.carry[:h.carryN]
		h.carryN = 0
		if _, err := h.dst.Write(c); err != nil {
			h.failDst()
			return
		}
	}
	if len(b) == 0 {
		return
	}
	if _, err := h.dst.Write(b); err != nil {
		h.failDst()
	}
}

// failDst stops writes to a destination that failed and closes it, so the
// other direction's read fails too and tells the surviving side.
func (h *half) failDst() {
	h.dstFailed = true
	_ = h.dst.Close()
}

// writeClose writes the gateway's own close frame to dst. Called with mu
// held at a frame boundary of dst.
func (h *half) writeClose(code uint16, reason string) {
	if h.sentClose || h.dstFailed {
		return
	}
	h.pendingCode = 0
	var buf [wsframe.MaxHeaderLen + 125]byte
	var frame []byte
	if h.toClient {
		frame = wsframe.AppendClose(buf[:0], code, reason, nil)
	} else {
		var key [4]byte
		k := rand.Uint32()
		key[0], key[1], key[2], key[3] = byte(k), byte(k>>8), byte(k>>16), byte(k>>24)
		frame = wsframe.AppendClose(buf[:0], code, reason, &key)
	}
	h.carryN = 0 // a partial header not yet written is dropped with the rest
	if _, err := h.dst.Write(frame); err != nil {
		h.failDst()
	}
	h.sentClose = true
	h.sentCode = code
}

// injectClose sends the gateway's close frame to dst now if dst sits at a
// frame boundary, or at the end of the frame in flight. It does nothing when
// a close already went to dst, from the gateway or passed through from src.
func (h *half) injectClose(code uint16, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sentClose || h.srcClosed || h.dstFailed || h.pendingCode != 0 {
		return
	}
	if h.broken || h.sc.AtBoundary() || h.sc.PartialHeader() > 0 {
		h.writeClose(code, reason)
		return
	}
	h.pendingCode, h.pendingWhy = code, reason
}

// framingError answers a frame that broke the rules or the route's limit:
// the side that sent it gets a close saying why, the other side 1001, and the
// sender is treated as done since its close frame can no longer be found.
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
	if errors.Is(err, wsframe.ErrTooLarge) {
		code, why = CodeTooBig, "frame too large"
	}
	t.toClient.injectClose(code, why)
	t.toNode.injectClose(CodeGoingAway, "client closed")
	t.sideClosed(true)
}

// sawClose reports whether src sent a close frame.
func (h *half) sawClose() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.srcClosed
}

func (h *half) stats() (frames, bytes uint64, closeCode, sentCode uint16) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.frames, h.bytes, h.closeCode, h.sentCode
}
