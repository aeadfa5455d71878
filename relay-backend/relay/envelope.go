package relay

import (
	"errors"
	"fmt"

	"github.com/fasthttp/websocket"
)

// An envelope is what a relay publishes on the bus for one frame:
//
//	byte 0      version (1)
//	byte 1      WebSocket message type (1 text, 2 binary)
//	bytes 2-9   origin: the publishing relay's random id
//	bytes 10-   the frame's payload, unchanged
//
// The origin lets a relay drop its own messages when the bus hands them back,
// since it already delivered them to its local members.
const (
	envelopeVersion = 1
	originLen       = 8
	envelopeHeader  = 2 + originLen
)

type origin [originLen]byte

type envelope struct {
	origin origin
	typ    int
	data   []byte
}

var errBadEnvelope = errors.New("bad bus envelope")

// appendEnvelope appends the envelope of one frame to dst.
func appendEnvelope(dst []byte, o origin, typ int, data []byte) []byte {
	dst = append(dst, envelopeVersion, byte(typ))
	dst = append(dst, o[:]...)
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
	copy(e.origin[:], b[2:envelopeHeader])
	e.typ = typ
	e.data = b[envelopeHeader:]
	return e, nil
}
