package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/wsgate/wsgate/bench/internal/probe"
	"github.com/wsgate/wsgate/bench/internal/stack"
	"github.com/wsgate/wsgate/internal/h2client"
)

// The HTTP/2 rows: WebSockets as extended CONNECT streams (RFC 8441) of
// TLS connections whose ALPN chose h2, through wsgate (gateway.tls.h2)
// and HAProxy (bind ... alpn h2,http/1.1), beside the HTTP/1.1 rows
// (nginx, and wsgate), where each WebSocket is a TLS connection of its
// own. Measured for each:
//
//   - idle memory per WebSocket: the proxy's RSS growth per WebSocket,
//     with -h2-conns connections of -h2-streams streams each open and
//     silent after their 200 (HTTP/1.1: the idle measure above);
//   - WebSocket opens per second: -h2-workers clients opening a
//     WebSocket, reading its answer and ending it, for -duration, over
//     one HTTP/2 connection (HTTP/1.1: each on a new TLS connection, a
//     full handshake, as a browser without HTTP/2 WebSockets must), with
//     the proxy's CPU time per open.

// h2ClientTLS is clientTLS offering h2 only.
func h2ClientTLS() *tls.Config {
	c := clientTLS()
	c.NextProtos = []string{"h2"}
	return c
}

// startHAProxy starts HAProxy on one thread with a TLS listener offering
// h2 and http/1.1 in front of the relay (bench's HAProxy config, its bind
// line with ssl), and waits until it proxies a request.
func startHAProxy(bin, dir, relay, certFile, keyFile string) (*proxy, error) {
	addr, err := stack.FreeAddr()
	if err != nil {
		return nil, err
	}
	hdir := filepath.Join(dir, "haproxy-tls")
	if err := os.MkdirAll(hdir, 0o755); err != nil {
		return nil, err
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	pem := filepath.Join(hdir, "server.pem") // HAProxy reads certificate and key from one file
	if err := os.WriteFile(pem, append(cert, key...), 0o600); err != nil {
		return nil, err
	}
	cfg := strings.Replace(stack.HAProxyConfig(addr, []string{relay}), "bind "+addr,
		fmt.Sprintf("bind %s ssl crt %s alpn h2,http/1.1", addr, pem), 1)
	path := filepath.Join(hdir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	p, err := stack.Start("haproxy-tls", filepath.Join(dir, "haproxy-tls.log"), bin, "-db", "-f", path)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	if err := waitUpWith(p, hc, "https://"+addr+"/info"); err != nil {
		p.Stop(time.Second)
		return nil, err
	}
	return &proxy{name: "haproxy", addr: addr, proc: p, pids: func() ([]int, error) { return []int{p.Pid()}, nil }}, nil
}

// h2Dial opens a TLS connection to addr, checks that ALPN chose h2 and
// starts HTTP/2 on it.
func h2Dial(addr string) (*h2client.Conn, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, h2ClientTLS())
	if err != nil {
		return nil, err
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		return nil, fmt.Errorf("ALPN chose %q, not h2", p)
	}
	return h2client.Handshake(c, 10*time.Second)
}

// wsHeader are the fields of every extended CONNECT.
var wsHeader = http.Header{"Sec-Websocket-Version": {"13"}}

// h2Open opens one WebSocket stream on hc and waits for its 200.
func h2Open(hc *h2client.Conn, path string) (*h2client.Stream, error) {
	s, err := hc.Open(path, wsHeader)
	if err != nil {
		return nil, err
	}
	status, _, body, err := s.Response(10 * time.Second)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		_ = s.Abort()
		return nil, fmt.Errorf("%s: status %d %q", path, status, body)
	}
	return s, nil
}

// idleStreams opens conns HTTP/2 connections to p with streams WebSockets
// each, silent after their 200, and returns p's RSS growth per WebSocket,
// read once the relay counts them all and two seconds have passed; then
// closes them and waits until the relay holds none.
func idleStreams(ctx context.Context, p *proxy, relay *stack.Relay, conns, streams int) (float64, error) {
	pids, err := p.pids()
	if err != nil {
		return 0, err
	}
	before, err := probe.RSSSum(pids)
	if err != nil {
		return 0, err
	}
	hcs := make([]*h2client.Conn, conns)
	defer func() {
		for _, hc := range hcs {
			if hc != nil {
				_ = hc.Close()
			}
		}
		waitRelay(relay, func(n int) bool { return n == 0 })
	}()
	errs := make(chan error, conns)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc, err := h2Dial(p.addr)
			if err != nil {
				errs <- err
				return
			}
			hcs[i] = hc
			for k := 0; k < streams && ctx.Err() == nil; k++ {
				if _, err := h2Open(hc, fmt.Sprintf("/room/h2idle-%s-%d", p.name, (i*streams+k)%100)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	n := conns * streams
	if !waitRelay(relay, func(c int) bool { return c >= n }) {
		return 0, errors.New("the relay never counted every WebSocket")
	}
	time.Sleep(2 * time.Second) // the handshakes' garbage and buffers settle
	after, err := probe.RSSSum(pids)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}

// streamOpens runs workers clients opening WebSockets over one HTTP/2
// connection to p for dur, each reading its 200 and ending its stream,
// and returns the opens per second and p's CPU time per open.
func streamOpens(ctx context.Context, p *proxy, workers int, dur time.Duration) (float64, time.Duration, error) {
	hc, err := h2Dial(p.addr)
	if err != nil {
		return 0, 0, err
	}
	defer hc.Close()
	return rate(ctx, p, workers, dur, "opens", func(w int) func() error {
		return func() error {
			s, err := h2Open(hc, fmt.Sprintf("/room/h2open-%s-%d", p.name, w))
			if err != nil {
				return err
			}
			_ = s.Abort() // RST_STREAM: the tunnel ends at once
			return nil
		}
	})
}

// wssOpens is streamOpens over HTTP/1.1: each WebSocket on a TLS
// connection of its own, a full handshake, then closed.
func wssOpens(ctx context.Context, p *proxy, workers int, dur time.Duration) (float64, time.Duration, error) {
	return rate(ctx, p, workers, dur, "opens", func(w int) func() error {
		return func() error {
			c, err := wssOpen(p.addr, fmt.Sprintf("/room/h1open-%s-%d", p.name, w))
			if err != nil {
				return err
			}
			_ = c.Close()
			return nil
		}
	})
}
