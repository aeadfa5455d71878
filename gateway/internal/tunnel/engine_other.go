//go:build !linux

package tunnel

import (
	"net"
	"time"
)

// poller is the event-driven engine's poller, which exists on Linux only;
// elsewhere every tunnel runs on goroutines.
type poller struct{ out *outBuf }

func (*poller) run(func()) {}

func (t *Tunnel) adopt(net.Conn) bool      { return false }
func (t *Tunnel) startPolled(_, _ []byte)  {}
func (t *Tunnel) armClose(time.Time)       {}
func (t *Tunnel) closeFDs()                {}
func (h *half) writeNB(_ [][]byte, _ bool) {}
func (h *half) shutdownDst()               {}
func (h *half) shutdownDstWrite()          {}
func (h *half) endSrc(error)               {}

// SetPollers does nothing where there is no event-driven engine.
func SetPollers(int) bool { return false }

// Pollers is 0 where there is no event-driven engine.
func Pollers() int { return 0 }
