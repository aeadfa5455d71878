package gateway

import (
	"sync"
)

// stats counts handshakes by result until the metrics registry replaces it.
type stats struct {
	mu      sync.Mutex
	results map[string]uint64
}

func (st *stats) handshakes(result string) {
	st.mu.Lock()
	if st.results == nil {
		st.results = make(map[string]uint64)
	}
	st.results[result]++
	st.mu.Unlock()
}

// Handshakes returns the number of handshakes per result so far: ok,
// bad_request, origin, limited, no_capacity, upstream_error,
// upstream_refused, client_gone, no_route.
func (s *Server) Handshakes() map[string]uint64 {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	m := make(map[string]uint64, len(s.stats.results))
	for k, v := range s.stats.results {
		m[k] = v
	}
	return m
}
