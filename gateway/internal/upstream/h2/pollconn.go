package h2

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"github.com/wsgate/wsgate/internal/h2core"
	"github.com/wsgate/wsgate/internal/rawio"
	"io"
	"net"

	"golang.org/x/net/http2"
	"golang.org/x/sys/unix"
)

// A Poller runs a connection's reads on an event loop (the gateway's
// tunnel pollers) instead of a goroutine of its own, so that the frames a
// read brings reach the streams' tunnels on the loop that runs them, and
// what those tunnels send leaves from it: no frame crosses a goroutine. It
// returns the loop's token (Stream.Poller reports it) and a function that
// has the loop let go of the connection, or a nil token when the loop
// cannot take it (a TLS connection: the loop reads sockets), and the
// connection then reads on a goroutine. The loop calls PollRead whenever
// the socket may be readable and PollDetached once it has let go.
type Poller func(nc net.Conn, c *Conn) (owner any, detach func())

// frameSource is the Framer's reader: the handshake and readLoop read the
// socket through br, within in's budget per ReadFrame (a CONTINUATION
// flood); on a poller, PollRead hands the Framer one complete frame, or
// one header block with its CONTINUATION frames (maxHeaderGroup at
// most), at a time in b.
type frameSource struct {
	br *bufio.Reader
	in h2core.ReadBudget // reads br
	b  []byte
}

func (s *frameSource) Read(p []byte) (int, error) {
	if len(s.b) > 0 {
		n := copy(p, s.b)
		s.b = s.b[n:]
		return n, nil
	}
	if s.br != nil {
		return s.in.Read(p)
	}
	return 0, io.ErrUnexpectedEOF
}

const (
	// pollReadSize is a polled connection's read buffer, a frame and its
	// header at the largest this side accepts.
	pollReadSize = frameHeaderLen + defaultMaxFrameSize
	// maxHeaderGroup bounds a header block and its CONTINUATION frames
	// as read off the wire, before hpack decodes them (which
	// Config.MaxHeaderBytes bounds).
	maxHeaderGroup = 64 << 10
	frameHeaderLen = 9
)

// PollRead is a polled connection's reader (see Poller): on the poller's
// goroutine, it reads fd, its descriptor of the connection's socket, and
// acts on every complete frame, until the socket has nothing more or
// pollReadBudget reads filled the buffer: then more says to call it again
// once the poller has seen to its other work, so that a node that keeps
// its socket full cannot hold the poller's other tunnels. ok is false once
// the connection has ended: the poller then lets go of it. A read that
// fills less than the buffer took everything there was (the short-read
// rule of an edge-triggered poller: later bytes raise a new event), so
// PollRead stops there unless drain says the peer hung up, whose end of
// stream raises no event of its own.
func (c *Conn) PollRead(fd int, drain bool) (ok, more bool) {
	if c.pfd < 0 {
		c.pfd = fd
		// What the handshake's reader took in past the node's SETTINGS
		// comes first.
		c.rb = make([]byte, 0, pollReadSize)
		if n := c.src.br.Buffered(); n > 0 {
			b, _ := c.src.br.Peek(n)
			c.rb = append(c.rb, b...)
		}
		c.src.br = nil
		if err := c.handleBuffered(); err != nil {
			c.endRead(err)
			return false, false
		}
	}
	for range pollReadBudget {
		room := cap(c.rb) - len(c.rb)
		n, err := rawio.Read(fd, c.rb[len(c.rb):cap(c.rb)])
		switch {
		case n > 0:
			c.rb = c.rb[:len(c.rb)+n]
			if err := c.handleBuffered(); err != nil {
				c.endRead(err)
				return false, false
			}
			if n < room && !drain {
				return true, false
			}
			continue
		case err == unix.EAGAIN:
			return true, false
		case err == nil:
			err = io.EOF
		}
		c.endRead(err)
		return false, false
	}
	return true, true
}

// pollReadBudget is how many reads one PollRead makes before it lets the
// poller turn to its other work (as its tunnels' sources get).
const pollReadBudget = 16

