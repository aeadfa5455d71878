package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/plugins/auth"
	"github.com/wsgate/wsgate/plugins/auth/authtest"
)

// TestMain keeps race-enabled plugin builds from sleeping a second at exit.
func TestMain(m *testing.M) {
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

const secretEnv = "WSGATE_TEST_JWT_SECRET"

type keys struct {
	secret  []byte
	rsa     *rsa.PrivateKey
	pubFile string
}

func newKeys(t *testing.T) keys {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "pub.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return keys{secret: []byte("s3cret-for-tests-only"), rsa: k, pubFile: f}
}

func (k keys) hs(t *testing.T, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(k.secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (k keys) rs(t *testing.T, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, c).SignedString(k.rsa)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func claims(mod func(jwt.MapClaims)) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{
		"sub":   "user-42",
		"iss":   "https://issuer.test",
		"aud":   "wsgate",
		"exp":   now.Add(time.Hour).Unix(),
		"nbf":   now.Add(-time.Minute).Unix(),
		"iat":   now.Unix(),
		"tid":   "tenant-7",
		"roles": []string{"a", "b"},
	}
	if mod != nil {
		mod(c)
	}
	return c
}

func request(header http.Header, query url.Values) *auth.Request {
	if header == nil {
		header = http.Header{}
	}
	return &auth.Request{Method: "GET", Host: "h", Path: "/room/1", RawQuery: query.Encode(), Header: header, ClientAddr: "127.0.0.1:1"}
}

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

func TestJWT(t *testing.T) {
	k := newKeys(t)
	t.Setenv(secretEnv, string(k.secret))
	bin := testproc.Build(t, "./plugins/jwt")
	a := authtest.Start(t, bin, map[string]any{
		"hs256_secret_env":      secretEnv,
		"rs256_public_key_file": k.pubFile,
		"issuer":                "https://issuer.test",
		"audience":              "wsgate",
		"token_from":            []any{"header:Authorization", "query:access_token", "subprotocol"},
		"claims_to_headers":     map[string]any{"sub": "X-User-Id", "tid": "X-Tenant", "roles": "X-Roles", "missing": "X-Missing"},
	}, nil)
	if got := strings.Join(a.CacheKey(), " "); got != "header:Authorization query:access_token header:Sec-Websocket-Protocol" {
		t.Fatalf("CacheKey = %s", got)
	}
	other := keys{secret: []byte("another-secret"), rsa: k.rsa}
	otherRSA := newKeys(t)

	for _, tc := range []struct {
		name   string
		req    *auth.Request
		allow  bool
		reason string
	}{
		{"HS256 in header", request(bearer(k.hs(t, claims(nil))), nil), true, ""},
		{"RS256 in header", request(bearer(k.rs(t, claims(nil))), nil), true, ""},
		{"lowercase bearer", request(http.Header{"Authorization": {"bearer " + k.hs(t, claims(nil))}}, nil), true, ""},
		{"query access_token", request(nil, url.Values{"access_token": {k.hs(t, claims(nil))}}), true, ""},
		{"subprotocol", request(http.Header{"Sec-Websocket-Protocol": {"yjs, " + k.rs(t, claims(nil)) + ", v2"}}, nil), true, ""},
		{"header wins over query", request(bearer("garbage.x.y"), url.Values{"access_token": {k.hs(t, claims(nil))}}), false, "malformed token"},
		{"missing", request(nil, nil), false, "missing token"},
		{"basic auth is not a token", request(http.Header{"Authorization": {"Basic dXNlcjpwdw=="}}, nil), false, "missing token"},
		{"subprotocols without a token", request(http.Header{"Sec-Websocket-Protocol": {"yjs, v2.json"}}, nil), false, "missing token"},
		{"expired", request(bearer(k.hs(t, claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() }))), nil), false, "token expired"},
		{"nbf in the future", request(bearer(k.hs(t, claims(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() }))), nil), false, "token not valid yet"},
		{"wrong issuer", request(bearer(k.hs(t, claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }))), nil), false, "wrong token issuer"},
		{"no issuer", request(bearer(k.hs(t, claims(func(c jwt.MapClaims) { delete(c, "iss") }))), nil), false, "token lacks a required claim (iss, aud)"},
		{"no audience", request(bearer(k.hs(t, claims(func(c jwt.MapClaims) { delete(c, "aud") }))), nil), false, "token lacks a required claim (iss, aud)"},
		{"wrong audience", request(bearer(k.hs(t, claims(func(c jwt.MapClaims) { c["aud"] = []string{"other"} }))), nil), false, "wrong token audience"},
		{"wrong HS256 secret", request(bearer(other.hs(t, claims(nil))), nil), false, "bad token signature"},
		{"wrong RS256 key", request(bearer(otherRSA.rs(t, claims(nil))), nil), false, "bad token signature"},
		{"alg none", request(bearer(noneToken(t, claims(nil))), nil), false, "bad token signature"},
		{"HS256 keyed with the public key", request(bearer(pubKeyAsSecret(t, k, claims(nil))), nil), false, "bad token signature"},
		{"tampered payload", request(bearer(tamper(k.hs(t, claims(nil)))), nil), false, "bad token signature"},
		{"garbage", request(bearer("not-a-jwt"), nil), false, "malformed token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := a.Authenticate(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allow != tc.allow {
				t.Fatalf("allow = %v (%d %s), want %v", d.Allow, d.Status, d.Reason, tc.allow)
			}
			if !tc.allow {
				if d.Status != 401 || d.Reason != tc.reason {
					t.Fatalf("deny %d %q, want 401 %q", d.Status, d.Reason, tc.reason)
				}
				return
			}
			want := map[string]string{"X-User-Id": "user-42", "X-Tenant": "tenant-7", "X-Roles": "a,b", "X-Missing": ""}
			for h, v := range want {
				if got, ok := d.Headers[h]; !ok || got != v {
					t.Errorf("header %s = %q (present %v), want %q", h, got, ok, v)
				}
			}
			if d.Subject != "user-42" {
				t.Errorf("subject %q", d.Subject)
			}
			if len(d.CredentialID) != 64 {
				t.Errorf("credential id %q, want the hex SHA-256 of the token (it has no jti)", d.CredentialID)
			}
			if d.Expires.IsZero() || d.CacheTTL <= 0 || d.CacheTTL > time.Hour {
				t.Errorf("expires %v, cache ttl %v: want an expiry and a TTL up to it", d.Expires, d.CacheTTL)
			}
		})
	}
}

