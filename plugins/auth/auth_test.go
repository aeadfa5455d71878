package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestConfigRoundTrip(t *testing.T) {
	in := map[string]any{
		"s":    "x",
		"i":    int64(42),
		"f":    1.5,
		"b":    true,
		"list": []any{"a", int64(1)},
		"tab":  map[string]any{"k": "v", "n": int64(-7)},
	}
	b, err := encodeConfig(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", out, in)
	}
}

func TestDecodeConfig(t *testing.T) {
	type cfg struct {
		Name string   `json:"name"`
		TTL  Duration `json:"ttl"`
		N    int      `json:"n"`
	}
	for _, tc := range []struct {
		name    string
		in      map[string]any
		want    cfg
		wantErr bool
	}{
		{"all", map[string]any{"name": "a", "ttl": "1m", "n": int64(3)}, cfg{"a", Duration{time.Minute}, 3}, false},
		{"empty", nil, cfg{}, false},
		{"unknown key", map[string]any{"nmae": "a"}, cfg{}, true},
		{"bare number duration", map[string]any{"ttl": int64(5)}, cfg{}, true},
		{"bad duration", map[string]any{"ttl": "5 parsecs"}, cfg{}, true},
		{"wrong type", map[string]any{"n": "three"}, cfg{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got cfg
			err := DecodeConfig(tc.in, &got)
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("err = %v, want ErrInvalidConfig", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestErrorTranslation(t *testing.T) {
	bg := context.Background()
	for _, tc := range []struct {
		name      string
		err       error
		configure bool
		want      error
	}{
		{"invalid config", ErrInvalidConfig, true, ErrInvalidConfig},
		{"invalid config outside Configure is a failure", ErrInvalidConfig, false, ErrPlugin},
		{"plugin error", errors.New("redis down"), false, ErrPlugin},
		{"plugin deadline", context.DeadlineExceeded, false, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromStatus(bg, toStatus(tc.err, tc.configure))
			if !errors.Is(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("transport", func(t *testing.T) {
		got := fromStatus(bg, status.Error(codes.Unavailable, "connection refused"))
		if !errors.Is(got, ErrTransport) {
			t.Fatalf("got %v", got)
		}
	})
	t.Run("connection closed under the call", func(t *testing.T) {
		got := fromStatus(bg, status.Error(codes.Canceled, "grpc: the client connection is closing"))
		if !errors.Is(got, ErrTransport) {
			t.Fatalf("got %v", got)
		}
	})
	t.Run("caller context wins", func(t *testing.T) {
		ctx, cancel := context.WithCancel(bg)
		cancel()
		got := fromStatus(ctx, status.Error(codes.Unavailable, "x"))
		if !errors.Is(got, context.Canceled) {
			t.Fatalf("got %v", got)
		}
	})
}

// TestErrorTextOnce pins the text of a Configure error after the wire: the
// sentinel's words appear once. They used to appear twice ("auth: invalid
// plugin config: auth: invalid plugin config: ..."), the plugin's own
// wrapping and the gateway side's translation each adding them.
func TestErrorTextOnce(t *testing.T) {
	bg := context.Background()
	type cfg struct {
		Name string `json:"name"`
		N    int    `json:"n"`
	}
	unknown := DecodeConfig(map[string]any{"nmae": "a"}, &cfg{})
	wrongType := DecodeConfig(map[string]any{"n": "three"}, &cfg{})
	for _, tc := range []struct {
		name string
		err  error // as the plugin returns it, or the status it sent
		want string
	}{
		{"wrapped", fmt.Errorf("%w: token is required", ErrInvalidConfig), "auth: invalid plugin config: token is required"},
		{"bare", ErrInvalidConfig, "auth: invalid plugin config"},
		{"unknown key", unknown, `auth: invalid plugin config: unknown key "nmae" (known: name, n)`},
		{"wrong type", wrongType, "auth: invalid plugin config: n: wrong type: got string, want int"},
		{"older SDK's message", status.Error(codes.InvalidArgument, "auth: invalid plugin config: token is required"),
			"auth: invalid plugin config: token is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := tc.err
			if _, ok := status.FromError(sent); !ok {
				sent = toStatus(sent, true)
			}
			got := fromStatus(bg, sent)
			if !errors.Is(got, ErrInvalidConfig) || got.Error() != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestProtoRoundTrip(t *testing.T) {
	req := &Request{
		Method: "GET", Host: "h", Path: "/p", RawQuery: "a=1", ClientAddr: "127.0.0.1:5",
		Header: http.Header{"X-A": {"1", "2"}}, Route: "*/",
		TLS: &TLSInfo{Version: "TLS 1.3", ServerName: "h", PeerCertificates: [][]byte{{1, 2}}},
	}
	if got := requestFromProto(requestToProto(req)); !reflect.DeepEqual(got, req) {
		t.Fatalf("request:\n got %+v\nwant %+v", got, req)
	}
	d := &Decision{Allow: true, Headers: map[string]string{"X-User-Id": "u"}, AffinityKey: "t",
		CacheTTL: time.Minute, Expires: time.UnixMilli(1_700_000_000_123), Subject: "u", CredentialID: "jti-1"}
	if got := decisionFromProto(decisionToProto(d)); !reflect.DeepEqual(got, d) {
		t.Fatalf("decision:\n got %+v\nwant %+v", got, d)
	}
}

func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":[1.5,"x",{"c":true}]}`, `null`, `{"n":1e400}`, `[`, `{"a":-0}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeConfig(b)
		if err != nil {
			return
		}
		if _, err := encodeConfig(m); err != nil {
			t.Fatalf("decoded config does not encode: %v", err)
		}
	})
}
