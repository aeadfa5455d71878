package wsframe

import "strconv"

// Opcode is a WebSocket frame opcode (RFC 6455 section 5.2), the low four
// bits of a frame's first byte.
type Opcode byte

// The opcodes defined by RFC 6455. All other values (0x3-0x7, 0xB-0xF) are
// reserved and rejected with ErrReservedOpcode.
const (
	// OpContinuation continues a fragmented text or binary message.
	OpContinuation Opcode = 0x0
	// OpText starts a text message (UTF-8 payload).
	OpText Opcode = 0x1
	// OpBinary starts a binary message.
	OpBinary Opcode = 0x2
	// OpClose is a close control frame.
	OpClose Opcode = 0x8
	// OpPing is a ping control frame.
	OpPing Opcode = 0x9
	// OpPong is a pong control frame.
	OpPong Opcode = 0xA
)

// IsControl reports whether o is a control opcode (close, ping, pong or a
// reserved control value 0xB-0xF), that is, whether its high bit is set.
func (o Opcode) IsControl() bool { return o&0x8 != 0 }

// valid reports whether o is one of the six opcodes RFC 6455 defines.
func (o Opcode) valid() bool {
	switch o {
	case OpContinuation, OpText, OpBinary, OpClose, OpPing, OpPong:
		return true
	}
	return false
}

// String returns the opcode's lowercase name ("text", "close", ...), or
// "opcode(0xN)" for a reserved value.
func (o Opcode) String() string {
	switch o {
	case OpContinuation:
		return "continuation"
	case OpText:
		return "text"
	case OpBinary:
		return "binary"
	case OpClose:
		return "close"
	case OpPing:
		return "ping"
	case OpPong:
		return "pong"
	}
	return "opcode(0x" + strconv.FormatUint(uint64(o), 16) + ")"
}
