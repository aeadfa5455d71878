package pluginhost

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/plugins/auth"
)

func TestDecisionCache(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newDecisionCache(2)
	k := func(n byte) cacheKey { return cacheKey{gen: 1, sum: [32]byte{n}} }
	d := &auth.Decision{Allow: true}
	c.put(k(1), d, now.Add(time.Minute))
	c.put(k(2), d, now.Add(time.Second))
	if _, ok := c.get(k(1), now); !ok { // k(1) is now most recent
		t.Fatal("k1 missing")
	}
	c.put(k(3), d, now.Add(time.Minute)) // evicts k(2), the least recent
	if _, ok := c.get(k(2), now); ok {
		t.Fatal("k2 not evicted")
	}
	if _, ok := c.get(k(3), now); !ok {
		t.Fatal("k3 missing")
	}
	if _, ok := c.get(k(3), now.Add(time.Minute)); ok {
		t.Fatal("k3 served at its expiry")
	}
	if c.len() != 1 {
		t.Fatalf("len = %d, want 1", c.len())
	}
	if _, ok := c.get(cacheKey{gen: 2, sum: [32]byte{1}}, now); ok {
		t.Fatal("another generation hit")
	}
	off := newDecisionCache(-1)
	off.put(k(1), d, now.Add(time.Minute))
	if off.len() != 0 {
		t.Fatal("disabled cache stored")
	}
}

