// Package relayclient speaks relay.v1, the resumable dialect of
// relay-backend's rooms (docs/protocol.md).
//
// The pure codec, usable with any WebSocket library, is ParseFrame,
// AppendFrame, ParseSince and Since.String. Conn wraps a
// fasthttp/websocket connection, tracks the client's position in the room
// and tells messages, acknowledgements and the replay's end apart.
package relayclient

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Subprotocol is the Sec-WebSocket-Protocol value of relay.v1.
const Subprotocol = "relay.v1"

// HeaderLen is the length of the header before every frame's body.
const HeaderLen = 10

// MaxEpochLen is the longest epoch, in bytes.
const MaxEpochLen = 64

// Kind is the first byte of a relay-to-client frame.
type Kind byte

// The frame kinds.
const (
	// KindMsg carries a room message (live or replayed) at Offset.
	KindMsg Kind = 0x01
	// KindPos is the first frame: the room's epoch (body) and last
	// committed offset at join.
	KindPos Kind = 0x02
	// KindResync says the client's since cannot be served; its state must
	// be rebuilt from the replay that follows. Body: the room's epoch.
	KindResync Kind = 0x03
	// KindLive ends the replay; Offset is the last replayed offset.
	KindLive Kind = 0x04
	// KindAck acknowledges the client's own message, committed at Offset.
	KindAck Kind = 0x05
)

// String returns the kind's name from docs/protocol.md.
func (k Kind) String() string {
	switch k {
	case KindMsg:
		return "MSG"
	case KindPos:
		return "POS"
	case KindResync:
		return "RESYNC"
	case KindLive:
		return "LIVE"
	case KindAck:
		return "ACK"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Message types carried in a frame's second byte (as in RFC 6455 opcodes).
const (
	TypeNone   byte = 0
	TypeText   byte = 1
	TypeBinary byte = 2
)

// Frame is one decoded relay-to-client frame.
type Frame struct {
	// Kind says what the frame is.
	Kind Kind
	// Type is the carried message's type for MSG (TypeText or TypeBinary),
	// TypeNone otherwise.
	Type byte
	// Offset is the room offset the frame refers to.
	Offset uint64
	// Body is the message payload (MSG) or the epoch (POS, RESYNC); empty
	// otherwise. ParseFrame's Body aliases its input.
	Body []byte
}

// ErrBadFrame is returned by ParseFrame for a payload that is not a valid
// relay.v1 frame.
var ErrBadFrame = errors.New("relayclient: malformed frame")

// ErrBadSince is returned by ParseSince for a malformed since value.
var ErrBadSince = errors.New("relayclient: malformed since")

// AppendFrame appends the encoding of f to dst.
func AppendFrame(dst []byte, f Frame) []byte {
	dst = append(dst, byte(f.Kind), f.Type)
	dst = binary.BigEndian.AppendUint64(dst, f.Offset)
	return append(dst, f.Body...)
}

// ParseFrame decodes one binary WebSocket payload sent by the relay and
// checks it against docs/protocol.md: a known kind, a message type only on
// MSG, a valid epoch on POS and RESYNC, no body on LIVE and ACK.
func ParseFrame(b []byte) (Frame, error) {
	if len(b) < HeaderLen {
		return Frame{}, fmt.Errorf("%w: %d bytes, want at least %d", ErrBadFrame, len(b), HeaderLen)
	}
	f := Frame{Kind: Kind(b[0]), Type: b[1], Offset: binary.BigEndian.Uint64(b[2:HeaderLen]), Body: b[HeaderLen:]}
	switch f.Kind {
	case KindMsg:
		if f.Type != TypeText && f.Type != TypeBinary {
			return Frame{}, fmt.Errorf("%w: MSG with type %d", ErrBadFrame, f.Type)
		}
		if f.Offset == 0 {
			return Frame{}, fmt.Errorf("%w: MSG at offset 0", ErrBadFrame)
		}
		return f, nil
	case KindPos, KindResync:
		if !ValidEpoch(string(f.Body)) {
			return Frame{}, fmt.Errorf("%w: %s with epoch %q", ErrBadFrame, f.Kind, f.Body)
		}
	case KindLive, KindAck:
		if len(f.Body) != 0 {
			return Frame{}, fmt.Errorf("%w: %s with a %d-byte body", ErrBadFrame, f.Kind, len(f.Body))
		}
	default:
		return Frame{}, fmt.Errorf("%w: kind %d", ErrBadFrame, b[0])
	}
	if f.Type != TypeNone {
		return Frame{}, fmt.Errorf("%w: %s with type %d", ErrBadFrame, f.Kind, f.Type)
	}
	if f.Kind == KindAck && f.Offset == 0 {
		return Frame{}, fmt.Errorf("%w: ACK at offset 0", ErrBadFrame)
	}
	return f, nil
}

// ValidEpoch reports whether s is 1 to MaxEpochLen characters of
// [A-Za-z0-9].
func ValidEpoch(s string) bool {
	if len(s) == 0 || len(s) > MaxEpochLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// Since is a position in a room: the value of the ?since= query parameter.
// The zero value means none.
type Since struct {
	// Epoch is the room's epoch.
	Epoch string
	// Offset is the last offset the client has.
	Offset uint64
}

// IsZero reports whether s is the zero value (no position).
func (s Since) IsZero() bool { return s.Epoch == "" }

// String formats s as "<epoch>.<offset>", or "" for the zero value.
func (s Since) String() string {
	if s.IsZero() {
		return ""
	}
	return s.Epoch + "." + strconv.FormatUint(s.Offset, 10)
}

// ParseSince parses "<epoch>.<offset>" strictly: epoch 1-64 characters of
// [A-Za-z0-9], offset a decimal uint64 without sign or leading zeros (other
// than "0" itself).
func ParseSince(v string) (Since, error) {
	epoch, off, ok := strings.Cut(v, ".")
	if !ok {
		return Since{}, fmt.Errorf("%w: %q has no dot", ErrBadSince, v)
	}
	if !ValidEpoch(epoch) {
		return Since{}, fmt.Errorf("%w: epoch %q", ErrBadSince, epoch)
	}
	if off == "" || len(off) > 20 || (off[0] == '0' && len(off) > 1) {
		return Since{}, fmt.Errorf("%w: offset %q", ErrBadSince, off)
	}
	for i := 0; i < len(off); i++ {
		if off[i] < '0' || off[i] > '9' {
			return Since{}, fmt.Errorf("%w: offset %q", ErrBadSince, off)
		}
	}
	n, err := strconv.ParseUint(off, 10, 64)
	if err != nil {
		return Since{}, fmt.Errorf("%w: offset %q: %w", ErrBadSince, off, err)
	}
	return Since{Epoch: epoch, Offset: n}, nil
}
