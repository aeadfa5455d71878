package tunnel

import (
	"net"
	"sync/atomic"
)

// NodeStream is a node connection that is one stream of a connection
// multiplexed over many tunnels (an HTTP/2 stream to the node,
// gateway/internal/upstream/h2). On the event-driven engine a poller runs
// it without a descriptor of its own: it reads and writes the stream
// without waiting, looks again when the stream's Notify function says
// something changed, and has what it queued on the streams it served
// written once per pass (Kick), so that one write to the node carries the
// frames of many clients. On the stream engine it is a net.Conn like any
// other.
type NodeStream interface {
	net.Conn
	// Notify sets the function called when the stream may have become
	// readable, or writable after a WriteNB that fell short. It is called
	// with the stream's locks held, from any goroutine: it must return
	// at once and not call the stream.
	Notify(fn func())
	// ReadNB reads what is buffered without waiting: 0 and no error when
	// nothing is.
	ReadNB(p []byte) (int, error)
	// WriteNB queues as much of bufs as the stream may send now and
	// returns how much it took.
	WriteNB(bufs [][]byte) (int, error)
	// Kick has what ReadNB and WriteNB queued written soon; it never
	// blocks.
	Kick()
	// CloseWrite ends the stream toward the node; Abort resets it.
	CloseWrite() error
	Abort()
	// Poller returns the token AttachConn returned for the stream's
	// connection, nil when no poller reads it.
	Poller() any
	// FlushNB is Kick on the poller that reads the stream's connection:
	// it writes what is queued at once, as far as the socket takes it.
	FlushNB()
}

// polledStream is a tunnel's NodeStream on the event-driven engine.
type polledStream struct {
	s NodeStream
	// poked is set while the tunnel waits in its poller's poke list, so
	// that a burst of notifications queues it once.
	poked atomic.Bool
	// Poller-only: watched once the poller takes notifications for it;
	// kick while it waits in the poller's list of streams to kick; own
	// when the tunnel's poller reads the stream's connection.
	watched, kick, own bool
}

// PolledConn is a connection a poller reads on behalf of the node streams
// it carries (an HTTP/2 connection to a node): see AttachConn.
type PolledConn interface {
	// PollRead is called on the poller's goroutine whenever the
	// connection's socket may be readable, with the poller's descriptor
	// of it: it reads fd without blocking and acts on what came, until
	// the socket has nothing more (a read that fills less than its buffer
	// may say so, unless drain says the peer hung up, whose end of stream
	// raises no event of its own) or its budget of reads is spent, when
	// more asks to be called again after the poller's other work. ok is
	// false once the connection has ended.
	PollRead(fd int, drain bool) (ok, more bool)
	// PollDetached is called on the poller's goroutine once the poller
	// has let go of the connection and closed its descriptor; err, when
	// not nil, is why it could not take it.
	PollDetached(err error)
}
