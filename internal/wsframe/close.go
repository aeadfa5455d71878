package wsframe

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Close status codes this package gives a meaning to (RFC 6455 section 7.4.1).
const (
	// CloseNoStatus (1005) is what ParseClosePayload and Scanner.CloseCode
	// report for a close frame without a body. It never appears on the wire.
	CloseNoStatus uint16 = 1005
)

// maxCloseReason is the longest close reason that fits a control frame next
// to the 2-byte code.
const maxCloseReason = maxControlPayload - 2

// ValidCloseCode reports whether code may be sent in a close frame
// (RFC 6455 section 7.4 and the IANA registry): 1000-1003, 1007-1014 and the
// application ranges 3000-4999. 1004, 1005, 1006 and 1015 are reserved or
// local-only and invalid on the wire.
func ValidCloseCode(code uint16) bool {
	switch {
	case code >= 1000 && code <= 1003:
		return true
	case code >= 1007 && code <= 1014:
		return true
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// AppendClose appends a whole close frame to dst and returns the extended
// slice: FIN set, opcode 8, a payload of the 2-byte big-endian code followed
// by reason cut to at most 123 bytes at a UTF-8 boundary. With code 1005
// (CloseNoStatus) the payload is empty and reason is ignored, since 1005 must
// not appear on the wire. When mask is non-nil the frame is masked with *mask
// (client to server); otherwise it is unmasked. It does not check code. It
// does not allocate when dst has room.
func AppendClose(dst []byte, code uint16, reason string, mask *[4]byte) []byte {
	h := Header{Fin: true, Op: OpClose}
	if code != CloseNoStatus {
		if len(reason) > maxCloseReason {
			cut := maxCloseReason
			// Back up to the start of the rune that straddles the cut;
			// at most utf8.UTFMax-1 steps.
			for cut > 0 && !utf8.RuneStart(reason[cut]) && maxCloseReason-cut < utf8.UTFMax-1 {
				cut--
			}
			reason = reason[:cut]
		}
		h.Length = uint64(2 + len(reason))
	} else {
		reason = ""
	}
	if mask != nil {
		h.Masked = true
		h.Mask = *mask
	}
	dst = AppendHeader(dst, h)
	if h.Length == 0 {
		return dst
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, code)
	dst = append(dst, reason...)
	if mask != nil {
		Mask(*mask, 0, dst[start:])
	}
	return dst
}

// ParseClosePayload decodes an unmasked close frame payload. An empty
// payload yields code 1005 (CloseNoStatus) and no error. A 1-byte payload
// returns ErrBadClosePayload; a code that ValidCloseCode rejects returns
// ErrBadCloseCode (with the code); a reason that is not valid UTF-8 returns
// ErrBadCloseReason (with the code and the raw reason).
func ParseClosePayload(p []byte) (code uint16, reason string, err error) {
	switch len(p) {
	case 0:
		return CloseNoStatus, "", nil
	case 1:
		return 0, "", ErrBadClosePayload
	}
	code = binary.BigEndian.Uint16(p)
	reason = string(p[2:])
	if !ValidCloseCode(code) {
		return code, reason, fmt.Errorf("parse close payload: code %d: %w", code, ErrBadCloseCode)
	}
	if !utf8.ValidString(reason) {
		return code, reason, fmt.Errorf("parse close payload: code %d: %w", code, ErrBadCloseReason)
	}
	return code, reason, nil
}
