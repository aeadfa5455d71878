package tunnel

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// TestRateLimitDripGives1008 pins issue 19 item 11: a client sending its
// frames one byte per TCP segment (TCP_NODELAY, one write per byte, a
// pause between) stayed under frame_rate and byte_rate, which counted only
// whole frames and bytes, while every byte cost the gateway a read. A read
// that ends no frame and brings fewer than smallRead bytes now costs
// smallRead bytes and one frame: the drip gets 1008, and a client sending
// the same bytes as whole frames does not.
func TestRateLimitDripGives1008(t *testing.T) {
	// 600 bytes: six frames of 100 bytes (a 94-byte payload).
	one := frame(wsframe.OpBinary, true, true, bytes.Repeat([]byte{'d'}, 94))
	for _, c := range []struct {
		name string
		p    Params
	}{
		// Both rates hold the 600 bytes (or six frames) with room to
		// spare, sent at once or over seconds.
		{"bytes", Params{ByteRate: 1000}},
		{"frames", Params{FrameRate: 20}},
	} {
		t.Run(c.name+"/drip", func(t *testing.T) {
			r := newRigWith(t, c.p)
			for range 6 {
				for i := range one {
					if _, err := r.client.Write(one[i : i+1]); err != nil {
						t.Fatalf("drip write: %v", err)
					}
					time.Sleep(3 * time.Millisecond)
				}
			}
			// Cut at a frame's end, the node gets close 1001 and answers
			// it; cut inside a frame (most likely), it gets the part
			// the client sent, then the end of its stream, and closes.
			_ = r.node.SetReadDeadline(time.Now().Add(5 * time.Second))
			frames := 0
			for {
				h, _, err := readFrameErr(r.nr)
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					r.node.Close()
					break
				}
				if err != nil {
					t.Fatalf("the drip was not cut: the node read %d frames, then %v (stats %+v)", frames, err, r.tun.Stats())
				}
				if h.Op == wsframe.OpClose {
					r.write(r.node, wsframe.AppendClose(nil, 1000, "", nil))
					break
				}
				frames++
			}
			expectClose(t, r.client, r.cr, CodePolicy, false)
			r.waitEnd()
		})
		t.Run(c.name+"/frames", func(t *testing.T) {
			r := newRigWith(t, c.p)
			for i := range 6 {
				r.write(r.client, one)
				if h, p := readFrame(t, r.node, r.nr); h.Op != wsframe.OpBinary || len(p) != 94 {
					t.Fatalf("frame %d: node got %v of %d bytes", i, h.Op, len(p))
				}
				time.Sleep(50 * time.Millisecond)
			}
			r.closeNormally()
		})
	}
}

// TestRateLimitSmallReads is the charge of one read: a read that ends no
// frame costs at least smallRead bytes and one frame; one that ends a frame
// costs what it brought.
func TestRateLimitSmallReads(t *testing.T) {
	for _, c := range []struct {
		frames       uint64
		n            int
		wantF, wantB float64 // tokens spent
	}{
		{0, 1, 1, smallRead},                 // a dripped byte
		{0, smallRead - 1, 1, smallRead},     // a header sent apart from its payload
		{0, smallRead, 0, smallRead},         // a segment of a large frame
		{0, 1448, 0, 1448},                   // another
		{1, 6, 1, 6},                         // a whole empty frame
		{3, 30, 3, 30},                       // three small whole frames
		{1, smallRead - 1, 1, smallRead - 1}, // the end of a frame
	} {
		r := newRateLimit(1000, 10000)
		r.last = 0
		r.read(c.frames, c.n, 0)
		if gotF, gotB := 1000-r.frames, 10000-r.bytes; gotF != c.wantF || gotB != c.wantB {
			t.Errorf("read(%d frames, %d bytes) cost %v frames and %v bytes, want %v and %v", c.frames, c.n, gotF, gotB, c.wantF, c.wantB)
		}
	}
}

// TestRateLimitInsideFrameEndsNodeStream: a client over its byte rate in
// the middle of a frame's payload (a drip always is) leaves the node inside
// that frame, where no close frame can go. The gateway's close 1001 used to
// be written there anyway, read by the node as payload, and the node then
// waited for the rest of the frame until the close timeout (found with
// issue 19 item 11). The node now gets exactly what the client sent and
// then the end of its stream; once it closes, the client gets 1008.
func TestRateLimitInsideFrameEndsNodeStream(t *testing.T) {
	r := newRigWith(t, Params{ByteRate: 1000})
	f := frame(wsframe.OpBinary, true, true, bytes.Repeat([]byte{'x'}, 2000))
	sent := f[:1100] // over the 1000 bytes of burst, inside the payload
	r.write(r.client, sent[:500])
	time.Sleep(50 * time.Millisecond)
	r.write(r.client, sent[500:])
	_ = r.node.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(r.node)
	if err != nil {
		t.Fatalf("node read %d bytes, then %v, not the end of its stream (stats %+v)", len(got), err, r.tun.Stats())
	}
	if !bytes.Equal(got, sent) {
		t.Fatalf("node read %d bytes (% x...), want the %d the client sent", len(got), got[:min(len(got), 8)], len(sent))
	}
	r.node.Close()
	expectClose(t, r.client, r.cr, CodePolicy, false)
	r.waitEnd()
}
