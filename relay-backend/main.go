// Command relay-backend is the reference WebSocket relay behind the wsgate
// gateway: rooms of clients, a durable room log in Redis (epochs, offsets,
// Streams) published to every replica, relay.v1 resume and acknowledgements
// (docs/protocol.md), and a graceful 1001 drain on SIGTERM or SIGINT. Its
// port speaks HTTP/1.1 and cleartext HTTP/2 with prior knowledge, whose
// extended CONNECT streams (RFC 8441) carry WebSockets too. When
// Redis stops answering it closes its clients with 1012 and answers
// /healthz and joins with 503 until Redis is back; it does not exit.
//
// Usage:
//
//	relay-backend [-listen 127.0.0.1:7001] [-redis redis://127.0.0.1:6379/0
//	              | -redis-cluster ADDR[,ADDR...] | -redis-sentinel MASTER@ADDR[,ADDR...]]
//	              [-redis-wait-replicas 0] [-redis-wait-timeout 200ms]
//	              [-drain-window 5s] [-id NAME] [-room-prefix /room/]
//	              [-send-queue 256] [-max-message 1048576] [-max-members 10000]
//	              [-history 1000] [-history-ttl 24h] [-weight 0] [-h2-max-streams 1000]
//	              [-register-redis URL] [-register-prefix wsgate:relays]
//	              [-register-ttl 10s] [-advertise HOST:PORT]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/internal/rlimit"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
	"github.com/wsgate/wsgate/relay-backend/roomlog"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], log); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		log.Error("relay-backend failed", "err", err)
		os.Exit(1)
	}
}

type config struct {
	listen      string
	redisURL    string          // -redis; after parseFlags, c.redis as text
	redis       bus.RedisTarget // from -redis, -redis-cluster or -redis-sentinel
	waitN       int             // -redis-wait-replicas
	waitFor     time.Duration   // -redis-wait-timeout
	drainWindow time.Duration
	id          string
	roomPrefix  string
	sendQueue   int
	maxMessage  int64
	maxMembers  int
	history     int
	historyTTL  time.Duration
	weight      int
	h2Streams   int
	tls         tlsFlags     // -tls-cert, -tls-key, -tls-client-ca (tls.go)
	register    registration // -register-* and -advertise (register.go)
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("relay-backend", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:7001", "address to listen on")
	fs.StringVar(&c.redisURL, "redis", "", "Redis URL for the bus between replicas, e.g. redis://127.0.0.1:6379/0 (empty: single replica, in-process bus)")
	var cluster, sentinel string
	fs.StringVar(&cluster, "redis-cluster", "", "seed addresses of a Redis Cluster, ADDR[,ADDR...] (instead of -redis)")
	fs.StringVar(&sentinel, "redis-sentinel", "", "a Redis master found through Sentinel, MASTER@ADDR[,ADDR...] (instead of -redis)")
	fs.IntVar(&c.waitN, "redis-wait-replicas", 0, "replicas that must acknowledge each committed message (Redis WAIT) before its relay.v1 ACK; fewer closes the sender with 1011 (0: no wait)")
	fs.DurationVar(&c.waitFor, "redis-wait-timeout", roomlog.DefaultWaitTimeout, "longest wait for -redis-wait-replicas")
	fs.DurationVar(&c.drainWindow, "drain-window", relay.DefaultDrainWindow, "window over which the 1001 closes of a drain are spread")
	fs.StringVar(&c.id, "id", "", `replica name shown in /info and hello frames (default "<hostname>:<port>")`)
	fs.StringVar(&c.roomPrefix, "room-prefix", relay.DefaultRoomPrefix, "path prefix before the room id")
	fs.IntVar(&c.sendQueue, "send-queue", relay.DefaultSendQueue, "messages queued per client before it is closed as a slow consumer (1013)")
	fs.Int64Var(&c.maxMessage, "max-message", relay.DefaultMaxMessage, "largest client message in bytes; a bigger one closes the client with 1009")
	fs.IntVar(&c.maxMembers, "max-members", relay.DefaultMaxMembers, "members per room on this replica; the next join gets HTTP 503")
	fs.IntVar(&c.history, "history", roomlog.DefaultHistory, "messages retained per room for replay (MAXLEN ~)")
	fs.DurationVar(&c.historyTTL, "history-ttl", roomlog.DefaultTTL, "a room's log expires after this idle time")
	fs.IntVar(&c.weight, "weight", 0, "weight announced in /healthz's Wsgate-Agent header, 1..1000 (0: not announced)")
	fs.IntVar(&c.h2Streams, "h2-max-streams", relay.DefaultH2MaxStreams, "WebSockets one HTTP/2 connection may carry at once (SETTINGS_MAX_CONCURRENT_STREAMS); beyond it a stream is refused")
	c.register.flags(fs)
	c.tls.flags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := c.register.check(); err != nil {
		return c, err
	}
	if err := c.tls.check(); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.drainWindow <= 0:
		return c, fmt.Errorf("-drain-window must be positive, got %s", c.drainWindow)
	case !strings.HasPrefix(c.roomPrefix, "/"):
		return c, fmt.Errorf("-room-prefix must start with /, got %q", c.roomPrefix)
	case c.sendQueue <= 0:
		return c, fmt.Errorf("-send-queue must be positive, got %d", c.sendQueue)
	case c.maxMessage <= 0:
		return c, fmt.Errorf("-max-message must be positive, got %d", c.maxMessage)
	case c.maxMembers <= 0:
		return c, fmt.Errorf("-max-members must be positive, got %d", c.maxMembers)
	case c.history <= 0:
		return c, fmt.Errorf("-history must be positive, got %d", c.history)
	case c.historyTTL < time.Millisecond:
		return c, fmt.Errorf("-history-ttl must be at least 1ms, got %s", c.historyTTL)
	case c.weight < 0 || c.weight > 1000:
		return c, fmt.Errorf("-weight must be 0 (off) or 1..1000, got %d", c.weight)
	case c.h2Streams <= 0 || c.h2Streams > 1<<31-1:
		return c, fmt.Errorf("-h2-max-streams must be 1..2147483647, got %d", c.h2Streams)
	}
	if err := c.parseRedis(cluster, sentinel); err != nil {
		return c, err
	}
	switch {
	case c.waitN < 0:
		return c, fmt.Errorf("-redis-wait-replicas must be 0 (off) or positive, got %d", c.waitN)
	case c.waitN > 0 && c.redisURL == "":
		return c, errors.New("-redis-wait-replicas needs -redis, -redis-cluster or -redis-sentinel")
	case c.waitFor < time.Millisecond:
		return c, fmt.Errorf("-redis-wait-timeout must be at least 1ms, got %s", c.waitFor)
	}
	return c, nil
}

