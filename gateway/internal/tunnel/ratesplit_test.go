package tunnel

import (
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// TestRateLimitCutsBetweenFrames: a client whose read goes over its rate
// in the middle of a frame has that frame go out whole, then the node gets
// the gateway's 1001 and the client its 1008. The cut used to come at the
// end of the read, inside the frame: the node got half a frame with the
// 1001 in its payload. The TLS suite (issue 19 item 1) found it: crypto/tls
// sends a fresh connection's first writes as small records, so a burst
// arrives in pieces.
func TestRateLimitCutsBetweenFrames(t *testing.T) {
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
	// Whole frames, then the 1001. Over TCP the cut follows the 13th;
	// over TLS the reads split where crypto/tls's records do, and it may
	// come sooner, never before the 11th, and never inside a frame.
	n := 0
	for {
		h, p := readFrame(t, r.node, r.nr)
		if h.Op == wsframe.OpClose {
			code, _, _ := wsframe.ParseClosePayload(p)
			if code != CodeGoingAway || n < 11 {
				t.Fatalf("node got close %d after %d frames, want 1001 after at least 11", code, n)
			}
			break
		}
		if h.Op != wsframe.OpBinary || len(p) != 100 {
			t.Fatalf("node frame %d: %v of %d bytes, want the client's 100-byte frame", n, h.Op, len(p))
		}
		n++
	}
	if !testTLS && n != 13 {
		t.Errorf("node got %d frames before the cut, want 13", n)
	}
	r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
	expectClose(t, r.client, r.cr, CodePolicy, false)
	r.waitEnd()
}
