//go:build linux

package tunnel

import (
	"bufio"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// TestStaleRegistrationNotRouted pins issue 19 item 8: a poller routed
// epoll events by descriptor number and closed a socket without deleting it
// from the epoll set. Closing removes a socket from the set only once no
// other descriptor refers to it, so while a forked child (a plugin's start,
// the restart's hand-over) still held a copy, the closed socket's
// registration lived on, and its events reached whichever tunnel had the
// descriptor number next. Here tunnel A's client socket is kept open by a
// duplicate standing in for the child's copy, A ends, tunnel B takes the
// same number on the same poller, and A's client hangs up: B must not see
// that hang-up (before the fix B's client→node half was marked hung up).
func TestStaleRegistrationNotRouted(t *testing.T) {
	if testEngine == EngineGoroutines {
		t.Skip("no pollers on the goroutine engine")
	}
	a := newRig(t, 0)
	p := a.tun.poller()
	if p == nil {
		t.Skip("the event-driven engine does not run here")
	}
	exchange(t, a) // A's sockets are registered
	fd := clientFDOf(a.tun)
	child, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(child)
	a.closeNormally()

	var b *rig
	for range 2*len(pollers) + 2 {
		r := newRigOnFD(t, fd)
		if r.tun.poller() == p {
			b = r
			break
		}
		// Pollers are picked in turn: end this one and try again.
		r.tun.Abort()
		r.waitEnd()
	}
	if b == nil {
		t.Fatal("no tunnel came to A's poller")
	}
	if got := clientFDOf(b.tun); got != fd {
		t.Fatalf("B's client descriptor is %d, want A's %d", got, fd)
	}
	exchange(t, b) // B's sockets are registered

	// A's client hangs up; A's socket, alive in the child's copy, sees it.
	a.client.Close()
	pfd := []unix.PollFd{{Fd: int32(child), Events: unix.POLLRDHUP}}
	for deadline := time.Now().Add(10 * time.Second); pfd[0].Revents&unix.POLLRDHUP == 0; {
		if time.Now().After(deadline) {
			t.Fatal("A's socket never saw its client's hang-up")
		}
		if _, err := unix.Poll(pfd, 100); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
	}
	// The poller handles whatever that raised before it runs its queue
	// twice over.
	onPoller(t, p, func() {})
	var hup bool
	onPoller(t, p, func() { hup = b.tun.toNode.hup })
	if hup {
		t.Fatalf("the tunnel now on descriptor %d got the hang-up of the closed socket's registration", fd)
	}
	exchange(t, b)
	b.closeNormally()
}

// newRigOnFD starts a tunnel whose client socket gets descriptor number fd,
// which must be free: every free number below it is taken meanwhile, so the
// tunnel's duplicate of the socket gets the lowest, fd.
func newRigOnFD(t *testing.T, fd int) *rig {
	t.Helper()
	var held []int
	defer func() {
		for _, h := range held {
			_ = unix.Close(h)
		}
	}()
	at := -1
	for at < 0 {
		h, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case h == fd:
			at = h
		case h > fd:
			_ = unix.Close(h)
			t.Fatalf("descriptor %d was taken by something else", fd)
		default:
			held = append(held, h)
		}
	}
	client, gwClient := tcpPair(t)
	gwNode, node := nodePair(t)
	_ = unix.Close(at)
	r := &rig{t: t, client: client, node: node, lease: &countingLease{}}
	r.cr, r.nr = bufio.NewReader(client), bufio.NewReader(node)
	r.tun = New(Params{Client: gwClient, Node: gwNode, CloseTimeout: 10 * time.Second, Lease: r.lease})
	r.tun.Start()
	return r
}

// exchange sends a frame each way through r's tunnel.
func exchange(t *testing.T, r *rig) {
	t.Helper()
	r.write(r.client, frame(wsframe.OpText, true, true, []byte("ping")))
	if h, _ := readFrame(t, r.node, r.nr); h.Op != wsframe.OpText {
		t.Fatalf("node got %v", h.Op)
	}
	r.write(r.node, frame(wsframe.OpText, true, false, []byte("pong")))
	if h, _ := readFrame(t, r.client, r.cr); h.Op != wsframe.OpText {
		t.Fatalf("client got %v", h.Op)
	}
}

// onPoller runs f on p's goroutine and waits for it.
func onPoller(t *testing.T, p *poller, f func()) {
	t.Helper()
	done := make(chan struct{})
	p.run(func() { f(); close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the poller did not run the check")
	}
}

// clientFDOf reads t's client descriptor on its poller, which owns it.
func clientFDOf(t *Tunnel) int {
	ch := make(chan int)
	t.poller().run(func() { ch <- int(t.clientFD) })
	return <-ch
}