// parseRedis sets c.redis from -redis, -redis-cluster and -redis-sentinel,
// of which at most one may be set.
func (c *config) parseRedis(cluster, sentinel string) error {
	n := 0
	for _, v := range []string{c.redisURL, cluster, sentinel} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		return errors.New("-redis, -redis-cluster and -redis-sentinel exclude each other: set one")
	}
	var err error
	switch {
	case c.redisURL != "":
		c.redis.URL = c.redisURL
	case cluster != "":
		if c.redis.Cluster, err = bus.ParseAddrs(cluster); err != nil {
			return fmt.Errorf("-redis-cluster: %w", err)
		}
	case sentinel != "":
		if c.redis.SentinelMaster, c.redis.Sentinels, err = bus.ParseSentinel(sentinel); err != nil {
			return fmt.Errorf("-redis-sentinel: %w", err)
		}
	}
	c.redisURL = c.redis.String() // non-empty: Redis is in use
	return nil
}

// run serves until ctx ends (a signal), then drains and returns nil.
func run(ctx context.Context, args []string, log *slog.Logger) error {
	c, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	raiseFileLimit(log)

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	if ln, err = c.tls.wrap(ln); err != nil {
		return err
	}
	if c.id == "" {
		host, _ := os.Hostname()
		c.id = net.JoinHostPort(host, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	}

	var (
		b  bus.Bus
		rl relay.Log
	)
	if c.redisURL == "" {
		mb := bus.NewMemory()
		b = mb.Endpoint()
		rl = roomlog.Shared(mb, roomlog.MemoryOptions{History: c.history, TTL: c.historyTTL})
	} else {
		// One client for the bus and the room log.
		client, err := c.redis.Client()
		if err != nil {
			return fmt.Errorf("connect redis: %w", err)
		}
		defer client.Close()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rb, err := bus.NewRedis(rctx, bus.RedisOptions{Client: client, Logger: log})
		if err != nil {
			cancel()
			return fmt.Errorf("connect bus to %s: %w", c.redis, err)
		}
		defer rb.Close()
		lg, err := roomlog.NewRedis(rctx, roomlog.RedisOptions{Client: client, History: c.history, TTL: c.historyTTL,
			WaitReplicas: c.waitN, WaitTimeout: c.waitFor})
		cancel()
		if err != nil {
			return fmt.Errorf("connect room log: %w", err)
		}
		defer lg.Close()
		b, rl = rb, lg
	}

	r := relay.New(relay.Options{
		ID:           c.id,
		Bus:          b,
		Log:          rl,
		MaxMembers:   c.maxMembers,
		Weight:       c.weight,
		RoomPrefix:   c.roomPrefix,
		SendQueue:    c.sendQueue,
		MaxMessage:   c.maxMessage,
		DrainWindow:  c.drainWindow,
		Logger:       log,
		H2MaxStreams: c.h2Streams,
	})
	served := make(chan error, 1)
	go func() { served <- r.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String(), "id", c.id, "redis", c.redisURL != "")
	deregister, err := c.register.start(ln.Addr(), c.id, log)
	if err != nil {
		return err
	}

	select {
	case err := <-served:
		deregister()
		return err
	case <-ctx.Done():
	}
	log.Info("signal received, draining", "window", c.drainWindow)
	deregister() // gateways stop sending clients here, and drain theirs
	dctx, cancel := context.WithTimeout(context.Background(), c.drainWindow+10*time.Second)
	defer cancel()
	if err := r.Drain(dctx); err != nil {
		log.Warn("drain incomplete", "err", err)
	}
	if err := r.Close(dctx); err != nil {
		log.Warn("close", "err", err)
	}
	log.Info("stopped", "info", r.Info())
	return nil
}

// raiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit: every
// client is a file descriptor and the usual soft limit of 1024 is far too low.
func raiseFileLimit(log *slog.Logger) {
	soft, hard, err := rlimit.RaiseNoFile()
	if err != nil {
		log.Warn("open-file limit not raised", "err", err)
	}
	log.Info("open-file limit", "soft", soft, "hard", hard)
}
