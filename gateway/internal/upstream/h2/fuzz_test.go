package h2

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// scriptConn is a net.Conn whose peer is a script: reads return the
// node's preface, then, once the client has written its first request
// (its third write), the script's bytes, then EOF. Writes are discarded.
type scriptConn struct {
	preface, script io.Reader
	mu              sync.Mutex
	writes          int
	gate, closed    chan struct{}
	closeOnce       sync.Once
}

func newScriptConn(preface, script []byte) *scriptConn {
	return &scriptConn{
		preface: bytes.NewReader(preface), script: bytes.NewReader(script),
		gate: make(chan struct{}), closed: make(chan struct{}),
	}
}

func (c *scriptConn) Read(p []byte) (int, error) {
	if n, _ := c.preface.Read(p); n > 0 {
		return n, nil
	}
	select {
	case <-c.gate:
	case <-c.closed:
		return 0, net.ErrClosed
	}
	return c.script.Read(p)
}

func (c *scriptConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writes++; c.writes == 3 {
		close(c.gate)
	}
	return len(p), nil
}

func (c *scriptConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

func (c *scriptConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *scriptConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *scriptConn) SetDeadline(t time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(t time.Time) error { return nil }

// frames builds a script with a Framer.
func frames(write func(fr *http2.Framer, enc func(fields ...string) []byte)) []byte {
	var out, hb bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	fr.AllowIllegalWrites = true
	henc := hpack.NewEncoder(&hb)
	enc := func(fields ...string) []byte {
		hb.Reset()
		for i := 0; i < len(fields); i += 2 {
			henc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return bytes.Clone(hb.Bytes())
	}
	write(fr, enc)
	return out.Bytes()
}

// FuzzNodeFrames feeds arbitrary bytes as the node's side of a connection
// with one stream waiting for its response: the client must neither panic
// nor hang, and must hold nothing once the connection is gone.
func FuzzNodeFrames(f *testing.F) {
	preface := frames(func(fr *http2.Framer, _ func(...string) []byte) {
		fr.WriteSettings(xconnect, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14})
	})
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":status", "200", "sec-websocket-protocol", "x"), EndHeaders: true})
		fr.WriteData(1, false, []byte("hello"))
		fr.WriteDataPadded(1, true, []byte("bye"), make([]byte, 10))
	}))
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		b := enc(":status", "403", "content-type", "text/plain")
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:2]})
		fr.WriteContinuation(1, true, b[2:])
		fr.WriteData(1, true, []byte("denied"))
		fr.WriteRSTStream(1, http2.ErrCodeNo)
	}))
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":status", "100"), EndHeaders: true})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":status", "200"), EndHeaders: true})
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30}, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		fr.WriteWindowUpdate(1, 1<<30)
		fr.WriteWindowUpdate(0, 1<<31-1)
		fr.WritePing(false, [8]byte{})
		fr.WriteGoAway(1, http2.ErrCodeNo, []byte("bye"))
		fr.WriteRawFrame(0xfa, 0xff, 3, []byte("?"))
	}))
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(":status", "200"), EndHeaders: true})
		fr.WriteData(1, false, make([]byte, 16000))
		fr.WriteData(3, false, []byte("idle"))
		fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: enc(":method", "GET"), EndHeaders: true})
	}))
	f.Add([]byte{0, 0, 4, 8, 0, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, script []byte) {
		nc := newScriptConn(preface, script)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := testHandshake(ctx, nc, Config{StreamWindow: 1 << 14, MaxHeaderBytes: 4096, MaxBody: 100})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s, _, err := c.OpenWebSocket(ctx, &Request{Authority: "n", Path: "/"})
			if err != nil || s == nil {
				return
			}
			s.Write([]byte("hi"))
			io.Copy(io.Discard, s)
			s.Close()
		}()
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("the connection did not end on EOF")
		}
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the stream did not end with the connection")
		}
		if st := c.Stats(); st != (Stats{}) {
			t.Fatalf("holds %+v after the end", st)
		}
		c.Close()
	})
}
