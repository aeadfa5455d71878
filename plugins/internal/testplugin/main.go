// Command testplugin is an auth plugin for the host's tests: its config
// picks allow or deny, the request path picks a misbehaviour (/hang,
// /slow, /crash, /error, /bad-header) or a 401 whose response headers are
// the query's parameters (/deny-headers), and every decision carries the
// plugin's pid and call count so a test can see which process answered
// and whether the call reached it, and the client address it was given.
// On a TLS listener it also reports the request's TLS info (see
// tlsHeaders).
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/plugins/auth"
)

type config struct {
	Deny       bool          `json:"deny"`
	Status     int           `json:"status"`
	Tag        string        `json:"tag"`
	CacheKey   []string      `json:"cache_key"`
	CacheTTL   auth.Duration `json:"cache_ttl"`
	BadConfig  bool          `json:"bad_config"`
	SlowFor    auth.Duration `json:"slow_for"`
	HeaderName string        `json:"header_name"`
	// StartedFile, when set, is created as Configure begins, holding the
	// plugin's pid; Configure then waits until ReleaseFile exists (a
	// plugin slow to start).
	StartedFile string `json:"started_file"`
	ReleaseFile string `json:"release_file"`
}

type testAuth struct {
	cfg   config
	calls atomic.Int64
}

func (a *testAuth) Configure(ctx context.Context, raw map[string]any) error {
	if err := auth.DecodeConfig(raw, &a.cfg); err != nil {
		return err
	}
	if a.cfg.BadConfig {
		return fmt.Errorf("%w: bad_config is set", auth.ErrInvalidConfig)
	}
	if a.cfg.StartedFile != "" {
		if err := os.WriteFile(a.cfg.StartedFile, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			return err
		}
		for {
			if _, err := os.Stat(a.cfg.ReleaseFile); err == nil {
				break
			}
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if a.cfg.HeaderName == "" {
		a.cfg.HeaderName = "X-Tag"
	}
	log.Printf("testplugin configured tag=%s", a.cfg.Tag)
	return nil
}

func (a *testAuth) CacheKey() []string { return a.cfg.CacheKey }

func (a *testAuth) Authenticate(ctx context.Context, req *auth.Request) (*auth.Decision, error) {
	n := a.calls.Add(1)
	switch req.Path {
	case "/hang":
		select {} // ignores ctx, as a stuck plugin would
	case "/slow":
		select {
		case <-time.After(a.cfg.SlowFor.Duration):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case "/crash":
		os.Exit(3)
	case "/error":
		return nil, errors.New("backend down")
	case "/bad-header":
		return auth.Allow(map[string]string{"X-Evil": "a\r\nX-Injected: 1"}), nil
	case "/nil":
		return nil, nil
	case "/deny-headers":
		d := auth.Deny(401, "denied with headers")
		d.ResponseHeaders = map[string]string{}
		for k, v := range req.Query() {
			d.ResponseHeaders[k] = v[0]
		}
		return d, nil
	}
	h := map[string]string{
		a.cfg.HeaderName: a.cfg.Tag,
		"X-Pid":          strconv.Itoa(os.Getpid()),
		"X-Calls":        strconv.FormatInt(n, 10),
		"X-Client-Addr":  req.ClientAddr,
	}
	tlsHeaders(h, req.TLS)
	if a.cfg.Deny {
		d := auth.Deny(a.cfg.Status, "denied by "+a.cfg.Tag)
		d.CacheTTL = a.cfg.CacheTTL.Duration
		return d, nil
	}
	d := auth.Allow(h)
	d.CacheTTL = a.cfg.CacheTTL.Duration
	d.Subject = a.cfg.Tag
	return d, nil
}

func main() { auth.Serve(&testAuth{}) }

// tlsHeaders reports what the plugin learnt of the client's TLS connection
// in headers to the node: version, server name, ALPN, and the verified
// client certificate's subject, SANs and chain length.
func tlsHeaders(h map[string]string, t *auth.TLSInfo) {
	if t == nil {
		return
	}
	h["X-TLS-Version"] = t.Version
	h["X-TLS-Server-Name"] = t.ServerName
	h["X-TLS-ALPN"] = t.NegotiatedProtocol
	certs, err := t.ParsePeerCertificates()
	if err != nil || len(certs) == 0 {
		return
	}
	leaf := certs[0]
	sans := append([]string(nil), leaf.EmailAddresses...)
	for _, u := range leaf.URIs {
		sans = append(sans, u.String())
	}
	h["X-Client-Subject"] = leaf.Subject.String()
	h["X-Client-SAN"] = strings.Join(sans, ",")
	h["X-Client-Chain"] = strconv.Itoa(len(certs))
}
