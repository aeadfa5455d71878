package gateway

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"sync"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway/internal/acmecert"
	"github.com/wsgate/wsgate/gateway/internal/edge"
	"github.com/wsgate/wsgate/gateway/internal/pluginhost"
	"github.com/wsgate/wsgate/gateway/internal/upstream"
	"github.com/wsgate/wsgate/plugins/auth"
)

// CheckPlugins starts each auth plugin of cfg, configures it with its
// [plugins.config] table and stops it, as a start or a reload would: it is
// what `wsgate -check` runs after loading the file, so a config a plugin
// rejects fails the check rather than the start. The plugins are checked
// concurrently; their log lines go to log. It returns nil, or one
// *conf.Error per failing plugin (joined, in file order) naming the file,
// the line, the key (plugins[i].config for a rejected config,
// plugins[i].sha256 for a checksum mismatch, plugins[i].path otherwise) and
// the plugin's own error.
func CheckPlugins(cfg *conf.Config, log *slog.Logger) error {
	errs := make([]error, len(cfg.Plugins))
	var wg sync.WaitGroup
	for i, p := range cfg.Plugins {
		wg.Go(func() {
			if _, err := os.Stat(p.Path); errors.Is(err, fs.ErrNotExist) {
				// Say where it looked: the path as resolved, not as written.
				key := pluginKey(i, "path")
				errs[i] = &conf.Error{File: cfg.File, Line: cfg.Line(key), Key: key,
					Msg: fmt.Sprintf("plugin %q: no executable at %s (a relative path is taken from the config file's directory)", p.Name, p.Path)}
				return
			}
			err := pluginhost.Check(p, pluginhost.Options{Logger: log})
			if err == nil {
				return
			}
			key := pluginKey(i, "path")
			switch {
			case errors.Is(err, auth.ErrInvalidConfig):
				key = pluginKey(i, "config")
			case errors.Is(err, pluginhost.ErrChecksum):
				key = pluginKey(i, "sha256")
			}
			errs[i] = &conf.Error{File: cfg.File, Line: cfg.Line(key), Key: key, Msg: err.Error()}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pluginKey is the key path of field of the i-th [[plugins]] entry.
func pluginKey(i int, field string) string {
	return "plugins[" + strconv.Itoa(i) + "]." + field
}

// CheckACME fetches the directory of cfg's [gateway.tls.acme], if it has
// one, as a start would (trusting ca_file), so `wsgate -check` says why a
// gateway could never obtain a certificate: a directory whose HTTPS
// certificate does not verify (a *conf.Error at gateway.tls.acme.ca_file,
// naming the file or saying it is unset), one that cannot be reached or
// does not answer a directory (at gateway.tls.acme.directory). It orders
// nothing and touches no storage; an unreadable ca_file is CheckTLS's to
// report.
func CheckACME(ctx context.Context, cfg *conf.Config) error {
	a := cfg.Gateway.TLS.ACME
	if a == nil || cfg.Gateway.TLS.Listen == "" {
		return nil
	}
	roots, err := acmecert.LoadCAs(a.CAFile)
	if err != nil {
		return nil // CheckTLS says so
	}
	err = acmecert.Probe(ctx, a.Directory, roots, a.CAFile)
	if err == nil {
		return nil
	}
	key := "gateway.tls.acme.directory"
	if errors.Is(err, acmecert.ErrUntrusted) {
		key = "gateway.tls.acme.ca_file"
	}
	return &conf.Error{File: cfg.File, Line: cfg.Line(key), Key: key, Msg: err.Error()}
}

// CheckTLS reads the certificate, key and CA files of cfg's TLS listener
// and of its pools' [pools.tls] as a start would, so `wsgate -check`
// fails on a file the start would fail on. It returns nil, or a
// *conf.Error naming the file, the line and the key
// (gateway.tls.certificates[i], gateway.tls.client_ca_file,
// pools[i].tls.ca_file, ...).
func CheckTLS(cfg *conf.Config) error {
	if _, err := edge.LoadTLS(cfg); err != nil {
		return err
	}
	if a := cfg.Gateway.TLS.ACME; a != nil {
		// ca_file is read as a start would; nothing is ordered, and the
		// storage is not touched.
		if _, err := acmecert.LoadCAs(a.CAFile); err != nil {
			key := "gateway.tls.acme.ca_file"
			return &conf.Error{File: cfg.File, Line: cfg.Line(key), Key: key, Msg: err.Error()}
		}
	}
	_, err := upstream.LoadTLS(cfg)
	return err
}
