//go:build !linux

package tunnel

// clientAcked reports false: without TCP_INFO's bytes_acked the keepalive
// sees only the bytes a client sends.
func (t *Tunnel) clientAcked() (uint64, bool) { return 0, false }

// clientWritten reports false: the keepalive cannot place its ping in the
// client's socket.
func (t *Tunnel) clientWritten() (uint64, bool) { return 0, false }
