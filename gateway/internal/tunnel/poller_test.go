//go:build linux

package tunnel

import (
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestPollersForgetEndedTunnels ends tunnels and checks that no poller
// still holds a slot for one of them, so no event can reach an ended
// tunnel.
func TestPollersForgetEndedTunnels(t *testing.T) {
	if testEngine == EngineGoroutines {
		t.Skip("no pollers on the goroutine engine")
	}
	ended := map[*Tunnel]bool{}
	for range 20 {
		r := newRig(t, 0)
		if r.tun.poller() == nil {
			t.Skip("the event-driven engine does not run here")
		}
		r.closeNormally()
		ended[r.tun] = true
	}
	for _, p := range pollers {
		found := make(chan int, 1)
		p.run(func() {
			n := 0
			for _, s := range p.slots {
				if ended[s.t] {
					n++
				}
			}
			found <- n
		})
		select {
		case n := <-found:
			if n != 0 {
				t.Fatalf("a poller still holds %d slots of ended tunnels", n)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a poller did not run the check")
		}
	}
}

// TestPollersSweepEndedTunnelsTimers ends tunnels whose keepalive would
// look at them again only in an hour, and checks that the pollers' timer
// heaps do not keep them: a heap drops the entries of ended tunnels once
// sweepMin of its tunnels have ended, so at most that many ended tunnels
// (and not every one since the poller started) stay referenced.
func TestPollersSweepEndedTunnelsTimers(t *testing.T) {
	if testEngine == EngineGoroutines {
		t.Skip("no pollers on the goroutine engine")
	}
	// The heap is swept once as many tunnels ended as it has entries
	// over two: a live tunnel's entries (one of an earlier test still
	// ending, as a TLS client's may be) would put the sweep off. Wait
	// for them to end first.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		live := 0
		for _, p := range pollers {
			got := make(chan int, 1)
			p.run(func() { got <- p.live })
			live += <-got
		}
		if live == 0 {
			break
		}
	}
	ended := map[*Tunnel]bool{}
	n := 3 * sweepMin * max(len(pollers), 2)
	for range n {
		r := newRigWith(t, Params{PingInterval: time.Hour})
		if r.tun.poller() == nil {
			t.Skip("the event-driven engine does not run here")
		}
		r.closeNormally()
		ended[r.tun] = true
	}
	total := 0
	for _, p := range pollers {
		found := make(chan int, 1)
		p.run(func() {
			n := 0
			for _, tm := range p.timers {
				if ended[tm.t] {
					n++
				}
			}
			found <- n
		})
		select {
		case k := <-found:
			// Each ended tunnel of the poller's holds at most two
			// entries (its keepalive and its close deadline).
			if k > 2*sweepMin {
				t.Fatalf("a poller's timer heap still holds %d entries of ended tunnels (of %d ended), want at most %d", k, n, 2*sweepMin)
			}
			total += k
		case <-time.After(10 * time.Second):
			t.Fatal("a poller did not run the check")
		}
	}
	t.Logf("%d timer entries of %d ended tunnels left", total, n)
}

// TestPollerTableFollowsOwnTunnels pins issue 19 item 9: a poller's table
// was indexed by descriptor number, so every poller's grew to the highest
// descriptor of the process, its own tunnels' or not, and never shrank
// (16 pollers and a million descriptors: 128 MB of tables). Now a poller's
// table has a slot per tunnel it holds, whatever the descriptors' numbers:
// it grows only when no slot is free, and once fewer than a quarter of its
// slots are in use it shrinks (to no less than compactMin), moving the
// tunnels it keeps to low slots, whose events must still reach them.
func TestPollerTableFollowsOwnTunnels(t *testing.T) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	const n = 4 * compactMin
	// High descriptor numbers, as a busy process's are.
	base := int(min(lim.Cur, 1<<20)) - 2*n - 64
	if base < 2*n {
		t.Skipf("a descriptor limit of %d is too low for the test", lim.Cur)
	}
	p, err := newPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.epfile.Close(); _ = unix.Close(p.wakefd) }()

	// A fake tunnel: an eventfd as its client's socket and a duplicate
	// of it as its node's, so a write to it raises an event for each.
	tuns := make([]*Tunnel, n)
	for i := range tuns {
		efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		c, err := unix.FcntlInt(uintptr(efd), unix.F_DUPFD_CLOEXEC, base)
		_ = unix.Close(efd)
		if err != nil {
			t.Fatal(err)
		}
		nd, err := unix.FcntlInt(uintptr(c), unix.F_DUPFD_CLOEXEC, base)
		if err != nil {
			t.Fatal(err)
		}
		tuns[i] = &Tunnel{clientFD: int32(c), nodeFD: int32(nd), slot: -1}
		t.Cleanup(func() { _ = unix.Close(c); _ = unix.Close(nd) })
		if err := p.watch(tuns[i]); err != nil {
			t.Fatal(err)
		}
	}
	slotSize := int(unsafe.Sizeof(slot{}))
	if len(p.slots) != n {
		t.Fatalf("%d tunnels on descriptors %d-%d: table of %d slots, want %d", n, base, tuns[n-1].nodeFD, len(p.slots), n)
	}
	t.Logf("%d tunnels on descriptors %d-%d: table %d slots, %d KB (indexed by descriptor: %d KB)",
		n, base, tuns[n-1].nodeFD, len(p.slots), cap(p.slots)*slotSize>>10, int(tuns[n-1].nodeFD+1)*8>>10)

	// End all but one tunnel in 16, and take slots for a few new ones:
	// freed slots are reused.
	kept := map[*Tunnel]bool{}
	for i, tun := range tuns {
		if i%16 == 0 {
			kept[tun] = true
		} else {
			p.forget(tun)
		}
	}
	for _, tun := range tuns[1:4] {
		if err := p.watch(tun); err != nil {
			t.Fatal(err)
		}
		kept[tun] = true
	}
	if len(p.slots) != n {
		t.Fatalf("table grew to %d slots with free ones", len(p.slots))
	}
	p.compact()
	if limit := max(compactMin, 4*p.live); len(p.slots) > limit || cap(p.slots) > limit {
		t.Fatalf("%d live tunnels: table of %d slots (capacity %d) after compact, want at most %d", p.live, len(p.slots), cap(p.slots), limit)
	}
	t.Logf("%d tunnels left: table %d slots, %d KB", p.live, len(p.slots), cap(p.slots)*slotSize>>10)

	// Every kept tunnel's events reach it, one for each socket, and no
	// ended tunnel's do.
	for tun := range kept {
		if _, err := unix.Write(int(tun.clientFD), []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[*Tunnel]int{}
	for {
		k, err := epollWaitNow(p.epfd, p.events)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			break
		}
		for _, ev := range p.events[:k] {
			tun, node := p.route(&ev)
			if tun == nil || !kept[tun] {
				t.Fatalf("an event (slot %d, generation %d) reached no kept tunnel", ev.Fd, uint32(ev.Pad)>>1)
			}
			if node {
				seen[tun] |= 2
			} else {
				seen[tun] |= 1
			}
		}
	}
	for tun := range kept {
		if seen[tun] != 3 {
			t.Fatalf("a kept tunnel (slot %d) got events %b from its sockets, want both", tun.slot, seen[tun])
		}
	}

	// Once every tunnel has ended, the poller holds none and its table is
	// back to the floor.
	for tun := range kept {
		p.forget(tun)
	}
	p.compact()
	if p.live != 0 || len(p.slots) > compactMin {
		t.Fatalf("all tunnels ended: %d live, table of %d slots, want 0 and at most %d", p.live, len(p.slots), compactMin)
	}
}
