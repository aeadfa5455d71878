package conf

import (
	"math"
	"testing"
	"time"
)

func TestDurationUnmarshalTOML(t *testing.T) {
	tests := []struct {
		name    string
		in      any
		want    time.Duration
		wantErr bool
	}{
		{"seconds", "30s", 30 * time.Second, false},
		{"fraction", "1.5s", 1500 * time.Millisecond, false},
		{"millis", "250ms", 250 * time.Millisecond, false},
		{"minutes", "2m", 2 * time.Minute, false},
		{"compound", "1h2m3s", time.Hour + 2*time.Minute + 3*time.Second, false},
		{"zero with unit", "0s", 0, false},
		{"bare zero string", "0", 0, false},
		{"negative", "-5s", -5 * time.Second, false},
		{"integer", int64(30), 0, true},
		{"integer zero", int64(0), 0, true},
		{"float", 1.5, 0, true},
		{"bool", true, 0, true},
		{"empty", "", 0, true},
		{"no unit", "30", 0, true},
		{"bad unit", "30 seconds", 0, true},
		{"garbage", "soon", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Duration
			err := d.UnmarshalTOML(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("UnmarshalTOML(%#v) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if err == nil && d.Duration != tt.want {
				t.Fatalf("UnmarshalTOML(%#v) = %v, want %v", tt.in, d.Duration, tt.want)
			}
		})
	}
}

func TestSizeUnmarshalTOML(t *testing.T) {
	tests := []struct {
		name    string
		in      any
		want    Size
		wantErr bool
	}{
		{"integer", int64(4096), 4096, false},
		{"integer zero", int64(0), 0, false},
		{"bytes", "512B", 512, false},
		{"digits only", "512", 512, false},
		{"KiB", "64KiB", 64 << 10, false},
		{"MiB", "1MiB", 1 << 20, false},
		{"GiB", "1GiB", 1 << 30, false},
		{"TiB", "2TiB", 2 << 40, false},
		{"KB", "10KB", 10_000, false},
		{"kB", "10kB", 10_000, false},
		{"MB", "1MB", 1_000_000, false},
		{"GB", "3GB", 3_000_000_000, false},
		{"max", "9223372036854775807B", math.MaxInt64, false},
		{"negative integer", int64(-1), 0, true},
		{"negative string", "-1KiB", 0, true},
		{"fraction", "1.5MiB", 0, true},
		{"space", "1 MiB", 0, true},
		{"unit only", "MiB", 0, true},
		{"empty", "", 0, true},
		{"lowercase unit", "1mib", 0, true},
		{"unknown unit", "1PiB", 0, true},
		{"overflow", "9000000TiB", 0, true},
		{"overflow digits", "99999999999999999999", 0, true},
		{"float", 1.5, 0, true},
		{"array", []any{int64(1)}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var z Size
			err := z.UnmarshalTOML(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("UnmarshalTOML(%#v) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if err == nil && z != tt.want {
				t.Fatalf("UnmarshalTOML(%#v) = %d, want %d", tt.in, z, tt.want)
			}
		})
	}
}

func TestSizeString(t *testing.T) {
	tests := []struct {
		in   Size
		want string
	}{
		{0, "0B"},
		{1, "1B"},
		{1000, "1000B"},
		{1024, "1KiB"},
		{1536, "1536B"},
		{1 << 20, "1MiB"},
		{3 << 30, "3GiB"},
		{5 << 40, "5TiB"},
		{-5, "-5B"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.in.String(); got != tt.want {
				t.Fatalf("Size(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
			}
		})
	}
}

// FuzzParseSize checks that ParseSize never panics, never returns a negative
// size, and that what it accepts round-trips through String.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"", "0", "512B", "64KiB", "1MiB", "1GiB", "10KB", "1MB", "9223372036854775807B", "9000000TiB", "-1B", "1.5MiB", "B", "KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		z, err := ParseSize(s)
		if err != nil {
			return
		}
		if z < 0 {
			t.Fatalf("ParseSize(%q) = %d, negative", s, z)
		}
		back, err := ParseSize(z.String())
		if err != nil || back != z {
			t.Fatalf("ParseSize(%q) = %d; String %q re-parses to %d, %v", s, z, z.String(), back, err)
		}
	})
}

// FuzzDuration checks that Duration.UnmarshalTOML never panics and that what
// it accepts round-trips through MarshalText.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{"", "0", "30s", "1.5s", "250ms", "2m", "-5s", "1h2m3.5s", "9223372036854775807ns", "99999999999h", ".s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var d Duration
		if err := d.UnmarshalTOML(s); err != nil {
			return
		}
		text, _ := d.MarshalText()
		var back Duration
		if err := back.UnmarshalText(text); err != nil || back != d {
			t.Fatalf("UnmarshalTOML(%q) = %v; MarshalText %q re-parses to %v, %v", s, d, text, back, err)
		}
	})
}

func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.0/8":              "10.0.0.0/8",
		"10.1.2.3/8":              "10.0.0.0/8",
		"192.0.2.7":               "192.0.2.7/32",
		"2001:db8::/32":           "2001:db8::/32",
		"2001:db8::1":             "2001:db8::1/128",
		"::ffff:198.51.100.0/120": "198.51.100.0/24",
		"::ffff:192.0.2.7":        "192.0.2.7/32",
	} {
		p, err := ParsePrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"", "10.0.0.0/33", "fe80::1%eth0", "lb.example.com", "::ffff:0:0/95", "10.0.0.0/-1"} {
		if p, err := ParsePrefix(in); err == nil {
			t.Errorf("ParsePrefix(%q) = %v, want an error", in, p)
		}
	}
}
