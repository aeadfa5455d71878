package h2

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// newGroupFramer is a Framer set up as a Conn's, reading r.
func newGroupFramer(r interface{ Read([]byte) (int, error) }) *http2.Framer {
	fr := http2.NewFramer(nil, r)
	fr.SetMaxReadFrameSize(defaultMaxFrameSize)
	fr.SetReuseFrames()
	fr.ReadMetaHeaders = hpack.NewDecoder(headerTableSize, nil)
	fr.MaxHeaderListSize = 16 << 10
	return fr
}

// describeRead names what one ReadFrame gave, for comparison.
func describeRead(f http2.Frame, err error) string {
	if err != nil {
		var se http2.StreamError
		var ce http2.ConnectionError
		switch {
		case errors.As(err, &se):
			return fmt.Sprintf("streamerr %d %v", se.StreamID, se.Code)
		case errors.As(err, &ce):
			return fmt.Sprintf("connerr %v", http2.ErrCode(ce))
		case errors.Is(err, http2.ErrFrameTooLarge):
			return "toolarge"
		}
		return "err " + err.Error()
	}
	return fmt.Sprintf("%v", f.Header())
}

// FuzzFrameGroups checks that a polled connection's Framer, handed
// frameGroupEnd's groups one at a time (as PollRead does), reads the same
// frames and errors as readLoop's reading the bytes straight, stream
// errors inside a header block included.
func FuzzFrameGroups(f *testing.F) {
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		b := enc(":status", "200", "x", "y")
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:2]})
		fr.WriteData(1, false, []byte("x"))
	}))
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		b := enc(":status", "200", "x", "y")
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:2]})
		fr.WriteContinuation(1, false, b[2:4])
		fr.WriteContinuation(3, true, b[4:])
		fr.WriteData(1, false, []byte("x"))
	}))
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteContinuation(1, true, []byte("zz"))
	}))
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		b := enc(":status", "200")
		fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: b})
		fr.WriteContinuation(1, true, nil)
	}))
	f.Add([]byte{0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var a []string
		fa := newGroupFramer(bytes.NewReader(b))
		for {
			fr, err := fa.ReadFrame()
			a = append(a, describeRead(fr, err))
			if err != nil {
				var se http2.StreamError
				if errors.As(err, &se) {
					continue
				}
				break
			}
		}
		var src frameSource
		fb := newGroupFramer(&src)
		var p []string
		off := 0
		for {
			end, need := frameGroupEnd(b[off:])
			if end == 0 {
				if need > maxHeaderGroup+frameHeaderLen {
					p = append(p, "calm")
				} else {
					p = append(p, "eof")
				}
				break
			}
			src.b = b[off : off+end]
			fr, err := fb.ReadFrame()
			p = append(p, describeRead(fr, err))
			left := len(src.b)
			src.b = nil
			off += end - left
			if err != nil {
				var se http2.StreamError
				if errors.As(err, &se) {
					continue
				}
				break
			}
		}
		// Compare up to the first difference that is not "eof" vs an
		// unexpected EOF.
		for i := range min(len(a), len(p)) {
			if a[i] == p[i] {
				continue
			}
			if p[i] == "eof" || p[i] == "calm" {
				return
			}
			if p[i] == "err unexpected EOF" {
				t.Fatalf("polled path: Framer ran out of the group at %d: %v vs %v", i, a, p)
			}
			t.Fatalf("differ at %d:\nread: %v\npoll: %v", i, a, p)
		}
	})
}
