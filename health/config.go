package health

import (
	"crypto/tls"
	"strings"
	"time"
)

// Defaults applied by [NewChecker] to zero (or negative) [Config] fields.
const (
	// DefaultPath is the path probed when Config.Path is empty or invalid.
	DefaultPath = "/healthz"
	// DefaultInterval is the time between probes of one node.
	DefaultInterval = 2 * time.Second
	// DefaultTimeout bounds one probe.
	DefaultTimeout = time.Second
	// DefaultRise is the number of passing probes in a row that bring a
	// node up.
	DefaultRise = 2
	// DefaultFall is the number of failing probes in a row that take a node
	// down.
	DefaultFall = 3
	// DefaultEjectFor is the rest of an ejected node before it is probed
	// again.
	DefaultEjectFor = 10 * time.Second
)

// Config is one pool's check settings (from conf.Health plus the pool's
// slow_start). Zero fields take the defaults named below.
type Config struct {
	// Path is the HTTP path probed on each node (default "/healthz"). A
	// path that does not start with "/" or holds a space or control byte
	// is replaced by the default.
	Path string
	// Host is the Host header sent with each probe (default: the node's
	// address). A value holding a space or control byte is ignored.
	Host string
	// Interval is the time between two probes of one node (default 2s);
	// each wait gets ±10% random jitter so probes do not align.
	Interval time.Duration
	// Timeout bounds one probe: dial, request and answer (default 1s).
	Timeout time.Duration
	// Rise is the number of passing probes in a row that bring a node up
	// (default 2).
	Rise int
	// Fall is the number of failing probes in a row that take an up node
	// down (default 3).
	Fall int
	// SlowStart is the time over which a node that comes up again ramps to
	// its full weight (default 0: off).
	SlowStart time.Duration
	// EjectAfter is the number of passive failures in a row (failed dials
	// or upstream handshakes) that eject an up node (default: Fall).
	EjectAfter int
	// EjectFor is how long an ejected node rests before it is probed again
	// (default 10s); it then needs Rise passing probes to come up.
	EjectFor time.Duration
	// ProxyLocal starts each probe's connection with a PROXY protocol
	// version 2 LOCAL header (the gateway's own connection, no client's
	// address), for nodes that expect a header on every connection
	// (default false).
	ProxyLocal bool
	// Refuse, when set, is asked about the address each probe is about
	// to connect to (IP:port, resolved), before the connect; an error
	// fails the probe (default none).
	Refuse AddrCheck
	// TLS, when set, gives the TLS client config for each node: every
	// probe's connection is then TLS, begun after the PROXY header
	// (default none: cleartext).
	TLS TLSConfigs
}

// TLSConfigs gives the TLS client config a probe of the node at addr
// uses: the roots, server name and client certificate the node is
// spoken to with. Its implementations are comparable (a pointer, say):
// Configs are compared.
type TLSConfigs interface {
	ClientConfig(addr string) *tls.Config
}

// AddrCheck refuses addresses a probe may not connect to. Its
// implementations are comparable (a pointer, say): Configs are compared.
type AddrCheck interface {
	CheckAddr(address string) error
}

// withDefaults returns cfg with every unset or invalid field replaced by
// its default, so the checker never tests for zero at run time.
func (cfg Config) withDefaults() Config {
	if !strings.HasPrefix(cfg.Path, "/") || !isToken(cfg.Path) {
		cfg.Path = DefaultPath
	}
	if !isToken(cfg.Host) {
		cfg.Host = ""
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Rise <= 0 {
		cfg.Rise = DefaultRise
	}
	if cfg.Fall <= 0 {
		cfg.Fall = DefaultFall
	}
	if cfg.SlowStart < 0 {
		cfg.SlowStart = 0
	}
	if cfg.EjectAfter <= 0 {
		cfg.EjectAfter = cfg.Fall // a dial failure counts like a failed probe
	}
	if cfg.EjectFor <= 0 {
		cfg.EjectFor = DefaultEjectFor
	}
	return cfg
}

// isToken reports whether s can go into a request line or header as is: no
// space, control byte or DEL, which would split or smuggle a request.
func isToken(s string) bool {
	for i := range len(s) {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}