func TestParseCacheKey(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []keyPart
		err  bool
	}{
		{in: nil, want: []keyPart{}},
		{in: []string{"header:authorization", "query:t", "route", "client_ip"},
			want: []keyPart{{partHeader, "Authorization"}, {partQuery, "t"}, {kind: partRoute}, {kind: partClientIP}}},
		{in: []string{"header:"}, err: true},
		{in: []string{"query:"}, err: true},
		{in: []string{"route:x"}, err: true},
		{in: []string{"cookie:x"}, err: true},
		{in: []string{""}, err: true},
	} {
		t.Run(strings.Join(tc.in, ","), func(t *testing.T) {
			got, err := parseCacheKey(tc.in)
			if tc.err {
				if err == nil {
					t.Fatalf("got %v, want an error", got)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("got %v, %v", got, err)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("part %d = %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestKeySumDistinct pins that requests differing in a named part never
// share a key, including values that would collide if simply concatenated.
func TestKeySumDistinct(t *testing.T) {
	parts, err := parseCacheKey([]string{"header:A", "header:B", "query:q", "client_ip"})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(a []string, b []string, q, addr string) *auth.Request {
		h := http.Header{}
		if a != nil {
			h["A"] = a
		}
		if b != nil {
			h["B"] = b
		}
		return &auth.Request{Header: h, RawQuery: q, ClientAddr: addr}
	}
	reqs := map[string]*auth.Request{
		"base":          mk([]string{"x"}, []string{"y"}, "q=1", "127.0.0.1:1"),
		"shifted":       mk([]string{"xy"}, nil, "q=1", "127.0.0.1:1"),
		"split value":   mk([]string{"x", "y"}, nil, "q=1", "127.0.0.1:1"),
		"other query":   mk([]string{"x"}, []string{"y"}, "q=2", "127.0.0.1:1"),
		"other ip":      mk([]string{"x"}, []string{"y"}, "q=1", "127.0.0.2:1"),
		"empty":         mk(nil, nil, "", ""),
		"empty value":   mk([]string{""}, nil, "", ""),
		"swapped a & b": mk([]string{"y"}, []string{"x"}, "q=1", "127.0.0.1:1"),
	}
	seen := map[[32]byte]string{}
	for name, r := range reqs {
		var ks keyScratch
		s := ks.sum(parts, r)
		if other, ok := seen[s]; ok {
			t.Fatalf("%s and %s share a key", name, other)
		}
		seen[s] = name
	}
	var ks keyScratch
	a := ks.sum(parts, reqs["base"])
	r := *reqs["base"]
	r.ClientAddr = "127.0.0.1:2" // another port, same IP
	if b := (&keyScratch{}).sum(parts, &r); a != b {
		t.Fatal("client port changed the key")
	}
}

func TestCheckDecision(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    auth.Decision
		ok   bool
	}{
		{"allow", auth.Decision{Allow: true, Headers: map[string]string{"X-User-Id": "u", "X-Empty": ""}}, true},
		{"deny default", auth.Decision{}, true},
		{"deny 401", auth.Decision{Status: 401}, true},
		{"deny 200", auth.Decision{Status: 200}, false},
		{"deny 600", auth.Decision{Status: 600}, false},
		{"CRLF value", auth.Decision{Allow: true, Headers: map[string]string{"X-A": "a\r\nB: c"}}, false},
		{"NUL value", auth.Decision{Allow: true, Headers: map[string]string{"X-A": "a\x00"}}, false},
		{"space in name", auth.Decision{Allow: true, Headers: map[string]string{"X A": "a"}}, false},
		{"colon in name", auth.Decision{Allow: true, Headers: map[string]string{"X-A:": "a"}}, false},
		{"empty name", auth.Decision{Allow: true, Headers: map[string]string{"": "a"}}, false},
		{"CR in reason", auth.Decision{Reason: "no\r\n"}, false},
		// Issue 19 item 16: a deny's own response headers.
		{"challenge", auth.Decision{Status: 401, ResponseHeaders: map[string]string{"WWW-Authenticate": `Bearer realm="x"`}}, true},
		{"CRLF in response header", auth.Decision{ResponseHeaders: map[string]string{"WWW-Authenticate": "a\r\nSet-Cookie: x"}}, false},
		{"bad response header name", auth.Decision{ResponseHeaders: map[string]string{"WWW Authenticate": "a"}}, false},
		{"framing response header", auth.Decision{ResponseHeaders: map[string]string{"content-length": "0"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.d
			err := checkDecision(&d)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err == nil && !d.Allow && (d.Status == 0 || d.Reason == "") {
				t.Fatalf("deny defaults not filled: %+v", d)
			}
		})
	}
}

// TestDenyResponseHeaderAllowList pins the hardening of issue 19 item 16:
// a deny's response headers were refused only when they framed the answer
// (Content-Length, Transfer-Encoding, Connection), so a plugin could set a
// cookie on the gateway's origin, a Content-Encoding on the plain-text
// body, or a Trailer. Only what a deny needs passes now, whatever the
// case; any other name refuses the whole decision.
func TestDenyResponseHeaderAllowList(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"WWW-Authenticate", true},
		{"www-authenticate", true},
		{"Retry-After", true},
		{"Cache-Control", true},
		{"X-Request-Id", true},
		{"x-ratelimit-reset", true},
		{"X-", false},
		{"Xfoo", false},
		{"Set-Cookie", false},
		{"set-cookie", false},
		{"Content-Encoding", false},
		{"Content-Type", false},
		{"Content-Length", false},
		{"Transfer-Encoding", false},
		{"Trailer", false},
		{"Connection", false},
		{"Upgrade", false},
		{"Keep-Alive", false},
		{"Location", false},
		{"Proxy-Authenticate", false},
		{"Sec-WebSocket-Accept", false},
		{"Strict-Transport-Security", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := auth.Decision{Status: 401, ResponseHeaders: map[string]string{tc.name: "v"}}
			if err := checkDecision(&d); (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestLogWriter(t *testing.T) {
	var buf testproc.Buffer
	w := &logWriter{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), plugin: "p"}
	w.Write([]byte("first li"))
	w.Write([]byte("ne\nsecond\r\n\n"))
	w.Write([]byte(`{"@level":"error","@message":"boom","error":"x"}` + "\n"))
	w.Write([]byte(strings.Repeat("z", 3*maxLogLine) + "\n"))
	out := buf.String()
	for _, want := range []string{`msg="first line" plugin=p`, `msg=second plugin=p`, `level=ERROR msg=boom plugin=p`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 4 {
		t.Errorf("%d records, want 4:\n%s", n, out)
	}
	if strings.Count(out, "z") > maxLogLine {
		t.Error("long line not cut")
	}
}

func FuzzParseCacheKey(f *testing.F) {
	for _, s := range []string{"header:Authorization", "query:t", "route", "client_ip", "header:", "x:y:z", ""} {
		f.Add(s, "Bearer x", "t=1&t=2")
	}
	f.Fuzz(func(t *testing.T, part, value, query string) {
		parts, err := parseCacheKey([]string{part})
		if err != nil {
			return
		}
		r := &auth.Request{Header: http.Header{}, RawQuery: query}
		if parts[0].kind == partHeader {
			r.Header[parts[0].name] = []string{value}
		}
		var ks keyScratch
		if ks.sum(parts, r) != (&keyScratch{}).sum(parts, r) {
			t.Fatal("key is not deterministic")
		}
	})
}
