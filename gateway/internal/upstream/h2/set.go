package h2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/internal/penalty"
	"golang.org/x/net/http2"
)

// Set is the HTTP/2 connections the gateway keeps to one node: streams go
// on the open connection carrying the fewest, connections are dialed as
// streams need them (up to Size while fewer are open, beyond Size only
// while every one is at the node's SETTINGS_MAX_CONCURRENT_STREAMS, and
// those close once idle), and each is pinged every PingInterval, so a
// silent node connection ends rather than holding its clients. A connection the node sent GOAWAY on,
// or that is near its last stream identifier, leaves the set and its open
// streams continue; one that was lost leaves it too, and its streams end,
// spread over the lost window (see SetLost). A node's connections are
// read by distinct pollers (see SpreadPoller). It is safe for concurrent
// use; the zero value is not: set Dial and Size first.
type Set struct {
	// Dial opens a connection to the node, bounded by ctx: TCP, or TLS
	// whose handshake selected "h2" by ALPN. Set it before the first
	// Open; SetDial replaces it after.
	Dial func(ctx context.Context) (net.Conn, error)
	// Config is each connection's.
	Config Config
	// Size is how many connections the node's streams are spread over.
	Size int
	// PingInterval is how often each connection is pinged; a ping not
	// answered within it ends the connection. 0: no pings.
	PingInterval time.Duration
	// Poller, when set, is offered each connection's reads (see
	// SpreadPoller); nil: each connection reads on a goroutine of its own.
	Poller SpreadPoller

	mu      sync.Mutex
	conns   []*Conn
	pending int           // dials under way
	dialed  chan struct{} // closed when a dial ends; nil while none is under way
	dialErr error         // the last dial's error, for those that waited on it
	closed  bool
	closing atomic.Int32 // connections out of the set, waiting for their streams to end
	// placing holds the pollers (tokens) of connections placed on one
	// and not yet in conns; placeMu serializes placements, so that two
	// dials at once see each other's (see SpreadPoller).
	placing map[*Conn]any
	placeMu sync.Mutex
	// lostPol is how the streams of a lost connection end, held counts
	// those waiting for their end (see herd.go).
	lostPol lostPolicy
	lostWin atomic.Int64 // lostPol.window, read under a connection's lock
	held    atomic.Int64
	// flood is the back-off after connections cut for flooding,
	// floodPol its policy, floodCuts their count (see backoff.go).
	flood     penalty.Record
	floodPol  penalty.Policy
	floodCuts int
}

// A SpreadPoller is a Poller told which pollers (their tokens) read the
// set's other connections, busy, so that it places a node's connections
// on distinct pollers while there are more pollers than connections
// (tunnel.AttachConnBeside): the node's clients, whose tunnels run on
// their connection's poller, then spread over every poller rather than
// sharing one while another has none.
type SpreadPoller func(nc net.Conn, c *Conn, busy []any) (owner any, detach func())

// poller returns the Poller for the connection a dial is about to make,
// nil when the set has none.
func (s *Set) poller() Poller {
	if s.Poller == nil {
		return nil
	}
	return func(nc net.Conn, c *Conn) (any, func()) {
		s.placeMu.Lock()
		defer s.placeMu.Unlock()
		s.mu.Lock()
		busy := make([]any, 0, len(s.conns)+len(s.placing))
		for _, o := range s.conns {
			o.mu.Lock()
			if o.owner != nil {
				busy = append(busy, o.owner)
			}
			o.mu.Unlock()
		}
		for _, owner := range s.placing {
			busy = append(busy, owner)
		}
		s.mu.Unlock()
		owner, detach := s.Poller(nc, c, busy)
		if owner != nil {
			s.mu.Lock()
			if s.placing == nil {
				s.placing = make(map[*Conn]any)
			}
			s.placing[c] = owner
			s.mu.Unlock()
		}
		return owner, detach
	}
}

// placedLocked forgets c's placement once c is in conns or will not be.
// Called with s.mu held.
func (s *Set) placedLocked(c *Conn) { delete(s.placing, c) }

// ErrSetClosed is returned by Set.Open once the set is closed: the node
// left the pool, or the gateway is stopping.
var ErrSetClosed = errors.New("h2: the node's connections are closed")

// maxOpenTries bounds how many connections one Open tries: a stream
// refused or a connection that went away at the moment of the request
// is tried again on another; more of those in a row is the node's state,
// not a race.
const maxOpenTries = 4

