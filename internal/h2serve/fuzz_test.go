package h2serve_test

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/wsgate/wsgate/internal/h2serve"
)

// frames encodes what write writes with a Framer.
func frames(write func(fr *http2.Framer)) []byte {
	var b bytes.Buffer
	write(http2.NewFramer(&b, nil))
	return b.Bytes()
}

// FuzzServeConn feeds a server arbitrary bytes after a valid preface: it
// must neither panic nor hang, and the connection must end once the
// client is gone.
func FuzzServeConn(f *testing.F) {
	settings := frames(func(fr *http2.Framer) { _ = fr.WriteSettings() })
	f.Add(settings)
	f.Add([]byte{})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(frames(func(fr *http2.Framer) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1}, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectBlock, EndHeaders: true})
		_ = fr.WriteData(1, false, []byte("hello"))
		_ = fr.WriteWindowUpdate(1, 10)
		_ = fr.WriteWindowUpdate(0, 10)
		_ = fr.WritePing(false, [8]byte{1})
		_ = fr.WriteData(1, true, []byte("bye"))
	}))
	f.Add(frames(func(fr *http2.Framer) {
		_ = fr.WriteSettings()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: connectBlock[:5]})
		_ = fr.WriteContinuation(1, true, connectBlock[5:])
		_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: connectBlock, EndHeaders: true, EndStream: true})
		_ = fr.WriteGoAway(3, http2.ErrCodeNo, nil)
	}))
	f.Add(frames(func(fr *http2.Framer) {
		_ = fr.WriteSettings()
		_ = fr.WriteRawFrame(0x42, 0xff, 7, []byte("unknown type"))
		_ = fr.WritePriority(9, http2.PriorityParam{StreamDep: 9})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x3f, 0xe1, 0x1f}, EndHeaders: true})
	}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 0 && data[0]&1 == 1 {
			// Half the inputs get past the first-frame check, so that
			// mutations reach the handling of every other frame.
			data = append(append([]byte(nil), settings...), data[1:]...)
		}
		srv := &h2serve.Server{Handler: echo, WriteTimeout: time.Second, MaxConcurrentStreams: 8}
		client, server := net.Pipe()
		served := make(chan error, 1)
		go func() { served <- srv.ServeConn(server) }()
		drained := make(chan struct{})
		go func() { _, _ = io.Copy(io.Discard, client); close(drained) }()
		_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = client.Write(data)
		_ = client.Close()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Fatal("ServeConn did not return after the client left")
		}
		<-drained
		if n := srv.Stats().Streams; n != 0 {
			t.Fatalf("%d streams left", n)
		}
	})
}
