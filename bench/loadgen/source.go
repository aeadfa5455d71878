package loadgen

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
)

// ErrBadSource is returned by ParseSources for a malformed -source value.
var ErrBadSource = errors.New("loadgen: bad source address list")

// maxSources bounds a -source list, so a typo such as 10.0.0.0-10.255.0.0
// does not allocate millions of addresses.
const maxSources = 65536

// Sources hands out local addresses to dial from, round robin. A nil
// *Sources dials from the kernel's choice. It is safe for concurrent use.
type Sources struct {
	addrs []netip.Addr
	next  atomic.Uint64
}

// ParseSources parses a comma-separated list of IP addresses and inclusive
// ranges of one family ("127.0.0.2-127.0.0.250,127.0.1.1"). An empty string
// yields nil: no source binding.
func ParseSources(s string) (*Sources, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	src := &Sources{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := netip.ParseAddr(strings.TrimSpace(lo))
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrBadSource, part, err)
		}
		b := a
		if isRange {
			if b, err = netip.ParseAddr(strings.TrimSpace(hi)); err != nil {
				return nil, fmt.Errorf("%w: %q: %w", ErrBadSource, part, err)
			}
		}
		if a.Is4() != b.Is4() || a.Zone() != "" || b.Zone() != "" {
			return nil, fmt.Errorf("%w: %q: both ends must be plain addresses of one family", ErrBadSource, part)
		}
		if b.Less(a) {
			return nil, fmt.Errorf("%w: %q: range ends before it starts", ErrBadSource, part)
		}
		for ip := a; ; ip = ip.Next() {
			if len(src.addrs) >= maxSources {
				return nil, fmt.Errorf("%w: more than %d addresses", ErrBadSource, maxSources)
			}
			src.addrs = append(src.addrs, ip)
			if ip == b {
				break
			}
		}
	}
	return src, nil
}

// Len returns how many addresses s holds (0 for nil).
func (s *Sources) Len() int {
	if s == nil {
		return 0
	}
	return len(s.addrs)
}

// Next returns the next local address to dial from, or nil for a nil s.
func (s *Sources) Next() *net.TCPAddr {
	if s == nil || len(s.addrs) == 0 {
		return nil
	}
	a := s.addrs[(s.next.Add(1)-1)%uint64(len(s.addrs))]
	return &net.TCPAddr{IP: a.AsSlice()}
}
