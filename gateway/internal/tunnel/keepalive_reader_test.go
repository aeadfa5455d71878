package tunnel

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// pacedReader reads its connection at rate bytes a second at most, as a
// client that handles what it reads at that pace.
type pacedReader struct {
	c     net.Conn
	rate  float64
	start time.Time
	taken int
}

func (p *pacedReader) Read(b []byte) (int, error) {
	for {
		allowed := int(p.rate*time.Since(p.start).Seconds()) - p.taken
		if allowed >= min(len(b), 4096) {
			n, err := p.c.Read(b[:min(len(b), allowed)])
			p.taken += n
			return n, err
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// streamFromNode has the node write 16 KiB frames to the client as fast as
// the tunnel takes them, and read (and drop) what the client sends, until
// the test ends (its cleanup closes the node's connection after stop).
func streamFromNode(t *testing.T, r *rig) {
	one := frame(wsframe.OpBinary, true, false, make([]byte, 16<<10))
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for range 100000 { // bounded: 1.6 GB, far more than a test reads
			select {
			case <-stop:
				return
			default:
			}
			// No deadline: a write cut short would split a frame. The
			// connection's close at the test's end ends a blocked write.
			if _, err := r.node.Write(one); err != nil {
				return
			}
		}
	}()
	go func() {
		b := make([]byte, 4096)
		for {
			if _, err := r.node.Read(b); err != nil {
				return
			}
		}
	}()
}

// TestKeepaliveSlowReaderNotCut pins issue 19 item 3: a client reading a
// node's stream at 1 MB/s, answering each ping as soon as it reads it, was
// cut with pong_timeout (at 7.1 s with ping_interval and pong_timeout 1s):
// its ping sat behind the megabytes the sockets buffered toward it, which
// it read at its own pace. The keepalive now counts a client that took
// bytes since the ping (its TCP stack acknowledged some) as alive. Run at 1s
// settings and at the default pong_timeout.
func TestKeepaliveSlowReaderNotCut(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Params
		run  time.Duration
	}{
		{"1s", Params{PingInterval: time.Second, PongTimeout: time.Second}, 10 * time.Second},
		{"default", Params{PingInterval: time.Second}, 14 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRigWith(t, c.p)
			streamFromNode(t, r)
			cr := bufio.NewReader(&pacedReader{c: r.client, rate: 1 << 20, start: time.Now()})
			pong := frame(wsframe.OpPong, true, true, nil)
			pings, frames := 0, 0
			for until := time.Now().Add(c.run); time.Now().Before(until); {
				_ = r.client.SetReadDeadline(time.Now().Add(10 * time.Second))
				h, _, err := readFrameErr(cr)
				if err != nil {
					t.Fatalf("after %d frames and %d pings: %v; tunnel end %v, stats %+v", frames, pings, err, r.tun.EndReason(), r.tun.Stats())
				}
				switch h.Op {
				case wsframe.OpPing:
					pings++
					r.write(r.client, pong)
				case wsframe.OpBinary:
					frames++
				default:
					t.Fatalf("after %d frames and %d pings: %v frame; tunnel end %v, stats %+v", frames, pings, h.Op, r.tun.EndReason(), r.tun.Stats())
				}
			}
			if end := r.tun.EndReason(); end != 0 {
				t.Fatalf("a client reading at 1 MB/s and answering every ping was cut: end %v after %d frames, %d pings", end, frames, pings)
			}
			if pings == 0 {
				t.Fatalf("no ping in %v of reading (%d frames)", c.run, frames)
			}
			t.Logf("engine %s: %d frames (%d KiB), %d pings", r.tun.Engine(), frames, frames*16, pings)
		})
	}
}

// TestKeepaliveCutsStalledReader: the other side of issue 19 item 3. A
// client that stops reading while the node streams to it, and sends
// nothing, takes no byte after the ping (which waits behind what it does
// not read): it is cut with pong_timeout, not left to the write timeout.
func TestKeepaliveCutsStalledReader(t *testing.T) {
	r := newRigWith(t, Params{PingInterval: 100 * time.Millisecond, PongTimeout: 300 * time.Millisecond})
	streamFromNode(t, r)
	waitFor(t, func() bool { return r.tun.EndReason() != 0 })
	if end := r.tun.EndReason(); end != EndPongTimeout {
		t.Fatalf("end reason %v, want %v", end, EndPongTimeout)
	}
}
