package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"golang.org/x/net/http2"

	"github.com/wsgate/wsgate/internal/testca"
)

// setup is what every run shares: the gateway binary, the directory and
// the TLS listener's certificate.
type setup struct {
	o                 options
	bin, dir          string
	certFile, keyFile string
}

func run(ctx context.Context, o options, out io.Writer) error {
	s := setup{o: o, bin: o.gateway, dir: o.dir}
	if s.dir == "" {
		d, err := os.MkdirTemp("", "wsgate-h2attack-")
		if err != nil {
			return err
		}
		s.dir = d
	} else if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	if s.bin == "" {
		b, err := buildGateway(ctx, s.dir)
		if err != nil {
			return err
		}
		s.bin = b
	}
	ca, err := testca.New("h2attack CA")
	if err != nil {
		return err
	}
	leaf, err := ca.Server("localhost", "127.0.0.1")
	if err != nil {
		return err
	}
	if s.certFile, s.keyFile, err = leaf.WriteFiles(s.dir, "server"); err != nil {
		return err
	}
	// The attacker's address must be one this machine can send from.
	if ln, err := net.Listen("tcp", net.JoinHostPort(o.attacker.String(), "0")); err != nil {
		return fmt.Errorf("-attacker %s: %w", o.attacker, err)
	} else {
		ln.Close()
	}
	fmt.Fprintf(out, "wsgate %s; %d victims, one TLS connection (h2) each, a round trip every %v; baseline %v, attack %v, %d runs each (medians); attacker from %s; logs in %s; load average at the start %s\n\n",
		s.bin, o.victims, o.interval, o.baseline, o.duration, o.reps, o.attacker, s.dir, loadAverage())
	var sums []summary
	var all []result
	for _, a := range o.attacks {
		var runs []result
		for r := range o.reps {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res, err := s.runOnce(ctx, a, r)
			if err != nil {
				return fmt.Errorf("attack %s, run %d: %w", a, r+1, err)
			}
			fmt.Fprintf(os.Stderr, "%s run %d: p99 %s → %s, delivered %.1f %%, RSS peak %s; %s\n",
				a, r+1, fmtDur(res.base.p99), fmtDur(res.under.p99), res.under.delivered(), fmtBytes(res.rssPeak), res.got)
			runs = append(runs, res)
		}
		sums = append(sums, summarize(runs))
		all = append(all, runs...)
	}
	writeTable(out, sums)
	fmt.Fprintf(out, "\nload average at the end %s\n\nEach run:\n", loadAverage())
	writeRuns(out, all)
	return nil
}

// attackEnv is what an attack works with.
type attackEnv struct {
	o     options
	gw    *gateway
	reset *echoNode
	flood *floodNode
	// begin marks the attack's start, once its preparation is done, and
	// returns when it must end.
	begin func() (until time.Time, err error)
}

// runOnce starts a gateway and its nodes, runs the victims for the
// baseline, then the attack, and measures.
func (s setup) runOnce(ctx context.Context, attack string, rep int) (result, error) {
	res := result{attack: attack}
	name := fmt.Sprintf("wsgate-%s-%d", attack, rep+1)
	vs, err := startVictimSide(s.o, filepath.Join(s.dir, name+"-victims.log"))
	if err != nil {
		return res, err
	}
	defer vs.stop()
	reset, err := startEchoNode()
	if err != nil {
		return res, err
	}
	defer reset.close()
	flood, err := startFloodNode(attack == "18")
	if err != nil {
		return res, err
	}
	defer flood.close()
	gw, err := startGateway(s.bin, s.dir, name, s.certFile, s.keyFile, gatewayNodes{echo: vs.node, reset: reset.addr(), flood: flood.addr()})
	if err != nil {
		return res, err
	}
	defer gw.stop()

	kind := "ws"
	if attack == "15" {
		kind = "get"
	}
	if err := vs.dial(kind, gw.tls); err != nil {
		return res, err
	}
	if err := sleep(ctx, s.o.baseline); err != nil {
		return res, err
	}

	var m *meter
	var until time.Time
	env := &attackEnv{o: s.o, gw: gw, reset: reset, flood: flood}
	env.begin = func() (time.Time, error) {
		if m != nil {
			return until, nil
		}
		base, err := vs.next()
		if err != nil {
			return time.Time{}, err
		}
		res.base = base.stats()
		if m, err = startMeter(gw); err != nil {
			return time.Time{}, err
		}
		until = time.Now().Add(s.o.duration)
		return until, nil
	}
	var got string
	switch attack {
	case "14", "18":
		got, err = nodeFlood(ctx, env)
	case "15":
		got, err = slowBodies(ctx, env)
	case "16", "17":
		got, err = controlFlood(ctx, env, attack == "16")
	case "19":
		got, err = rapidReset(ctx, env)
	default:
		err = fmt.Errorf("no attack %q", attack)
	}
	if m == nil && err == nil {
		err = errors.New("the attack never began")
	}
	if err != nil {
		return res, err
	}
	if err := m.end(gw, &res); err != nil {
		return res, err
	}
	under, err := vs.next()
	if err != nil {
		return res, err
	}
	res.under = under.stats()
	res.got = got
	if attack == "15" {
		res.got += fmt.Sprintf("; the node got %d POSTs", under.Posts)
	}
	select {
	case <-gw.proc.Done():
		res.got += fmt.Sprintf("; THE GATEWAY EXITED (log %s)", filepath.Base(gw.log))
	default:
	}
	return res, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// dialAttackerWS opens a WebSocket through the gateway's plain listener
// from the attacker's address.
func dialAttackerWS(e *attackEnv, path string) (*websocket.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: e.o.attacker}}
	wd := websocket.Dialer{NetDial: d.Dial, HandshakeTimeout: 5 * time.Second}
	c, _, err := wd.Dial("ws://"+e.gw.addr+path, nil)
	return c, err
}

