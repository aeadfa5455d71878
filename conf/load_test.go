package conf

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestShippedFile loads the reference conf/wsgate.toml and checks that it
// states exactly the defaults: every key it sets equals what the same file
// with all keys left out yields.
func TestShippedFile(t *testing.T) {
	cfg, err := Load("wsgate.toml")
	if err != nil {
		t.Fatalf("Load(wsgate.toml): %v", err)
	}
	if cfg.File != "wsgate.toml" {
		t.Errorf("File = %q", cfg.File)
	}
	if len(cfg.Pools) != 1 || cfg.Pools[0].Name != "relay" || len(cfg.Pools[0].Nodes) != 2 ||
		cfg.Pools[0].Nodes[0].Addr != "127.0.0.1:7001" || cfg.Pools[0].Nodes[1].Addr != "127.0.0.1:7002" {
		t.Errorf("pools = %+v, want relay with 127.0.0.1:7001 and :7002", cfg.Pools)
	}
	if len(cfg.Routes) != 1 || cfg.Routes[0].PathPrefix != "/" || cfg.Routes[0].Pool != "relay" {
		t.Errorf("routes = %+v, want / -> relay", cfg.Routes)
	}
	if len(cfg.Plugins) != 0 {
		t.Errorf("plugins = %+v, want none", cfg.Plugins)
	}
	minimal, err := Load("../testdata/conf/valid/minimal.toml")
	if err != nil {
		t.Fatal(err)
	}
	// The minimal file relies on defaults everywhere; the shipped one spells
	// them out. Compare with the parts that must differ made equal.
	minimal.File = cfg.File
	minimal.lines = cfg.lines
	minimal.Pools[0].Nodes = cfg.Pools[0].Nodes
	normalizeEmpty(cfg)
	normalizeEmpty(minimal)
	if !reflect.DeepEqual(cfg, minimal) {
		t.Errorf("shipped file differs from the defaults:\nshipped:  %+v\ndefaults: %+v", cfg, minimal)
	}
}

