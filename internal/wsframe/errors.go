package wsframe

import "errors"

// Errors reported by [ParseHeader], [Scanner.Advance] and
// [ParseClosePayload]. All but ErrShortHeader mean the peer broke the
// protocol; the usual answer is to close the connection with 1002 (protocol
// error) or, for ErrTooLarge, 1009 (message too big).
var (
	// ErrShortHeader is returned by ParseHeader when p ends before the
	// frame header does. Read more bytes and try again; the Scanner never
	// returns it because it buffers a partial header itself.
	ErrShortHeader = errors.New("wsframe: short frame header")

	// ErrReservedOpcode means the opcode is one of the reserved values
	// 0x3-0x7 or 0xB-0xF (RFC 6455 section 5.2).
	ErrReservedOpcode = errors.New("wsframe: reserved opcode")

	// ErrFragmentedControl means a control frame (close, ping, pong) had
	// FIN=0; control frames must not be fragmented (RFC 6455 section 5.5).
	ErrFragmentedControl = errors.New("wsframe: fragmented control frame")

	// ErrControlTooLong means a control frame declared a payload longer
	// than 125 bytes (RFC 6455 section 5.5).
	ErrControlTooLong = errors.New("wsframe: control frame payload longer than 125 bytes")

	// ErrBadLength means the payload length was not in its minimal encoding
	// (a 16-bit length below 126, a 64-bit length below 65536) or a 64-bit
	// length had its most significant bit set (RFC 6455 section 5.2).
	ErrBadLength = errors.New("wsframe: invalid payload length encoding")

	// ErrTooLarge means a frame's payload is longer than
	// Scanner.MaxPayload. It is reported as soon as the header is complete,
	// before any payload byte is consumed. Raise the route's max_frame if
	// legitimate traffic hits it.
	ErrTooLarge = errors.New("wsframe: frame payload too large")

	// ErrUnmasked means an unmasked frame arrived where
	// Scanner.RequireMasked is set (client to server, RFC 6455 section 5.1).
	ErrUnmasked = errors.New("wsframe: unmasked frame from client")

	// ErrMasked means a masked frame arrived where Scanner.RejectMasked is
	// set (server to client, RFC 6455 section 5.1).
	ErrMasked = errors.New("wsframe: masked frame from server")

	// ErrUnexpectedContinuation means a continuation frame arrived while no
	// fragmented message was in progress (RFC 6455 section 5.4).
	ErrUnexpectedContinuation = errors.New("wsframe: continuation frame without a message in progress")

	// ErrExpectedContinuation means a new text or binary frame arrived while
	// a fragmented message was still in progress (RFC 6455 section 5.4).
	ErrExpectedContinuation = errors.New("wsframe: new data frame inside a fragmented message")

	// ErrBadClosePayload means a close frame carried a 1-byte payload; a
	// close body, if any, starts with a 2-byte status code (RFC 6455
	// section 5.5.1). The Scanner reports it as soon as the header is
	// complete.
	ErrBadClosePayload = errors.New("wsframe: close payload of 1 byte")

	// ErrBadCloseCode is returned by ParseClosePayload when the status code
	// may not appear on the wire (see ValidCloseCode).
	ErrBadCloseCode = errors.New("wsframe: invalid close code")

	// ErrBadCloseReason is returned by ParseClosePayload when the close
	// reason is not valid UTF-8 (RFC 6455 section 5.5.1).
	ErrBadCloseReason = errors.New("wsframe: close reason is not valid UTF-8")
)

// scanErrs maps the Scanner's one-byte error index to its sentinel, so the
// Scanner stores a byte instead of a 16-byte interface value.
var scanErrs = [...]error{
	nil,
	ErrReservedOpcode,
	ErrFragmentedControl,
	ErrControlTooLong,
	ErrBadLength,
	ErrTooLarge,
	ErrUnmasked,
	ErrMasked,
	ErrUnexpectedContinuation,
	ErrExpectedContinuation,
	ErrBadClosePayload,
}

// errIndex returns the index of err in scanErrs, or 0 when it is not there.
func errIndex(err error) uint8 {
	for i, e := range scanErrs {
		if e == err {
			return uint8(i)
		}
	}
	return 0
}
