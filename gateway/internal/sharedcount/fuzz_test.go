package sharedcount

import (
	"strings"
	"testing"
)

// FuzzDecode checks that Decode, which reads values other gateways wrote
// to Redis, never panics, never gives a count below 0 or above 2^40 (so sums over many gateways
// cannot overflow), and adds a line it
// reads under the address before the line's first space.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "127.0.0.1:7001 3\n", "a 1\nb 2", "x -1\n", "y 99999999999999999999\n", " 1\n", "a  2\n", "\n\n", "a 9223372036854775807\na 1\n", "a 1099511627776\na 1099511627776\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := map[string]int{}
		Decode(v, got)
		for addr, n := range got {
			if n < 0 || n > maxCount {
				t.Fatalf("negative count %d for %q", n, addr)
			}
			if strings.ContainsAny(addr, " \n") {
				t.Fatalf("address %q holds a separator", addr)
			}
		}
	})
}