// normalizeEmpty makes empty slices nil, so "key = []" equals an absent key.
func normalizeEmpty(c *Config) {
	nilIfEmpty := func(s *[]string) {
		if len(*s) == 0 {
			*s = nil
		}
	}
	nilIfEmpty(&c.Gateway.Listeners)
	nilIfEmpty(&c.Admin.Hosts)
	nilIfEmpty(&c.Gateway.TrustedProxies)
	for i := range c.Pools {
		nilIfEmpty(&c.Pools[i].SourceAddrs)
	}
	for i := range c.Routes {
		nilIfEmpty(&c.Routes[i].Origins)
		nilIfEmpty(&c.Routes[i].Auth)
		nilIfEmpty(&c.Routes[i].AuthHeaders)
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := Load("../testdata/conf/valid/minimal.toml")
	if err != nil {
		t.Fatal(err)
	}
	p, r := cfg.Pools[0], cfg.Routes[0]
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"gateway.listen", cfg.Gateway.Listen, ":8080"},
		{"gateway.max_conns", cfg.Gateway.MaxConns, 1_000_000},
		{"gateway.max_conns_per_ip", cfg.Gateway.MaxConnsPerIP, 0},
		{"gateway.handshake_timeout", cfg.Gateway.HandshakeTimeout.Duration, 10 * time.Second},
		{"gateway.write_timeout", cfg.Gateway.WriteTimeout.Duration, 30 * time.Second},
		{"gateway.tunnel_engine", cfg.Gateway.TunnelEngine, "epoll"},
		{"gateway.pollers", cfg.Gateway.Pollers, 0},
		{"gateway.drain_window", cfg.Gateway.DrainWindow.Duration, 10 * time.Second},
		{"gateway.drain_timeout", cfg.Gateway.DrainTimeout.Duration, 30 * time.Second},
		{"gateway.retry_after", cfg.Gateway.RetryAfter.Duration, time.Second},
		{"gateway.flood_backoff", cfg.Gateway.FloodBackoff.Duration, time.Second},
		{"gateway.flood_backoff_max", cfg.Gateway.FloodBackoffMax.Duration, time.Minute},
		{"gateway.flood_backoff_addrs", cfg.Gateway.FloodBackoffAddrs, 65536},
		{"admin.listen", cfg.Admin.Listen, "127.0.0.1:9090"},
		{"admin.token_env", cfg.Admin.TokenEnv, ""},
		{"admin.hosts", len(cfg.Admin.Hosts), 0},
		{"pools[0].balance", p.Balance, "least_conn"},
		{"pools[0].hash_balance_factor", p.HashBalanceFactor, 0.25},
		{"pools[0].max_conns_per_node", p.MaxConnsPerNode, 50_000},
		{"pools[0].connect_timeout", p.ConnectTimeout.Duration, 2 * time.Second},
		{"pools[0].connect_tries", p.ConnectTries, 3},
		{"pools[0].health.path", p.Health.Path, "/healthz"},
		{"pools[0].health.interval", p.Health.Interval.Duration, 2 * time.Second},
		{"pools[0].health.timeout", p.Health.Timeout.Duration, time.Second},
		{"pools[0].health.rise", p.Health.Rise, 2},
		{"pools[0].health.fall", p.Health.Fall, 3},
		{"pools[0].nodes[0].weight", p.Nodes[0].Weight, 1},
		{"pools[0].nodes[0].max_conns", p.Nodes[0].MaxConns, 50_000},
		{"routes[0].host", r.Host, "*"},
		{"routes[0].path_prefix", r.PathPrefix, "/"},
		{"routes[0].overflow", r.Overflow, "http-503"},
		{"routes[0].max_frame", r.MaxFrame, Size(1 << 20)},
		{"routes[0].plain_http", r.PlainHTTP, "proxy"},
		{"routes[0].ping_interval", r.PingInterval.Duration, time.Duration(0)},
		{"routes[0].pong_timeout", r.PongTimeout.Duration, 10 * time.Second},
		{"routes[0].frame_rate", r.FrameRate, 0},
		{"routes[0].byte_rate", r.ByteRate, Size(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Fatalf("%s = %v, want %v", tt.name, tt.got, tt.want)
			}
		})
	}
}

func TestFullFile(t *testing.T) {
	cfg, err := Load("../testdata/conf/valid/full.toml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"admin listen kept empty", cfg.Admin.Listen, ""},
		{"drain window zero kept", cfg.Gateway.DrainWindow.Duration, time.Duration(0)},
		{"node cap set", cfg.Pools[0].Nodes[0].MaxConns, 1},
		{"node cap inherited", cfg.Pools[0].Nodes[1].MaxConns, 120_000},
		{"inline node weight", cfg.Pools[1].Nodes[0].Weight, 2},
		{"inline node default weight", cfg.Pools[1].Nodes[1].Weight, 1},
		{"inline pool default health", cfg.Pools[1].Health.Path, "/healthz"},
		{"integer size", cfg.Routes[0].MaxFrame, Size(65536)},
		{"decimal size", cfg.Routes[1].MaxFrame, Size(10_000)},
		{"second plugin default timeout", cfg.Plugins[1].Timeout.Duration, 2 * time.Second},
		{"plugin config as is", cfg.Plugins[0].Config["hs256_secret_env"], "JWT_SECRET"},
		{"plugin config array", cfg.Plugins[0].Config["token_from"], []any{"header:Authorization", "subprotocol"}},
		{"plugin nested config", cfg.Plugins[0].Config["claims_to_headers"], map[string]any{"sub": "X-User-Id"}},
		{"line of a plugin's config table", cfg.Line("plugins[0].config"), 72},
		{"line of a key inside it", cfg.Line("plugins[0].config.claims_to_headers.sub"), 76},
		{"send_proxy_v2 set", cfg.Pools[0].SendProxyV2, true},
		{"send_proxy_v2 off by default", cfg.Pools[1].SendProxyV2, false},
		{"trusted proxies", cfg.Gateway.TrustedProxies, []string{"10.0.0.0/8", "2001:db8::/32", "192.0.2.7", "::ffff:198.51.100.0/120"}},
		{"per-IP handshake burst set", cfg.Gateway.HandshakeBurstPerIP, 40},
		{"admission set", cfg.Pools[0].Admission, Admission{Rate: 500, Burst: 1000}},
		{"admission off by default", cfg.Pools[1].Admission, Admission{}},
		{"hash pool", cfg.Pools[0].Balance, "hash"},
		{"integer hash_balance_factor", cfg.Pools[0].HashBalanceFactor, 1.0},
		{"p2c pool", cfg.Pools[1].Balance, "p2c"},
		{"default hash_balance_factor", cfg.Pools[1].HashBalanceFactor, 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Fatalf("got %#v, want %#v", tt.got, tt.want)
			}
		})
	}
}