// noneToken is an unsigned token (alg "none").
func noneToken(t *testing.T, c jwt.MapClaims) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodNone, c).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pubKeyAsSecret is the algorithm-confusion attack: HS256 with the RSA
// public key's PEM as the secret.
func pubKeyAsSecret(t *testing.T, k keys, c jwt.MapClaims) string {
	pemBytes, err := os.ReadFile(k.pubFile)
	if err != nil {
		t.Fatal(err)
	}
	return keys{secret: pemBytes}.hs(t, c)
}

// tamper changes the payload's sub without re-signing.
func tamper(tok string) string {
	p := strings.Split(tok, ".")
	c := jwt.MapClaims{}
	_, _, _ = jwt.NewParser().ParseUnverified(tok, c)
	c["sub"] = "admin"
	forged, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte("x"))
	return strings.Split(forged, ".")[0] + "." + strings.Split(forged, ".")[1] + "." + p[2]
}

func TestJWTConfig(t *testing.T) {
	k := newKeys(t)
	t.Setenv(secretEnv, string(k.secret))
	t.Setenv(secretEnv+"_EMPTY", "")
	bin := testproc.Build(t, "./plugins/jwt")
	for _, tc := range []struct {
		name string
		cfg  map[string]any
		ok   bool
	}{
		{"HS256 only, defaults", map[string]any{"hs256_secret_env": secretEnv}, true},
		{"RS256 only", map[string]any{"rs256_public_key_file": k.pubFile}, true},
		{"no key", map[string]any{"issuer": "x"}, false},
		{"empty secret env", map[string]any{"hs256_secret_env": secretEnv + "_EMPTY"}, false},
		{"missing key file", map[string]any{"rs256_public_key_file": k.pubFile + ".nope"}, false},
		{"bad token_from", map[string]any{"hs256_secret_env": secretEnv, "token_from": []any{"cookie:x"}}, false},
		{"empty token_from", map[string]any{"hs256_secret_env": secretEnv, "token_from": []any{}}, false},
		{"unknown key", map[string]any{"hs256_secret_env": secretEnv, "secret_env": "X"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := authtest.StartErr(t, bin, tc.cfg, nil)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Join(a.CacheKey(), " "); got != "header:Authorization query:access_token" {
					t.Fatalf("default CacheKey = %s", got)
				}
				return
			}
			if !errors.Is(err, auth.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestLooksLikeJWT(t *testing.T) {
	for in, want := range map[string]bool{
		"eyJh.eyJz.sig": true, "a.b.c": true, "a-_.b.c9": true,
		"a.b": false, "a..c": false, ".b.c": false, "a.b.": false, "a.b.c.d": false,
		"yjs": false, "v2.json": false, "a.b.c=": false, "": false,
	} {
		if got := looksLikeJWT(in); got != want {
			t.Errorf("looksLikeJWT(%q) = %v, want %v", in, got, want)
		}
	}
}

func FuzzParseSource(f *testing.F) {
	for _, s := range []string{"header:Authorization", "query:access_token", "subprotocol", "header:", "query", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		src, err := parseSource(s)
		if err != nil {
			return
		}
		back, err := parseSource(strings.Replace(src.cacheKey(), "header:Sec-Websocket-Protocol", "subprotocol", 1))
		if src.kind != sourceSubprotocol && (err != nil || back != src) {
			t.Fatalf("%q: cache key %q does not name the same source", s, src.cacheKey())
		}
	})
}
