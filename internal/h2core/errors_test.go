package h2core

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestReadError: what ReadFrame returns for each kind of bad input is
// sorted into a stream error to answer, or a connection error with the
// code RFC 9113 gives it, or the socket's own error.
func TestReadError(t *testing.T) {
	cases := []struct {
		name   string
		wire   func(fr *http2.Framer)
		limit  int // the ReadBudget, 0: none
		stream bool
		code   http2.ErrCode // of the ConnError; 0: err itself
		err    error
	}{
		{"a frame past SETTINGS_MAX_FRAME_SIZE", func(fr *http2.Framer) { fr.WriteData(1, false, make([]byte, 20000)) }, 0, false, http2.ErrCodeFrameSize, nil},
		{"a malformed frame", func(fr *http2.Framer) { fr.WriteRawFrame(http2.FramePing, 0, 0, make([]byte, 7)) }, 0, false, http2.ErrCodeFrameSize, nil},
		{"a WINDOW_UPDATE of 0 on a stream", func(fr *http2.Framer) { fr.WriteRawFrame(http2.FrameWindowUpdate, 0, 1, make([]byte, 4)) }, 0, true, 0, nil},
		{"a header block past its budget", func(fr *http2.Framer) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: bytes.Repeat([]byte{0x20}, 16384)})
			fr.WriteContinuation(1, false, bytes.Repeat([]byte{0x20}, 16384))
		}, 20000, false, http2.ErrCodeEnhanceYourCalm, nil},
		{"the socket's end", func(*http2.Framer) {}, 0, false, 0, io.EOF},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var wire bytes.Buffer
			tc.wire(http2.NewFramer(&wire, nil))
			var r io.Reader = &wire
			if tc.limit > 0 {
				r = &ReadBudget{R: &wire, Limit: tc.limit}
			}
			fr := http2.NewFramer(io.Discard, r)
			fr.SetMaxReadFrameSize(16384)
			fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
			_, err := fr.ReadFrame()
			if err == nil {
				t.Fatal("ReadFrame took it")
			}
			se, stream, end := ReadError(fr, err)
			if stream != tc.stream {
				t.Fatalf("stream error %v (%v, %v), want %v", stream, se, end, tc.stream)
			}
			if stream {
				if end != nil || se.StreamID != 1 {
					t.Fatalf("stream error %+v with %v", se, end)
				}
				return
			}
			var ce ConnError
			switch {
			case tc.code != 0 && (!errors.As(end, &ce) || ce.Code != tc.code || ce.Reason == ""):
				t.Fatalf("end %v, want a connection error %v with its reason", end, tc.code)
			case tc.code == 0 && end != tc.err:
				t.Fatalf("end %v, want %v", end, tc.err)
			}
		})
	}
}

// TestQueueGoAway: a connection error queues its GOAWAY, code and
// reason, any other error none.
func TestQueueGoAway(t *testing.T) {
	var cut []error
	q, _ := newTestQueue(&cut)
	if q.GoAway(7, io.EOF) || q.Len() != 0 {
		t.Fatal("a GOAWAY for the socket's end")
	}
	if !q.GoAway(7, &lostError{ConnError{http2.ErrCodeProtocol, "bad"}}) {
		t.Fatal("no GOAWAY for a connection error")
	}
	nc := &recConn{}
	if _, err := q.Flush(nc); err != nil {
		t.Fatal(err)
	}
	f, err := http2.NewFramer(nil, &nc.out).ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	ga, ok := f.(*http2.GoAwayFrame)
	if !ok || ga.LastStreamID != 7 || ga.ErrCode != http2.ErrCodeProtocol || string(ga.DebugData()) != "bad" {
		t.Fatalf("queued %v, want GOAWAY(7, PROTOCOL_ERROR, \"bad\")", f)
	}
}
