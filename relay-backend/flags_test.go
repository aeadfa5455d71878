package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// TestRedisFlags: -redis, -redis-cluster and -redis-sentinel exclude each
// other, and each is parsed into its target or refused with its name; so
// is -redis-wait-replicas with -redis-wait-timeout.
func TestRedisFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		err     string // substring; "" for success
		url     string
		cluster []string
		master  string
		sents   []string
		waitN   int
	}{
		{name: "none", args: nil},
		{name: "url", args: []string{"-redis", "redis://127.0.0.1:6379/0"}, url: "redis://127.0.0.1:6379/0"},
		{name: "cluster", args: []string{"-redis-cluster", "127.0.0.1:7000, 127.0.0.1:7001"},
			cluster: []string{"127.0.0.1:7000", "127.0.0.1:7001"}},
		{name: "sentinel", args: []string{"-redis-sentinel", "relay@127.0.0.1:26379,127.0.0.1:26380"},
			master: "relay", sents: []string{"127.0.0.1:26379", "127.0.0.1:26380"}},
		{name: "url and cluster", args: []string{"-redis", "redis://x:1/0", "-redis-cluster", "x:1"},
			err: "-redis, -redis-cluster and -redis-sentinel exclude each other"},
		{name: "cluster and sentinel", args: []string{"-redis-cluster", "x:1", "-redis-sentinel", "m@x:2"},
			err: "exclude each other"},
		{name: "cluster without port", args: []string{"-redis-cluster", "127.0.0.1"},
			err: `-redis-cluster: address "127.0.0.1" is not host:port`},
		{name: "cluster empty item", args: []string{"-redis-cluster", "x:1,"},
			err: `-redis-cluster: address "" is not host:port`},
		{name: "sentinel without master", args: []string{"-redis-sentinel", "127.0.0.1:26379"},
			err: `-redis-sentinel: "127.0.0.1:26379" is not MASTER@ADDR[,ADDR...]`},
		{name: "sentinel empty master", args: []string{"-redis-sentinel", "@127.0.0.1:26379"},
			err: "is not MASTER@ADDR"},
		{name: "sentinel bad address", args: []string{"-redis-sentinel", "m@127.0.0.1:"},
			err: `-redis-sentinel: address "127.0.0.1:" is not host:port`},
		{name: "wait", args: []string{"-redis-cluster", "x:1", "-redis-wait-replicas", "1", "-redis-wait-timeout", "1ms"},
			cluster: []string{"x:1"}, waitN: 1},
		{name: "wait negative", args: []string{"-redis", "redis://x:1/0", "-redis-wait-replicas", "-1"},
			err: "-redis-wait-replicas must be 0 (off) or positive, got -1"},
		{name: "wait without redis", args: []string{"-redis-wait-replicas", "1"},
			err: "-redis-wait-replicas needs -redis, -redis-cluster or -redis-sentinel"},
		{name: "wait timeout too short", args: []string{"-redis", "redis://x:1/0", "-redis-wait-replicas", "1", "-redis-wait-timeout", "999us"},
			err: "-redis-wait-timeout must be at least 1ms, got 999µs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, io.Discard)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := c.redis
			if r.URL != tc.url || !slices.Equal(r.Cluster, tc.cluster) || r.SentinelMaster != tc.master || !slices.Equal(r.Sentinels, tc.sents) || c.waitN != tc.waitN {
				t.Fatalf("target %+v", r)
			}
		})
	}
}

// TestH2MaxStreamsFlag: -h2-max-streams defaults to the relay's default
// and takes 1..2^31-1 (SETTINGS_MAX_CONCURRENT_STREAMS is a uint32; the
// relay's Options field an int).
func TestH2MaxStreamsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
		err  string
	}{
		{nil, 1000, ""},
		{[]string{"-h2-max-streams", "1"}, 1, ""},
		{[]string{"-h2-max-streams", "0"}, 0, "-h2-max-streams must be 1..2147483647, got 0"},
		{[]string{"-h2-max-streams", "2147483648"}, 0, "got 2147483648"},
	} {
		c, err := parseFlags(tc.args, io.Discard)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.err)
		case tc.err == "" && (err != nil || c.h2Streams != tc.want):
			t.Errorf("%v: %d, %v; want %d", tc.args, c.h2Streams, err, tc.want)
		}
	}
}

func TestTLSFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{nil, ""},
		{[]string{"-tls-cert", "c.pem", "-tls-key", "k.pem"}, ""},
		{[]string{"-tls-cert", "c.pem", "-tls-key", "k.pem", "-tls-client-ca", "ca.pem"}, ""},
		{[]string{"-tls-cert", "c.pem"}, "-tls-cert and -tls-key go together"},
		{[]string{"-tls-key", "k.pem"}, "-tls-cert and -tls-key go together"},
		{[]string{"-tls-client-ca", "ca.pem"}, "-tls-client-ca needs -tls-cert and -tls-key"},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || err.Error() != tc.err) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.err)
		}
	}
	var f tlsFlags
	f.cert, f.key = "/nonexistent.crt", "/nonexistent.key"
	if _, err := f.wrap(nil); err == nil || !strings.Contains(err.Error(), "-tls-cert/-tls-key") {
		t.Errorf("missing files: %v", err)
	}
}