// nodeFlood is 14 and 18: the flood pool's node floods PINGs (14) or
// SETTINGS (18) once a client's first message comes, and stops reading.
// The attacker's clients (1 for 14, -node-streams for 18, streams of the
// node's one connection) open, one sends a message, and all wait for
// their end; then they come back, until the attack's end.
func nodeFlood(ctx context.Context, e *attackEnv) (string, error) {
	streams := 1
	if e.flood.settings {
		streams = e.o.nodeStreams
	}
	until, err := e.begin()
	if err != nil {
		return "", err
	}
	e.flood.until.Store(until.UnixNano())
	closes := map[int]int{}
	refused, rounds := 0, 0
	var firstRefusal error
	for time.Now().Before(until) && ctx.Err() == nil {
		rounds++
		cs := make([]*websocket.Conn, streams)
		var wg sync.WaitGroup
		var next atomic.Int64
		errs := make([]error, streams)
		for range min(streams, 8) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < streams; i = int(next.Add(1)) - 1 {
					cs[i], errs[i] = dialAttackerWS(e, fmt.Sprintf("/flood/%d", i))
				}
			}()
		}
		wg.Wait()
		var open []*websocket.Conn
		for i, c := range cs {
			if errs[i] != nil {
				refused++
				if firstRefusal == nil {
					firstRefusal = errs[i]
				}
				continue
			}
			open = append(open, c)
		}
		if len(open) == 0 {
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return "", err
			}
			continue
		}
		_ = open[len(open)-1].WriteMessage(websocket.TextMessage, []byte("go"))
		// The round ends at its first close: the others of a lost node
		// connection get theirs spread over drain_window; the attacker
		// does not wait for them, it closes them and comes back.
		first := make(chan int, len(open))
		for _, c := range open {
			go func() {
				_ = c.SetReadDeadline(until.Add(2 * time.Second))
				for {
					if _, _, err := c.ReadMessage(); err != nil {
						code := 0
						var ce *websocket.CloseError
						if errors.As(err, &ce) {
							code = ce.Code
						}
						first <- code
						return
					}
				}
			}()
		}
		code := <-first
		closes[code]++
		for _, c := range open {
			c.Close()
		}
		for range len(open) - 1 {
			<-first
		}
	}
	s := e.flood.report()
	s += fmt.Sprintf("; %d rounds of %d clients, each round's first close: %s", rounds, streams, closeCounts(closes))
	if refused > 0 {
		s += fmt.Sprintf("; %d of their handshakes failed (first: %v)", refused, firstRefusal)
	}
	return s, nil
}

// closeCounts prints WebSocket close codes by count (0: no close frame).
func closeCounts(m map[int]int) string {
	if len(m) == 0 {
		return "none"
	}
	s := ""
	for _, code := range slices.Sorted(maps.Keys(m)) {
		n := m[code]
		if s != "" {
			s += ", "
		}
		if code == 0 {
			s += fmt.Sprintf("no close frame x%d", n)
		} else {
			s += fmt.Sprintf("%d x%d", code, n)
		}
	}
	return s
}

