package tunnel

import "time"

// clientRate is a client's frame and byte token buckets, each holding one
// second's worth. It is used by the client→node half's forward only.
type clientRate struct {
	frameRate, byteRate float64 // per second; 0 = no cap
	frames, bytes       float64 // tokens left
	last                int64   // mono ns of the last take
}

func newClientRate(frameRate, byteRate uint64) *clientRate {
	return &clientRate{
		frameRate: float64(frameRate), byteRate: float64(byteRate),
		frames: float64(frameRate), bytes: float64(byteRate),
		last: mono(time.Now()),
	}
}

// smallRead is the least a read of the client's socket that ends no frame
// costs of its rates: a read that brings fewer bytes than this and ends no
// frame is charged as smallRead bytes and one frame. The gateway's cost of
// a read hardly depends on its size, so a client dripping a frame one byte
// per TCP segment would otherwise cost it tens of times more per byte than
// whole frames while staying under both rates (issue 19 item 11; see
// docs/security.md). A read that ends a frame is charged what it brought:
// a client that writes whole frames is never charged more.
const smallRead = 64

// read charges one read of n bytes from the client that ended frames
// frames, at now, and reports whether both buckets held enough.
func (r *clientRate) read(frames uint64, n int, now int64) bool {
	if frames == 0 && n < smallRead {
		frames, n = 1, smallRead
	}
	return r.take(frames, n, now)
}

// take spends frames and n bytes at now and reports whether both buckets
// held enough.
func (r *clientRate) take(frames uint64, n int, now int64) bool {
	dt := max(0, float64(now-r.last)/1e9)
	r.last = now
	ok := true
	if r.frameRate > 0 {
		r.frames = min(r.frameRate, r.frames+dt*r.frameRate) - float64(frames)
		ok = r.frames >= 0
	}
	if r.byteRate > 0 {
		r.bytes = min(r.byteRate, r.bytes+dt*r.byteRate) - float64(n)
		ok = ok && r.bytes >= 0
	}
	return ok
}
