package tunnel

import (
	"io"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// TestRateLimitNeverClosesInsideAFrame: a client whose read goes over its
// rate in the middle of a frame never has the gateway's close frame
// written into that frame's payload. The cut used to come at the end of
// the read, inside the frame: the node got half a frame with the 1001 in
// its payload. The TLS suite (issue 19 item 1) found it: crypto/tls sends
// a fresh connection's first writes as small records, so a burst arrives
// in pieces. At a frame boundary the node gets whole frames and then the
// 1001; inside a frame it gets whole frames, the part of the frame the
// client sent, and the end of its stream (endInsideFrame): the gateway
// does not wait for the frame's end, which a drip would put off.
func TestRateLimitNeverClosesInsideAFrame(t *testing.T) {
	r := newRigWith(t, Params{FrameRate: 10})
	var burst []byte
	for range 12 { // over 10 a second
		burst = append(burst, frame(wsframe.OpBinary, true, true, make([]byte, 100))...)
	}
	last := frame(wsframe.OpBinary, true, true, make([]byte, 100))
	r.write(r.client, append(burst, last[:50]...))
	// The rest of the frame in flight comes in a read of its own.
	time.Sleep(100 * time.Millisecond)
	r.write(r.client, last[50:])
	_ = r.node.SetReadDeadline(time.Now().Add(5 * time.Second))
	n := 0
	for {
		h, p, err := readFrameErr(r.nr)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			// Cut inside a frame. Over TCP the burst is one read,
			// which ends inside the 13th; over TLS the reads split
			// where crypto/tls's records do, and each that ends no
			// frame costs one, so the cut may come sooner.
			if !testTLS && n != 12 {
				t.Fatalf("node stream ended after %d whole frames, want 12", n)
			}
			t.Logf("node stream ended inside a frame after %d whole frames", n)
			r.node.Close()
			break
		}
		if err != nil {
			t.Fatalf("node read after %d frames: %v (stats %+v)", n, err, r.tun.Stats())
		}
		if h.Op == wsframe.OpClose {
			code, _, _ := wsframe.ParseClosePayload(p)
			if code != CodeGoingAway || !testTLS {
				t.Fatalf("node got close %d after %d frames, want the end of its stream inside the 13th", code, n)
			}
			t.Logf("node got 1001 after %d whole frames", n)
			r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
			break
		}
		if h.Op != wsframe.OpBinary || len(p) != 100 {
			t.Fatalf("node frame %d: %v of %d bytes, want the client's 100-byte frame", n, h.Op, len(p))
		}
		n++
	}
	expectClose(t, r.client, r.cr, CodePolicy, false)
	r.waitEnd()
}
