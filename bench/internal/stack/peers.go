package stack

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/bench/internal/probe"
)

// ErrPeerMissing is returned by FindPeer when the peer proxy's executable is
// not installed; `make bench` installs it from Debian's packages when it runs
// as root.
var ErrPeerMissing = errors.New("stack: peer proxy not installed")

// Peer kinds: the other WebSocket proxies the benchmark compares wsgate
// with, each from Debian's packages, in front of the same relays.
const (
	// Nginx is nginx (package nginx-light or nginx): one worker,
	// least_conn upstream.
	Nginx = "nginx"
	// HAProxy is haproxy: one thread, balance leastconn.
	HAProxy = "haproxy"
)

// MaxOpenFiles is the most descriptors a peer is configured for: the
// machine the benchmark was written on has a hard limit of 20,000 that no
// process can raise, and a peer asking for more fails or warns at start.
const MaxOpenFiles = 20000

// FindPeer returns the path of the executable of peer kind: found in PATH,
// else in /usr/sbin (where Debian puts both, and which a non-root PATH
// often lacks).
func FindPeer(kind string) (string, error) {
	if kind != Nginx && kind != HAProxy {
		return "", fmt.Errorf("find peer %q: unknown kind", kind)
	}
	if p, err := exec.LookPath(kind); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", kind)
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return p, nil
	}
	return "", fmt.Errorf("find %s (apt-get install -y %s): %w", kind, peerPackage(kind), ErrPeerMissing)
}

func peerPackage(kind string) string {
	if kind == Nginx {
		return "nginx-light"
	}
	return kind
}

// Peer is one running nginx or HAProxy in front of every relay of a stack.
// Its methods are safe for concurrent use; a Peer must not be copied.
type Peer struct {
	*Proc
	// Kind is Nginx or HAProxy.
	Kind string
	// Addr is its 127.0.0.1:port listener.
	Addr string
	// Config is the path of its config file.
	Config string
	// workers are the nginx worker PIDs seen by Pids, stopped by PID in
	// Stop if the master left one behind.
	workers []int
}

// NginxConfig is an nginx.conf for one worker on addr in front of relays
// with least_conn, everything it writes (pid, temp files, error log) under
// dir. WebSocket upgrades are passed through (HTTP/1.1, Upgrade and
// Connection headers) and a tunnel may stay silent for an hour. A relay
// that refuses a connection is left to nginx's defaults, which already
// do what a reconnect storm needs: the handshake moves to the next relay
// (proxy_next_upstream error timeout) and the failed one is skipped for
// 10s (max_fails 1, fail_timeout 10s). root says
// the master runs as root: the worker then keeps root ("user root") rather
// than nobody, who could not write to dir.
func NginxConfig(dir, addr string, relays []string, root bool) string {
	var b strings.Builder
	if root {
		b.WriteString("user root;\n")
	}
	fmt.Fprintf(&b, "worker_processes 1;\nworker_rlimit_nofile %d;\ndaemon off;\nmaster_process on;\n", MaxOpenFiles)
	fmt.Fprintf(&b, "pid %s;\nerror_log %s warn;\n\n", filepath.Join(dir, "nginx.pid"), filepath.Join(dir, "nginx-error.log"))
	fmt.Fprintf(&b, "events {\n    worker_connections %d;\n}\n\n", MaxOpenFiles)
	b.WriteString("http {\n    access_log off;\n")
	for _, t := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&b, "    %s_temp_path %s;\n", t, filepath.Join(dir, "nginx-temp", t))
	}
	b.WriteString("\n    map $http_upgrade $connection_upgrade {\n        default upgrade;\n        ''      close;\n    }\n\n")
	b.WriteString("    upstream relays {\n        least_conn;\n")
	for _, r := range relays {
		fmt.Fprintf(&b, "        server %s;\n", r)
	}
	b.WriteString("    }\n\n")
	fmt.Fprintf(&b, "    server {\n        listen %s;\n        location / {\n", addr)
	b.WriteString("            proxy_pass http://relays;\n" +
		"            proxy_http_version 1.1;\n" +
		"            proxy_set_header Upgrade $http_upgrade;\n" +
		"            proxy_set_header Connection $connection_upgrade;\n" +
		"            proxy_set_header Host $host;\n" +
		"            proxy_read_timeout 1h;\n" +
		"            proxy_send_timeout 1h;\n" +
		"        }\n    }\n}\n")
	return b.String()
}

// HAProxyMaxConn is HAProxy's maxconn: the most tunnels whose two
// descriptors each fit under MaxOpenFiles with a reserve. HAProxy sizes
// its descriptor limit as twice maxconn plus a few and refuses to start
// ("Cannot raise FD limit") when that is above the hard limit, so the
// maxconn 20000 nginx's worker_connections matches cannot be used.
const HAProxyMaxConn = (MaxOpenFiles - 200) / 2

