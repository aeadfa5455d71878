package tunnel

import "golang.org/x/sys/unix"

// watch has the poller take ns's notifications: each pokes t (see
// poller.poke), once until the poller has seen to it. Runs on p.
func (ns *polledStream) watch(p *poller, t *Tunnel) {
	ns.watched = true
	ns.s.Notify(func() {
		if ns.poked.CompareAndSwap(false, true) {
			p.poke(t)
		}
	})
}

// poked handles a notification of t's node stream as an epoll event on a
// node socket: a write waiting for window goes on, then the stream is
// read. Runs on t's poller.
func (t *Tunnel) poked() {
	t.ns.poked.Store(false)
	if !t.fdsClosed() && t.ns.watched {
		t.event(true, unix.EPOLLIN|unix.EPOLLOUT)
	}
}

// write queues what it can of out on the stream; what it queued goes at
// the poller's next kickStreams.
func (ns *polledStream) write(p *poller, out [][]byte) (int, error) {
	n, err := ns.s.WriteNB(out)
	if n > 0 {
		ns.kickLater(p)
	}
	return n, err
}

// kickLater queues ns for the poller's next kickStreams.
func (ns *polledStream) kickLater(p *poller) {
	if !ns.kick {
		ns.kick = true
		p.kicks = append(p.kicks, ns)
	}
}

// nodeStreamOf returns t's node stream when it is h's destination.
func (t *Tunnel) nodeStreamOf(h *half) *polledStream {
	if h.toClient {
		return nil
	}
	return t.ns
}

// readNB reads h's source once without blocking: unix.EAGAIN when nothing
// is there.
func (h *half) readNB(buf []byte) (int, error) {
	if ns := h.t.ns; ns != nil && h.toClient {
		n, err := ns.s.ReadNB(buf)
		if n == 0 && err == nil {
			return 0, unix.EAGAIN
		}
		if n > 0 {
			ns.kickLater(h.t.poller()) // the read may have queued a WINDOW_UPDATE
		}
		return n, err
	}
	return rawRead(h.srcFD(), buf)
}

// writeDst writes out to h's destination once without blocking.
func (h *half) writeDst(out [][]byte) (int, error) {
	if ns := h.t.nodeStreamOf(h); ns != nil {
		return ns.write(h.t.poller(), out)
	}
	return h.t.poller().writev(h.dstFD(), out)
}
