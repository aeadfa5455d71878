package tunnel

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// registeredData returns the epoll event data the poller's set holds for
// descriptor number fd, as /proc shows it, and whether it holds one.
func registeredData(t *testing.T, p *poller, fd int) (uint64, bool) {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", p.epfd))
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// tfd:       12 events:   80201b data: 1fffffffe  pos:0 ino:...
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[0] != "tfd:" || fs[1] != strconv.Itoa(fd) {
			continue
		}
		for i := 2; i+1 < len(fs); i++ {
			if fs[i] == "data:" {
				v, err := strconv.ParseUint(strings.TrimPrefix(fs[i+1], "0x"), 16, 64)
				if err != nil {
					t.Fatal(err)
				}
				return v, true
			}
		}
	}
	return 0, false
}

// TestNodeSocketAbortBeforeStartForgets pins a tunnel over a NodeSocket
// aborted before Start (a drain past its timeout that found it in the
// registry first): its node socket leaves the poller's epoll set before it
// is closed, as every other tunnel socket does (see forget), so a copy a
// forked child holds until its exec keeps no registration alive.
// Regression: forget returned at once for a slot of slotNodeWatched, and
// the NodeSocket's registration outlived the close, naming an index of
// p.sockets that the next NodeSocket is given.
func TestNodeSocketAbortBeforeStartForgets(t *testing.T) {
	if testEngine == EngineGoroutines {
		t.Skip("the event-driven engine with a socket client only")
	}
	_, gwClient := clientPair(t)
	gwNode, _ := socketPair(t)
	s := gwNode
	p := s.p
	s.mu.RLock()
	nfd := s.fd
	s.mu.RUnlock()
	// The copy a child forked now (a plugin's start, the restart's
	// hand-over) would hold until it execs.
	child, err := unix.FcntlInt(uintptr(nfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(child)
	tun := New(Params{Client: gwClient, Node: gwNode, CloseTimeout: 10 * time.Second, Lease: &countingLease{}})
	if tun.Engine() != "epoll" {
		t.Skipf("engine %s", tun.Engine())
	}
	tun.Abort()
	select {
	case <-tun.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the aborted tunnel did not end")
	}
	done := make(chan struct{})
	p.run(func() { close(done) }) // closeFDs ran before this
	<-done
	if data, ok := registeredData(t, p, nfd); ok {
		t.Fatalf("the closed node socket is still in the epoll set (data %#x): forget did not delete it", data)
	}
}
