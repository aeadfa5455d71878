package h2

import (
	"errors"
	"fmt"

	"github.com/wsgate/wsgate/internal/h2core"

	"golang.org/x/net/http2"
)

var (
	// ErrFull is returned by OpenWebSocket when the connection carries as
	// many streams as the node's SETTINGS_MAX_CONCURRENT_STREAMS allows
	// (RFC 9113 section 5.1.2); a pool opens another connection.
	ErrFull = errors.New("h2: the node's SETTINGS_MAX_CONCURRENT_STREAMS is reached on this connection")

	// ErrGoingAway is returned by OpenWebSocket once the node sent GOAWAY
	// or the connection is shutting down or out of stream identifiers: the
	// connection takes no new stream, its open streams continue.
	ErrGoingAway = errors.New("h2: the connection takes no new stream")

	// ErrConnLost is what every open stream's Read and Write return (as a
	// wrapped error; test with errors.Is) once the connection is gone: the
	// node closed it, it failed, a protocol error ended it, or the gateway
	// closed it. The gateway answers its clients 1012 as for a lost node.
	ErrConnLost = errors.New("h2: connection to the node lost")

	// ErrStreamReset is matched (errors.Is) by a *StreamError: the stream
	// alone ended abnormally, by the node's RST_STREAM or by a stream
	// error this side detected.
	ErrStreamReset = errors.New("h2: stream reset")

	// ErrNoExtendedConnect is returned by Handshake when the node's
	// SETTINGS do not include SETTINGS_ENABLE_CONNECT_PROTOCOL = 1, without
	// which a client must not send :protocol (RFC 8441 section 3).
	ErrNoExtendedConnect = errors.New("h2: the node does not enable extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL = 1 missing, RFC 8441 section 3)")

	// ErrNoStreams is returned by Set.Open when a new connection to the
	// node takes no stream (its SETTINGS_MAX_CONCURRENT_STREAMS is 0).
	ErrNoStreams = errors.New("h2: the node takes no stream on a new connection (SETTINGS_MAX_CONCURRENT_STREAMS = 0)")

	// ErrStalled ends a stream the gateway reset because the
	// connection's send window stayed spent for Config.StallTimeout, with
	// another stream waiting, and it held the most of it (see
	// Config.StreamSendLimit).
	ErrStalled = errors.New("h2: stream reset: it held the most of the connection's send window while the node gave none back and another stream waited")

	// ErrRequestTooLarge is returned by OpenWebSocket, before anything
	// is sent, when the request's header list is larger than the node's
	// SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 section 6.5.2), which the
	// node may answer by ending the connection and every stream on it.
	ErrRequestTooLarge = errors.New("h2: the request's header fields exceed the node's SETTINGS_MAX_HEADER_LIST_SIZE")

	// ErrHeaderTooLarge is returned by OpenWebSocket when the node's
	// response header block decodes to more than Config.MaxHeaderBytes.
	ErrHeaderTooLarge = errors.New("h2: the node's response header block is too large")
)

// StreamError is a stream that ended abnormally while the connection goes
// on: the node reset it (Remote) or this side reset it for a stream error
// (RFC 9113 section 5.4.2). REFUSED_STREAM from the node, or a stream
// above a GOAWAY's last stream identifier, means the node did not process
// it, and it may be retried on another connection (section 8.7).
type StreamError struct {
	StreamID uint32
	Code     http2.ErrCode
	Remote   bool
}

// Error says which stream ended, how, and by whom.
func (e *StreamError) Error() string {
	by := "by the gateway"
	if e.Remote {
		by = "by the node"
	}
	return fmt.Sprintf("h2: stream %d reset %s: %v", e.StreamID, by, e.Code)
}

// Is matches ErrStreamReset.
func (e *StreamError) Is(target error) bool { return target == ErrStreamReset }

// connLostError is ErrConnLost with its cause. It does not unwrap to the
// cause, so that a connection lost to its write timeout is not taken for a
// stream's own deadline.
type connLostError struct{ cause error }

func (e *connLostError) Error() string { return "h2: connection to the node lost: " + e.cause.Error() }

func (e *connLostError) Unwrap() error { return ErrConnLost }

// connError is a connection error this side detected (RFC 9113 section
// 5.4.1): it sends GOAWAY with Code and closes the connection.
type connError = h2core.ConnError
