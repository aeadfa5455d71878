package probe

import (
	"errors"
	"os"
	"os/exec"
	"slices"
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
			user, sys, err := ParseCPUSplit([]byte(tc.in))
			if (err != nil) != tc.wantErr || user+sys != tc.want || (tc.want > 0 && sys == 0) {
				t.Fatalf("ParseCPUSplit = %v + %v, %v; want %v in all, both parts set", user, sys, err, tc.want)
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

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Stat
		wantErr bool
	}{
		{"typical", statLine, Stat{Comm: "wsgate", PPID: 1}, false},
		{"name with spaces and parens", "7 (a) b (c)) R 42 1 1 0\n", Stat{Comm: "a) b (c)", PPID: 42}, false},
		{"nginx worker title", "9 (nginx) S 8 8 8 0\n", Stat{Comm: "nginx", PPID: 8}, false},
		{"short", "7 (x) R\n", Stat{}, true},
		{"no paren", "7 x R 1 1\n", Stat{}, true},
		{"bad ppid", "7 (x) R z 1\n", Stat{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ParseStat = %+v, %v; want %+v, err %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestChildren starts a child process and finds it among this process's
// children by /proc, as the runner finds nginx's worker under its master.
func TestChildren(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	kids, err := Children(os.Getpid())
	if err != nil || !slices.Contains(kids, cmd.Process.Pid) {
		t.Fatalf("Children = %v, %v; want it to hold %d", kids, err, cmd.Process.Pid)
	}
	st, err := ReadStat(cmd.Process.Pid)
	if err != nil || st.Comm != "sleep" || st.PPID != os.Getpid() {
		t.Fatalf("ReadStat = %+v, %v", st, err)
	}
	sum, err := RSSSum([]int{os.Getpid(), cmd.Process.Pid})
	if one, _ := RSS(os.Getpid()); err != nil || sum <= one {
		t.Fatalf("RSSSum = %d, %v; want more than this process's %d", sum, err, one)
	}
	if _, err := CPUSum([]int{os.Getpid(), cmd.Process.Pid}); err != nil {
		t.Fatalf("CPUSum: %v", err)
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

func FuzzParseStat(f *testing.F) {
	f.Add([]byte(statLine))
	f.Add([]byte("7 (a) b (c)) R 42 1\n"))
	f.Add([]byte(")("))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := ParseStat(b); err == nil && v.PPID < 0 {
			t.Fatalf("negative ppid %d", v.PPID)
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

func TestParseSlabTotal(t *testing.T) {
	text := `slabinfo - version: 2.1
# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>
TCP                 10     12   2432   13    8 : tunables    0    0    0 : slabdata      1      1      0
filp                100    128   256   16    1 : tunables    0    0    0 : slabdata      8      8      0
`
	got, err := ParseSlabTotal([]byte(text))
	if err != nil || got != 10*2432+100*256 {
		t.Fatalf("got %d %v", got, err)
	}
	for _, bad := range []string{"", "slabinfo - version: 2.1\n", "TCP x 12 2432\n"} {
		if _, err := ParseSlabTotal([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
