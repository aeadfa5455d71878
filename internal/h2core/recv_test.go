package h2core

import (
	"errors"
	"io"
	"net"
	"testing"

	"golang.org/x/net/http2"
)

// TestCheckData pins the stream errors of DATA both roles answer alike:
// beyond the stream's window FLOW_CONTROL_ERROR (a stream error, not the
// connection's), after the peer's END_STREAM STREAM_CLOSED, off the
// content-length PROTOCOL_ERROR.
func TestCheckData(t *testing.T) {
	tests := []struct {
		name        string
		window      uint32
		bodyLen     int64
		taken       int // DATA taken before, in one frame
		remoteEnded bool
		n           uint32 // the frame's length, padding included
		size        int
		end         bool
		want        http2.ErrCode
	}{
		{name: "within the window", window: 100, bodyLen: -1, n: 100, size: 100},
		{name: "one past the window", window: 100, bodyLen: -1, n: 101, size: 101, want: http2.ErrCodeFlowControl},
		{name: "padding counts", window: 100, bodyLen: -1, n: 101, size: 10, want: http2.ErrCodeFlowControl},
		{name: "past what is left", window: 100, bodyLen: -1, taken: 60, n: 41, size: 41, want: http2.ErrCodeFlowControl},
		{name: "after END_STREAM", window: 100, bodyLen: -1, remoteEnded: true, n: 1, size: 1, want: http2.ErrCodeStreamClosed},
		{name: "empty after END_STREAM", window: 100, bodyLen: -1, remoteEnded: true, end: true, want: http2.ErrCodeStreamClosed},
		{name: "content-length met", window: 100, bodyLen: 10, n: 10, size: 10, end: true},
		{name: "content-length met in two", window: 100, bodyLen: 10, taken: 4, n: 6, size: 6, end: true},
		{name: "beyond the content-length", window: 100, bodyLen: 10, n: 11, size: 11, want: http2.ErrCodeProtocol},
		{name: "ended short of the content-length", window: 100, bodyLen: 10, n: 9, size: 9, end: true, want: http2.ErrCodeProtocol},
		{name: "short of it, not ended", window: 100, bodyLen: 10, n: 9, size: 9},
		{name: "padding is not body", window: 100, bodyLen: 10, n: 50, size: 10, end: true},
		{name: "the window first", window: 10, bodyLen: 5, n: 11, size: 11, want: http2.ErrCodeFlowControl},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Stream
			s.Init(tt.window, tt.bodyLen)
			if tt.taken > 0 {
				s.TakeData(uint32(tt.taken), make([]byte, tt.taken), false, false)
			}
			s.RemoteEnded = tt.remoteEnded
			if got := s.CheckData(tt.n, tt.size, tt.end); got != tt.want {
				t.Fatalf("CheckData(%d, %d, %v) = %v, want %v", tt.n, tt.size, tt.end, got, tt.want)
			}
		})
	}
}

// TestReceiveWindowCredit follows the receive window through DATA, reads
// and a close: consumed bytes (padding on arrival, data once read, or
// once discarded) go back by WINDOW_UPDATE in updates of half a window,
// none after the peer's END_STREAM.
func TestReceiveWindowCredit(t *testing.T) {
	var s Stream
	s.Init(100, -1)
	type step struct {
		name    string
		do      func() uint32 // returns the WINDOW_UPDATE increment
		wantInc uint32
		window  int32 // after the step, credit given back
	}
	p := make([]byte, 100)
	read := func(n int) func() uint32 {
		return func() uint32 { _, inc, _, _ := s.Read(p[:n]); return inc }
	}
	data := func(n uint32, size int, end bool) func() uint32 {
		return func() uint32 { _, inc := s.TakeData(n, make([]byte, size), end, false); return inc }
	}
	steps := []step{
		{"40 bytes", data(40, 40, false), 0, 60},
		{"read 30", read(30), 0, 60},
		{"padding 20 consumed on arrival: 50 owed", data(30, 10, false), 50, 80},
		{"read the 20 left", read(20), 0, 80},
		{"29 of padding: 49 owed", data(29, 0, false), 0, 51},
		{"one more byte of padding makes half", data(1, 0, false), 50, 100},
		{"ended with 10 bytes", data(10, 10, true), 0, 90},
		{"read after END_STREAM gives nothing back", read(10), 0, 90},
	}
	for _, st := range steps {
		if inc := st.do(); inc != st.wantInc {
			t.Fatalf("%s: WINDOW_UPDATE of %d, want %d", st.name, inc, st.wantInc)
		}
		if s.window != st.window {
			t.Fatalf("%s: window %d, want %d", st.name, s.window, st.window)
		}
	}
	if _, _, err, _ := s.Read(p); err != io.EOF {
		t.Fatalf("after END_STREAM: %v, want io.EOF", err)
	}
}

