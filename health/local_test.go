package health

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestLocalReason(t *testing.T) {
	dial := func(call string, e syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError(call, e)}
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{dial("connect", syscall.EADDRNOTAVAIL), ReasonNoSourcePort},
		{dial("bind", syscall.EADDRNOTAVAIL), ReasonNoSourceAddr},
		{dial("bind", syscall.EADDRINUSE), ReasonNoSourcePort},
		{dial("connect", syscall.EADDRINUSE), ""},
		{dial("socket", syscall.EMFILE), ReasonNoDescriptors},
		{dial("socket", syscall.ENFILE), ReasonNoDescriptors},
		{dial("connect", syscall.ENOBUFS), ReasonNoMemory},
		{dial("socket", syscall.ENOMEM), ReasonNoMemory},
		{dial("connect", syscall.ECONNREFUSED), ""},
		{dial("connect", syscall.ETIMEDOUT), ""},
		{dial("connect", syscall.EHOSTUNREACH), ""},
		{errors.New("handshake: 502"), ""},
	} {
		if got := LocalReason(tc.err); got != tc.want {
			t.Errorf("LocalReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestLocalFailureKeepsNodeUp pins that a shortage on the dialing host is
// not the node's failure (it was: a gateway out of descriptors or ports
// failed its probes and reported its dials as passive failures, and so
// brought down or ejected healthy nodes): a passive report of a local
// error is ignored, and probes that cannot dial for want of descriptors
// (a real EMFILE, the test's own descriptor limit lowered) leave the node
// up, with no failure counted and no probe reported to the observer.
func TestLocalFailureKeepsNodeUp(t *testing.T) {
	b := newBackend(t)
	cfg := fastConfig()
	cfg.EjectAfter = 1
	c, rec := startChecker(t, cfg)
	f := newTarget(b.addr())
	c.Add(f)
	c.ReportFailure(f.addr, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EADDRNOTAVAIL)})
	if st, _ := c.Status(f.addr); st.State != StateUp || st.PassiveFailures != 0 {
		t.Fatalf("after a local dial failure: %+v, want up with no passive failure", st)
	}
	waitProbes(t, rec, f.addr, 1)

	restore := exhaustDescriptors(t)
	probesBefore := len(rec.Events())
	var seen []time.Time
	waitUntil(t, "probes not sent for want of descriptors", func() bool {
		st, _ := c.Status(f.addr)
		if st.State != StateUp {
			return true // failed below
		}
		if st.LastResult == "not probed: "+ReasonNoDescriptors && (len(seen) == 0 || !st.LastCheck.Equal(seen[len(seen)-1])) {
			seen = append(seen, st.LastCheck)
		}
		return len(seen) > cfg.Fall
	})
	st, _ := c.Status(f.addr)
	restore()
	if st.State != StateUp || st.ConsecutiveFailures != 0 || len(seen) <= cfg.Fall {
		t.Fatalf("after %d probes that could not dial: %+v, want up with no failure", len(seen), st)
	}
	for _, e := range rec.Events()[probesBefore:] {
		if e.kind == "probe" && !e.ok {
			t.Fatalf("a probe that could not dial was reported failed: %+v", rec.Events()[probesBefore:])
		}
	}
	waitUntil(t, "a probe after the descriptors are back", func() bool {
		st, _ := c.Status(f.addr)
		return st.LastResult == "ok"
	})
	sameStates(t, f, rec)
}

// exhaustDescriptors lowers this process's descriptor limit just above
// the descriptors open and fills the rest, so that every socket() fails
// with EMFILE until the returned func (also run at cleanup) undoes both.
func exhaustDescriptors(t *testing.T) (restore func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("count open descriptors: %v", err)
	}
	lim := old
	lim.Cur = uint64(len(ents)) + 8
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	var dups []int
	done := false
	restore = func() {
		if done {
			return
		}
		done = true
		for _, fd := range dups {
			_ = syscall.Close(fd)
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Errorf("restore the descriptor limit: %v", err)
		}
	}
	t.Cleanup(restore)
	for range 4096 {
		fd, err := syscall.Dup(0)
		if err != nil {
			if errors.Is(err, syscall.EMFILE) {
				return restore
			}
			t.Fatalf("dup: %v", err)
		}
		dups = append(dups, fd)
	}
	t.Fatal("the descriptor limit was not reached")
	return restore
}
