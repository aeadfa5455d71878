package conf

import (
	"testing"
	"time"
)

// TestSharedCounts checks [pools.shared_counts]'s defaults (off, 250ms,
// "wsgate:counts") and that set values are kept, with gateway.id.
func TestSharedCounts(t *testing.T) {
	cfg, err := Parse("shared.toml", []byte(`
[gateway]
id = "gw-1.example:9"

[[pools]]
name = "a"
  [pools.shared_counts]
  redis = "redis://127.0.0.1:6379/2"
  interval = "1s"
  key_prefix = "app:counts"
  [[pools.nodes]]
  addr = "127.0.0.1:7001"

[[pools]]
name = "b"
  [[pools.nodes]]
  addr = "127.0.0.1:7001"

[[routes]]
pool = "a"
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gateway.ID != "gw-1.example:9" {
		t.Errorf("gateway.id = %q", cfg.Gateway.ID)
	}
	want := SharedCounts{Redis: "redis://127.0.0.1:6379/2", Interval: Duration{time.Second}, KeyPrefix: "app:counts"}
	if got := cfg.Pools[0].SharedCounts; got != want {
		t.Errorf("pool a: %+v, want %+v", got, want)
	}
	want = SharedCounts{Interval: Duration{250 * time.Millisecond}, KeyPrefix: "wsgate:counts"}
	if got := cfg.Pools[1].SharedCounts; got != want {
		t.Errorf("pool b (defaults): %+v, want %+v", got, want)
	}
}

// TestSharedCountsIntervalBounds checks that both ends of
// pools.shared_counts.interval's range load (the golden files check
// just outside them).
func TestSharedCountsIntervalBounds(t *testing.T) {
	for _, d := range []string{"50ms", "10s"} {
		_, err := Parse("b.toml", []byte(`
[[pools]]
name = "a"
  [pools.shared_counts]
  redis = "redis://127.0.0.1:6379/0"
  interval = "`+d+`"
  [[pools.nodes]]
  addr = "127.0.0.1:7001"

[[routes]]
pool = "a"
`))
		if err != nil {
			t.Errorf("interval %s: %v", d, err)
		}
	}
}