// TestCloseReadGivesWindowBack pins what a close of the read side does:
// the buffered bytes are dropped and given back, and DATA after it is
// discarded and given back as it comes.
func TestCloseReadGivesWindowBack(t *testing.T) {
	var s Stream
	s.Init(100, -1)
	s.TakeData(30, make([]byte, 30), false, false)
	dropped, inc, first := s.CloseRead()
	if dropped != 30 || inc != 30 || !first || s.Buffered() != 0 || s.BufCap() != 0 {
		t.Fatalf("CloseRead = %d, %d, %v (buffered %d, cap %d); want 30, 30, true and no buffer", dropped, inc, first, s.Buffered(), s.BufCap())
	}
	if buffered, inc := s.TakeData(50, make([]byte, 50), false, false); buffered != 0 || inc != 50 {
		t.Fatalf("DATA after CloseRead: buffered %d, WINDOW_UPDATE %d; want 0 and 50", buffered, inc)
	}
	if _, _, first := s.CloseRead(); first {
		t.Fatal("a second CloseRead says it was the first")
	}
	if _, _, err, _ := s.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after CloseRead: %v, want net.ErrClosed", err)
	}
}

// TestReadBeforeError pins the order of what Read returns: what was
// received comes first, then io.EOF if the peer had ended its side
// (whatever ended the stream after), else the stream's error.
func TestReadBeforeError(t *testing.T) {
	reset := errors.New("reset")
	tests := []struct {
		name    string
		end     bool  // the peer's END_STREAM came with the data
		err     error // what ended the stream after
		wantEnd error
	}{
		{name: "reset after data", err: reset, wantEnd: reset},
		{name: "reset after END_STREAM", end: true, err: reset, wantEnd: io.EOF},
		{name: "END_STREAM alone", end: true, wantEnd: io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Stream
			s.Init(100, -1)
			s.TakeData(5, []byte("close"), tt.end, false)
			if tt.err != nil {
				s.Finish(tt.err)
			}
			if !s.Readable() {
				t.Fatal("not readable with bytes buffered")
			}
			p := make([]byte, 10)
			n, _, err, ready := s.Read(p)
			if string(p[:n]) != "close" || err != nil || !ready {
				t.Fatalf("first Read = %q, %v, %v; want the bytes received", p[:n], err, ready)
			}
			if _, _, err, ready := s.Read(p); err != tt.wantEnd || !ready {
				t.Fatalf("second Read: %v, %v; want %v", err, ready, tt.wantEnd)
			}
		})
	}
	var s Stream
	s.Init(100, -1)
	if n, _, err, ready := s.Read(make([]byte, 1)); n != 0 || err != nil || ready || s.Readable() {
		t.Fatalf("open and empty: Read = %d, %v, %v; want it to wait", n, err, ready)
	}
}

// TestReceiveBufferKeptOrReleased pins when the receive buffer is kept
// once read empty: a small one is, unless the stream is read by one that
// holds none while it waits (Release); a large one never is.
func TestReceiveBufferKeptOrReleased(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		release bool
		kept    bool
	}{
		{name: "small", size: 100, kept: true},
		{name: "small, released", size: 100, release: true},
		{name: "large", size: KeepBufCap + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Stream
			s.Init(1<<20, -1)
			if tt.release {
				s.Release()
			}
			s.TakeData(uint32(tt.size), make([]byte, tt.size), false, false)
			s.Read(make([]byte, tt.size))
			if kept := s.BufCap() > 0; kept != tt.kept {
				t.Fatalf("buffer of %d bytes kept: %v, want %v", tt.size, kept, tt.kept)
			}
		})
	}
	// The unread part moves to the front rather than the buffer grow.
	var s Stream
	s.Init(100, -1)
	s.TakeData(60, make([]byte, 60), false, false)
	s.Read(make([]byte, 50))
	c := s.BufCap()
	s.TakeData(40, make([]byte, 40), false, false)
	if s.BufCap() != c || s.Buffered() != 50 {
		t.Fatalf("buffer grew from %d to %d (buffered %d) while it had room at its front", c, s.BufCap(), s.Buffered())
	}
}

// TestConnRecv pins the connection's receive window: DATA past it is
// refused (a connection FLOW_CONTROL_ERROR) and takes nothing; what DATA
// took goes back once half the window is owed.
func TestConnRecv(t *testing.T) {
	var c ConnRecv
	c.Init(100)
	steps := []struct {
		n       uint32
		ok      bool
		credit  uint32
		leftAft int64
	}{
		{49, true, 0, 51},
		{52, false, 0, 51},
		{1, true, 50, 100},
		{100, true, 100, 100},
		{101, false, 0, 100},
	}
	for i, st := range steps {
		if ok := c.Take(st.n); ok != st.ok {
			t.Fatalf("step %d: Take(%d) = %v, want %v", i, st.n, ok, st.ok)
		}
		if inc := c.Credit(); inc != st.credit {
			t.Fatalf("step %d: WINDOW_UPDATE of %d, want %d", i, inc, st.credit)
		}
		if c.window != st.leftAft {
			t.Fatalf("step %d: window %d, want %d", i, c.window, st.leftAft)
		}
	}
}
