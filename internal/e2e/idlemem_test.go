package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestIdleMemoryPerTunnel measures the gateway's resident memory per idle
// proxied WebSocket: RSS growth of the wsgate process over N tunnels held
// open to two relay-backend processes, divided by N. It is a measurement,
// not a check: it runs only when WSGATE_IDLE_CONNS is set, e.g.
//
//	WSGATE_IDLE_CONNS=9000 go test -run TestIdleMemoryPerTunnel -v ./internal/e2e
//
// (A gateway process holds two descriptors per tunnel; at the 20,000-file
// limit of this machine that is at most 9,836 tunnels: max_conns is held
// to (20,000 - 328) / 2.)
func TestIdleMemoryPerTunnel(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("WSGATE_IDLE_CONNS"))
	if n <= 0 {
		t.Skip("set WSGATE_IDLE_CONNS=N to measure gateway memory per idle tunnel")
	}
	st := &stack{}
	startRelays(t, st, 2, "")
	startGateway(t, st, "", "")

	before := rssKiB(t, st.gw.Pid())
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	for i := range n {
		c, err := rawHandshake(st.gwAddr, fmt.Sprintf("/room/idle-%d", i%100))
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	ramp := time.Since(start)
	// Let the runtime settle, then read RSS (median of three reads).
	time.Sleep(2 * time.Second)
	var samples []int
	for range 3 {
		samples = append(samples, rssKiB(t, st.gw.Pid()))
		time.Sleep(500 * time.Millisecond)
	}
	after := median(samples)
	per := float64(after-before) * 1024 / float64(n)
	t.Logf("tunnels %d, ramp %v (%.0f handshakes/s), gateway RSS %d KiB -> %d KiB, %.0f bytes (%.1f KiB) per idle tunnel",
		n, ramp.Round(time.Millisecond), float64(n)/ramp.Seconds(), before, after, per, per/1024)
}

// rawHandshake opens a WebSocket with a bare TCP connection and no
// goroutine, so the client side stays cheap at thousands of connections.
func rawHandshake(addr, path string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return rawUpgrade(c, addr, path)
}

// rawUpgrade sends a WebSocket upgrade request for path on c and reads the
// 101; it closes c on failure.
func rawUpgrade(c net.Conn, addr, path string) (net.Conn, error) {
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 512)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 101 ") {
		c.Close()
		return nil, fmt.Errorf("handshake: %q %v", status, err)
	}
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			c.Close()
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			break
		}
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// rssKiB reads VmRSS of pid from /proc.
func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			v, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

func median(v []int) int {
	s := append([]int(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}