// HAProxyConfig is a haproxy.cfg for one thread on addr in front of relays
// with balance leastconn, in HTTP mode (HAProxy turns an upgraded
// connection into a tunnel by itself) with an hour's tunnel timeout. As
// HAProxy's own WebSocket examples have it, every relay is health checked
// ("check"; every second, as the gateway probes its nodes, marked down
// after HAProxy's default 3 failures) and a connection refused is retried
// (retries 3, HAProxy's default) with the last retry on another relay
// ("option redispatch"): without them a dead relay, holding the fewest
// connections, keeps being picked, and each handshake sent there is
// answered 503 after three retries a second apart.
func HAProxyConfig(addr string, relays []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global\n    nbthread 1\n    maxconn %d\n\n", HAProxyMaxConn)
	b.WriteString("defaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n" +
		"    timeout server 30s\n    timeout http-request 10s\n    timeout tunnel 1h\n" +
		"    retries 3\n    option redispatch\n\n")
	fmt.Fprintf(&b, "frontend ws\n    bind %s\n    default_backend relays\n\n", addr)
	b.WriteString("backend relays\n    balance leastconn\n")
	for i, r := range relays {
		fmt.Fprintf(&b, "    server relay-%d %s check inter 1s\n", i+1, r)
	}
	return b.String()
}

// PeerArgs writes the config of peer kind on addr in front of relays into
// dir and returns the config's path and the command line that runs the peer
// in the foreground on it. check adds the flag that only checks the config
// (nginx -t, haproxy -c) instead.
func PeerArgs(kind, dir, addr string, relays []string, check bool) (cfg string, args []string, err error) {
	switch kind {
	case Nginx:
		// nginx creates the last element of each temp path, not its parent.
		if err := os.MkdirAll(filepath.Join(dir, "nginx-temp"), 0o755); err != nil {
			return "", nil, fmt.Errorf("nginx temp dir: %w", err)
		}
		cfg = filepath.Join(dir, "nginx.conf")
		// -e: the error log before the config is read (nginx >= 1.19.5);
		// -p: the prefix, so nothing resolves under /usr/share/nginx.
		args = []string{"-c", cfg, "-p", dir + "/", "-e", filepath.Join(dir, "nginx-error.log")}
		if check {
			args = append(args, "-t")
		}
		err = os.WriteFile(cfg, []byte(NginxConfig(dir, addr, relays, os.Geteuid() == 0)), 0o644)
	case HAProxy:
		cfg = filepath.Join(dir, "haproxy.cfg")
		args = []string{"-db", "-f", cfg}
		if check {
			args = []string{"-c", "-f", cfg}
		}
		err = os.WriteFile(cfg, []byte(HAProxyConfig(addr, relays)), 0o644)
	default:
		return "", nil, fmt.Errorf("peer %q: unknown kind", kind)
	}
	if err != nil {
		return "", nil, fmt.Errorf("write %s config: %w", kind, err)
	}
	return cfg, args, nil
}

// StartPeer starts peer kind (executable bin) on a free loopback port in
// front of every relay of the stack, its config and files in a directory
// of its own under the stack's, and waits until it proxies a request to a
// relay. Close stops it with the rest of the stack.
func (s *Stack) StartPeer(kind, bin string) (*Peer, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.opt.Dir, kind)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start %s: %w", kind, err)
	}
	relays := make([]string, len(s.Relays))
	for i, r := range s.Relays {
		relays[i] = r.Addr
	}
	cfg, args, err := PeerArgs(kind, dir, addr, relays, false)
	if err != nil {
		return nil, err
	}
	p, err := Start(kind, filepath.Join(s.opt.Dir, kind+".log"), bin, args...)
	if err != nil {
		return nil, err
	}
	peer := &Peer{Proc: p, Kind: kind, Addr: addr, Config: cfg}
	s.peers = append(s.peers, peer)
	// Plain HTTP to a relay's /info through the peer: listening and
	// reaching a relay.
	if err := waitReady(p, 15*time.Second, func() error { return httpOK("http://" + addr + "/info") }); err != nil {
		return nil, err
	}
	if _, err := peer.Pids(); err != nil {
		return nil, err
	}
	s.Peers = append(s.Peers, peer)
	return peer, nil
}

// Pids are the processes whose memory and CPU are the peer's: HAProxy's
// one process; nginx's master and its worker(s), master first. The worker
// does the proxying; the master only supervises it.
func (p *Peer) Pids() ([]int, error) {
	pids := []int{p.Pid()}
	if p.Kind != Nginx {
		return pids, nil
	}
	// The master forks its worker after it has read the config; poll
	// briefly for it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		kids, err := probe.Children(p.Pid())
		if err != nil {
			return nil, err
		}
		if len(kids) > 0 {
			p.workers = kids
			return append(pids, kids...), nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("nginx (pid %d) has no worker after 5s (log %s)", p.Pid(), p.Log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the peer by its PID (nginx's master stops its worker on
// SIGTERM), then kills by its PID any nginx worker still there: a master
// killed after the grace period leaves its worker behind.
func (p *Peer) Stop(grace time.Duration) {
	p.Proc.Stop(grace)
	for _, pid := range p.workers {
		st, err := probe.ReadStat(pid)
		if err != nil || st.Comm != "nginx" || st.PPID == p.Pid() {
			continue // gone (or the PID reused by another program)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// PeerCheck writes the config of peer kind (executable bin) into dir, for
// two made-up relays, and runs the peer's own config check on it (nginx -t,
// haproxy -c). It returns the check's output.
func PeerCheck(kind, bin, dir string) (string, error) {
	addr, err := FreeAddr()
	if err != nil {
		return "", err
	}
	_, args, err := PeerArgs(kind, dir, addr, []string{"127.0.0.1:1", "127.0.0.1:2"}, true)
	if err != nil {
		return "", err
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w", bin, strings.Join(args, " "), err)
	}
	return string(out), nil
}
