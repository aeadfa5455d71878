package pluginhost

import (
	"context"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/internal/testproc"
)

// BenchmarkAuthenticateJWT measures one handshake's auth step with the jwt
// plugin: every call reaching the plugin process (uncached) against the
// decision cache answering (cached).
func BenchmarkAuthenticateJWT(b *testing.B) {
	const env = "WSGATE_BENCH_JWT_SECRET"
	b.Setenv(env, "bench-secret")
	bin := testproc.Build(b, "./plugins/jwt")
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "user-1", "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte("bench-secret"))
	if err != nil {
		b.Fatal(err)
	}
	p := conf.Plugin{Name: "jwt", Path: bin, Timeout: conf.Duration{Duration: 2 * time.Second}, Config: map[string]any{
		"hs256_secret_env":  env,
		"claims_to_headers": map[string]any{"sub": "X-User-Id"},
	}}
	for _, bc := range []struct {
		name  string
		cache int
	}{
		{"uncached", -1},
		{"cached", 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h, _, _ := newHost(b, []conf.Plugin{p}, Options{CacheSize: bc.cache})
			r := req("/room/1", "Authorization", "Bearer "+tok)
			chain := []string{"jwt"}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := h.Authenticate(ctx, chain, r)
				if err != nil || !res.Allow {
					b.Fatal(res, err)
				}
			}
		})
	}
}
