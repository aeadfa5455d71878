package httpheader

import (
	"strings"
	"testing"
)

// TestHasToken checks Connection-style token lists.
func TestHasToken(t *testing.T) {
	for _, tc := range []struct {
		v, tok string
		want   bool
	}{
		{"keep-alive, Upgrade", "upgrade", true},
		{"  upgrade  ", "upgrade", true},
		{"upgrades", "upgrade", false},
		{"close,keep-alive", "close", true},
		{"", "close", false},
	} {
		if got := HasToken([]byte(tc.v), tc.tok); got != tc.want {
			t.Errorf("HasToken(%q, %q) = %v, want %v", tc.v, tc.tok, got, tc.want)
		}
	}
}

// TestNames checks the three ways header names compare.
func TestNames(t *testing.T) {
	for _, tc := range []struct {
		k, name              string
		is, same, suffixFold bool
	}{
		{"Upgrade", "upgrade", true, true, true},
		{"UPGRADE", "upgrade", true, true, true},
		{"upgrades", "upgrade", false, false, false},
		{"X-User-Id", "x-user-id", true, true, true},
		{"X_User_Id", "x-user-id", false, true, false},
		{"X User Id", "X-User-Id", false, true, false},
		{"a.Example.Test", "example.test", false, false, true},
		{"", "", true, true, true},
	} {
		k := []byte(tc.k)
		if got := Is(k, tc.name); got != tc.is {
			t.Errorf("Is(%q, %q) = %v, want %v", tc.k, tc.name, got, tc.is)
		}
		if got := Same(k, tc.name); got != tc.same {
			t.Errorf("Same(%q, %q) = %v, want %v", tc.k, tc.name, got, tc.same)
		}
		if got := len(tc.k) >= len(tc.name) && HasSuffixFold(k, tc.name); got != tc.suffixFold {
			t.Errorf("HasSuffixFold(%q, %q) = %v, want %v", tc.k, tc.name, got, tc.suffixFold)
		}
	}
	for _, h := range HopByHop {
		if !IsHopByHop([]byte(strings.ToUpper(h))) {
			t.Errorf("IsHopByHop(%q) = false", strings.ToUpper(h))
		}
	}
	if IsHopByHop([]byte("x-user-id")) {
		t.Error("IsHopByHop(x-user-id) = true")
	}
}

// FuzzHasToken holds HasToken to a plain reading of a token list: split on
// commas, trim spaces and tabs, compare without regard to ASCII case.
func FuzzHasToken(f *testing.F) {
	for _, s := range []string{"keep-alive, Upgrade", " upgrade ,", ",,close", "UPGRADE\t", ""} {
		f.Add(s, "upgrade")
	}
	f.Fuzz(func(t *testing.T, v, tok string) {
		tok = strings.ToLower(tok)
		if tok == "" || strings.ContainsAny(tok, ", \t") || !isASCII(tok) { // callers ask for a token, never for none
			t.Skip()
		}
		want := false
		for _, part := range strings.Split(v, ",") {
			if asciiLower(strings.Trim(part, " \t")) == tok {
				want = true
			}
		}
		if len(v) == 0 {
			want = false
		}
		if got := HasToken([]byte(v), tok); got != want {
			t.Fatalf("HasToken(%q, %q) = %v, want %v", v, tok, got, want)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// asciiLower lowers ASCII letters only, as header comparison does.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
