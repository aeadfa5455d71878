// Package dnstest runs a tiny authoritative DNS server on loopback UDP for
// tests: it answers A, AAAA and SRV questions from records the test sets
// and changes while it runs, and can be told to fail every question with
// SERVFAIL.
package dnstest

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// SRV is one SRV record's data.
type SRV struct {
	Priority, Weight, Port uint16
	Target                 string // a host name, answered from the A records
}

// Server is a DNS server on 127.0.0.1. Its methods are safe for concurrent
// use.
type Server struct {
	// Addr is the server's 127.0.0.1:port address, the resolver to name.
	Addr string
	conn net.PacketConn

	mu      sync.Mutex
	addrs   map[string][]netip.Addr // by lower-case name without the final dot
	srvs    map[string][]SRV
	fail    bool
	queries atomic.Int64
}

// Start runs a server on a free loopback UDP port until the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{Addr: pc.LocalAddr().String(), conn: pc, addrs: map[string][]netip.Addr{}, srvs: map[string][]SRV{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.serve()
	}()
	tb.Cleanup(func() {
		_ = pc.Close()
		<-done
	})
	return s
}

func canon(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// SetA replaces the A and AAAA records of name (none: the name does not
// exist, unless it has SRV records).
func (s *Server) SetA(name string, ips ...string) {
	var as []netip.Addr
	for _, ip := range ips {
		as = append(as, netip.MustParseAddr(ip))
	}
	setRecords(s, s.addrs, name, as)
}

// SetSRV replaces the SRV records of name.
func (s *Server) SetSRV(name string, recs ...SRV) { setRecords(s, s.srvs, name, recs) }

// setRecords replaces name's records in m, one of s's maps; none deletes
// the name from m.
func setRecords[T any](s *Server, m map[string][]T, name string, recs []T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(recs) == 0 {
		delete(m, canon(name))
		return
	}
	m[canon(name)] = recs
}

// Fail makes every answer SERVFAIL (true) or the records again (false).
func (s *Server) Fail(on bool) {
	s.mu.Lock()
	s.fail = on
	s.mu.Unlock()
}

// Queries is the number of questions answered so far.
func (s *Server) Queries() int64 { return s.queries.Load() }

// serve answers until the socket closes.
func (s *Server) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if out, ok := s.answer(buf[:n]); ok {
			_, _ = s.conn.WriteTo(out, from)
		}
	}
}

// answer builds the reply to one query; false drops a message that does
// not parse.
func (s *Server) answer(q []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, false
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil, false
	}
	s.queries.Add(1)
	question := qs[0]
	name := canon(question.Name.String())
	s.mu.Lock()
	addrs, srvs, fail := s.addrs[name], s.srvs[name], s.fail
	_, exists := s.addrs[name]
	_, hasSRV := s.srvs[name]
	s.mu.Unlock()

	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	switch {
	case fail:
		rh.RCode = dnsmessage.RCodeServerFailure
	case !exists && !hasSRV:
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(question)
	_ = b.StartAnswers()
	rr := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 0}
	if rh.RCode == dnsmessage.RCodeSuccess {
		switch question.Type {
		case dnsmessage.TypeA:
			for _, a := range addrs {
				if a.Is4() {
					_ = b.AResource(rr, dnsmessage.AResource{A: a.As4()})
				}
			}
		case dnsmessage.TypeAAAA:
			for _, a := range addrs {
				if a.Is6() {
					_ = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
				}
			}
		case dnsmessage.TypeSRV:
			for _, r := range srvs {
				target, err := dnsmessage.NewName(canon(r.Target) + ".")
				if err != nil {
					continue
				}
				_ = b.SRVResource(rr, dnsmessage.SRVResource{Priority: r.Priority, Weight: r.Weight, Port: r.Port, Target: target})
			}
		}
	}
	out, err := b.Finish()
	return out, err == nil
}
