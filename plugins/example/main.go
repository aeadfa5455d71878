// Command example is the smallest useful wsgate auth plugin: it admits a
// client whose X-Demo-Token header equals the configured token, and tells
// the relay who it is with an X-User-Id header.
//
//	[[plugins]]
//	name = "example"
//	path = "bin/plugins/example"
//	  [plugins.config]
//	  token = "let-me-in"
//	  user = "demo-user"
package main

import (
	"context"
	"crypto/subtle"
	"fmt"
	"time"

	"github.com/wsgate/wsgate/plugins/auth"
)

// config is the plugin's [plugins.config] table.
type config struct {
	Token string `json:"token"`
	User  string `json:"user"`
}

// demo implements auth.Authenticator (and auth.CacheKeyer).
type demo struct {
	cfg config // set once by Configure, read-only afterwards
}

func (d *demo) Configure(_ context.Context, raw map[string]any) error {
	if err := auth.DecodeConfig(raw, &d.cfg); err != nil {
		return err
	}
	if d.cfg.Token == "" {
		return fmt.Errorf("%w: token is required", auth.ErrInvalidConfig)
	}
	return nil
}

func (d *demo) Authenticate(_ context.Context, req *auth.Request) (*auth.Decision, error) {
	got := req.Header.Get("X-Demo-Token")
	if got == "" {
		return auth.Deny(401, "missing X-Demo-Token"), nil
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(d.cfg.Token)) != 1 {
		return auth.Deny(403, "wrong token"), nil
	}
	dec := auth.Allow(map[string]string{"X-User-Id": d.cfg.User})
	dec.Subject = d.cfg.User
	dec.CacheTTL = time.Minute
	return dec, nil
}

// CacheKey says a decision depends on the token header only, so the gateway
// may reuse it for a minute for any request carrying the same token.
func (d *demo) CacheKey() []string { return []string{"header:X-Demo-Token"} }

func main() { auth.Serve(&demo{}) }
