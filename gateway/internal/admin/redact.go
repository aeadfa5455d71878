package admin

import (
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/redact"
)

// RedactedConfig is the effective config as the admin API shows it: the
// credentials in gateway.revoke_redis, pools' discovery.redis and
// shared_counts.redis, the ACME storage, ask and directory URLs, the values of plugin config keys
// that hold secrets, and the credentials of any URL in a plugin's config
// are replaced with "REDACTED".
func RedactedConfig(c *conf.Config) conf.Config {
	out := *c
	out.Gateway.RevokeRedis = redact.URL(c.Gateway.RevokeRedis)
	if a := c.Gateway.TLS.ACME; a != nil {
		// A redis:// storage or an ask URL may carry a password.
		ca := *a
		ca.Storage, ca.Ask, ca.Directory = redact.URL(a.Storage), redact.URL(a.Ask), redact.URL(a.Directory)
		out.Gateway.TLS.ACME = &ca
	}
	out.Pools = make([]conf.Pool, len(c.Pools))
	for i, p := range c.Pools {
		p.Discovery.Redis = redact.URL(p.Discovery.Redis)
		p.SharedCounts.Redis = redact.URL(p.SharedCounts.Redis)
		out.Pools[i] = p
	}
	out.Plugins = make([]conf.Plugin, len(c.Plugins))
	for i, p := range c.Plugins {
		cp := p
		cp.Config = redactMap(p.Config)
		out.Plugins[i] = cp
	}
	return out
}

// redactMap copies a plugin config with its secrets replaced, through
// nested tables and arrays.
func redactMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if redact.IsSecretKey(k) {
			out[k] = redact.Redacted
			continue
		}
		out[k] = redactValue(v)
	}
	return out
}

// redactValue copies one plugin config value: tables and arrays are walked,
// strings that are URLs lose their credentials.
func redactValue(v any) any {
	switch vv := v.(type) {
	case map[string]any:
		return redactMap(vv)
	case []map[string]any:
		out := make([]map[string]any, len(vv))
		for i, m := range vv {
			out[i] = redactMap(m)
		}
		return out
	case []any:
		out := make([]any, len(vv))
		for i, x := range vv {
			out[i] = redactValue(x)
		}
		return out
	case string:
		return redact.URL(vv)
	}
	return v
}