func TestConfigPool(t *testing.T) {
	cfg, err := Load("../testdata/conf/valid/full.toml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want *Pool
	}{
		{"relay-eu_1", &cfg.Pools[0]},
		{"docs", &cfg.Pools[1]},
		{"missing", nil},
		{"", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cfg.Pool(tt.name); got != tt.want {
				t.Fatalf("Pool(%q) = %p, want %p", tt.name, got, tt.want)
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	tests := []struct {
		name string
		err  Error
		want string
	}{
		{"full", Error{File: "wsgate.toml", Line: 14, Key: "pools[0].nodes[1].max_conns", Msg: "must be >= 0, got -5"},
			"wsgate.toml:14: pools[0].nodes[1].max_conns: must be >= 0, got -5"},
		{"no line", Error{File: "wsgate.toml", Key: "pools", Msg: "at least one"}, "wsgate.toml: pools: at least one"},
		{"syntax", Error{File: "wsgate.toml", Line: 3, Msg: "expected value"}, "wsgate.toml:3: expected value"},
		{"bare", Error{File: "wsgate.toml", Msg: "bad"}, "wsgate.toml: bad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Fatalf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent.toml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(absent) = %v, want fs.ErrNotExist", err)
	}
}

// TestLoadNamesPath checks that errors from Load name the path as given.
func TestLoadNamesPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(path, []byte("[gateway]\nmax_conns = -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":2: gateway.max_conns: ") {
		t.Fatalf("Load = %v, want it to start with %s:2: gateway.max_conns", err, path)
	}
	checkErrors(t, err, path)
}

// FuzzParse checks that Parse never panics and that every error it returns
// is a *Error, or a join of them, naming the file.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"../testdata/conf/valid/*.toml", "../testdata/conf/invalid/*.toml", "wsgate.toml"} {
		files, _ := filepath.Glob(dir)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte(""))
	f.Add([]byte("pools = 5\nroutes = [1, 'x']\ngateway = []\nadmin.listen = 7\n"))
	f.Add([]byte("[[pools]]\nnodes = [[1]]\nhealth = 'x'\n[[plugins]]\nconfig = 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.toml", data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("Parse returned both a config and %v", err)
			}
			checkErrors(t, err, "fuzz.toml")
			return
		}
		if len(cfg.Pools) == 0 || len(cfg.Routes) == 0 || cfg.Pool(cfg.Routes[0].Pool) == nil {
			t.Fatalf("Parse accepted a config without pools or routes: %+v", cfg)
		}
		for _, p := range cfg.Pools {
			for _, n := range p.Nodes {
				if n.MaxConns < 1 {
					t.Fatalf("node %s has cap %d after load", n.Addr, n.MaxConns)
				}
			}
		}
	})
}
