package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/wsgate/wsgate/internal/h2client"
)

// victimTimeout bounds one victim's round trip: past it, the operation
// counts as failed.
const victimTimeout = 5 * time.Second

// victimIP is the victims' source address, apart from the attacker's.
var victimIP = net.IPv4(127, 0, 0, 1)

// victimClient is one victim: it does one round trip, or fails; after a
// failure it is closed and dialed again.
type victimClient interface {
	roundTrip(i int) error
	close()
}

// victims run round trips until stopped, one goroutine each, -interval
// apart, each on a TLS connection of its own with ALPN h2. Their figures
// are kept apart for the baseline period and the attack.
type victims struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex
	phase     int // 0: baseline, 1: the attack, 2: after
	rtts      [2][]time.Duration
	sent, ok  [2]int
	firstFail [2]string
}

// startVictims dials n victims with dial (each must succeed once) and
// starts their round trips.
func startVictims(ctx context.Context, n int, interval time.Duration, dial func(i int) (victimClient, error)) (*victims, error) {
	v := &victims{stop: make(chan struct{})}
	cs := make([]victimClient, n)
	for i := range n {
		c, err := dial(i)
		if err != nil {
			for _, c := range cs[:i] {
				c.close()
			}
			return nil, fmt.Errorf("victim %d: %w", i, err)
		}
		cs[i] = c
	}
	for i, c := range cs {
		v.wg.Add(1)
		go v.loop(ctx, i, c, interval, dial)
	}
	return v, nil
}

func (v *victims) loop(ctx context.Context, i int, c victimClient, interval time.Duration, dial func(int) (victimClient, error)) {
	defer v.wg.Done()
	defer func() {
		if c != nil {
			c.close()
		}
	}()
	pause := time.NewTimer(0)
	defer pause.Stop()
	for k := 0; ; k++ {
		select {
		case <-v.stop:
			return
		case <-ctx.Done():
			return
		case <-pause.C:
		}
		var err error
		start := time.Now()
		if c == nil {
			c, err = dial(i)
		}
		if err == nil {
			err = c.roundTrip(k)
		}
		rtt := time.Since(start)
		v.mu.Lock()
		if p := v.phase; p < 2 {
			v.sent[p]++
			if err == nil {
				v.ok[p]++
				v.rtts[p] = append(v.rtts[p], rtt)
			} else if v.firstFail[p] == "" {
				v.firstFail[p] = err.Error()
			}
		}
		v.mu.Unlock()
		if err != nil && c != nil {
			c.close()
			c = nil
		}
		pause.Reset(interval)
	}
}

// next ends the current period and returns its figures.
func (v *victims) next() victimStats {
	v.mu.Lock()
	defer v.mu.Unlock()
	p := v.phase
	v.phase++
	if p > 1 {
		return victimStats{}
	}
	return statsOf(v.rtts[p], v.sent[p], v.ok[p], v.firstFail[p])
}

// statsOf reduces a period's round trips.
func statsOf(rtts []time.Duration, sent, ok int, firstFail string) victimStats {
	s := victimStats{sent: sent, ok: ok, firstFail: firstFail}
	if len(rtts) == 0 {
		return s
	}
	r := slices.Clone(rtts)
	slices.Sort(r)
	q := func(p float64) time.Duration { return r[int(float64(len(r)-1)*p)] }
	s.p50, s.p99 = q(.5), q(.99)
	return s
}

// end stops the victims and waits for them.
func (v *victims) end() {
	close(v.stop)
	v.wg.Wait()
}

// victimTLS is a victim's TLS: h2 only, from victimIP.
func victimTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true, ServerName: "localhost", NextProtos: []string{"h2"}}
}

// wsVictim is a WebSocket echo client, a stream of its own HTTP/2
// connection.
type wsVictim struct {
	hc *h2client.Conn
	ws *websocket.Conn
}

// dialWSVictim opens a TLS connection to addr, HTTP/2 on it, and a
// WebSocket on path.
func dialWSVictim(addr, path string) (victimClient, error) {
	d := &net.Dialer{Timeout: victimTimeout, LocalAddr: &net.TCPAddr{IP: victimIP}}
	tc, err := tls.DialWithDialer(d, "tcp", addr, victimTLS())
	if err != nil {
		return nil, err
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		tc.Close()
		return nil, fmt.Errorf("ALPN chose %q, not h2", p)
	}
	hc, err := h2client.Handshake(tc, victimTimeout)
	if err != nil {
		return nil, err
	}
	ws, _, err := hc.Dialer(victimTimeout).Dial("ws://localhost"+path, nil)
	if err != nil {
		hc.Close()
		return nil, err
	}
	return &wsVictim{hc: hc, ws: ws}, nil
}

func (w *wsVictim) roundTrip(i int) error {
	msg := fmt.Sprintf("victim message %d, a few dozen bytes long", i)
	_ = w.ws.SetReadDeadline(time.Now().Add(victimTimeout))
	if err := w.ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		return err
	}
	_, got, err := w.ws.ReadMessage()
	if err != nil {
		return err
	}
	if string(got) != msg {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}

func (w *wsVictim) close() {
	w.ws.Close()
	w.hc.Close()
}

// getVictim does plain GETs over an HTTP/2 connection of its own (Go's
// net/http client).
type getVictim struct {
	url string
	tr  *http.Transport
	hc  *http.Client
}

func dialGetVictim(addr, path string) (victimClient, error) {
	d := &net.Dialer{Timeout: victimTimeout, LocalAddr: &net.TCPAddr{IP: victimIP}}
	tr := &http.Transport{DialContext: d.DialContext, TLSClientConfig: victimTLS(), ForceAttemptHTTP2: true, MaxConnsPerHost: 1}
	g := &getVictim{url: "https://" + addr + path, tr: tr, hc: &http.Client{Transport: tr, Timeout: victimTimeout}}
	if err := g.roundTrip(0); err != nil {
		g.close()
		return nil, err
	}
	return g, nil
}

func (g *getVictim) roundTrip(int) error {
	resp, err := g.hc.Get(g.url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.ProtoMajor != 2 {
		return errors.New("the GET went over " + resp.Proto + ", not HTTP/2")
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET: %s", resp.Status)
	}
	return nil
}

func (g *getVictim) close() { g.tr.CloseIdleConnections() }
