package upgrade

import (
	"crypto/sha1"
	"encoding/base64"
)

const websocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// AcceptLen is the length of a Sec-WebSocket-Accept value: base64 of a
// SHA-1 sum.
const AcceptLen = 28

// AcceptKey computes Sec-WebSocket-Accept for key (RFC 6455 section 4.2.2).
func AcceptKey(key []byte) string {
	var b [AcceptLen]byte
	return string(AppendAccept(b[:0], key))
}

// AppendAccept appends Sec-WebSocket-Accept for key to dst, allocating
// nothing when dst has room and key is of a valid length.
func AppendAccept(dst, key []byte) []byte {
	var in [24 + len(websocketGUID)]byte
	sum := sha1.Sum(append(append(in[:0], key...), websocketGUID...))
	var out [AcceptLen]byte
	base64.StdEncoding.Encode(out[:], sum[:])
	return append(dst, out[:]...)
}

// ValidKey reports whether key is base64 of 16 bytes, as RFC 6455 requires.
func ValidKey(key []byte) bool {
	if len(key) != 24 {
		return false
	}
	var dst [18]byte
	n, err := base64.StdEncoding.Decode(dst[:], key)
	return err == nil && n == 16
}
