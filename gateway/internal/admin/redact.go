package admin

import (
	"net/url"
	"regexp"
	"strings"

	"github.com/wsgate/wsgate/conf"
)

// redacted replaces every secret the admin API or a log line would show.
const redacted = "REDACTED"

// secretKey matches config keys and URL query parameters whose values are
// secrets (a plugin's "hs256_secret", "api_key", "redis_password", a URL's
// "?password=" or "?sig="). It errs on the side of hiding: a "key_id" is
// hidden too.
var secretKey = regexp.MustCompile(`(?i)(secret|token|pass|pwd|private|key|credential|auth|cookie|salt|dsn|sig)`)

// pointerSuffixes are the key endings that name where a secret lives (an
// environment variable, a file), not the secret: such values are kept.
var pointerSuffixes = []string{"_env", "_file", "_path"}

// isSecretKey reports whether a config key or query parameter holds a secret.
func isSecretKey(k string) bool {
	for _, s := range pointerSuffixes {
		if strings.HasSuffix(strings.ToLower(k), s) {
			return false
		}
	}
	return secretKey.MatchString(k)
}

// RedactedConfig is the effective config as the admin API shows it: the
// credentials in gateway.revoke_redis, pools' discovery.redis and
// shared_counts.redis, the values of plugin config keys
// that hold secrets, and the credentials of any URL in a plugin's config
// are replaced with "REDACTED".
func RedactedConfig(c *conf.Config) conf.Config {
	out := *c
	out.Gateway.RevokeRedis = RedactURL(c.Gateway.RevokeRedis)
	out.Pools = make([]conf.Pool, len(c.Pools))
	for i, p := range c.Pools {
		p.Discovery.Redis = RedactURL(p.Discovery.Redis)
		p.SharedCounts.Redis = RedactURL(p.SharedCounts.Redis)
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
		if isSecretKey(k) {
			out[k] = redacted
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
		return RedactURL(vv)
	}
	return v
}

// RedactURL returns s with the credentials of a URL replaced: the password
// of its userinfo (or the whole userinfo when it is a lone name, as a token
// used as user name is) and the values of query parameters that hold
// secrets. A string that is not a URL comes back unchanged; one that looks
// like a URL ("://") but does not parse is replaced whole, since where its
// secrets are cannot be told.
func RedactURL(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return redacted
	}
	changed := false
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redacted)
		} else {
			u.User = url.User(redacted)
		}
		changed = true
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		switch {
		case err != nil:
			u.RawQuery = redacted
			changed = true
		case redactQuery(q):
			u.RawQuery = q.Encode()
			changed = true
		}
	}
	if !changed {
		return s
	}
	return u.String()
}

// redactQuery replaces the values of q's secret parameters and reports
// whether there were any.
func redactQuery(q url.Values) bool {
	found := false
	for k, vs := range q {
		if isSecretKey(k) {
			for i := range vs {
				vs[i] = redacted
			}
			found = true
		}
	}
	return found
}
