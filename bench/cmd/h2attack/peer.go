package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// peer is one attacking client connection to the gateway's TLS listener
// (ALPN h2), written with x/net/http2's Framer: the attack writes frames
// in batches, and a reader reads everything the gateway sends, answering
// its SETTINGS and PINGs and giving back the connection's window, and
// counting responses, resets and GOAWAYs.
type peer struct {
	nc      net.Conn
	wmu     sync.Mutex // the Framer's write side, bw, henc, hbuf, nextID
	bw      *bufio.Writer
	cw      *countWriter
	fr      *http2.Framer
	henc    *hpack.Encoder
	hbuf    bytesBuffer
	nextID  uint32
	started time.Time

	ended chan uint32 // streams the gateway ended (END_STREAM or RST_STREAM)
	done  chan struct{}

	mu       sync.Mutex
	statuses map[int]int
	resets   map[http2.ErrCode]int
	goAway   *http2.ErrCode
	lasted   time.Duration // from dial to the connection's end
	sent     atomic.Int64  // bytes written to the socket
}

// dialPeer opens a TLS connection from `from` to addr offering h2 only,
// checks ALPN chose it, and sends the preface and an empty SETTINGS.
func dialPeer(addr string, from net.IP) (*peer, error) {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: from}}
	nc, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err != nil {
		return nil, err
	}
	if p := nc.ConnectionState().NegotiatedProtocol; p != "h2" {
		nc.Close()
		return nil, fmt.Errorf("ALPN chose %q, not h2", p)
	}
	p := &peer{
		nc: nc, nextID: 1, started: time.Now(),
		ended: make(chan uint32, 4096), done: make(chan struct{}),
		statuses: map[int]int{}, resets: map[http2.ErrCode]int{},
	}
	p.cw = &countWriter{w: nc}
	p.bw = bufio.NewWriterSize(p.cw, 64<<10)
	p.fr = http2.NewFramer(p.bw, bufio.NewReaderSize(nc, 64<<10))
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.henc = hpack.NewEncoder(&p.hbuf)
	err = p.batch(func() error {
		if _, err := p.bw.WriteString(http2.ClientPreface); err != nil {
			return err
		}
		return p.fr.WriteSettings()
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	go p.read()
	return p, nil
}

// batch runs write under the write lock and flushes, within 5 s.
func (p *peer) batch(write func() error) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	err := write()
	if err == nil {
		err = p.bw.Flush()
	}
	p.sent.Store(p.cw.n)
	return err
}

// headers writes a request's header block on a new stream (under wmu)
// and returns its identifier.
func (p *peer) headers(end bool, fields ...string) (uint32, error) {
	id := p.nextID
	p.nextID += 2
	p.hbuf.b = p.hbuf.b[:0]
	for i := 0; i+1 < len(fields); i += 2 {
		_ = p.henc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return id, p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.hbuf.b, EndHeaders: true, EndStream: end})
}

// webSocket writes an extended CONNECT for a WebSocket on path (under
// wmu).
func (p *peer) webSocket(path string) (uint32, error) {
	return p.headers(false, ":method", "CONNECT", ":protocol", "websocket", ":scheme", "https",
		":authority", "localhost", ":path", path, "sec-websocket-version", "13")
}

// slowPost writes a POST of a size-byte body on path and its first byte
// (under wmu).
func (p *peer) slowPost(path string, size int) (uint32, error) {
	id, err := p.headers(false, ":method", "POST", ":scheme", "https", ":authority", "localhost", ":path", path,
		"content-type", "application/octet-stream", "content-length", strconv.Itoa(size))
	if err == nil {
		err = p.fr.WriteData(id, false, []byte{'x'})
	}
	return id, err
}

func (p *peer) read() {
	defer func() {
		p.mu.Lock()
		p.lasted = time.Since(p.started)
		p.mu.Unlock()
		close(p.done)
		p.nc.Close()
	}()
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			status, _ := strconv.Atoi(f.PseudoValue("status"))
			p.mu.Lock()
			p.statuses[status]++
			p.mu.Unlock()
			if f.StreamEnded() {
				p.end(f.StreamID)
			}
		case *http2.DataFrame:
			if n := f.Header().Length; n > 0 {
				_ = p.batch(func() error { return p.fr.WriteWindowUpdate(0, n) })
			}
			if f.StreamEnded() {
				p.end(f.StreamID)
			}
		case *http2.RSTStreamFrame:
			p.mu.Lock()
			p.resets[f.ErrCode]++
			p.mu.Unlock()
			p.end(f.StreamID)
		case *http2.GoAwayFrame:
			code := f.ErrCode
			p.mu.Lock()
			p.goAway = &code
			p.mu.Unlock()
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = p.batch(p.fr.WriteSettingsAck)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				_ = p.batch(func() error { return p.fr.WritePing(true, data) })
			}
		}
	}
}

// end passes a stream the gateway ended to the attack, dropping it when
// the attack does not take them.
func (p *peer) end(id uint32) {
	select {
	case p.ended <- id:
	default:
	}
}

// status returns how many responses with code came.
func (p *peer) status(code int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statuses[code]
}

// waitStatus waits up to timeout until n responses with code came, or
// the connection ended.
func (p *peer) waitStatus(code, n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for p.status(code) < n {
		select {
		case <-p.done:
			return false
		default:
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// isDone reports whether the connection has ended.
func (p *peer) isDone() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// peersReport says what a set of peers got: how many were cut (the
// connection ended before the attack's end, at) and after how long, the
// GOAWAY codes, the responses and resets, and the bytes sent.
func peersReport(ps []*peer, at time.Time) string {
	cut := 0
	var lasted []time.Duration
	goAways := map[http2.ErrCode]int{}
	statuses := map[int]int{}
	resets := map[http2.ErrCode]int{}
	var sent int64
	for _, p := range ps {
		sent += p.sent.Load()
		p.mu.Lock()
		if p.isDone() && p.started.Add(p.lasted).Before(at) {
			cut++
			lasted = append(lasted, p.lasted)
		}
		if p.goAway != nil {
			goAways[*p.goAway]++
		}
		for k, v := range p.statuses {
			statuses[k] += v
		}
		for k, v := range p.resets {
			resets[k] += v
		}
		p.mu.Unlock()
	}
	s := fmt.Sprintf("%d of %d conns cut", cut, len(ps))
	if cut > 0 {
		s += fmt.Sprintf(" (%s after dialing, median)", fmtDur(median(lasted)))
	}
	s += fmt.Sprintf("; GOAWAY: %s; responses: %s; RST_STREAM: %s; sent %s", codes(goAways), statusCounts(statuses), codes(resets), fmtBytes(sent))
	return s
}

// statusCounts prints counts by status, "none" for none.
func statusCounts(m map[int]int) string {
	if len(m) == 0 {
		return "none"
	}
	s := ""
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%d x%d", k, m[k])
	}
	return s
}