// slowBodies is 15: 6 connections of 100 POST streams, each sending 1
// byte of a 100 KB body; a stream the gateway ends is replaced, so that
// 100 stay open on each connection until the attack's end.
func slowBodies(ctx context.Context, e *attackEnv) (string, error) {
	const conns, streams, size = 6, 100, 100_000
	until, err := e.begin()
	if err != nil {
		return "", err
	}
	ps, err := dialPeers(e, conns)
	if err != nil {
		return "", err
	}
	defer closePeers(ps)
	var opened atomic.Int64
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			open := func(n int) bool {
				return p.batch(func() error {
					for range n {
						if _, err := p.slowPost("/upload", size); err != nil {
							return err
						}
						opened.Add(1)
					}
					return nil
				}) == nil
			}
			if !open(streams) {
				return
			}
			t := time.NewTimer(time.Until(until))
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					return
				case <-p.done:
					return
				case <-p.ended:
					if !open(1) {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	at := time.Now()
	return fmt.Sprintf("%d POST streams opened; %s", opened.Load(), peersReport(ps, at)), nil
}

// dialPeers opens n attacking connections.
func dialPeers(e *attackEnv, n int) ([]*peer, error) {
	var ps []*peer
	for range n {
		p, err := dialPeer(e.gw.tls, e.o.attacker)
		if err != nil {
			closePeers(ps)
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func closePeers(ps []*peer) {
	for _, p := range ps {
		p.nc.Close()
		<-p.done
	}
}

// persistent runs attacking connections until until: each slot starts
// with its connection of first (made before the attack began), attacks
// with it (attack returns when the connection ended, a write failed or
// until passed) and, if it was cut before until, dials a new one with
// prepare and goes on: an attacker who comes back (-reconnect; without
// it, a slot whose connection was cut stays idle until until). It
// returns every connection used, to report on and close, and how many
// dials failed.
func persistent(ctx context.Context, reconnect bool, until time.Time, first []*peer, prepare func() (*peer, error), attack func(p *peer)) (all []*peer, dialFails int, firstDialErr error) {
	var mu sync.Mutex
	all = append(all, first...)
	var wg sync.WaitGroup
	for _, p := range first {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := p; time.Now().Before(until) && ctx.Err() == nil; {
				if p == nil {
					np, err := prepare()
					mu.Lock()
					if err != nil {
						dialFails++
						if firstDialErr == nil {
							firstDialErr = err
						}
					} else {
						all = append(all, np)
					}
					mu.Unlock()
					if err != nil {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					p = np
				}
				attack(p)
				p = nil
				if !reconnect {
					break
				}
			}
		}()
	}
	wg.Wait()
	_ = sleep(ctx, time.Until(until))
	return all, dialFails, firstDialErr
}

// reconnects says how many connections the attacker needed beyond its
// first ones, and the dials that failed.
func reconnects(all []*peer, first, dialFails int, firstDialErr error) string {
	s := fmt.Sprintf("%d connections (none after the cuts)", len(all))
	if len(all) > first {
		s = fmt.Sprintf("%d connections in all (%d at a time, a new one after each cut)", len(all), first)
	}
	if dialFails > 0 {
		s += fmt.Sprintf(", %d dials or stream openings failed (first: %v)", dialFails, firstDialErr)
	}
	return s
}

// controlFlood is 16 (SETTINGS toggling INITIAL_WINDOW_SIZE) and 17
// (WINDOW_UPDATE(0, 1)): 3 connections, each with -attack-streams
// WebSocket streams open (to the reset pool, whose node is the
// attacker's), flood the frame at -flood-rate, reading what the gateway
// sends; a connection cut is replaced by a new one with its streams, until
// the attack's end.
func controlFlood(ctx context.Context, e *attackEnv, settings bool) (string, error) {
	const conns, perBatch = 3, 512
	prepare := func() (*peer, error) {
		p, err := dialPeer(e.gw.tls, e.o.attacker)
		if err != nil {
			return nil, err
		}
		err = p.batch(func() error {
			for i := range e.o.attackStreams {
				if _, err := p.webSocket(fmt.Sprintf("/rr/attacker-%d", i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil && !p.waitStatus(200, e.o.attackStreams, 10*time.Second) {
			err = fmt.Errorf("%d of %d attacker's streams open", p.status(200), e.o.attackStreams)
		}
		if err != nil {
			closePeers([]*peer{p})
			return nil, err
		}
		return p, nil
	}
	var first []*peer
	for range conns {
		p, err := prepare()
		if err != nil {
			closePeers(first)
			return "", fmt.Errorf("open the attacker's streams: %w", err)
		}
		first = append(first, p)
	}
	until, err := e.begin()
	if err != nil {
		closePeers(first)
		return "", err
	}
	start := time.Now()
	rate := e.o.floodRate
	switch {
	case rate == 0 && settings:
		rate = 6.4
	case rate == 0:
		rate = 9.7
	}
	frameSize := 13.0 // WINDOW_UPDATE
	if settings {
		frameSize = 15
	}
	var frames, flooded atomic.Int64
	all, fails, firstErr := persistent(ctx, e.o.reconnect, until, first, prepare, func(p *peer) {
		pace := newPacer(rate * 1e6 / frameSize / conns)
		sent0 := p.sent.Load()
		defer func() { flooded.Add(p.sent.Load() - sent0) }()
		for time.Now().Before(until) && ctx.Err() == nil && !p.isDone() {
			err := p.batch(func() error {
				for i := range perBatch {
					var err error
					if settings {
						err = p.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535 - uint32(i&1)})
					} else {
						err = p.fr.WriteWindowUpdate(0, 1)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return
			}
			frames.Add(perBatch)
			pace.wait(perBatch)
		}
	})
	at := time.Now()
	defer closePeers(all)
	got := float64(flooded.Load()) / at.Sub(start).Seconds()
	return fmt.Sprintf("%d streams open beside each; %d frames at %.2f MB/s; %s; %s", e.o.attackStreams, frames.Load(), got/1e6,
		reconnects(all, conns, fails, firstErr), peersReport(all, at)), nil
}

// rapidReset is 19: 3 connections open WebSocket streams to the reset
// pool and reset each at once (HEADERS then RST_STREAM(CANCEL), 100 a
// batch), at -reset-rate, a connection cut replaced by a new one, until
// the attack's end; then, a second later, the handshakes the reset pool's
// node got.
func rapidReset(ctx context.Context, e *attackEnv) (string, error) {
	const conns = 3
	perBatch := 100
	if r := e.o.resetRate; r > 0 && r < 3000 {
		perBatch = max(1, r/30) // about 10 batches a second a connection
	}
	prepare := func() (*peer, error) { return dialPeer(e.gw.tls, e.o.attacker) }
	first, err := dialPeers(e, conns)
	if err != nil {
		return "", err
	}
	gone0, _ := e.gw.metric("wsgate_handshakes_total", `result="client_gone"`)
	until, err := e.begin()
	if err != nil {
		closePeers(first)
		return "", err
	}
	var resets, slot atomic.Int64
	all, fails, firstErr := persistent(ctx, e.o.reconnect, until, first, prepare, func(p *peer) {
		c := slot.Add(1)
		pace := newPacer(float64(e.o.resetRate) / conns)
		for time.Now().Before(until) && ctx.Err() == nil && !p.isDone() {
			err := p.batch(func() error {
				for i := range perBatch {
					id, err := p.webSocket(fmt.Sprintf("/rr/%d-%d", c, i))
					if err == nil {
						err = p.fr.WriteRSTStream(id, http2.ErrCodeCancel)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return
			}
			resets.Add(int64(perBatch))
			pace.wait(perBatch)
		}
	})
	at := time.Now()
	defer closePeers(all)
	report := peersReport(all, at)
	if err := sleep(ctx, time.Second); err != nil {
		return "", err
	}
	gone1, _ := e.gw.metric("wsgate_handshakes_total", `result="client_gone"`)
	n := resets.Load()
	hs := e.reset.handshakes.Load()
	return fmt.Sprintf("%d streams reset (%.0f/s); node handshakes %d (%.2f per 1,000 reset); handshakes counted client_gone %.0f; %s; %s",
		n, float64(n)/e.o.duration.Seconds(), hs, 1000*float64(hs)/float64(max(n, 1)), gone1-gone0,
		reconnects(all, conns, fails, firstErr), report), nil
}

// pacer spaces an attacker's batches so that perSec units a second go
// out; with perSec 0 or less, as fast as they can.
type pacer struct {
	start  time.Time
	perSec float64
	done   float64
}

func newPacer(perSec float64) *pacer { return &pacer{start: time.Now(), perSec: perSec} }

// wait counts n more units and sleeps until they are due.
func (p *pacer) wait(n int) {
	if p.perSec <= 0 {
		return
	}
	p.done += float64(n)
	due := p.start.Add(time.Duration(p.done / p.perSec * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
}

// loadAverage is the machine's 1-, 5- and 15-minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
