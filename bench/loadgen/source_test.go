package loadgen

import (
	"errors"
	"testing"
)

func TestParseSources(t *testing.T) {
	tests := []struct {
		in    string
		n     int
		first string
		last  string
		bad   bool
	}{
		{in: "", n: 0},
		{in: "127.0.0.2", n: 1, first: "127.0.0.2", last: "127.0.0.2"},
		{in: "127.0.0.2-127.0.0.250", n: 249, first: "127.0.0.2", last: "127.0.0.250"},
		{in: "127.0.0.250-127.0.1.3", n: 10, first: "127.0.0.250", last: "127.0.1.3"},
		{in: "127.0.0.2, 127.0.0.9-127.0.0.10", n: 3, first: "127.0.0.2", last: "127.0.0.10"},
		{in: "::1", n: 1, first: "::1", last: "::1"},
		{in: "127.0.0.5-127.0.0.2", bad: true},
		{in: "127.0.0.1-::1", bad: true},
		{in: "localhost", bad: true},
		{in: "127.0.0.1-", bad: true},
		{in: "10.0.0.0-10.255.0.0", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			s, err := ParseSources(tt.in)
			if tt.bad {
				if !errors.Is(err, ErrBadSource) {
					t.Fatalf("ParseSources(%q) err = %v, want ErrBadSource", tt.in, err)
				}
				return
			}
			if err != nil || s.Len() != tt.n {
				t.Fatalf("ParseSources(%q) = %d addrs, %v; want %d", tt.in, s.Len(), err, tt.n)
			}
			if tt.n == 0 {
				if s.Next() != nil {
					t.Error("empty list hands out an address")
				}
				return
			}
			if got := s.Next().IP.String(); got != tt.first {
				t.Errorf("first = %s, want %s", got, tt.first)
			}
			for range tt.n - 2 {
				s.Next()
			}
			if tt.n > 1 {
				if got := s.Next().IP.String(); got != tt.last {
					t.Errorf("last = %s, want %s", got, tt.last)
				}
			}
			if got := s.Next().IP.String(); got != tt.first {
				t.Errorf("after wrapping = %s, want %s", got, tt.first)
			}
		})
	}
}
