package probe

import (
	"errors"
	"os"
	"testing"
	"time"
)

const statLine = "1234 (wsgate) S 1 1234 1234 0 -1 4194560 2660 0 0 0 150 42 0 0 20 0 9 0 12345 1300000000 4000 18446744073709551615 1 1 0 0 0 0 0 0 2143420159 0 0 0 17 1 0 0 0 0 0\n"

func TestParseVmRSS(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr bool
	}{
		{"typical", "Name:\twsgate\nVmPeak:\t  9000 kB\nVmRSS:\t   12345 kB\nRssAnon:\t 1 kB\n", 12345 * 1024, false},
		{"zero", "VmRSS:\t0 kB\n", 0, false},
		{"missing", "Name:\tzombie\nState:\tZ\n", 0, true},
		{"no unit", "VmRSS:\t12\n", 0, true},
		{"negative", "VmRSS:\t-12 kB\n", 0, true},
		{"garbage", "VmRSS:\tabc kB\n", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseVmRSS([]byte(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ParseVmRSS = %d, %v; want %d, err %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseCPU(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"typical", statLine, 1920 * time.Millisecond, false},
		{"name with spaces and parens", "7 (a) b (c)) R 1 1 1 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 1 1\n", 70 * time.Millisecond, false},
		{"short", "7 (x) R 1 2 3\n", 0, true},
		{"no paren", "7 x R 1 1 1 0 -1 0 0 0 0 0 3 4 0 0\n", 0, true},
		{"bad ticks", "7 (x) R 1 1 1 0 -1 0 0 0 0 0 z 4 0 0\n", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCPU([]byte(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ParseCPU = %v, %v; want %v, err %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

const metricsText = `# HELP wsgate_frames_total WebSocket frames forwarded.
# TYPE wsgate_frames_total counter
wsgate_frames_total{direction="to_client"} 1.5e+06
wsgate_frames_total{direction="to_node"} 250000
wsgate_frames_total_other 7
wsgate_tunnels 3
`

func TestSumCounter(t *testing.T) {
	tests := []struct {
		name, text, metric string
		want               float64
		missing            bool
	}{
		{"labelled", metricsText, "wsgate_frames_total", 1.75e6, false},
		{"bare", metricsText, "wsgate_tunnels", 3, false},
		{"prefix is not a match", "wsgate_tunnels_x 1\n", "wsgate_tunnels", 0, true},
		{"absent", metricsText, "wsgate_bytes_total", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SumCounter([]byte(tc.text), tc.metric)
			if tc.missing {
				if !errors.Is(err, ErrProbeMissing) {
					t.Fatalf("SumCounter = %v, %v; want ErrProbeMissing", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("SumCounter = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestReadSelf reads this test process's own /proc files.
func TestReadSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	rss, err := RSS(os.Getpid())
	if err != nil || rss <= 0 {
		t.Fatalf("RSS = %d, %v", rss, err)
	}
	if _, err := CPU(os.Getpid()); err != nil {
		t.Fatalf("CPU: %v", err)
	}
}

func FuzzParseVmRSS(f *testing.F) {
	f.Add([]byte("VmRSS:\t   12345 kB\n"))
	f.Add([]byte("VmRSS:\t99999999999999999999 kB\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := ParseVmRSS(b); err == nil && v < 0 {
			t.Fatalf("negative rss %d", v)
		}
	})
}

func FuzzParseCPU(f *testing.F) {
	f.Add([]byte(statLine))
	f.Add([]byte("7 (a) b (c)) R 1 1 1 0 -1 0 0 0 0 0 3 4 0 0\n"))
	f.Add([]byte("1 ()"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := ParseCPU(b); err == nil && v < 0 {
			t.Fatalf("negative cpu %v", v)
		}
	})
}

func FuzzSumCounter(f *testing.F) {
	f.Add([]byte(metricsText), "wsgate_frames_total")
	f.Add([]byte("x{a=\"}\" 1\n"), "x")
	f.Fuzz(func(t *testing.T, b []byte, name string) {
		_, _ = SumCounter(b, name)
	})
}
