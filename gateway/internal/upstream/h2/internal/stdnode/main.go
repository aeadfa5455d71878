// Command stdnode is a WebSocket node built on Go's standard library alone,
// for the interop tests of package h2: net/http's server with cleartext
// HTTP/2 (prior knowledge) and extended CONNECT, which net/http enables
// only with GODEBUG=http2xconnect=1 in the environment at start. With
// -tls-cert and -tls-key it serves TLS instead, HTTP/2 and HTTP/1.1 by
// ALPN (net/http's ServeTLS), for the gateway's [pools.tls].
//
// It serves extended CONNECT requests with :protocol websocket (net/http
// gives r.Method "CONNECT" and the protocol as the ":protocol" header):
//
//	/echo    200 (with the first Sec-WebSocket-Protocol offered), then
//	         echoes the request body, flushing after each read
//	/deny    403 with a body
//	/fail    500 with a body
//	/reject  resets the stream without a response
//	/slow    as /ws, after 3s
//	/source  200, then sends data until the stream ends
//	/sink    200, then never reads the request body
//	/reset   200, then resets the stream after the first read
//	/ws      (and /ws/...) 200, then a WebSocket echo: each message from the client
//	         (masked frames) comes back unmasked, a ping gets its pong,
//	         a close its close (see ws.go)
//
// A GET of /healthz answers 200 (the gateway's health probe). Each
// response to a CONNECT carries X-Seen-Origin, X-Seen-Version and
// X-Seen-Key: the Origin, Sec-WebSocket-Version and Sec-WebSocket-Key it
// was sent. It prints "listening ADDR" once it accepts connections, and
// shuts down gracefully (GOAWAY) on SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	maxStreams := flag.Int("max-streams", 0, "SETTINGS_MAX_CONCURRENT_STREAMS (0: net/http's default)")
	streamBuf := flag.Int("stream-buffer", 0, "receive window per stream (0: net/http's default)")
	maxHeader := flag.Int("max-header-bytes", 0, "http.Server.MaxHeaderBytes, which sets SETTINGS_MAX_HEADER_LIST_SIZE (0: net/http's default)")
	certFile := flag.String("tls-cert", "", "PEM certificate file: serve TLS (ALPN h2, http/1.1) rather than cleartext")
	keyFile := flag.String("tls-key", "", "PEM key file of -tls-cert")
	flag.Parse()
	tlsOn := *certFile != "" || *keyFile != ""
	if tlsOn && (*certFile == "" || *keyFile == "") {
		log.Fatal("-tls-cert and -tls-key go together")
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true) // the gateway's health probe
	protocols.SetUnencryptedHTTP2(!tlsOn)
	protocols.SetHTTP2(tlsOn)
	srv := &http.Server{
		Handler:        http.HandlerFunc(serve),
		Protocols:      &protocols,
		MaxHeaderBytes: *maxHeader,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:      *maxStreams,
			MaxReceiveBufferPerStream: *streamBuf,
		},
	}
	done := make(chan struct{})
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		<-sig
		fmt.Println("shutting down")
		srv.Shutdown(context.Background())
		close(done)
	}()
	fmt.Println("listening", ln.Addr())
	run := func() error { return srv.Serve(ln) }
	if tlsOn {
		run = func() error { return srv.ServeTLS(ln, *certFile, *keyFile) }
	}
	if err := run(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
	<-done
}

func serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
		return // 200: the gateway's health probe
	}
	if r.Method != http.MethodConnect || r.Header.Get(":protocol") != "websocket" {
		http.Error(w, "extended CONNECT for websocket only", http.StatusBadRequest)
		return
	}
	h := w.Header()
	h.Set("X-Seen-Origin", r.Header.Get("Origin"))
	h.Set("X-Seen-Version", r.Header.Get("Sec-WebSocket-Version"))
	h.Set("X-Seen-Key", r.Header.Get("Sec-WebSocket-Key"))
	if p := r.Header.Get("Sec-WebSocket-Protocol"); p != "" {
		h.Set("Sec-WebSocket-Protocol", strings.TrimSpace(strings.Split(p, ",")[0]))
	}
	rc := http.NewResponseController(w)
	path := r.URL.Path
	if strings.HasPrefix(path, "/ws/") {
		path = "/ws" // /ws/anything is /ws, for routes by prefix
	}
	switch path {
	case "/deny":
		http.Error(w, "denied by the node", http.StatusForbidden)
		return
	case "/fail":
		http.Error(w, "the node failed", http.StatusInternalServerError)
		return
	case "/reject":
		panic(http.ErrAbortHandler) // RST_STREAM before any response
	case "/slow":
		time.Sleep(3 * time.Second) // an app slow to accept: auth, a database
		path = "/ws"
	case "/echo", "/source", "/sink", "/reset", "/ws":
	default:
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	switch path {
	case "/echo":
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				if rc.Flush() != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	case "/source":
		buf := []byte(strings.Repeat("s", 16<<10))
		for {
			if _, err := w.Write(buf); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
	case "/sink":
		<-r.Context().Done()
	case "/ws":
		serveWebSocket(r.Body, w, rc)
	case "/reset":
		io.ReadFull(r.Body, make([]byte, 1))
		panic(http.ErrAbortHandler)
	}
}
