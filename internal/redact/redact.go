// Package redact hides secrets in what the gateway shows: the values of
// config keys and URL query parameters that hold secrets, and the
// credentials of a URL, replaced with "REDACTED".
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Redacted replaces every secret the admin API or a log line would show.
const Redacted = "REDACTED"

// secretKey matches config keys and URL query parameters whose values are
// secrets (a plugin's "hs256_secret", "api_key", "redis_password", a URL's
// "?password=" or "?sig="). It errs on the side of hiding: a "key_id" is
// hidden too.
var secretKey = regexp.MustCompile(`(?i)(secret|token|pass|pwd|private|key|credential|auth|cookie|salt|dsn|sig)`)

// pointerSuffixes are the key endings that name where a secret lives (an
// environment variable, a file), not the secret: such values are kept.
var pointerSuffixes = []string{"_env", "_file", "_path"}

// IsSecretKey reports whether a config key or query parameter holds a
// secret.
func IsSecretKey(k string) bool {
	for _, s := range pointerSuffixes {
		if strings.HasSuffix(strings.ToLower(k), s) {
			return false
		}
	}
	return secretKey.MatchString(k)
}

// URL returns s with the credentials of a URL replaced: the password
// of its userinfo (or the whole userinfo when it is a lone name, as a token
// used as user name is) and the values of query parameters that hold
// secrets. A string that is not a URL comes back unchanged; one that looks
// like a URL ("://") but does not parse is replaced whole, since where its
// secrets are cannot be told.
func URL(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return Redacted
	}
	changed := false
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Redacted)
		} else {
			u.User = url.User(Redacted)
		}
		changed = true
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		switch {
		case err != nil:
			u.RawQuery = Redacted
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
		if IsSecretKey(k) {
			for i := range vs {
				vs[i] = Redacted
			}
			found = true
		}
	}
	return found
}