// Open opens a WebSocket stream to the node with req, as
// Conn.OpenWebSocket does, on the set's least loaded connection, dialing
// one when the set needs it. ctx bounds the dial, the HTTP/2 handshake
// and the wait for the node's response. An error from the dial is
// returned as it is (wrapped); ErrSetClosed once Close was called.
func (s *Set) Open(ctx context.Context, req *Request) (*Stream, *Response, error) {
	var last error
	for try := 0; try < maxOpenTries; try++ {
		c, err := s.pick(ctx)
		if err != nil {
			return nil, nil, err
		}
		st, resp, err := c.OpenWebSocket(ctx, req)
		if err == nil {
			return st, resp, nil
		}
		last = err
		var se *StreamError
		var sent afterRequest
		switch {
		case errors.As(err, &se) && se.Remote && se.Code == http2.ErrCodeRefusedStream:
			// The node did not process it (RFC 9113 section 8.7).
		case errors.As(err, &sent):
			// The node may have seen the request: it is not sent
			// again (see afterRequest).
			return nil, nil, err
		case errors.Is(err, ErrFull):
			// Another stream took the last slot since pick looked: the
			// next pick finds this one full and moves on or dials.
		case errors.Is(err, ErrGoingAway), errors.Is(err, ErrConnLost):
			s.drop(c)
		default:
			return nil, nil, err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, nil, fmt.Errorf("h2: no connection to the node took the stream: %w", last)
}

// pick returns the open connection with the fewest streams that takes
// another, dialing a new one while fewer than Size are open or being
// dialed (so the first clients of a node spread over Size connections)
// or when none takes another. A caller that finds no connection while
// one is being dialed waits for that dial, and gets its error.
func (s *Set) pick(ctx context.Context) (*Conn, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrSetClosed
		}
		s.retireSpentLocked()
		best, bestN := (*Conn)(nil), 0
		for _, c := range s.conns {
			if n, ok := c.room(); ok && (best == nil || n < bestN) {
				best, bestN = c, n
			}
		}
		if best != nil && (bestN == 0 || len(s.conns)+s.pending >= s.Size) {
			s.mu.Unlock()
			return best, nil
		}
		if best == nil && s.pending > 0 {
			wait := s.dialed
			s.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, fmt.Errorf("h2: wait for a connection to the node: %w", ctx.Err())
			}
			s.mu.Lock()
			err := s.dialErr
			s.mu.Unlock()
			if err != nil {
				return nil, err
			}
			continue
		}
		if err := s.backoffLocked(time.Now()); err != nil {
			// The node flooded lately: no dial (backoff.go).
			s.mu.Unlock()
			if best != nil {
				return best, nil
			}
			return nil, err
		}
		s.pending++
		if s.dialed == nil {
			s.dialed = make(chan struct{})
		}
		s.mu.Unlock()

		c, err := s.dial(ctx)

		s.mu.Lock()
		s.pending--
		s.dialErr = err
		close(s.dialed)
		s.dialed = nil
		if s.pending > 0 {
			s.dialed = make(chan struct{})
		}
		if c != nil {
			s.placedLocked(c)
		}
		if err == nil && s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return nil, ErrSetClosed
		}
		if err == nil {
			s.conns = append(s.conns, c)
		}
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if s.PingInterval > 0 {
			go s.keepAlive(c)
		}
		go s.forgetWhenDone(c)
		return c, nil
	}
}

// SetDial has the set's later dials (a connection lost, beyond Size, or
// replacing a spent one) open their connection with dial: a set kept
// across a reload dials as the pool it now belongs to does (its source
// addresses, connect_timeout, node policy), not as the one it was made
// for. Connections open stay as they are.
func (s *Set) SetDial(dial func(ctx context.Context) (net.Conn, error)) {
	s.mu.Lock()
	s.Dial = dial
	s.mu.Unlock()
}

// dial opens one connection and starts HTTP/2 on it.
func (s *Set) dial(ctx context.Context) (*Conn, error) {
	s.mu.Lock()
	dialNode := s.Dial
	s.mu.Unlock()
	nc, err := dialNode(ctx)
	if err != nil {
		return nil, err
	}
	c, err := HandshakePolled(ctx, nc, s.Config, s.poller())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.set = s // its streams' ends are spread if it is lost (herd.go)
	c.mu.Unlock()
	if _, ok := c.room(); !ok {
		// SETTINGS_MAX_CONCURRENT_STREAMS = 0: a connection that takes
		// no stream is not kept, nor is another dialed for each try.
		s.mu.Lock()
		s.placedLocked(c)
		s.mu.Unlock()
		_ = c.Close()
		return nil, ErrNoStreams
	}
	return c, nil
}

// room reports how many streams c carries and whether it takes another.
func (c *Conn) room() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.streams)
	return n, c.err == nil && !c.goAway && c.nextID <= retireIDAt && uint32(n) < c.peer.MaxConcurrentStreams
}