// handleBuffered acts on every complete frame in rb and keeps the rest
// at its front, with room for the next frame whole.
func (c *Conn) handleBuffered() error {
	off, keep := 0, 0
	for {
		end, need := frameGroupEnd(c.rb[off:])
		if end == 0 {
			if need > maxHeaderGroup+frameHeaderLen {
				return connError{Code: http2.ErrCodeEnhanceYourCalm, Reason: "header block larger than 64 KiB before decoding"}
			}
			if need > cap(c.rb) {
				grown := make([]byte, len(c.rb)-off, max(need, 2*cap(c.rb)))
				copy(grown, c.rb[off:])
				c.rb = grown
				return nil
			}
			keep = need
			break
		}
		c.src.b = c.rb[off : off+end]
		err := c.onFrame(c.fr.ReadFrame())
		// What the Framer read: a stream error may stop it inside a
		// header block, and the rest is read next as readLoop would.
		off += end - len(c.src.b)
		c.src.b = nil
		if err != nil {
			return err
		}
	}
	n := copy(c.rb, c.rb[off:])
	c.rb = c.rb[:n]
	if cap(c.rb) > pollReadSize && n <= pollReadSize && keep <= pollReadSize {
		// A large frame came and went: back to the usual buffer.
		c.rb = append(make([]byte, 0, pollReadSize), c.rb...)
	}
	return nil
}

// frameGroupEnd returns the length of the first frame in b, or of a
// HEADERS or PUSH_PROMISE frame and the CONTINUATION frames up to the one
// with END_HEADERS (which the Framer reads as one), when b holds all of
// it; otherwise end is 0 and need how many bytes it takes at least. A
// frame longer than this side's SETTINGS_MAX_FRAME_SIZE is handed over by
// its header alone: the Framer refuses it by its length.
func frameGroupEnd(b []byte) (end, need int) {
	for first := true; ; first = false {
		if len(b)-end < frameHeaderLen {
			return 0, end + frameHeaderLen
		}
		h := b[end:]
		length := int(binary.BigEndian.Uint32(h[0:4]) >> 8)
		typ, flags := http2.FrameType(h[3]), http2.Flags(h[4])
		if length > defaultMaxFrameSize {
			return end + frameHeaderLen, 0
		}
		if len(b)-end < frameHeaderLen+length {
			return 0, end + frameHeaderLen + length
		}
		end += frameHeaderLen + length
		open := false
		switch {
		case first && (typ == http2.FrameHeaders || typ == http2.FramePushPromise):
			open = flags&http2.FlagHeadersEndHeaders == 0
		case !first && typ == http2.FrameContinuation:
			open = flags&http2.FlagContinuationEndHeaders == 0
		}
		if !open {
			return end, 0
		}
	}
}

// PollDetached is called on the poller once it has let go of the
// connection and closed its descriptor; err, when not nil, is why it
// could not take it, and ends the connection. Done is closed once the
// connection has failed too (a GOAWAY may still be on its way).
func (c *Conn) PollDetached(err error) {
	c.pfd = -1
	c.rb = nil
	if err != nil {
		c.fail(fmt.Errorf("h2: poller: %w", err))
	}
	c.pollEnded()
}

// pollEnded closes readDone at its second call, from fail or PollDetached.
func (c *Conn) pollEnded() {
	if c.pollEnds.Add(1) == 2 {
		close(c.readDone)
	}
}

// flushNB writes what is queued now, without blocking, on the poller of a
// polled connection (h2core.Queue.FlushNB); what the socket does not
// take goes, in order, to the flusher goroutine. When a flush is under
// way, or the connection is not polled, it is Kick.
func (c *Conn) flushNB() {
	if c.pfd < 0 {
		c.Kick()
		return
	}
	if err := c.q.FlushNB(c.nbWrite); err != nil {
		c.fail(err)
	}
}

// writeNB writes b to the poller's descriptor of the socket without
// blocking: a full socket takes less, with no error.
func (c *Conn) writeNB(b []byte) (int, error) {
	n, err := rawio.Write(c.pfd, b)
	if err == unix.EAGAIN {
		return 0, nil
	}
	return n, err
}

// Polled reports whether a Poller reads the connection.
func (c *Conn) Polled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owner != nil
}

// Poller returns the token of the poller that reads the stream's
// connection (see Poller), nil when a goroutine does.
func (s *Stream) Poller() any {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.c.owner
}

// FlushNB is Kick for the poller that reads the stream's connection: what
// is queued is written now, as far as the socket takes it without
// waiting.
func (s *Stream) FlushNB() { s.c.flushNB() }
