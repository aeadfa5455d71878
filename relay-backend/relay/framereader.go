package relay

import (
	"errors"
	"fmt"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// Close codes of a client's frames the relay refuses.
const (
	closeProtocolError = 1002 // a frame RFC 6455 forbids
	closeMessageTooBig = 1009 // a message over MaxMessage
)

// frameError is a client's frame that ends its member: the close code and
// reason to send it.
type frameError struct {
	code   uint16
	reason string
}

func (e *frameError) Error() string {
	return fmt.Sprintf("websocket frame refused with %d: %s", e.code, e.reason)
}

// errReadLimit is the frameError of a message over the read limit, sent
// as fasthttp/websocket sends it: 1009 with no reason.
var errReadLimit = &frameError{code: closeMessageTooBig}

// frameEvent is what frameReader.next found: nothing yet (evNone), a
// whole data message (typ, data: a websocket.TextMessage or BinaryMessage
// and its unmasked payload), a ping, a pong or a close (data: the
// unmasked control payload).
type frameEvent struct {
	kind evKind
	typ  int
	data []byte
}

type evKind uint8

const (
	evNone evKind = iota
	evMessage
	evPing
	evPong
	evClose
)

// frameReader parses a client's side of a WebSocket (RFC 6455 section
// 5), fed as it arrives in pieces of any size: masked frames, fragmented
// messages with control frames between their fragments, a read limit on
// each message. It holds a buffer only while a message or control frame
// is partly read; between messages it holds nothing but its header
// bytes. Checks and their close codes follow fasthttp/websocket's
// reader, so a member reads the same whichever way it came: reserved
// bits, an unknown opcode, a control frame fragmented or over 125 bytes,
// a continuation without a message or a new message inside one, an
// unmasked frame, a length not in its shortest form are 1002; a message
// over limit is 1009 and is refused at the header that crosses the limit,
// before anything of that size is allocated. It is not safe for
// concurrent use.
type frameReader struct {
	limit int64 // largest message; zero: none

	hdr  [14]byte // a frame header being read
	nhdr int
	in   bool           // inside a frame's payload
	h    wsframe.Header // the frame being read
	left uint64         // its payload bytes still to come
	mpos int            // mask key offset of its next payload byte

	msgTyp int    // the data message in progress (0: none)
	msgLen int64  // its announced length so far
	msg    []byte // its payload so far
	ctl    []byte // the control frame's payload so far
}

// next consumes p up to and including the next event and returns how many
// bytes that took. With evNone it consumed all of p. A returned event's
// data is the reader's own and valid until the next call. Masked payload
// in p is unmasked in place. After an error the reader must not be used
// again.
func (f *frameReader) next(p []byte) (int, frameEvent, error) {
	n := 0
	for {
		if !f.in {
			k, err := f.readHeader(p[n:])
			n += k
			if err != nil {
				return n, frameEvent{}, err
			}
			if !f.in {
				return n, frameEvent{}, nil // the header is incomplete
			}
		}
		take := uint64(len(p) - n)
		take = min(take, f.left)
		chunk := p[n : n+int(take)]
		n += int(take)
		f.mpos = wsframe.Mask(f.h.Mask, f.mpos, chunk)
		f.left -= take
		if f.h.Op.IsControl() {
			f.ctl = append(f.ctl, chunk...)
		} else {
			f.msg = append(f.msg, chunk...)
		}
		if f.left > 0 {
			return n, frameEvent{}, nil
		}
		f.in = false
		if ev, ok := f.endFrame(); ok {
			return n, ev, nil
		}
		if n == len(p) {
			return n, frameEvent{}, nil
		}
	}
}

// idle reports whether f is between messages, holding nothing.
func (f *frameReader) idle() bool {
	return f.nhdr == 0 && !f.in && f.msgTyp == 0
}

// readHeader adds p's first bytes to the header being read and, once it
// is whole, checks it and starts its payload. It returns the bytes of p
// it took.
func (f *frameReader) readHeader(p []byte) (int, error) {
	had := f.nhdr
	k := copy(f.hdr[f.nhdr:], p)
	h, hl, err := wsframe.ParseHeader(f.hdr[:f.nhdr+k])
	if errors.Is(err, wsframe.ErrShortHeader) {
		f.nhdr += k
		return k, nil
	}
	if err == nil {
		err = f.check(h)
	}
	if err != nil {
		var fe *frameError
		if !errors.As(err, &fe) {
			err = &frameError{code: closeProtocolError, reason: protocolReason(err)}
		}
		return k, err
	}
	f.nhdr = 0
	f.h, f.left, f.mpos, f.in = h, h.Length, 0, true
	if h.Op.IsControl() {
		f.ctl = make([]byte, 0, h.Length)
	}
	return hl - had, nil
}

// check refuses what ParseHeader lets through and the relay does not
// take.
func (f *frameReader) check(h wsframe.Header) error {
	switch {
	case h.Rsv != 0:
		return &frameError{code: closeProtocolError, reason: fmt.Sprintf("unexpected reserved bits 0x%x", h.Rsv<<4)}
	case !h.Masked:
		return &frameError{code: closeProtocolError, reason: "incorrect mask flag"}
	case h.Op == wsframe.OpContinuation && f.msgTyp == 0:
		return &frameError{code: closeProtocolError, reason: "continuation after FIN"}
	case (h.Op == wsframe.OpText || h.Op == wsframe.OpBinary) && f.msgTyp != 0:
		return &frameError{code: closeProtocolError, reason: "data before FIN"}
	case h.Op.IsControl():
		return nil
	}
	if f.msgTyp == 0 {
		f.msgTyp = int(h.Op)
	}
	// Compared before the sum, which a huge length would overflow.
	if f.limit > 0 && (h.Length > uint64(f.limit) || f.msgLen+int64(h.Length) > f.limit) {
		return errReadLimit
	}
	f.msgLen += int64(h.Length)
	return nil
}

// endFrame finishes the frame just read: a control frame, or the last
// fragment of a message, is an event.
func (f *frameReader) endFrame() (frameEvent, bool) {
	switch f.h.Op {
	case wsframe.OpPing:
		return frameEvent{kind: evPing, data: f.takeCtl()}, true
	case wsframe.OpPong:
		return frameEvent{kind: evPong, data: f.takeCtl()}, true
	case wsframe.OpClose:
		return frameEvent{kind: evClose, data: f.takeCtl()}, true
	}
	if !f.h.Fin {
		return frameEvent{}, false
	}
	ev := frameEvent{kind: evMessage, typ: f.msgTyp, data: f.msg}
	if ev.data == nil {
		ev.data = []byte{}
	}
	f.msgTyp, f.msgLen, f.msg = 0, 0, nil
	return ev, true
}

func (f *frameReader) takeCtl() []byte {
	b := f.ctl
	f.ctl = nil
	return b
}

// protocolReason is the close reason of a header ParseHeader refused.
func protocolReason(err error) string {
	switch {
	case errors.Is(err, wsframe.ErrReservedOpcode):
		return "unknown opcode"
	case errors.Is(err, wsframe.ErrFragmentedControl):
		return "control frame not final"
	case errors.Is(err, wsframe.ErrControlTooLong):
		return "control frame length > 125"
	case errors.Is(err, wsframe.ErrBadLength):
		return "invalid frame length"
	}
	return "invalid frame"
}
