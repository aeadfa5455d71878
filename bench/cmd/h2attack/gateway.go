package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wsgate/wsgate/bench/internal/probe"
	"github.com/wsgate/wsgate/bench/internal/stack"
)

// buildGateway compiles ./cmd/wsgate from the working directory (the
// module's root) into dir.
func buildGateway(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "wsgate")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/wsgate")
	if o, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/wsgate (run from the module's root, or give -gateway): %w\n%s", err, o)
	}
	return out, nil
}

// gateway is one wsgate started for a run.
type gateway struct {
	proc             *stack.Proc
	addr, tls, admin string // plain, TLS (h2) and admin listeners
	log              string
}

// gatewayNodes are the nodes a run's gateway is configured with.
type gatewayNodes struct {
	echo  string // http1: WebSocket echo, GETs, POSTs; the victims' pool
	reset string // http1: the rapid reset's WebSocket streams
	flood string // h2, one connection: the flooding node
}

// gatewayConfig is wsgate's config for a run: the defaults but for an
// admin listener, a TLS listener with h2, health probes every 200 ms that
// mark a node up at once, and three pools (see gatewayNodes) routed by
// path: /flood, /rr, and everything else to the echo pool.
func gatewayConfig(addr, tlsAddr, admin, certFile, keyFile string, n gatewayNodes) string {
	health := "  [pools.health]\n  interval = \"200ms\"\n  timeout = \"200ms\"\n  rise = 1\n"
	return fmt.Sprintf(`[gateway]
listen = %q
[gateway.tls]
listen = %q
h2 = true
[[gateway.tls.certificates]]
cert_file = %q
key_file = %q
[admin]
listen = %q
[[pools]]
name = "echo"
%s  [[pools.nodes]]
  addr = %q
[[pools]]
name = "reset"
%s  [[pools.nodes]]
  addr = %q
[[pools]]
name = "flood"
protocol = "h2"
h2_connections = 1
%s  [[pools.nodes]]
  addr = %q
[[routes]]
path_prefix = "/flood"
pool = "flood"
[[routes]]
path_prefix = "/rr"
pool = "reset"
[[routes]]
path_prefix = "/"
pool = "echo"
`, addr, tlsAddr, certFile, keyFile, admin, health, n.echo, health, n.reset, health, n.flood)
}

// startGateway starts bin with gatewayConfig in dir and waits until its
// admin listener says it is ready.
func startGateway(bin, dir, name, certFile, keyFile string, n gatewayNodes) (*gateway, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := stack.FreeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	g := &gateway{addr: addrs[0], tls: addrs[1], admin: addrs[2], log: filepath.Join(dir, name+".log")}
	cfg := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(cfg, []byte(gatewayConfig(g.addr, g.tls, g.admin, certFile, keyFile, n)), 0o644); err != nil {
		return nil, err
	}
	p, err := stack.Start(name, g.log, bin, "-config", cfg)
	if err != nil {
		return nil, err
	}
	g.proc = p
	hc := &http.Client{Timeout: time.Second}
	for i := 0; ; i++ {
		select {
		case <-p.Done():
			return nil, fmt.Errorf("wsgate exited at start (log %s)", g.log)
		default:
		}
		if resp, err := hc.Get("http://" + g.admin + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g, nil
			}
		}
		if i == 150 {
			p.Stop(time.Second)
			return nil, fmt.Errorf("wsgate not ready after 15s (log %s)", g.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop stops the gateway by its PID.
func (g *gateway) stop() { g.proc.Stop(5 * time.Second) }

// metric sums the samples of the gateway's metric name whose labels
// contain every one of labels (`result="client_gone"`); 0 if none.
func (g *gateway) metric(name string, labels ...string) (float64, error) {
	resp, err := http.Get("http://" + g.admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return 0, err
	}
	return sumMetric(b, name, labels...), nil
}

// sumMetric sums the samples of name in a Prometheus text exposition whose
// labels contain every one of labels.
func sumMetric(text []byte, name string, labels ...string) float64 {
	var sum float64
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		lbl := ""
		if rest[0] == '{' {
			j := strings.IndexByte(rest, '}')
			if j < 0 {
				continue
			}
			lbl, rest = rest[:j], rest[j+1:]
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(lbl, l)
		}
		f := strings.Fields(rest)
		if !match || len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// logLines counts the lines of the gateway's log so far.
func (g *gateway) logLines() int {
	b, err := os.ReadFile(g.log)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte{'\n'})
}

// meter watches the gateway over an attack: RSS (sampled, and VmHWM
// after resetting it) and CPU time.
type meter struct {
	pid         int
	start       time.Time
	rssBefore   int64
	cpu0, self0 time.Duration
	log0        int
	stop        chan struct{}
	done        chan struct{}
	mu          sync.Mutex
	samples     []rssSample
}

type rssSample struct {
	at  time.Duration
	rss int64
}

// startMeter reads the gateway's RSS and CPU, resets its VmHWM (writing 5
// to /proc/PID/clear_refs; where that fails, the samples alone give the
// peak) and samples VmRSS every 25 ms until end.
func startMeter(g *gateway) (*meter, error) {
	pid := g.proc.Pid()
	m := &meter{pid: pid, stop: make(chan struct{}), done: make(chan struct{}), log0: g.logLines()}
	var err error
	if m.rssBefore, err = probe.RSS(pid); err != nil {
		return nil, err
	}
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	if m.cpu0, err = probe.CPU(pid); err != nil {
		return nil, err
	}
	if m.self0, err = probe.CPU(os.Getpid()); err != nil {
		return nil, err
	}
	m.start = time.Now()
	go func() {
		defer close(m.done)
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := probe.RSS(pid); err == nil {
				m.mu.Lock()
				m.samples = append(m.samples, rssSample{time.Since(m.start), v})
				m.mu.Unlock()
			}
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m, nil
}

// end stops the sampling and fills r's gateway figures.
func (m *meter) end(g *gateway, r *result) error {
	cpu1, err := probe.CPU(m.pid)
	self1, err2 := probe.CPU(os.Getpid())
	r.wall = time.Since(m.start)
	r.selfCPU = self1 - m.self0
	if err == nil {
		err = err2
	}
	close(m.stop)
	<-m.done
	if err != nil {
		return err
	}
	r.cpu = cpu1 - m.cpu0
	r.rssBefore = m.rssBefore
	r.logLines = g.logLines() - m.log0
	half := r.wall / 2
	for _, s := range m.samples {
		r.rssPeak = max(r.rssPeak, s.rss)
		if s.at < half {
			r.rssFirst = max(r.rssFirst, s.rss)
		} else {
			r.rssSecond = max(r.rssSecond, s.rss)
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.pid)); err == nil {
		if hwm, err := parseVmHWM(b); err == nil {
			r.rssPeak = max(r.rssPeak, hwm)
		}
	}
	return nil
}

// parseVmHWM returns the VmHWM line of a /proc/PID/status text in bytes.
func parseVmHWM(status []byte) (int64, error) {
	for line := range strings.SplitSeq(string(status), "\n") {
		rest, ok := strings.CutPrefix(line, "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("parse VmHWM %q", rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse VmHWM %q: %w", rest, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no VmHWM: %w", probe.ErrProbeMissing)
}
