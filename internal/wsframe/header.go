package wsframe

import "encoding/binary"

// MaxHeaderLen is the longest possible frame header (2 + 8 + 4 bytes).
const MaxHeaderLen = 14

// maxControlPayload is the longest payload a control frame may carry
// (RFC 6455 section 5.5).
const maxControlPayload = 125

// Header is a decoded frame header. It is a plain value, safe to copy.
type Header struct {
	// Fin is set on the last frame of a message (always on control frames).
	Fin bool
	// Rsv holds RSV1..RSV3 as the 3-bit value (b0>>4)&7. Extensions such as
	// permessage-deflate give them meaning; this package passes them through.
	Rsv uint8
	// Op is the frame's opcode.
	Op Opcode
	// Masked is set when the payload is masked with Mask (client frames).
	Masked bool
	// Mask is the masking key; meaningful only when Masked is set.
	Mask [4]byte
	// Length is the payload length in bytes. It must stay below 1<<63.
	Length uint64
}

// EncodedLen returns the number of bytes AppendHeader writes for h.
func (h Header) EncodedLen() int {
	n := 2
	switch {
	case h.Length > 0xFFFF:
		n += 8
	case h.Length > maxControlPayload:
		n += 2
	}
	if h.Masked {
		n += 4
	}
	return n
}

// headerLen returns the header length implied by a frame's second byte.
func headerLen(b1 byte) int {
	n := 2
	switch b1 & 0x7F {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if b1&0x80 != 0 {
		n += 4
	}
	return n
}

// AppendHeader appends h to dst in wire format, with the payload length in
// its minimal encoding, and returns the extended slice. It does not check h:
// a reserved opcode, or a control frame that is fragmented or too long, is
// written as given (useful for tests); only bits 0-2 of Rsv and 0-3 of Op are
// used. A Length of 1<<63 or more cannot be represented and yields a header
// that ParseHeader rejects. It does not allocate when dst has room for
// EncodedLen bytes.
func AppendHeader(dst []byte, h Header) []byte {
	b0 := (h.Rsv&7)<<4 | byte(h.Op)&0xF
	if h.Fin {
		b0 |= 0x80
	}
	var b1 byte
	if h.Masked {
		b1 = 0x80
	}
	switch {
	case h.Length > 0xFFFF:
		dst = append(dst, b0, b1|127)
		dst = binary.BigEndian.AppendUint64(dst, h.Length)
	case h.Length > maxControlPayload:
		dst = append(dst, b0, b1|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(h.Length))
	default:
		dst = append(dst, b0, b1|byte(h.Length))
	}
	if h.Masked {
		dst = append(dst, h.Mask[:]...)
	}
	return dst
}

// ParseHeader decodes the frame header at the start of p and returns it with
// its length in bytes n. When p holds only part of a header it returns
// ErrShortHeader and n = 0. A complete but invalid header (reserved opcode,
// non-minimal or oversized length, fragmented or too long control frame)
// returns the matching error, n = 0, and h decoded as far as possible for
// diagnostics. RSV bits are not checked. It never reads past the header and
// does not allocate.
func ParseHeader(p []byte) (h Header, n int, err error) {
	hl, err := parseHeader(p, &h)
	if err != nil {
		return h, 0, err
	}
	return h, hl, nil
}

// parseHeader decodes into *h and returns the header length, which is
// meaningful (non-zero) whenever p holds a complete header, even when the
// header is invalid.
func parseHeader(p []byte, h *Header) (int, error) {
	if len(p) < 2 {
		return 0, ErrShortHeader
	}
	b0, b1 := p[0], p[1]
	hl := headerLen(b1)
	if len(p) < hl {
		return 0, ErrShortHeader
	}
	h.Fin = b0&0x80 != 0
	h.Rsv = (b0 >> 4) & 7
	h.Op = Opcode(b0 & 0xF)
	h.Masked = b1&0x80 != 0
	i := 2
	var err error
	switch l7 := b1 & 0x7F; l7 {
	case 126:
		h.Length = uint64(binary.BigEndian.Uint16(p[2:4]))
		if h.Length <= maxControlPayload {
			err = ErrBadLength
		}
		i = 4
	case 127:
		h.Length = binary.BigEndian.Uint64(p[2:10])
		if h.Length <= 0xFFFF || h.Length>>63 != 0 {
			err = ErrBadLength
		}
		i = 10
	default:
		h.Length = uint64(l7)
	}
	if h.Masked {
		copy(h.Mask[:], p[i:i+4])
	} else {
		h.Mask = [4]byte{}
	}
	switch {
	case !h.Op.valid():
		return hl, ErrReservedOpcode
	case err != nil:
		return hl, err
	case h.Op.IsControl() && !h.Fin:
		return hl, ErrFragmentedControl
	case h.Op.IsControl() && h.Length > maxControlPayload:
		return hl, ErrControlTooLong
	}
	return hl, nil
}
