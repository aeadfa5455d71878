package relay

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fasthttp/websocket"
)

// An envelope is what a relay appends to the room log for one member's
// message; the log stores and publishes it as opaque data:
//
//	byte 0      version (2)
//	byte 1      WebSocket message type (1 text, 2 binary)
//	bytes 2-9   origin: the appending relay's random id
//	bytes 10-17 the sender's member id on that relay, big-endian
//	bytes 18-   the message's payload, unchanged
//
// Origin and member id identify the sender, which never gets its own
// message back, whether live, repaired or replayed.
const (
	envelopeVersion = 2
	originLen       = 8
	envelopeHeader  = 2 + originLen + 8
)

type origin [originLen]byte

type envelope struct {
	origin origin
	member uint64
	typ    int
	data   []byte
}

var errBadEnvelope = errors.New("bad room log envelope")

// appendEnvelope appends the envelope of one message to dst.
func appendEnvelope(dst []byte, o origin, member uint64, typ int, data []byte) []byte {
	dst = append(dst, envelopeVersion, byte(typ))
	dst = append(dst, o[:]...)
	dst = binary.BigEndian.AppendUint64(dst, member)
	return append(dst, data...)
}

// parseEnvelope decodes b; the returned data aliases b.
func parseEnvelope(b []byte) (envelope, error) {
	if len(b) < envelopeHeader {
		return envelope{}, fmt.Errorf("%w: %d bytes, want at least %d", errBadEnvelope, len(b), envelopeHeader)
	}
	if b[0] != envelopeVersion {
		return envelope{}, fmt.Errorf("%w: version %d", errBadEnvelope, b[0])
	}
	typ := int(b[1])
	if typ != websocket.TextMessage && typ != websocket.BinaryMessage {
		return envelope{}, fmt.Errorf("%w: message type %d", errBadEnvelope, typ)
	}
	var e envelope
	copy(e.origin[:], b[2:2+originLen])
	e.member = binary.BigEndian.Uint64(b[2+originLen : envelopeHeader])
	e.typ = typ
	e.data = b[envelopeHeader:]
	return e, nil
}
