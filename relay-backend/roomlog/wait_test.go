package roomlog_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/redistest"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

// startReplicated runs a master and one replica of it, and waits until the
// master counts the replica as online.
func startReplicated(t testing.TB) (master, replica *redistest.Server) {
	master = redistest.StartArgs(t, "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0")
	host, port, _ := strings.Cut(master.Addr, ":")
	replica = redistest.StartArgs(t, "--save", "", "--appendonly", "no", "--replicaof", host, port)
	for i := 0; ; i++ {
		// Online on the master's side: until then WAIT does not count it.
		out, err := redistest.Cmd(master.Addr, "INFO", "replication")
		if err == nil && strings.Contains(out, "state=online") {
			return master, replica
		}
		if i == 400 {
			t.Fatalf("replica %s never linked to %s: %v %s", replica.Addr, master.Addr, err, out)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// TestRedisWaitReplicas checks RedisOptions.WaitReplicas: an Append that
// returns without error is on the replica already; asking for more
// replicas than exist fails with ErrNotReplicated after the commit, which
// keeps its offset; a server that lost the script gets it again.
func TestRedisWaitReplicas(t *testing.T) {
	master, replica := startReplicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	open := func(n int, timeout time.Duration) *roomlog.Redis {
		l, err := roomlog.NewRedis(ctx, roomlog.RedisOptions{URL: master.URL(), WaitReplicas: n, WaitTimeout: timeout})
		if err != nil {
			t.Fatalf("NewRedis: %v", err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	one, two := open(1, time.Second), open(2, 50*time.Millisecond)
	for i := uint64(1); i <= 20; i++ {
		p, err := one.Append(ctx, "r", []byte("m"))
		if err != nil || p.Offset != i {
			t.Fatalf("append %d with one replica: %v %v", i, p, err)
		}
		// Acknowledged by the replica: it holds the entry now.
		if out, err := redistest.Cmd(replica.Addr, "XLEN", "wsgate:{r}:log"); err != nil || strings.TrimSpace(out) != strconv.FormatUint(i, 10) {
			t.Fatalf("replica's stream after append %d: %q %v", i, out, err)
		}
	}
	p, err := two.Append(ctx, "r", []byte("m"))
	if !errors.Is(err, roomlog.ErrNotReplicated) || p.Offset != 21 {
		t.Fatalf("append waiting for 2 of 1 replicas = %v %v, want offset 21 and ErrNotReplicated", p, err)
	}
	if _, err := redistest.Cmd(master.Addr, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if p, err := one.Append(ctx, "r", []byte("m")); err != nil || p.Offset != 22 {
		t.Fatalf("append after SCRIPT FLUSH = %v %v, want offset 22", p, err)
	}
}
