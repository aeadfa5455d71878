package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/wsgate/wsgate/internal/discovery"
)

// Defaults of the -register-* flags.
const (
	defaultRegisterPrefix = "wsgate:relays"
	defaultRegisterTTL    = 10 * time.Second
	minRegisterTTL        = 300 * time.Millisecond
)

// registration is the -register-* and -advertise flags: the relay keeps a
// heartbeat key PREFIX:ADDR in Redis (SET with PX ttl, refreshed every
// ttl/3) while it serves, and deletes it when it starts draining, so
// gateways whose pool has [pools.discovery] kind = "redis" find it and
// let it go.
type registration struct {
	redisURL  string
	prefix    string
	advertise string
	ttl       time.Duration
}

// flags defines the registration flags on fs.
func (g *registration) flags(fs *flag.FlagSet) {
	fs.StringVar(&g.redisURL, "register-redis", "", "Redis URL to register this relay in for gateways' [pools.discovery] kind = \"redis\" (empty: no registration)")
	fs.StringVar(&g.prefix, "register-prefix", defaultRegisterPrefix, "key prefix of the registration: the key is PREFIX:ADDR (the gateway's discovery name)")
	fs.StringVar(&g.advertise, "advertise", "", "host:port gateways dial to reach this relay, the registered ADDR (default: the listener's address, unless it binds every interface)")
	fs.DurationVar(&g.ttl, "register-ttl", defaultRegisterTTL, "lifetime of the registration key, refreshed every third of it; a relay that dies is forgotten once it passes")
}

// check validates the registration flags.
func (g *registration) check() error {
	switch {
	case g.redisURL == "":
		return nil
	case g.prefix == "":
		return errors.New("-register-prefix must not be empty")
	case g.ttl < minRegisterTTL:
		return fmt.Errorf("-register-ttl must be at least %s, got %s", minRegisterTTL, g.ttl)
	}
	if _, err := redis.ParseURL(g.redisURL); err != nil {
		return fmt.Errorf("-register-redis: %w", err)
	}
	if g.advertise != "" {
		if _, _, err := net.SplitHostPort(g.advertise); err != nil {
			return fmt.Errorf("-advertise must be host:port, got %q", g.advertise)
		}
	}
	return nil
}

// addr is the address to register for a relay listening on ln.
func (g *registration) addr(ln net.Addr) (string, error) {
	if g.advertise != "" {
		return g.advertise, nil
	}
	ap, err := netip.ParseAddrPort(ln.String())
	if err != nil || ap.Addr().IsUnspecified() {
		return "", fmt.Errorf("-advertise is required with -register-redis when the listener (%s) binds every interface", ln)
	}
	return ap.String(), nil
}

// start registers the relay listening on ln, with its id as the key's
// value, and keeps the key alive until the returned function is called;
// that function deletes the key and returns once it is gone (or Redis did
// not answer within a few seconds). A Redis that does not answer is
// logged and tried again at the next refresh: the relay serves anyway.
func (g *registration) start(ln net.Addr, id string, log *slog.Logger) (func(), error) {
	if g.redisURL == "" {
		return func() {}, nil
	}
	addr, err := g.addr(ln)
	if err != nil {
		return nil, err
	}
	opt, err := redis.ParseURL(g.redisURL)
	if err != nil {
		return nil, fmt.Errorf("-register-redis: %w", err)
	}
	c := redis.NewClient(opt)
	key := discovery.Key(g.prefix, addr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go g.heartbeat(ctx, c, key, id, log, done)
	log.Info("registering for discovery", "key", key, "ttl", g.ttl)
	return func() {
		cancel()
		<-done
		dctx, dcancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer dcancel()
		if err := c.Del(dctx, key).Err(); err != nil {
			log.Warn("registration not deleted; it expires with its ttl", "key", key, "err", err)
		} else {
			log.Info("deregistered from discovery", "key", key)
		}
		_ = c.Close()
	}, nil
}

// heartbeat sets key every ttl/3 until ctx ends, logging the first of a
// run of failures and the recovery after it.
func (g *registration) heartbeat(ctx context.Context, c *redis.Client, key, id string, log *slog.Logger, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(g.ttl / 3)
	defer tick.Stop()
	failing := false
	for {
		sctx, cancel := context.WithTimeout(ctx, g.ttl/3)
		err := c.Set(sctx, key, id, g.ttl).Err()
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			failing = true
			log.Warn("registration not refreshed; trying again", "key", key, "err", err)
		case err == nil && failing:
			failing = false
			log.Info("registration refreshed again", "key", key)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
