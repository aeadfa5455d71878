package e2e

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// keepaliveRoutes are routes before the stack's catch-all: /room/ka-* pings a
// client silent for 1s and cuts it 1s after an unanswered ping; the other
// (/room/rate-*) lets a client send 5 frames a second.
const keepaliveRoutes = `
[[routes]]
path_prefix = "/room/ka-"
pool = "relay"
ping_interval = "1s"
pong_timeout = "1s"

[[routes]]
path_prefix = "/room/rate-"
pool = "relay"
frame_rate = 5
`

// TestKeepaliveFreesVanishedClients is issue 11's keepalive check through
// the wsgate and relay-backend processes: 1,000 clients hold a tunnel and
// then never answer (as a phone that left the network: its kernel may
// still acknowledge, its application says nothing). Each is pinged after
// one to two intervals of silence and cut a pong timeout later, so every
// count returns to zero within 2 × ping_interval + pong_timeout (3s here),
// and each end is counted as pong_timeout.
func TestKeepaliveFreesVanishedClients(t *testing.T) {
	st := &stack{}
	startRelays(t, st, 2, "")
	startGateway(t, st, "", keepaliveRoutes)

	const n = 1000
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 20 {
				c, err := rawHandshake(st.gwAddr, fmt.Sprintf("/room/ka-%d", i))
				if err != nil {
					errs <- err
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	close(errs)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	for err := range errs {
		t.Fatalf("handshake: %v", err)
	}
	opened := time.Now()
	waitFor(t, func() bool { return metricValue(t, st.adminAddr, "wsgate_tunnels") == n })

	// From here no client reads or writes a byte.
	deadline := opened.Add(60 * time.Second) // a bound for a loaded machine, not the figure
	for metricValue(t, st.adminAddr, "wsgate_tunnels") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%v tunnels still open 60s after the clients went silent", metricValue(t, st.adminAddr, "wsgate_tunnels"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	gone := time.Since(opened)
	waitRelaysEmpty(t, st)
	t.Logf("%d silent clients: every tunnel closed %v after the last handshake (ping_interval 1s, pong_timeout 1s: at most 3s by design)",
		n, gone.Round(10*time.Millisecond))
	if got := metricValue(t, st.adminAddr, `wsgate_tunnels_closed_total{reason="pong_timeout"}`); got != n {
		t.Errorf("pong_timeout ends: %v, want %d", got, n)
	}
	if got := metricValue(t, st.adminAddr, "wsgate_client_connections"); got != 0 {
		t.Errorf("client connections still counted: %v", got)
	}
	// Each client got a ping and nothing else before its socket ended.
	br := bufio.NewReader(conns[0])
	_ = conns[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if op, _ := readServerFrame(br); op != wsframe.OpPing {
		t.Errorf("a silent client's first frame is %v, want a ping", op)
	}
}

// TestFrameRateGives1008 sends 20 frames at once on a route that allows
// 5 a second, through the wsgate and relay-backend processes: the client
// gets close 1008.
func TestFrameRateGives1008(t *testing.T) {
	st := &stack{}
	startRelays(t, st, 1, "")
	startGateway(t, st, "", keepaliveRoutes)
	c, err := rawHandshake(st.gwAddr, "/room/rate-1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mask := [4]byte{1, 2, 3, 4}
	var burst []byte
	for range 20 {
		payload := []byte("hello")
		h := wsframe.Header{Fin: true, Op: wsframe.OpText, Masked: true, Mask: mask, Length: uint64(len(payload))}
		burst = wsframe.AppendHeader(burst, h)
		start := len(burst)
		burst = append(burst, payload...)
		wsframe.Mask(mask, 0, burst[start:])
	}
	if _, err := c.Write(burst); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a bound, not a speed
	br := bufio.NewReader(c)
	for {
		op, payload := readServerFrame(br)
		if op == 0 {
			t.Fatal("connection ended without a close frame")
		}
		if op != wsframe.OpClose {
			continue // the relay's own frames to the room
		}
		if len(payload) < 2 || binary.BigEndian.Uint16(payload) != 1008 {
			t.Fatalf("close payload % x, want code 1008", payload)
		}
		break
	}
	waitRelaysEmpty(t, st)
}

// readServerFrame reads one unmasked frame; op 0 when the stream ends or
// the frame is malformed.
func readServerFrame(br *bufio.Reader) (wsframe.Opcode, []byte) {
	var hb []byte
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, nil
		}
		hb = append(hb, b)
		h, _, err := wsframe.ParseHeader(hb)
		if err == wsframe.ErrShortHeader {
			continue
		}
		if err != nil || h.Masked {
			return 0, nil
		}
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(br, p); err != nil {
			return 0, nil
		}
		return h.Op, p
	}
}

// TestPollersKey starts wsgate with gateway.pollers = 1: after the first
// tunnel one event loop runs, and the tunnel is on the epoll engine.
func TestPollersKey(t *testing.T) {
	st := &stack{}
	startRelays(t, st, 1, "")
	startGatewayCmd(t, st, "", "", withGatewayKeys(t, "pollers = 1\n"))
	c, err := rawHandshake(st.gwAddr, "/room/pollers")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, func() bool { return metricValue(t, st.adminAddr, "wsgate_tunnels") == 1 })
	if got := metricValue(t, st.adminAddr, "wsgate_tunnel_pollers"); got != 1 {
		t.Errorf("wsgate_tunnel_pollers = %v, want 1", got)
	}
	if got := metricValue(t, st.adminAddr, `wsgate_tunnels_started_total{engine="epoll"}`); got != 1 {
		t.Errorf("epoll tunnels started = %v, want 1", got)
	}
}
