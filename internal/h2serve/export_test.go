package h2serve

// WindowWork is how many times s visited or woke a stream because a send
// window changed.
func WindowWork(s *Server) uint64 { return s.windowWork.Load() }

// SetControlBudget sets the control frames s's connections may receive
// beyond those their work pays for (see controlBurst), before it serves.
func SetControlBudget(s *Server, n int) { s.ctrlBurst = n }

// AnyConnFailed reports whether a connection of s is ending.
func AnyConnFailed(s *Server) bool {
	for _, c := range s.snapshot() {
		c.mu.Lock()
		failed := c.err != nil
		c.mu.Unlock()
		if failed {
			return true
		}
	}
	return false
}

// RecvBufCap is the capacity of the receive buffer s holds (0: none).
func RecvBufCap(s *Stream) int {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.core.BufCap()
}
