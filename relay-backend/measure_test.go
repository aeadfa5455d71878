package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/wsgate/wsgate/internal/h2client"
	"github.com/wsgate/wsgate/internal/rlimit"
)

// Measurements, not checks: they run only when asked, as
//
//	RELAY_MEASURE=1 go test -run 'TestMeasure' -v ./relay-backend/
//
// and log their figures.

// vmRSS returns a process's resident set size in KiB.
func vmRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.Fields(v)[0])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// connections reads /info's connection count.
func connections(addr string) int {
	_, body := get(addr, "/info")
	i := strings.Index(body, `"connections":`)
	if i < 0 {
		return -1
	}
	n, _ := strconv.Atoi(strings.TrimFunc(strings.SplitN(body[i+len(`"connections":`):], ",", 2)[0], func(r rune) bool { return r < '0' || r > '9' }))
	return n
}

func waitConnections(t *testing.T, addr string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for connections(addr) != n {
		if time.Now().After(deadline) {
			t.Fatalf("relay holds %d connections, want %d", connections(addr), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dialMembers joins n idle members (rooms of 20) over HTTP/1.1, or over
// conns HTTP/2 connections, and returns them.
func dialMembers(t *testing.T, addr string, n, conns int) []*websocket.Conn {
	t.Helper()
	var ds []*websocket.Dialer
	base := "ws://" + addr
	if conns == 0 {
		ds = []*websocket.Dialer{{HandshakeTimeout: ioTimeout}}
	} else {
		base = "ws://relay"
		for range conns {
			hc, err := h2client.Dial(addr, ioTimeout)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = hc.Close() })
			ds = append(ds, hc.Dialer(ioTimeout))
		}
	}
	ws := make([]*websocket.Conn, 0, n)
	for i := range n {
		c, _, err := ds[i%len(ds)].Dial(fmt.Sprintf("%s/room/m%d", base, i/20), nil)
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		ws = append(ws, c)
	}
	return ws
}

// TestMeasureIdleRSS measures the relay process's resident memory per
// idle member: VmRSS growth over RELAY_MEASURE_N (default 2000) members,
// in rooms of 20, over HTTP/1.1 and over 4 HTTP/2 connections.
func TestMeasureIdleRSS(t *testing.T) {
	if os.Getenv("RELAY_MEASURE") == "" {
		t.Skip("a measurement: RELAY_MEASURE=1 runs it")
	}
	if _, _, err := rlimit.RaiseNoFile(); err != nil {
		t.Fatal(err)
	}
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("RELAY_MEASURE_N")); err == nil && v > 0 {
		n = v
	}
	bin := buildBinary(t)
	for _, mode := range []struct {
		name  string
		conns int
	}{{"HTTP/1.1", 0}, {"HTTP/2 over 4 connections", 4}} {
		p := startProc(t, bin, "-id", "rss")
		pid := p.cmd.Process.Pid
		time.Sleep(500 * time.Millisecond)
		before := vmRSS(t, pid)
		dialMembers(t, p.addr, n, mode.conns)
		waitConnections(t, p.addr, n)
		time.Sleep(2 * time.Second) // let the last handshakes' garbage settle
		after := vmRSS(t, pid)
		t.Logf("%s: VmRSS %d -> %d KiB over %d idle members: %.1f KiB per member",
			mode.name, before, after, n, float64(after-before)/float64(n))
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// TestMeasureFanoutWrites counts the relay process's system calls (perf
// stat: all of them, and the writes) while one sender's messages fan out
// to 20 members of its room, the members over HTTP/1.1 and over one
// HTTP/2 connection.
func TestMeasureFanoutWrites(t *testing.T) {
	if os.Getenv("RELAY_MEASURE") == "" {
		t.Skip("a measurement: RELAY_MEASURE=1 runs it")
	}
	perf, err := exec.LookPath("perf")
	if err != nil {
		t.Skip("no perf")
	}
	const members, msgs = 20, 2000
	bin := buildBinary(t)
	for _, mode := range []struct {
		name  string
		conns int
	}{{"HTTP/1.1", 0}, {"HTTP/2 over 1 connection", 1}} {
		p := startProc(t, bin, "-id", "fan", "-send-queue", "4096") // a burst, not a slow consumer
		ws := dialMembers(t, p.addr, members, mode.conns)
		sender := join(t, p.addr, "m0") // reads its hello; in room m0 with the members
		waitConnections(t, p.addr, members+1)
		ctx, cancel := context.WithCancel(context.Background())
		events := "raw_syscalls:sys_enter,syscalls:sys_enter_write,syscalls:sys_enter_writev," +
			"syscalls:sys_enter_read,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_nanosleep,syscalls:sys_enter_sched_yield"
		cmd := exec.CommandContext(ctx, perf, "stat", "-x,", "-e", events, "-p", strconv.Itoa(p.cmd.Process.Pid))
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
		var out strings.Builder
		cmd.Stderr = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // perf attaches
		read := make(chan error, members)
		for _, c := range ws {
			go func() {
				_ = c.SetReadDeadline(time.Now().Add(time.Minute))
				for range msgs {
					if _, _, err := c.ReadMessage(); err != nil {
						read <- err
						return
					}
				}
				read <- nil
			}()
		}
		start := time.Now()
		for i := range msgs {
			_ = sender.SetWriteDeadline(time.Now().Add(ioTimeout))
			if err := sender.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, "message %d of the fan-out, about eighty bytes long.........", i)); err != nil {
				t.Fatal(err)
			}
			if i%20 == 19 {
				time.Sleep(time.Millisecond) // about 20k frames/s, not one burst
			}
		}
		for range members {
			if err := <-read; err != nil {
				t.Fatal(err)
			}
		}
		took := time.Since(start)
		cancel()
		_ = cmd.Wait()
		counts := map[string]int{}
		for line := range strings.Lines(out.String()) {
			f := strings.Split(strings.TrimSpace(line), ",")
			if len(f) > 2 {
				n, _ := strconv.Atoi(f[0])
				counts[f[2]] = n
			}
		}
		frames := float64(members * msgs)
		all, writes := counts["raw_syscalls:sys_enter"], counts["syscalls:sys_enter_write"]+counts["syscalls:sys_enter_writev"]
		t.Logf("%s: %d messages to %d members in %v: %d system calls (%.2f per delivered frame), %d writes (%.3f per delivered frame); read %d, futex %d, epoll_pwait %d, nanosleep %d, sched_yield %d",
			mode.name, msgs, members, took.Round(time.Millisecond), all, float64(all)/frames, writes, float64(writes)/frames,
			counts["syscalls:sys_enter_read"], counts["syscalls:sys_enter_futex"], counts["syscalls:sys_enter_epoll_pwait"],
			counts["syscalls:sys_enter_nanosleep"], counts["syscalls:sys_enter_sched_yield"])
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
