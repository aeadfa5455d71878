package h2

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/penalty"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// pingFlooder is a node on loopback that answers each extended CONNECT
// 200 and then, while flood is set, stops reading and sends PINGs until
// its connection is cut.
type pingFlooder struct {
	addr  string
	flood atomic.Bool
}

func startPingFlooder(t *testing.T) *pingFlooder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	n := &pingFlooder{addr: ln.Addr().String()}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go n.serve(nc)
		}
	}()
	return n
}

func (n *pingFlooder) serve(nc net.Conn) {
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(nc)
	if _, err := io.ReadFull(br, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(nc, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1})
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			hbuf.Reset()
			_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hbuf.Bytes(), EndHeaders: true})
			if n.flood.Load() {
				for i := range 10_000_000 {
					if fr.WritePing(false, [8]byte{byte(i), byte(i >> 8)}) != nil {
						return
					}
				}
				return
			}
		}
	}
}

// TestSetBacksOffAFloodingNode pins the set's back-off after a cut for
// flooding: a node that floods PINGs is cut (ENHANCE_YOUR_CALM), then
// Open fails at once with ErrBackoff and the node is not dialed; once
// the back-off has passed, the node (behaving now) is dialed again and
// takes the stream. The set's counts say so (FloodCuts, Backoff).
func TestSetBacksOffAFloodingNode(t *testing.T) {
	node := startPingFlooder(t)
	node.flood.Store(true)
	var dials atomic.Int32
	s := newSet(t, node.addr, 1, &dials)
	s.SetFloodBackoff(penalty.Policy{First: time.Second, Max: 2 * time.Second})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, _, err := s.Open(ctx, &Request{Authority: "node.test", Path: "/flood"})
	// The connection is cut for the flood; its stream ends, or, when the
	// cut came before Open saw the answer (a polled reader may read the
	// answer and the flood in one go), Open fails with the loss.
	if err != nil && !errors.Is(err, ErrConnLost) {
		t.Fatalf("open /flood: %v, want a stream or ErrConnLost", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().FloodCuts == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the flooding node's connection was not cut")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st != nil {
		if _, err := st.Read(make([]byte, 1)); !errors.Is(err, ErrConnLost) {
			t.Fatalf("the flooded stream read %v, want ErrConnLost", err)
		}
	}
	node.flood.Store(false)
	_, _, err = s.Open(context.Background(), &Request{Authority: "node.test", Path: "/again"})
	if s.Backoff() > 0 && !errors.Is(err, ErrBackoff) {
		// (Checked only while the back-off still runs: a loaded machine
		// may take longer than it between the cut and here.)
		t.Fatalf("open during the back-off: %v, want ErrBackoff", err)
	}
	if errors.Is(err, ErrBackoff) && dials.Load() != 1 {
		t.Fatalf("%d dials, want 1: the node was dialed during its back-off", dials.Load())
	}
	for s.Backoff() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the back-off did not end")
		}
		time.Sleep(5 * time.Millisecond)
	}
	st = setOpen(t, s, "/behaving")
	st.Close()
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d dials, want 2: the first, and one once the back-off passed", n)
	}
	if cuts := s.Stats().FloodCuts; cuts != 1 {
		t.Fatalf("%d cuts counted, want 1", cuts)
	}
}

// TestCutForFlood tells a connection's end for a flood from the others.
func TestCutForFlood(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&connLostError{connError{Code: http2.ErrCodeEnhanceYourCalm, Reason: "flood"}}, true},
		{connError{Code: http2.ErrCodeEnhanceYourCalm, Reason: "flood"}, true},
		{&connLostError{connError{Code: http2.ErrCodeProtocol, Reason: "bad"}}, false},
		{&connLostError{io.EOF}, false},
		{nil, false},
	} {
		if got := cutForFlood(c.err); got != c.want {
			t.Errorf("cutForFlood(%v) = %t, want %t", c.err, got, c.want)
		}
	}
}
