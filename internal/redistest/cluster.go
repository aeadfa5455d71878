package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of three masters and three replicas started
// by StartCluster, with a cluster-node-timeout of 1 s so a replica takes
// over a lost master within seconds.
type Cluster struct {
	// Nodes are the six servers; redis-cli made the first three masters
	// and the last three their replicas, but a failover changes that.
	Nodes []*Server
}

// StartCluster starts six cluster-enabled servers on loopback, joins them
// with `redis-cli --cluster create --cluster-replicas 1`, and waits (at
// most 30 s) until every node reports cluster_state:ok, every replica's
// link to its master is up, and every node's CLUSTER NODES shows the three
// replicas (gossip tells the others of a replica after its link is up:
// until then a test that reads a shard's members from one node misses it). The servers are stopped by PID when the test
// ends; if it failed, their output (at log level notice) is printed first.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	need(tb, CLI)
	c := &Cluster{}
	for range 6 {
		// The bus port defaults to the port + 10000, past 65535 for a
		// high ephemeral port: it gets a free port of its own.
		bus, err := freePort()
		if err != nil {
			tb.Fatal(err)
		}
		c.Nodes = append(c.Nodes, StartArgs(tb, "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "1000",
			// A replica takes over however long its link was down.
			"--cluster-replica-validity-factor", "0",
			// A replica's first sync starts at once, not after 5 s.
			"--repl-diskless-sync-delay", "0",
			// Elections, failovers and resyncs are logged at notice.
			"--loglevel", "notice"))
	}
	// Registered after the servers' own cleanups, so it runs before they
	// are stopped.
	tb.Cleanup(func() {
		if tb.Failed() {
			for _, n := range c.Nodes {
				tb.Logf("--- redis-server %s output:\n%s", n.Addr, n.Log())
			}
		}
	})
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(CLI, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		for {
			info, err := Cmd(n.Addr, "CLUSTER", "INFO")
			repl, rerr := Cmd(n.Addr, "INFO", "replication")
			nodes, nerr := Cmd(n.Addr, "CLUSTER", "NODES")
			if err == nil && rerr == nil && nerr == nil && strings.Contains(info, "cluster_state:ok") &&
				(strings.Contains(repl, "role:master") || strings.Contains(repl, "master_link_status:up")) &&
				strings.Count(nodes, " slave ")+strings.Count(nodes, ",slave ") == 3 {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("cluster node %s not ready within 30s: %v %v %v\n%s\n%s\n%s", n.Addr, err, rerr, nerr, info, repl, nodes)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr)
	}
	return a
}

// Seeds returns the nodes' addresses joined with commas, as the
// relay-backend's -redis-cluster flag takes them.
func (c *Cluster) Seeds() string { return strings.Join(c.Addrs(), ",") }

// Cmd runs one command on the server at addr with redis-cli and returns
// its reply as redis-cli prints it (raw, one line per element).
func Cmd(addr string, args ...string) (string, error) {
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(CLI, append([]string{"--raw", "-h", host, "-p", port}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("redis-cli %s on %s: %w", strings.Join(args, " "), addr, err)
	}
	return string(out), nil
}

// StartSentinel starts a Sentinel that watches master under name with a
// quorum of 1 and a down-after of 1 s, and waits until it answers PING.
// Several of them (each with quorum 1) watch one master independently.
func StartSentinel(tb testing.TB, name string, master *Server) *Server {
	tb.Helper()
	host, port, _ := strings.Cut(master.Addr, ":")
	conf := filepath.Join(tb.TempDir(), "sentinel.conf")
	text := fmt.Sprintf("sentinel monitor %[1]s %s %s 1\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 10000\n", name, host, port)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		tb.Fatal(err)
	}
	return StartArgs(tb, conf, "--sentinel")
}