// retireIDAt is the last stream identifier a connection of a Set is
// given a stream with. Stream identifiers are not reused (RFC 9113
// section 5.1.1), so a connection that has opened about 2^30 streams
// can open no more: short of that (by 1,024 streams, so that streams
// placed on it at that moment still get theirs), the set retires it as
// a node's GOAWAY does (no new stream; it closes, with a GOAWAY, once
// its streams have ended) and dials a replacement.
const retireIDAt = maxWindow - 2*1024

// idsSpent reports whether c has given out its stream identifiers up to
// retireIDAt.
func (c *Conn) idsSpent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nextID > retireIDAt
}

// retireSpentLocked takes the connections that used up their stream
// identifiers out of the set and retires them: a connection that takes no
// stream must not hold a place, and a PING, for good. Called with s.mu
// held.
func (s *Set) retireSpentLocked() {
	kept := s.conns[:0]
	for _, c := range s.conns {
		if c.idsSpent() {
			s.retire(c)
			continue
		}
		kept = append(kept, c)
	}
	clear(s.conns[len(kept):])
	s.conns = kept
}

// drop takes c out of the set: it takes no new stream (GOAWAY, lost).
// Its open streams continue; it closes once they have ended.
func (s *Set) drop(c *Conn) {
	s.mu.Lock()
	for i, x := range s.conns {
		if x == c {
			s.conns = append(s.conns[:i], s.conns[i+1:]...)
			s.mu.Unlock()
			s.retire(c)
			return
		}
	}
	s.mu.Unlock()
}

// forgetWhenDone drops c once it takes no new stream or has ended.
func (s *Set) forgetWhenDone(c *Conn) {
	select {
	case <-c.GoingAway():
	case <-c.Done():
	}
	s.drop(c)
}

// keepAlive pings c every PingInterval until it ends; a ping not
// answered within the interval closes it (its streams end with
// ErrConnLost). A connection beyond Size that carries no stream at a
// tick leaves the set instead.
func (s *Set) keepAlive(c *Conn) {
	t := time.NewTicker(s.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.Done():
			return
		case <-t.C:
		}
		if s.surplus(c) {
			// Opened in a burst, beyond Size, and idle now: it goes.
			s.drop(c)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.PingInterval)
		_, err := c.Ping(ctx)
		cancel()
		if err != nil {
			c.fail(fmt.Errorf("no answer to a PING within %v: %w", s.PingInterval, err))
			return
		}
	}
}

// surplus reports whether c is one of more than Size connections and
// carries no stream.
func (s *Set) surplus(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, _ := c.room()
	return n == 0 && len(s.conns) > s.Size
}

// SetStats is what a Set holds at one moment.
type SetStats struct {
	// Conns counts the connections that take streams.
	Conns int
	// Streams counts the open streams on them.
	Streams int
	// Closing counts the connections out of the set (the node sent
	// GOAWAY, or the set was closed) that wait for their streams to end.
	Closing int
	// Held counts the streams of lost connections whose end waits for
	// its turn (see SetLost).
	Held int
	// Polled counts the connections of Conns a Poller reads, and
	// Pollers the distinct pollers that read them.
	Polled, Pollers int
	// FloodCuts counts the connections cut for flooding, and Backoff is
	// how long the node is still not dialed for it (see backoff.go).
	FloodCuts int
	Backoff   time.Duration
}

// Stats returns the set's counts.
func (s *Set) Stats() SetStats {
	s.mu.Lock()
	conns := append([]*Conn(nil), s.conns...)
	cuts, backoff := s.floodCuts, s.flood.Left(time.Now())
	s.mu.Unlock()
	st := SetStats{Conns: len(conns), Closing: int(s.closing.Load()), Held: int(s.held.Load()), FloodCuts: cuts, Backoff: backoff}
	var owners []any
	for _, c := range conns {
		st.Streams += c.Stats().Streams
		c.mu.Lock()
		owner := c.owner
		c.mu.Unlock()
		if owner != nil {
			st.Polled++
			if !slices.Contains(owners, owner) {
				owners = append(owners, owner)
			}
		}
	}
	st.Pollers = len(owners)
	return st
}

// Close stops the set: no new stream, and each connection closes once
// its open streams have ended (Conn.Shutdown), which the gateway's drain
// of the node's tunnels brings about. It returns at once.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		s.retire(c)
	}
}

// retire closes c, out of the set, once its open streams have ended.
func (s *Set) retire(c *Conn) {
	s.closing.Add(1)
	go func() {
		defer s.closing.Add(-1)
		_ = c.Shutdown(context.Background())
	}()
}
