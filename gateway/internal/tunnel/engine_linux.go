package tunnel

import (
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The event-driven engine. A tunnel whose two connections are TCP sockets
// is taken off the runtime's poller and run by one of the package's
// pollers (see poller): both sockets are registered edge-triggered, the
// poller reads a readable source into its own buffer, scans it with the
// same framing code as the stream engine (half.forward) and writes what
// goes on with one non-blocking write (writev when a held-back header, a
// payload and a close frame go together). An idle tunnel holds no
// goroutine and no buffer.
//
// Backpressure: what a destination does not take is kept as the half's
// tail, the half keeps its write turn (writing) and its source is not read
// until EPOLLOUT drains the tail, so at most one read's worth of bytes
// (plus a close frame) waits per direction. A source that cannot be read
// is not dropped from the epoll set: registration is edge-triggered, so
// the bytes it keeps receiving cost at most one wake-up per arrival, and
// they stop when its receive window is full.
//
// The short-read rule: a read that fills less than the buffer drained the
// socket at that moment, and any byte arriving after it raises a new edge,
// so the source is not read again before its next event. A source whose
// peer has hung up raises no new edge for its end of stream, so after a
// hang-up event it is read until EAGAIN or end of stream. Nor does a read
// that stopped at TCP urgent data (MSG_OOB) say anything of the bytes
// behind it, so after an urgent-data event (EPOLLPRI) the source is read
// until EAGAIN too. The urgent byte itself is not part of the stream: the
// sockets leave SO_OOBINLINE off, so a read skips it, as the goroutine
// engine's reads and nginx's and HAProxy's do; WebSocket has no use for it.
//
// Timeouts are poller timers, not blocked goroutines: a tail that gains no
// byte for the write timeout ends the tunnel; the close deadline ends the
// reads and the writes still pending, as a read deadline does on the
// stream engine.

// socketOf returns the TCP socket under c: c itself, or the socket of a
// connection that wraps one and frees something of its own when closed
// (the gateway's accept slots).
func socketOf(c net.Conn) *net.TCPConn {
	switch v := c.(type) {
	case *net.TCPConn:
		return v
	case interface{ Socket() *net.TCPConn }:
		return v.Socket()
	}
	return nil
}

// dupSocket returns a close-on-exec duplicate of c's socket descriptor
// (non-blocking, as Go's sockets are) and the socket itself, or ok false
// when c has no socket or the duplicate fails (out of descriptors).
func dupSocket(c net.Conn) (fd int, sock *net.TCPConn, ok bool) {
	sock = socketOf(c)
	if sock == nil {
		return -1, nil, false
	}
	raw, err := sock.SyscallConn()
	if err != nil {
		return -1, nil, false
	}
	fd = -1
	var derr error
	if err := raw.Control(func(s uintptr) {
		fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil || derr != nil {
		return -1, nil, false
	}
	return fd, sock, true
}

// adopt moves t onto a poller when its client's connection is a TCP
// socket and its node's is a TCP socket or a NodeStream, and reports
// whether it did. The runtime's poller lets go of the sockets (their Go
// connections are closed); the tunnel's own descriptors keep them open.
// t.client's Close is still called at the end, after the descriptors are
// closed, so a wrapper frees what it holds as before; a wrapper with a
// DropSocket method is told to forget its socket, so the closed Go
// connection's memory is freed at once.
func (t *Tunnel) adopt(node net.Conn) bool {
	if s, ok := node.(*NodeSocket); ok {
		return t.adoptSocket(s)
	}
	ns, isStream := node.(NodeStream)
	client := t.client
	rc := recordConnOf(client)
	if rc != nil {
		client = rc.sock.Conn // the poller runs the records over the socket
	}
	if (!isStream && socketOf(node) == nil) || socketOf(client) == nil {
		return false // not a pair the poller runs: no poller is started for it
	}
	// A stream goes to the poller that reads its connection, if one does.
	var p *poller
	own := false
	if isStream {
		p, own = ns.Poller().(*poller)
	}
	if p == nil {
		if p = pickPoller(); p == nil {
			return false
		}
	}
	cfd, cs, ok := dupSocket(client)
	if !ok {
		return false
	}
	nfd := -1
	var nsock *net.TCPConn
	if !isStream {
		if nfd, nsock, ok = dupSocket(node); !ok {
			_ = unix.Close(cfd)
			return false
		}
	}
	if rc != nil && !t.takeRecords(rc) {
		_ = unix.Close(cfd)
		if nfd >= 0 {
			_ = unix.Close(nfd)
		}
		return false
	}
	if isStream {
		t.ns = &polledStream{s: ns, own: own}
	} else {
		_ = nsock.Close()
	}
	_ = cs.Close()
	// Nothing of the node's Go connection is needed any more; a wrapper
	// of the client's socket drops it, keeping what it frees on Close.
	if d, ok := t.client.(interface{ DropSocket() }); ok {
		d.DropSocket()
	}
	t.eng, t.clientFD, t.nodeFD, t.slot = p, int32(cfd), int32(nfd), -1
	return true
}

// adoptSocket takes over a NodeSocket and the client's socket, for the
// NodeSocket's poller. It returns false, leaving both as they are, when
// the client has no socket to take or its duplicate fails: the tunnel
// then runs on goroutines, with the NodeSocket as its node connection.
func (t *Tunnel) adoptSocket(s *NodeSocket) bool {
	orig, client := t.client, t.client
	rc := recordConnOf(client)
	if rc != nil {
		client = rc.sock.Conn
	}
	if socketOf(client) == nil {
		return false
	}
	cfd, cs, ok := dupSocket(client)
	if !ok {
		return false
	}
	if rc != nil && !t.takeRecords(rc) {
		_ = unix.Close(cfd)
		return false
	}
	nfd := s.release()
	if nfd < 0 {
		// Closed already (the handshake was given up): a tunnel that
		// ends at once, on goroutines.
		if rc != nil {
			t.giveBackRecords(rc, orig)
		}
		_ = unix.Close(cfd)
		return false
	}
	_ = cs.Close()
	if d, ok := t.client.(interface{ DropSocket() }); ok {
		d.DropSocket()
	}
	t.eng, t.clientFD, t.nodeFD, t.slot = s.p, int32(cfd), int32(nfd), slotNodeWatched
	return true
}

// startPolled registers t's sockets with its poller and forwards the bytes
// read before the tunnel began.
func (t *Tunnel) startPolled(cp, np []byte) {
	p := t.poller()
	p.run(func() {
		if t.fdsClosed() {
			// Aborted before Start: the descriptors are closed, and their
			// numbers may be another socket's by now.
			return
		}
		if err := p.watch(t); err != nil {
			t.setReason(EndAborted)
			t.closeConns()
			return
		}
		if t.ka != nil {
			p.after(time.Now().Add(t.ka.interval), t, timerKeepalive)
		}
		if t.ns != nil {
			t.ns.watch(p, t)
		}
		if len(np) > 0 {
			t.toClient.forward(p.out, np)
		}
		if len(cp) > 0 && !t.fdsClosed() {
			t.toNode.forward(p.out, cp)
		}
		if t.ns != nil && !t.fdsClosed() {
			// What the node sent before Notify was set raised no
			// poke: read once.
			t.toClient.readable = true
			t.toClient.readSrc()
		}
	})
}

// fileSocket makes the descriptor fd a net.Conn in the runtime's poller,
// for linger; it takes fd, closing it, and returns nil when that fails.
func fileSocket(fd int) net.Conn {
	f := os.NewFile(uintptr(fd), "client")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil
	}
	return c
}

// fdsClosed reports whether closeFDs has run: the tunnel's descriptors
// are closed, and their numbers may be another socket's by now.
func (t *Tunnel) fdsClosed() bool { return t.clientFD < 0 }

// poller is the poller t runs on; nil on the stream engine.
func (t *Tunnel) poller() *poller {
	p, _ := t.eng.(*poller)
	return p
}

// The poller is the tunnel's engine (see engine): what the tunnel does
// runs on the poller's goroutine, and writes never block.

func (*poller) name() string { return "epoll" }

func (*poller) start(t *Tunnel, cp, np []byte) { t.startPolled(cp, np) }

func (p *poller) goAway(t *Tunnel, code uint16, reason string) {
	p.run(func() {
		t.startClosing()
		t.toClient.injectClose(code, reason)
	})
}

func (p *poller) abort(t *Tunnel) { p.run(func() { t.closeFDs(false) }) }

// armClose starts the close-deadline timer.
func (p *poller) armClose(t *Tunnel, dl time.Time) { p.after(dl, t, timerClose) }

// finish finishes t off the poller: OnEnd may log and take locks.
func (*poller) finish(t *Tunnel) { go t.finish() }

// closeConns closes t's connections once what is queued for them has
// gone: a tail still waiting (a slow client's last frames and the close
// frame behind them) would be thrown away by the close, and its peer would
// read a cut frame and no close. The tail's write timeout and the close
// deadline (see closeDeadlinePassed) bound the wait; flushTail and
// dropTail close when the tail is gone.
func (*poller) closeConns(t *Tunnel) {
	for _, h := range [...]*half{&t.toClient, &t.toNode} {
		if h.tail != nil && !t.fdsClosed() {
			h.tail.thenClose = true
			return
		}
	}
	t.closeFDs(true)
}

func (*poller) cutClient(t *Tunnel) { t.toNode.endSrc(os.ErrDeadlineExceeded) }

func (*poller) write(h *half, out [][]byte, lastIsClose bool) { h.writeNB(out, lastIsClose) }

func (*poller) writeOwn(h *half, frame []byte, isClose bool) {
	h.writeNB([][]byte{frame}, isClose)
}

// writeOwnSoon is writeOwn: on the poller a write never blocks.
func (*poller) writeOwnSoon(h *half, frame []byte, isClose bool) {
	h.writeNB([][]byte{frame}, isClose)
}

// waitTurn does nothing: the poller never reads a source, and so never
// forwards, while the write turn is taken.
func (*poller) waitTurn(*half) {}

func (*poller) closeDst(h *half) { h.shutdownDst() }

func (*poller) endDst(h *half) {
	if h.tail != nil {
		// What dst has not taken yet goes first: the frames before
		// the cut, as the stream engine's synchronous writes do.
		h.tail.shut = true
		return
	}
	h.shutdownDstWrite()
}

// tail is what a destination has not taken yet on the event-driven
// engine, with the clocks of its write timeout.
type tail struct {
	b            []byte
	lastProgress int64 // mono ns: when dst last took a byte of the tail
	graceUntil   int64 // mono ns: how long a tail ending in the gateway's close may wait past the close deadline
	close        bool  // b ends with the gateway's close frame
	shut         bool  // dst's stream ends once b is written (endInsideFrame)
	thenClose    bool  // the tunnel's connections close once b is written or dropped (closeConns)
	ping         int32 // the bytes of b up to the end of the keepalive ping in it; 0: none
	pingLen      int32 // the ping's bytes in b: its frame's, or its record's to a TLS client
}

// srcFD and dstFD are the half's sockets on the poller engine.
func (h *half) srcFD() int {
	if h.toClient {
		return int(h.t.nodeFD)
	}
	return int(h.t.clientFD)
}

func (h *half) dstFD() int {
	if h.toClient {
		return int(h.t.clientFD)
	}
	return int(h.t.nodeFD)
}

// event handles what epoll reported for one of t's sockets (the node's
// when node is true): first the writes waiting on it, then its reads.
func (t *Tunnel) event(node bool, ev uint32) {
	in, out := &t.toNode, &t.toClient // the client's socket
	if node {
		in, out = &t.toClient, &t.toNode
	}
	if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 && out.tail != nil {
		out.flushTail()
	}
	if t.fdsClosed() || ev&(unix.EPOLLIN|unix.EPOLLPRI|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
		return
	}
	in.readable = true
	if ev&unix.EPOLLPRI != 0 {
		// Urgent data: a read stops short at its mark (see readSrc).
		in.urgent = true
	}
	if ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		in.hup = true
		if in.tail != nil {
			// The source hung up while its destination accepts
			// nothing: the close starts, so the tunnel ends within the
			// close timeout even if the destination never reads again.
			t.startClosing()
		}
	}
	in.readSrc()
}

// readBudget is how many full reads one half gets before the poller turns
// to its other tunnels: a source that always has a buffer's worth waiting
// (a client flooding a fast node) must not starve the tunnels that share
// its poller.
const readBudget = 16

// readSrc reads the half's source while it is readable and its
// destination has no tail, forwarding what it reads; it ends the side at
// the end of the stream or a failure. After readBudget reads it queues
// the half to go on once the poller has seen to the others.
func (h *half) readSrc() {
	t := h.t
	p := t.poller()
	buf := p.buf
	var rec *recordClient // the client's records, when the poller runs them
	if !h.toClient {
		if rec = t.records(); rec != nil {
			defer rec.s.Release() // idle, it holds no AEAD state
		}
	}
	retried := false
	for budget := readBudget; h.readable && !h.ended && !h.writing && !t.fdsClosed(); budget-- {
		if budget == 0 {
			p.later(h)
			return
		}
		var data []byte
		var full bool
		var err error
		if rec != nil {
			data, full, err = rec.read(p, h.srcFD())
		} else {
			var n int
			n, err = h.readNB(buf)
			data, full = buf[:max(n, 0)], n == len(buf)
		}
		if len(data) > 0 {
			// The short-read rule; not for a node stream, whose end
			// may have been announced with its last bytes and raises
			// no notification of its own (and whose read costs no
			// system call): it is read until it has nothing.
			if !full && !h.hup && !h.urgent && !(h.toClient && t.ns != nil) {
				h.readable = false
			}
			h.forward(p.out, data)
			continue
		}
		if err == errNoData {
			continue
		}
		if err == unix.EAGAIN {
			if h.urgent && !retried && atMark(h.srcFD()) {
				// A read that would start at the urgent byte fails
				// with EAGAIN while a signal is pending for the
				// thread, and the bytes behind it raise no new
				// edge: read once more. Once only: the mark is also
				// there while the urgent byte has been announced
				// but has not arrived (its arrival is an edge).
				retried = true
				continue
			}
			h.readable, h.urgent = false, false
			return
		}
		if err == nil {
			err = io.EOF
		}
		h.endSrc(err)
		return
	}
}

// atMark reports whether fd's next byte is TCP urgent data not yet read
// (SIOCATMARK).
func atMark(fd int) bool {
	v, err := unix.IoctlGetInt(fd, unix.SIOCATMARK)
	return err == nil && v != 0
}

// endSrc ends the reading of the half's source with err, as the goroutine
// engine's pump returning err does; once only.
func (h *half) endSrc(err error) {
	if h.ended {
		return
	}
	h.ended = true
	if h.toClient {
		h.t.nodeEnded(err)
	} else {
		h.t.clientEnded(err)
	}
}

// writeNB is the poller engine's writeOut (see stream.go): it writes
// without blocking and keeps what dst did not take as the half's tail,
// with the write turn still taken; flushTail goes on from there.
func (h *half) writeNB(out [][]byte, lastIsClose bool) {
	t := h.t
	var rec *recordClient // the client's records, when the poller runs them
	if h.toClient {
		if rec = t.records(); rec != nil {
			defer rec.s.Release() // a tail is ciphertext: no AEAD state is needed for it
		}
	}
	for {
		total, ping := 0, 0 // ping: the bytes of out up to the end of the keepalive ping
		for _, b := range out {
			total += len(b)
			if isPing(b) {
				ping = total
			}
		}
		pingLen := len(pingFrame)
		n, err := 0, error(net.ErrClosed)
		if rec != nil && !t.fdsClosed() {
			// The client gets records: out, sealed, is one segment.
			var from int
			if out, from, ping, err = rec.seal(t.poller(), out, ping); err == nil {
				total, pingLen = len(out[0]), ping-from
			}
		}
		if !t.fdsClosed() && (rec == nil || err == nil) {
			n, err = h.writeDst(out)
		}
		if err == unix.EAGAIN {
			n, err = 0, nil
		}
		if ping > 0 && err == nil && n >= ping {
			h.pingSent(n-ping, pingLen)
		}
		if err == nil && n < total {
			h.keepTail(out, n, lastIsClose)
			if ping > n {
				h.tail.ping = int32(ping - n) // within one write's bytes
				h.tail.pingLen = int32(pingLen)
			}
			return
		}
		next, isClose := h.afterWrite(err)
		if err != nil {
			h.failDst(err)
			return
		}
		if next == nil {
			return
		}
		out, lastIsClose = next, isClose
	}
}

// pingSent records where the keepalive ping lies in the client's socket:
// a write has just handed it over whole (size bytes: its frame, or the
// record carrying it), followed by after bytes of the same write.
func (h *half) pingSent(after, size int) {
	pos, ok := h.t.clientWritten()
	if !ok || pos < uint64(after+size) {
		return
	}
	end := pos - uint64(after)
	h.t.notePing(end-uint64(size), end)
}

// keepTail keeps the bytes of out after the first n as the tail and arms
// the write timeout.
func (h *half) keepTail(out [][]byte, n int, lastIsClose bool) {
	size := -n
	for _, b := range out {
		size += len(b)
	}
	tl := &tail{b: make([]byte, 0, size), close: lastIsClose}
	for _, b := range out {
		if n >= len(b) {
			n -= len(b)
			continue
		}
		tl.b = append(tl.b, b[n:]...)
		n = 0
	}
	h.tail = tl
	now := time.Now()
	tl.lastProgress = mono(now)
	if lastIsClose {
		tl.graceUntil = mono(now.Add(lastWordTimeout))
	}
	if !h.stallArmed {
		h.stallArmed = true
		h.t.poller().after(now.Add(h.t.writeTimeoutOrDefault()), h.t, h.stallTimer())
	}
}

func (h *half) stallTimer() timerKind {
	if h.toClient {
		return timerStallClient
	}
	return timerStallNode
}

// flushTail writes the tail once dst is writable again; when it is gone,
// a close asked for meanwhile goes out and the source is read again.
func (h *half) flushTail() {
	t := h.t
	tl := h.tail
	var n int
	var err error
	if ns := t.nodeStreamOf(h); ns != nil {
		if n, err = ns.write(t.poller(), [][]byte{tl.b}); n == 0 && err == nil {
			return
		}
	} else if n, err = rawWrite(h.dstFD(), tl.b); err == unix.EAGAIN {
		return
	}
	if tl.ping > 0 && err == nil {
		if n >= int(tl.ping) {
			h.pingSent(n-int(tl.ping), max(int(tl.pingLen), len(pingFrame)))
		}
		tl.ping -= int32(min(n, int(tl.ping)))
	}
	if err == nil && n < len(tl.b) {
		if n > 0 {
			tl.b = tl.b[n:]
			tl.lastProgress = mono(time.Now())
		}
		return
	}
	h.tail = nil
	next, isClose := h.afterWrite(err)
	if err != nil {
		h.failDst(err)
	} else if next != nil {
		h.writeNB(next, isClose)
	} else if tl.shut {
		h.shutdownDstWrite()
	}
	if tl.thenClose && !t.fdsClosed() {
		if h.tail != nil {
			h.tail.thenClose = true // the close asked for meanwhile waits too
		} else {
			t.closeConns()
		}
		return
	}
	if !h.writing && !t.fdsClosed() {
		h.readSrc()
	}
}

// dropTail gives up the tail after a timeout, as a failed write does.
func (h *half) dropTail(err error) {
	thenClose := h.tail.thenClose
	if r := h.t.records(); r != nil && h.toClient {
		r.cut = true // its bytes end inside a record
	}
	h.tail = nil
	h.afterWrite(err)
	h.failDst(err)
	if thenClose && !h.t.fdsClosed() {
		h.t.closeConns()
		return
	}
	if !h.t.fdsClosed() {
		h.readSrc() // src is read on (and dropped) until it ends
	}
}

// shutdownDst ends the connection to dst on the poller engine: the other
// direction's read of it then sees the end of the stream (a node stream is
// reset, and its read fails).
func (h *half) shutdownDst() {
	if ns := h.t.nodeStreamOf(h); ns != nil {
		ns.s.Abort()
		return
	}
	_ = unix.Shutdown(h.dstFD(), unix.SHUT_RDWR)
}

// shutdownDstWrite ends the stream to dst on the poller engine, leaving
// the other direction's read of it as it is.
func (h *half) shutdownDstWrite() {
	if ns := h.t.nodeStreamOf(h); ns != nil {
		_ = ns.s.CloseWrite()
		return
	}
	if r := h.t.records(); r != nil && h.toClient {
		r.closeRecords(h.dstFD()) // close_notify, then the FIN
	}
	_ = unix.Shutdown(h.dstFD(), unix.SHUT_WR)
}

// fire handles a timer of t's.
func (t *Tunnel) fire(kind timerKind, now time.Time) {
	if t.fdsClosed() {
		return
	}
	switch kind {
	case timerStallNode:
		t.toNode.checkStall(now)
	case timerStallClient:
		t.toClient.checkStall(now)
	case timerClose:
		t.closeDeadlinePassed(now)
	case timerKeepalive:
		if next := t.keepaliveTick(); next > 0 {
			t.poller().after(now.Add(next), t, timerKeepalive)
		}
	}
}

// checkStall ends the tunnel when the tail has gained no byte for the
// write timeout, or looks again later.
func (h *half) checkStall(now time.Time) {
	h.stallArmed = false
	if h.tail == nil {
		return
	}
	due := monoTime(h.tail.lastProgress).Add(h.t.writeTimeoutOrDefault())
	if now.Before(due) {
		h.stallArmed = true
		h.t.poller().after(due, h.t, h.stallTimer())
		return
	}
	h.dropTail(errWriteTimeout)
}

// closeDeadlinePassed ends what is left of the tunnel once the close
// timeout has passed: pending writes fail (the gateway's own close frame
// gets lastWordTimeout from its start first), then the sides still being
// read end as on a read deadline.
func (t *Tunnel) closeDeadlinePassed(now time.Time) {
	for _, h := range []*half{&t.toNode, &t.toClient} {
		if h.tail != nil && h.tail.close && mono(now) < h.tail.graceUntil {
			t.poller().after(monoTime(h.tail.graceUntil), t, timerClose)
			return
		}
	}
	for _, h := range []*half{&t.toNode, &t.toClient} {
		if h.tail != nil {
			h.dropTail(errCloseTimeout)
		}
	}
	t.toNode.endSrc(os.ErrDeadlineExceeded)
	t.toClient.endSrc(os.ErrDeadlineExceeded)
}

// closeFDs closes both sockets on the poller engine, then the Go
// connections (freeing what a wrapper holds), and ends the sides still
// being read, as a read of a closed connection fails on the goroutine
// engine. With mayLinger (not on Abort), the client's socket may linger
// (see linger).
func (t *Tunnel) closeFDs(mayLinger bool) {
	if t.fdsClosed() {
		return
	}
	p := t.poller()
	p.forget(t) // before the close: see forget
	cfd := int(t.clientFD)
	t.clientFD = -1 // fdsClosed
	var until time.Time
	lingers := false
	if mayLinger {
		until, lingers = t.clientLingers()
	}
	if r := t.records(); r != nil {
		if t.toClient.tail != nil {
			r.cut = true // an abort: the tail may end inside a record
		}
		r.closeRecords(cfd)
	}
	var sock net.Conn
	if lingers {
		if sock = fileSocket(cfd); sock == nil {
			lingering.Add(-1)
		}
	} else {
		_ = unix.Close(cfd)
	}
	if t.ns != nil {
		_ = t.ns.s.Close()
	} else {
		_ = unix.Close(int(t.nodeFD))
	}
	p.tunnelEnded()
	if sock != nil {
		// The client's connection, its place in the limits, goes last.
		go linger(sock, until, func() { _ = sock.Close(); _ = t.client.Close() })
	} else {
		_ = t.client.Close()
	}
	t.toNode.tail, t.toClient.tail = nil, nil
	t.toNode.endSrc(net.ErrClosed)
	t.toClient.endSrc(net.ErrClosed)
}

var _ engine = (*poller)(nil)
