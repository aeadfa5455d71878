package h2serve_test

import (
	"testing"

	"golang.org/x/net/http2"

	"github.com/wsgate/wsgate/internal/h2serve"
)

// TestDrainReachesLaterConnections pins that Drain is sticky: a
// connection served after it (its preface still on the way when Drain
// ran, as in the gateway's shutdown) gets this side's SETTINGS, then at
// once GOAWAY(NO_ERROR) naming no stream, and a stream it opens is not
// served. GoAway, which the gateway called, reaches only the connections
// being served, so a late one was served as usual for the whole drain.
func TestDrainReachesLaterConnections(t *testing.T) {
	srv := &h2serve.Server{Handler: echo}
	addr := serve(t, srv)
	srv.Drain()
	c := dialRaw(t, addr, true)
	f, err := c.fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		t.Fatalf("first frame %v, want SETTINGS (RFC 9113 section 3.4)", f.Header())
	}
	f = c.until(t, "GOAWAY", func(f http2.Frame) bool {
		if h, ok := f.(*http2.MetaHeadersFrame); ok {
			t.Fatalf("stream %d answered on a connection served after Drain", h.StreamID)
		}
		_, ok := f.(*http2.GoAwayFrame)
		return ok
	})
	if g := f.(*http2.GoAwayFrame); g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 0 {
		t.Fatalf("GOAWAY %v, last stream %d; want NO_ERROR, 0", g.ErrCode, g.LastStreamID)
	}
	// A stream opened now is refused, or finds the connection closed
	// (having no stream, it closes at once).
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectBlock, EndHeaders: true})
	for range 100 {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok {
			t.Fatalf("stream %d answered %s after GOAWAY", h.StreamID, h.PseudoValue("status"))
		}
	}
}
