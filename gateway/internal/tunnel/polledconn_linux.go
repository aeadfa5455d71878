package tunnel

import (
	"net"

	"golang.org/x/sys/unix"
)

// AttachConn has a poller read c, a connection carrying node streams, in
// place of a goroutine of its own: the poller calls pc.PollRead whenever
// c's socket may be readable, and the streams' tunnels are adopted by the
// same poller (NodeStream.Poller), so that the frames a read of c brings
// go to their clients' sockets in the same pass, and what those clients
// send leaves in one write at its end (NodeStream.FlushNB): no frame
// crosses a goroutine. It returns the poller's token and a function that
// has the poller let go of c (pc.PollDetached follows on the poller); a
// nil token when c is not a TCP socket (TLS) or the engine cannot run.
// The poller reads a duplicate of c's descriptor; c itself stays open
// for writes that must wait (the connection's flusher) and is closed by
// its owner.
func AttachConn(c net.Conn, pc PolledConn) (any, func()) {
	return AttachConnBeside(c, pc, nil)
}

// AttachConnBeside is AttachConn on a poller none of busy names (tokens
// AttachConn returned, for the connections c is one of: a node's HTTP/2
// connections), the next in turn among those; when every poller is in
// busy, the one it names least. So a node's connections are read by as
// many distinct pollers as there are of them, up to one per poller, and
// its clients' tunnels, which run on their connection's poller, spread
// over every core.
func AttachConnBeside(c net.Conn, pc PolledConn, busy []any) (any, func()) {
	if socketOf(c) == nil {
		return nil, nil
	}
	p := pickPollerBeside(busy)
	if p == nil {
		return nil, nil
	}
	fd, _, ok := dupSocket(c)
	if !ok {
		return nil, nil
	}
	pcn := &polledConn{pc: pc, fd: fd, idx: -1}
	p.run(func() { p.watchConn(pcn) })
	return p, func() { p.run(func() { p.forgetConn(pcn, nil) }) }
}

// polledConn is a connection a poller reads (see AttachConn); its fields
// are the poller's.
type polledConn struct {
	pc   PolledConn
	fd   int
	idx  int32 // its index in the poller's conns; -1 while it has none
	gone bool  // let go of: fd is closed
	// again: queued in againConns, to be read on with drain.
	again, drain bool
}

// connEvents are the events a polled connection's socket is registered
// for: edge-triggered reads and the peer's hang-up (PollRead reads until
// the socket has nothing more, so no edge is missed).
const connEvents = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET

// connEventFd is the epoll event data of conns[i]: below -1, which the
// eventfd uses, and never a slot's index.
func connEventFd(i int32) int32 { return -2 - i }

// watchConn registers c with the poller and reads what is already there.
func (p *poller) watchConn(c *polledConn) {
	if c.gone {
		return // let go of before it was watched
	}
	i := int32(-1)
	for j, x := range p.conns {
		if x == nil {
			i = int32(j)
			break
		}
	}
	if i < 0 {
		i = int32(len(p.conns))
		p.conns = append(p.conns, nil)
	}
	ev := unix.EpollEvent{Events: connEvents, Fd: connEventFd(i)}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		c.gone = true
		_ = unix.Close(c.fd)
		c.pc.PollDetached(err)
		return
	}
	p.conns[i], c.idx = c, i
	p.connRead(c, true)
}

// connEvent handles an epoll event for a polled connection.
func (p *poller) connEvent(ev *unix.EpollEvent) {
	i := -2 - ev.Fd
	if int(i) < len(p.conns) {
		if c := p.conns[i]; c != nil {
			p.connRead(c, ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0)
		}
	}
}

// connRead has c read its socket. The streams it wakes are queued to be
// seen to in this pass without a wake-up of the poller's own (see poke).
func (p *poller) connRead(c *polledConn, drain bool) {
	p.setInline(true)
	ok, more := c.pc.PollRead(c.fd, drain)
	p.setInline(false)
	switch {
	case !ok:
		p.forgetConn(c, nil)
	case more && !c.again:
		// Its budget is spent with bytes still there: read on after
		// the events at hand, as a tunnel's source is (see later).
		c.again, c.drain = true, drain
		p.againConns = append(p.againConns, c)
	}
}

// readConnsAgain reads on the connections queued by connRead.
func (p *poller) readConnsAgain() {
	list := p.againConns
	p.againConns = p.spareConns[:0]
	for i, c := range list {
		c.again = false
		if !c.gone {
			p.connRead(c, c.drain)
		}
		list[i] = nil
	}
	p.spareConns = list[:0]
}

// setInline marks the poller as reading a polled connection: a poke then
// needs no wake-up, the pass sees to it.
func (p *poller) setInline(on bool) {
	p.mu.Lock()
	p.inline = on
	if !on && len(p.poked) > 0 {
		p.pokedPending = true
	}
	p.mu.Unlock()
}

// forgetConn lets go of c: out of the epoll set, its descriptor closed,
// then PollDetached. Once only.
func (p *poller) forgetConn(c *polledConn, err error) {
	if c.gone {
		return
	}
	c.gone = true
	if c.idx >= 0 {
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, c.fd, nil)
		p.conns[c.idx] = nil
		c.idx = -1
	}
	_ = unix.Close(c.fd)
	c.pc.PollDetached(err)
}
