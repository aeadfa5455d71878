package upstream

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/health"
	"golang.org/x/sys/unix"
)

// portRangeFile is the ephemeral port range of the network namespace of
// the thread that opens it.
const portRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// errNoNetns says the test cannot make a network namespace here.
var errNoNetns = errors.New("no network namespace")

// inOwnNetns runs fn on a thread moved into a new network namespace of
// its own, with loopback up and the ephemeral port range set to ports
// (say "40000 40003"); sockets fn creates live in that namespace, and the
// host's settings are untouched. The thread is never unlocked, so it ends
// with fn instead of returning to the scheduler. It returns an error
// wrapping errNoNetns where namespaces are not allowed (not root, or a
// sandbox that forbids unshare).
func inOwnNetns(ports string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		done <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("%w: unshare: %w", errNoNetns, err)
			}
			if err := loopbackUp(); err != nil {
				return fmt.Errorf("%w: %w", errNoNetns, err)
			}
			if err := os.WriteFile(portRangeFile, []byte(ports), 0); err != nil {
				return fmt.Errorf("%w: set the namespace's port range: %w", errNoNetns, err)
			}
			return fn()
		}()
	}()
	return <-done
}

// loopbackUp brings up lo in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// TestSourcePortsPerNode measures, in miniature, what one source address
// holds, and pins a real port shortage: in a network namespace of the
// test's own whose ephemeral range is 4 ports, two source addresses hold
// 4 connections each to one node, then each reports no_source_port (real
// EADDRNOTAVAIL from connect) and the dial fails with ErrLocalDial; a
// second node still takes 4 from each source, since with
// IP_BIND_ADDRESS_NO_PORT the ports are per (source, node) pair. (Bound
// with port 0, as before, the second node got none: the four ports of a
// source were spent at bind, whatever the destination.)
func TestSourcePortsPerNode(t *testing.T) {
	hostRange, err := os.ReadFile(portRangeFile)
	if err != nil {
		t.Skipf("read %s: %v", portRangeFile, err)
	}
	const ports = 4
	var (
		counts   dialCounts
		held     []net.Conn
		perNode  [2]int
		lastErrs [2]error
	)
	err = inOwnNetns("40000 40003", func() error {
		d, err := newDialer("p", []string{"127.0.0.2", "127.0.0.3"}, 2*time.Second, quietLog(), counts.count)
		if err != nil {
			return err
		}
		for i := range perNode {
			// A node, in the namespace, on a port outside the ephemeral
			// range (a listener's port is not handed to connect).
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 50000+i))
			if err != nil {
				return err
			}
			defer ln.Close()
			go func() { // accepts and holds every connection until the listener closes
				var conns []net.Conn
				defer func() {
					for _, c := range conns {
						_ = c.Close()
					}
				}()
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					conns = append(conns, c)
				}
			}()
			// Bounded: one dial more than the two sources hold.
			for range 2*ports + 1 {
				c, err := d.Dial(ln.Addr().String())
				if err != nil {
					lastErrs[i] = err
					break
				}
				held = append(held, c)
				perNode[i]++
			}
		}
		return nil
	})
	for _, c := range held {
		_ = c.Close()
	}
	if errors.Is(err, errNoNetns) {
		t.Skipf("needs a network namespace of its own (root, unshare allowed): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(portRangeFile); string(after) != string(hostRange) {
		t.Fatalf("the host's port range changed from %q to %q", hostRange, after)
	}
	for i, n := range perNode {
		if n != 2*ports {
			t.Errorf("node %d took %d connections from two sources, want %d (%d ports each); last error: %v", i, n, 2*ports, ports, lastErrs[i])
		}
		if !errors.Is(lastErrs[i], ErrLocalDial) || !strings.Contains(fmt.Sprint(lastErrs[i]), health.ReasonNoSourcePort) {
			t.Errorf("node %d: the dial past the ports failed with %v, want ErrLocalDial (%s)", i, lastErrs[i], health.ReasonNoSourcePort)
		}
	}
	if n := counts.get(health.ReasonNoSourcePort); n != 4 {
		t.Errorf("counted %v, want 4 no_source_port (each source, toward each node)", counts.n)
	}
}
