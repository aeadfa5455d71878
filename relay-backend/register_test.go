package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/wsgate/wsgate/internal/redistest"
)

// TestRegisterFlags checks the -register-* and -advertise flags.
func TestRegisterFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string // "" = accepted
	}{
		{nil, ""},
		{[]string{"-register-redis", "redis://127.0.0.1:6379/0"}, ""},
		{[]string{"-register-redis", "redis://127.0.0.1:6379/0", "-register-ttl", "100ms"}, "-register-ttl must be at least 300ms"},
		{[]string{"-register-redis", "redis://127.0.0.1:6379/0", "-register-prefix", ""}, "-register-prefix must not be empty"},
		{[]string{"-register-redis", "http://127.0.0.1:6379"}, "-register-redis"},
		{[]string{"-register-redis", "redis://127.0.0.1:6379/0", "-advertise", "relay-0"}, "-advertise must be host:port"},
		{[]string{"-register-redis", "redis://127.0.0.1:6379/0", "-advertise", "relay-0.relay:7001"}, ""},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: err %v, want %q", tc.args, err, tc.err)
		}
	}
	var g registration
	if _, err := g.addr(&net.TCPAddr{IP: net.IPv4zero, Port: 7001}); err == nil {
		t.Error("a listener on every interface registered without -advertise")
	}
	if a, err := g.addr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7001}); a != "127.0.0.1:7001" || err != nil {
		t.Errorf("addr %q %v", a, err)
	}
}

// TestRegistrationKey registers in a real redis-server: the key is set
// with its TTL, refreshed before it passes, and gone once stopped.
func TestRegistrationKey(t *testing.T) {
	rs := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	ctx := context.Background()
	g := registration{redisURL: rs.URL(), prefix: "wsgate:relays", ttl: 600 * time.Millisecond}
	stop, err := g.start(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7001}, "relay-1", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	const key = "wsgate:relays:127.0.0.1:7001"
	deadline := time.Now().Add(10 * time.Second)
	for c.Get(ctx, key).Val() != "relay-1" {
		if time.Now().After(deadline) {
			t.Fatal("key never set")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Refreshed: its remaining lifetime goes back up, again and again.
	refreshes, last := 0, time.Duration(0)
	for refreshes < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d refreshes seen", refreshes)
		}
		ttl := c.PTTL(ctx, key).Val()
		if ttl > g.ttl {
			t.Fatalf("PTTL %v above the ttl %v", ttl, g.ttl)
		}
		if ttl > last && last > 0 {
			refreshes++
		}
		last = ttl
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if n := c.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("key still there after stop")
	}
}
