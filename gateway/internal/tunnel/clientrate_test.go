package tunnel

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// TestRateLimitGives1008: a client over its frame or byte rate gets 1008
// after the node's replies to what it sent before, and the node gets 1001.
func TestRateLimitGives1008(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Params
	}{
		{"frames", Params{FrameRate: 10}},
		{"bytes", Params{ByteRate: 1000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRigWith(t, c.p)
			var burst []byte
			for range 20 { // 20 frames of 106 bytes: over 10 a second and over 1000 bytes
				burst = append(burst, frame(wsframe.OpBinary, true, true, make([]byte, 100))...)
			}
			r.write(r.client, burst)
			_ = r.node.SetReadDeadline(time.Now().Add(5 * time.Second))
			for {
				h, _, err := readFrameErr(r.nr)
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					// The cut came inside a frame (over TLS the burst
					// arrives in records): the node's stream ends there
					// (see TestRateLimitNeverClosesInsideAFrame).
					r.node.Close()
					break
				}
				if err != nil {
					t.Fatalf("node read: %v", err)
				}
				if h.Op == wsframe.OpClose {
					// The 1001, checked by the node's reply.
					r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
					break
				}
			}
			expectClose(t, r.client, r.cr, CodePolicy, false)
			r.waitEnd()
		})
	}
}

// TestRateLimitAllowsSteadySender: a client under its rates is never cut.
func TestRateLimitAllowsSteadySender(t *testing.T) {
	r := newRigWith(t, Params{FrameRate: 100, ByteRate: 100 << 10})
	for i := range 30 {
		r.write(r.client, frame(wsframe.OpText, true, true, []byte("steady")))
		if h, _ := readFrame(t, r.node, r.nr); h.Op != wsframe.OpText {
			t.Fatalf("frame %d: node got %v", i, h.Op)
		}
	}
	r.closeNormally()
}

// TestRateLimitBucket is the token bucket's arithmetic: a second's worth of
// burst, refilled at the rate.
func TestRateLimitBucket(t *testing.T) {
	const s = int64(time.Second)
	r := newClientRate(10, 0)
	r.last = 0
	for _, c := range []struct {
		at     int64
		frames uint64
		ok     bool
	}{
		{0, 10, true},      // the burst
		{0, 1, false},      // nothing left
		{s / 2, 4, true},   // 5 refilled, 1 owed from before: 4 fit
		{s / 2, 1, false},  // empty again
		{10 * s, 10, true}, // refilled to the burst, never above it
		{10 * s, 1, false},
	} {
		if got := r.take(c.frames, 0, c.at); got != c.ok {
			t.Fatalf("take(%d) at %v: %v, want %v", c.frames, time.Duration(c.at), got, c.ok)
		}
	}
}
