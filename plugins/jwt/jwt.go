package main

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/wsgate/wsgate/plugins/auth"
)

// noExpiryTTL is how long a decision on a token without exp is cached.
const noExpiryTTL = time.Minute

// config is the plugin's [plugins.config] table.
type config struct {
	// HS256SecretEnv names the environment variable holding the HS256
	// secret (default "": HS256 not accepted).
	HS256SecretEnv string `json:"hs256_secret_env"`
	// RS256PublicKeyFile is a PEM file with the RS256 public key, a
	// relative path taken from the config file's directory (default
	// "": RS256 not accepted).
	RS256PublicKeyFile string `json:"rs256_public_key_file"`
	// Issuer, if set, must equal the token's iss.
	Issuer string `json:"issuer"`
	// Audience, if set, must be among the token's aud.
	Audience string `json:"audience"`
	// TokenFrom lists where to look for the token, first found wins
	// (default ["header:Authorization", "query:access_token"]).
	TokenFrom []string `json:"token_from"`
	// ClaimsToHeaders maps a claim to the upstream header that carries it.
	ClaimsToHeaders map[string]string `json:"claims_to_headers"`
}

// jwtAuth implements auth.Authenticator. Configure sets every field once;
// Authenticate only reads them, so it is safe for concurrent use.
type jwtAuth struct {
	secret  []byte
	pub     *rsa.PublicKey
	parser  *jwt.Parser
	sources []source
	claims  map[string]string
}

func (a *jwtAuth) Configure(ctx context.Context, raw map[string]any) error {
	var c config
	if err := auth.DecodeConfig(raw, &c); err != nil {
		return err
	}
	// Relative to the gateway's config file, as the gateway's own paths.
	c.RS256PublicKeyFile = auth.ConfigPath(ctx, c.RS256PublicKeyFile)
	var methods []string
	if c.HS256SecretEnv != "" {
		s := os.Getenv(c.HS256SecretEnv)
		if s == "" {
			return fmt.Errorf("%w: hs256_secret_env: environment variable %s is empty or unset", auth.ErrInvalidConfig, c.HS256SecretEnv)
		}
		a.secret = []byte(s)
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	if c.RS256PublicKeyFile != "" {
		b, err := os.ReadFile(c.RS256PublicKeyFile)
		if err != nil {
			return fmt.Errorf("%w: rs256_public_key_file: %w", auth.ErrInvalidConfig, err)
		}
		if a.pub, err = jwt.ParseRSAPublicKeyFromPEM(b); err != nil {
			return fmt.Errorf("%w: rs256_public_key_file %s: %w", auth.ErrInvalidConfig, c.RS256PublicKeyFile, err)
		}
		methods = append(methods, jwt.SigningMethodRS256.Alg())
	}
	if len(methods) == 0 {
		return fmt.Errorf("%w: set hs256_secret_env or rs256_public_key_file", auth.ErrInvalidConfig)
	}
	if c.TokenFrom == nil {
		c.TokenFrom = []string{"header:Authorization", "query:access_token"}
	}
	if len(c.TokenFrom) == 0 {
		return fmt.Errorf("%w: token_from is empty", auth.ErrInvalidConfig)
	}
	for _, s := range c.TokenFrom {
		src, err := parseSource(s)
		if err != nil {
			return fmt.Errorf("%w: token_from: %w", auth.ErrInvalidConfig, err)
		}
		a.sources = append(a.sources, src)
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods)}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	a.parser = jwt.NewParser(opts...)
	a.claims = c.ClaimsToHeaders
	return nil
}

// CacheKey implements auth.CacheKeyer: a decision depends only on the
// token, so the places a token can come from are the key.
func (a *jwtAuth) CacheKey() []string {
	parts := make([]string, len(a.sources))
	for i, s := range a.sources {
		parts[i] = s.cacheKey()
	}
	return parts
}

func (a *jwtAuth) Authenticate(_ context.Context, req *auth.Request) (*auth.Decision, error) {
	tok := a.token(req)
	if tok == "" {
		return challenge(auth.Deny(401, "missing token"), `Bearer realm="wsgate"`), nil
	}
	claims := jwt.MapClaims{}
	if _, err := a.parser.ParseWithClaims(tok, claims, a.key); err != nil {
		why := reason(err)
		// RFC 6750, section 3: a token that was sent and refused.
		return challenge(auth.Deny(401, why), `Bearer realm="wsgate", error="invalid_token", error_description="`+why+`"`), nil
	}
	d := auth.Allow(a.headers(claims))
	d.Subject, _ = claims.GetSubject()
	// The token's own id when it has one, else the hash of the token.
	if jti, ok := claims["jti"].(string); ok && jti != "" {
		d.CredentialID = jti
	} else {
		d.CredentialID = auth.CredentialHash(tok)
	}
	d.CacheTTL = noExpiryTTL
	if exp, _ := claims.GetExpirationTime(); exp != nil {
		d.Expires = exp.Time
		d.CacheTTL = time.Until(exp.Time)
	}
	return d, nil
}

// token returns the first token found in the configured sources.
func (a *jwtAuth) token(req *auth.Request) string {
	var q map[string][]string
	for _, s := range a.sources {
		if s.kind == sourceQuery && q == nil {
			q = req.Query()
		}
		if t := s.find(req, q); t != "" {
			return t
		}
	}
	return ""
}

// key is the jwt.Keyfunc: the key for the token's (already allowed) method.
func (a *jwtAuth) key(t *jwt.Token) (any, error) {
	switch t.Method.Alg() {
	case jwt.SigningMethodHS256.Alg():
		return a.secret, nil
	case jwt.SigningMethodRS256.Alg():
		return a.pub, nil
	}
	return nil, fmt.Errorf("signing method %s not accepted", t.Method.Alg())
}

// headers maps claims to upstream headers. Every configured header is
// present: an absent claim gives "" so the gateway removes any value the
// client sent itself.
func (a *jwtAuth) headers(claims jwt.MapClaims) map[string]string {
	if len(a.claims) == 0 {
		return nil
	}
	h := make(map[string]string, len(a.claims))
	for claim, header := range a.claims {
		v := claimString(claims[claim])
		if strings.ContainsAny(v, "\r\n\x00") {
			log.Printf("claim %s has control characters; header %s not set", claim, header)
			v = ""
		}
		h[header] = v
	}
	return h
}

// claimString renders a claim for a header: strings as is, numbers without
// exponent, booleans, and lists of those joined with ",".
func claimString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case []any:
		parts := make([]string, 0, len(v))
		for _, e := range v {
			if s := claimString(e); s != "" {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, ",")
	}
	return ""
}

// challenge sets d's WWW-Authenticate to c and returns d.
func challenge(d *auth.Decision, c string) *auth.Decision {
	d.ResponseHeaders = map[string]string{"WWW-Authenticate": c}
	return d
}

// reason is the deny reason for a token that failed validation; it is
// quoted in a challenge, so it holds no '"' or '\'.
func reason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed token"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token not valid yet"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "wrong token issuer"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "wrong token audience"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "token lacks a required claim (iss, aud)"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return "bad token signature"
	}
	return "invalid token"
}

var (
	_ auth.Authenticator = (*jwtAuth)(nil)
	_ auth.CacheKeyer    = (*jwtAuth)(nil)
)
