package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/wsgate/wsgate/plugins/auth"
)

// errEmpty is load's answer to an empty keys file once keys are loaded.
var errEmpty = errors.New("keys file is empty; keeping the keys loaded (to revoke all, leave a comment line)")

// config is the plugin's [plugins.config] table.
type config struct {
	// File is the keys file; required. A relative path is taken from the
	// directory of the gateway's config file.
	File string `json:"file"`
	// Header carries the key (default "X-Api-Key").
	Header string `json:"header"`
	// Query is the query parameter that carries the key when the header
	// is absent (default "api_key").
	Query string `json:"query"`
	// UserHeader is the upstream header set to the key's user id (default
	// "X-User-Id").
	UserHeader string `json:"user_header"`
	// CacheTTL is how long the gateway may reuse a decision (default
	// "10s"); a key removed from the file keeps working up to this long.
	CacheTTL auth.Duration `json:"cache_ttl"`
}

// apiKeyAuth implements auth.Authenticator. Configure sets the config once;
// the key set is swapped atomically on each reload, so Authenticate is safe
// for concurrent use.
type apiKeyAuth struct {
	cfg  config
	keys atomic.Pointer[keySet]
	sum  [32]byte // SHA-256 of the file last loaded; guarded by mu
	mu   sync.Mutex
}

func (a *apiKeyAuth) Configure(ctx context.Context, raw map[string]any) error {
	a.cfg = config{Header: "X-Api-Key", Query: "api_key", UserHeader: "X-User-Id", CacheTTL: auth.Duration{Duration: 10 * time.Second}}
	if err := auth.DecodeConfig(raw, &a.cfg); err != nil {
		return err
	}
	if a.cfg.File == "" {
		return fmt.Errorf("%w: file is required", auth.ErrInvalidConfig)
	}
	// Relative to the gateway's config file, as the gateway's own paths.
	a.cfg.File = auth.ConfigPath(ctx, a.cfg.File)
	if a.cfg.Header == "" && a.cfg.Query == "" {
		return fmt.Errorf("%w: header and query are both empty", auth.ErrInvalidConfig)
	}
	if a.cfg.CacheTTL.Duration < 0 {
		return fmt.Errorf("%w: cache_ttl is negative", auth.ErrInvalidConfig)
	}
	if err := a.load(); err != nil {
		return fmt.Errorf("%w: %w", auth.ErrInvalidConfig, err)
	}
	if err := a.watch(); err != nil {
		return fmt.Errorf("%w: watch %s: %w", auth.ErrInvalidConfig, a.cfg.File, err)
	}
	return nil
}

// CacheKey implements auth.CacheKeyer: a decision depends on the key only.
func (a *apiKeyAuth) CacheKey() []string {
	var parts []string
	if a.cfg.Header != "" {
		parts = append(parts, "header:"+a.cfg.Header)
	}
	if a.cfg.Query != "" {
		parts = append(parts, "query:"+a.cfg.Query)
	}
	return parts
}

func (a *apiKeyAuth) Authenticate(_ context.Context, req *auth.Request) (*auth.Decision, error) {
	key := ""
	if a.cfg.Header != "" {
		key = req.Header.Get(a.cfg.Header)
	}
	if key == "" && a.cfg.Query != "" {
		key = req.Query().Get(a.cfg.Query)
	}
	if key == "" {
		d := auth.Deny(401, "missing api key")
		d.ResponseHeaders = map[string]string{"WWW-Authenticate": a.challenge()}
		return d, nil
	}
	user, ok := (*a.keys.Load()).lookup(key)
	if !ok {
		d := auth.Deny(403, "unknown api key")
		d.CacheTTL = a.cfg.CacheTTL.Duration
		return d, nil
	}
	d := auth.Allow(map[string]string{a.cfg.UserHeader: user})
	d.Subject = user
	d.CredentialID = auth.CredentialHash(key)
	d.CacheTTL = a.cfg.CacheTTL.Duration
	return d, nil
}

// challenge is the WWW-Authenticate of a 401: the ApiKey scheme (no
// registered scheme names an API key) with where the key is read from.
func (a *apiKeyAuth) challenge() string {
	c := `ApiKey realm="wsgate"`
	if a.cfg.Header != "" {
		c += `, header="` + quoteEscaper.Replace(a.cfg.Header) + `"`
	}
	if a.cfg.Query != "" {
		c += `, query="` + quoteEscaper.Replace(a.cfg.Query) + `"`
	}
	return c
}

// quoteEscaper escapes a value for an HTTP quoted-string.
var quoteEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// load reads and parses the keys file and swaps the key set in. On error
// the previous set stays.
func (a *apiKeyAuth) load() error {
	b, err := os.ReadFile(a.cfg.File)
	if err != nil {
		return err
	}
	if len(b) == 0 && a.keys.Load() != nil {
		// An in-place write truncates before it writes: an empty file is
		// most likely that moment, not a wish to revoke every key (a
		// file with only a comment line does that).
		return errEmpty
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	sum := sha256.Sum256(b)
	if a.keys.Load() != nil && bytes.Equal(sum[:], a.sum[:]) {
		return nil // unchanged
	}
	ks, err := parseKeys(b)
	if err != nil {
		return fmt.Errorf("%s: %w", a.cfg.File, err)
	}
	a.keys.Store(&ks)
	a.sum = sum
	return nil
}

// watch reloads the file on every change in its directory. Watching the
// directory, not the file, catches editors and deploy tools that write a
// new file and rename it over the old one (and Kubernetes' symlink swaps).
func (a *apiKeyAuth) watch() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	if err := w.Add(filepath.Dir(a.cfg.File)); err != nil {
		w.Close()
		return err
	}
	go a.reloadOnChange(w)
	return nil
}

// reloadOnChange runs for the life of the plugin process.
func (a *apiKeyAuth) reloadOnChange(w *fsnotify.Watcher) {
	for {
		select {
		case _, ok := <-w.Events:
			if !ok {
				return
			}
			old := a.keys.Load()
			if err := a.load(); err != nil {
				if !os.IsNotExist(err) && err != errEmpty { // mid-write: the next event brings it
					log.Printf("keys file not reloaded, keeping %d keys: %v", len(*old), err)
				}
				continue
			}
			if now := a.keys.Load(); now != old {
				log.Printf("keys file reloaded: %d keys", len(*now))
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			log.Printf("watching keys file: %v", err)
		}
	}
}

var (
	_ auth.Authenticator = (*apiKeyAuth)(nil)
	_ auth.CacheKeyer    = (*apiKeyAuth)(nil)
)
