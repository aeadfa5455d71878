package conf

import "testing"

// TestPoolTLSTablePresence checks that [pools.tls] is on by its presence:
// an empty table turns TLS on with the defaults, and a pool without the
// table has none.
func TestPoolTLSTablePresence(t *testing.T) {
	c, err := Load("../testdata/conf/valid/pool_tls.toml")
	if err != nil {
		t.Fatal(err)
	}
	if pt := c.Pools[0].TLS; pt == nil || *pt != (PoolTLS{}) {
		t.Errorf("an empty [pools.tls]: %+v, want TLS on with every key at its default", pt)
	}
	c, err = Load("../testdata/conf/valid/minimal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if pt := c.Pools[0].TLS; pt != nil {
		t.Errorf("no [pools.tls]: %+v, want none", pt)
	}
}
